"""genai_shim.WhisperPipeline on "NPU" without STATIC_PIPELINE (the real's default NPU path: the
stateful decoder through NPUW's Whisper mode) against the real's goldens
(tests/fixtures/whisper/*/golden.json ``npu_stateful``: the real openvino_genai 2026.4.1 on "NPU"
with NPU_USE_NPUW=YES, NPUW_DEVICES=CPU, INFERENCE_PRECISION_HINT=f32), through our NPUW on the CPU
plugin and on the emulated NPU.

The real's results depend on the order of the calls (a pipeline's second and later language
detections read the previous call's decoder state, docs/npuw.md), so each setup runs the goldens'
cases once, in the goldens' order, on one pipeline (as tools/whisper_goldens.py did), and each case
is then checked on its own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import genai_shim
from ov_npu_emu.errors import BlobFormatError, ConfigError, PromptTooLongError, UnsupportedFeatureError
from ov_npu_emu.testing import whisper_case_kwargs, whisper_test_audio
from tests.genai_shim.whisper_helpers import IdRecorder, assert_chunks_match

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "whisper"
STATEFUL = FIXTURES / "whisper-tiny-random-fp32"
STATELESS = FIXTURES / "whisper-tiny-random-stateless-fp32"
STORIES = ROOT / "ov_npu_emu" / "models" / "stories260K"
F32 = {"INFERENCE_PRECISION_HINT": "f32"}
SETUPS: dict[str, dict[str, Any]] = {
    # the real's NPU path as it runs here: NPUW (Whisper mode) over the CPU plugin, the encoder on "NPU"
    "npuw_cpu": {"NPU_USE_NPUW": "YES", "NPUW_DEVICES": "CPU", **F32},
    # NPUW's sub-models and the encoder on the emulated NPU
    "emulated": dict(F32),
}
GOLDEN = json.loads((STATEFUL / "golden.json").read_text(encoding="utf-8"))
WANT = GOLDEN["npu_stateful"]["results"]
#: the cases the goldens ran in one pipeline, in their order: all but the word-timestamp ones and
#: those where the real corrupts its heap (a prompt longer than the 4-token prefill), run alone there
SEQUENCE = [n for n in GOLDEN["cases"] if n in WANT and "error" not in WANT[n]]
PROMPT_CASES = [n for n in GOLDEN["cases"] if n in WANT and "error" in WANT[n]]

_RUNS: dict[str, tuple[Any, dict[str, Any]]] = {}


def _run(setup: str) -> tuple[Any, dict[str, Any]]:
    """(pipeline, case -> (result, streamed ids)) of the whole sequence, once per setup."""
    if setup not in _RUNS:
        pipe = genai_shim.WhisperPipeline(STATEFUL, "NPU", **SETUPS[setup])
        out = {}
        for name in SEQUENCE:
            case = dict(GOLDEN["cases"][name])
            rec = IdRecorder()
            out[name] = (pipe.generate(whisper_test_audio(case.pop("audio")), streamer=rec, **case), rec.ids)
        _RUNS[setup] = (pipe, out)
    return _RUNS[setup]


def test_sequence_is_the_goldens_order() -> None:
    assert SEQUENCE[:3] == ["short", "medium", "long"] and len(SEQUENCE) == 11
    assert sorted(PROMPT_CASES) == ["short_hotwords", "short_initial_prompt"]


@pytest.mark.parametrize("setup", sorted(SETUPS))
@pytest.mark.parametrize("case", SEQUENCE)
def test_default_npu_path_golden(setup: str, case: str) -> None:
    res, streamed = _run(setup)[1][case]
    want = WANT[case]
    assert res.texts == want["texts"]
    assert list(res.scores) == want["scores"]
    assert res.language == want["language"]
    assert streamed == want["streamed_ids"]
    assert_chunks_match(res, want.get("chunks"))
    assert res.perf_metrics.get_num_generated_tokens() == want["num_generated_tokens"]


def test_language_detection_reads_the_previous_call() -> None:
    """The goldens' point: the first call equals CPU, a later one that detects the language does
    not (the real's 'ur' where CPU says 'si'); a given language equals CPU."""
    runs = _run("npuw_cpu")[1]
    cpu = GOLDEN["cpu"]["results"]
    assert runs["short"][0].language == cpu["short"]["language"] == "uz"
    assert runs["medium"][0].language == "ur" != cpu["medium"]["language"]
    assert runs["short_en"][0].texts == cpu["short_en"]["texts"]


@pytest.mark.parametrize("case", PROMPT_CASES)
def test_context_prompt_longer_than_the_prefill_is_refused(case: str) -> None:
    """initial_prompt / hotwords: the real overruns its 4-token prefill buffer (the goldens record
    the failure); ours refuses with a typed error that says what to do."""
    pipe = _run("npuw_cpu")[0]
    kwargs = dict(GOLDEN["cases"][case])
    with pytest.raises(PromptTooLongError, match="initial_prompt / hotwords"):
        pipe.generate(whisper_test_audio(kwargs.pop("audio")), **kwargs)


def test_default_npu_refusals_are_typed() -> None:
    # the real: "Stateful models without `beam_idx` input are not supported in StatefulToStateless"
    stateless = json.loads((STATELESS / "golden.json").read_text(encoding="utf-8"))
    assert "beam_idx" in stateless["npu_stateful"]["results"]["short"]["error"]
    with pytest.raises(ConfigError, match="STATIC_PIPELINE=True") as err:
        genai_shim.WhisperPipeline(STATELESS, "NPU", **SETUPS["npuw_cpu"])
    assert err.value.key == "models_path"
    # word timestamps on a pipeline not built for them: the real overruns NPUW's 4-slot prefill
    # with the window's text (heap corruption); ours says how to build it
    with pytest.raises(ConfigError, match="word_timestamps=True") as werr:
        _run("npuw_cpu")[0].generate(whisper_test_audio("short"), word_timestamps=True, max_new_tokens=3)
    assert werr.value.key == "word_timestamps"
    with pytest.raises(ConfigError, match="MAX_PROMPT_LEN cannot be negative"):
        genai_shim.WhisperPipeline(STATEFUL, "NPU", MAX_PROMPT_LEN=-1, **SETUPS["npuw_cpu"])
    pipe = _run("npuw_cpu")[0]
    with pytest.raises(UnsupportedFeatureError, match="beam search") as bserr:
        pipe.generate(whisper_test_audio("short"), num_beams=2, max_new_tokens=3)
    assert bserr.value.key == "num_beams"


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_decoder_blob_export_and_import(setup: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real's compile_decoder_for_npu rules for the decoder (measured on the real 2026.4.1 with
    NPUW on CPU: it exports and imports the decoder's blob): EXPORT_BLOB writes BLOB_PATH or
    ./openvino_model.blob; BLOB_PATH alone imports it instead of compiling; the text and ids are
    the compiled decoder's, word-timestamp decoders included."""
    monkeypatch.chdir(tmp_path)
    audio = whisper_test_audio("short")

    def run(pipe: Any, **kw: Any) -> tuple[Any, list[int]]:
        rec = IdRecorder()
        res = pipe.generate(audio, streamer=rec, max_new_tokens=12, **kw)
        return res.texts, rec.ids

    want = run(genai_shim.WhisperPipeline(STATEFUL, "NPU", **SETUPS[setup]))
    exported = genai_shim.WhisperPipeline(STATEFUL, "NPU", EXPORT_BLOB=True, **SETUPS[setup])
    assert (tmp_path / "openvino_model.blob").is_file() and run(exported) == want
    imported = genai_shim.WhisperPipeline(STATEFUL, "NPU", BLOB_PATH="openvino_model.blob", **SETUPS[setup])
    assert run(imported) == want
    # with BLOB_PATH and EXPORT_BLOB: compiled, written there
    words = genai_shim.WhisperPipeline(STATEFUL, "NPU", EXPORT_BLOB=True, BLOB_PATH=str(tmp_path / "w.blob"),
                                       word_timestamps=True, **SETUPS[setup])
    back = genai_shim.WhisperPipeline(STATEFUL, "NPU", BLOB_PATH=str(tmp_path / "w.blob"), word_timestamps=True,
                                      **SETUPS[setup])
    case = GOLDEN["cases"]["short_en_words_clean"]
    got = back.generate(whisper_test_audio(case["audio"]), **whisper_case_kwargs(case, back))
    expect = words.generate(whisper_test_audio(case["audio"]), **whisper_case_kwargs(case, words))
    assert got.texts == expect.texts and got.words
    assert [(w.word, w.start_ts, w.end_ts) for w in got.words] == [(w.word, w.start_ts, w.end_ts) for w in expect.words]


def test_decoder_blob_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real's texts for a missing blob and a path without ``.blob``; a damaged blob, and an
    LLM's, are typed errors that say what to pass."""
    monkeypatch.chdir(tmp_path)
    props = SETUPS["npuw_cpu"]
    with pytest.raises(BlobFormatError, match="Blob file is not found at: missing.blob"):
        genai_shim.WhisperPipeline(STATEFUL, "NPU", BLOB_PATH="missing.blob", **props)
    with pytest.raises(ConfigError, match="Please provide a full path to blob file in BLOB_PATH: d.bin") as err:
        genai_shim.WhisperPipeline(STATEFUL, "NPU", EXPORT_BLOB=True, BLOB_PATH="d.bin", **props)
    assert err.value.key == "BLOB_PATH"
    genai_shim.WhisperPipeline(STATEFUL, "NPU", EXPORT_BLOB=True, **props)
    blob = bytearray((tmp_path / "openvino_model.blob").read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    (tmp_path / "bad.blob").write_bytes(bytes(blob))
    with pytest.raises(BlobFormatError, match="corrupt"):
        genai_shim.WhisperPipeline(STATEFUL, "NPU", BLOB_PATH="bad.blob", **props)
    genai_shim.LLMPipeline(STORIES, "NPU", EXPORT_BLOB=True, BLOB_PATH="llm.blob", CACHE_MODE="OPTIMIZE_SPEED",
                           MAX_PROMPT_LEN=64, MIN_RESPONSE_LEN=64, **props)
    with pytest.raises(ConfigError, match="holds no NPUW Whisper decoder") as lerr:
        genai_shim.WhisperPipeline(STATEFUL, "NPU", BLOB_PATH="llm.blob", **props)
    assert lerr.value.key == "BLOB_PATH"


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_decoder_cache_dir(setup: str, tmp_path: Path) -> None:
    """CACHE_DIR keeps the NPUW Whisper decoder too (as the real's core caches any compiled model
    its plugin exports): the second pipeline imports it, with the same text and ids."""
    props = {**SETUPS[setup], "CACHE_DIR": str(tmp_path)}
    audio = whisper_test_audio("short")
    first = genai_shim.WhisperPipeline(STATEFUL, "NPU", **props)
    (entry,) = tmp_path.glob("npuw_whisper_*.blob")
    second = genai_shim.WhisperPipeline(STATEFUL, "NPU", **props)
    assert second._decoder._request._compiled._impl.loaded_from_cache
    rec1, rec2 = IdRecorder(), IdRecorder()
    assert first.generate(audio, streamer=rec1, max_new_tokens=12).texts == \
        second.generate(audio, streamer=rec2, max_new_tokens=12).texts
    assert rec1.ids == rec2.ids and entry.stat().st_size > 0
