"""Word-level timestamps on both NPU Whisper paths (the default one through NPUW's Whisper mode
with NPUW_WHISPER_DECOMPOSE_SDPA, and STATIC_PIPELINE=True) against the real openvino_genai
2026.4.1's goldens (tests/fixtures/whisper/whisper-tiny-random-fp32/golden.json
``npu_stateful_word_timestamps`` / ``npu_static_word_timestamps``: the real on "NPU" with
NPU_USE_NPUW=YES, NPUW_DEVICES=CPU, f32 hints, pipelines made with word_timestamps=True), through
our NPUW on the CPU plugin and on the emulated NPU.

What the goldens show: the real's NPU paths run the window's text through a 447-token prefill and
align over all of its rows, padding included, so its words carry the window's start time (0.0,
30.0 on the second window of 45 s) where the CPU path spreads them over the audio; texts and
words' tokens equal CPU.  One pipeline per setup (loads and compiles are most of the cost)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import genai_shim
from ov_npu_emu.testing import whisper_case_kwargs, whisper_test_audio

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "tests" / "fixtures" / "whisper" / "whisper-tiny-random-fp32"
GOLDEN = json.loads((FOLDER / "golden.json").read_text(encoding="utf-8"))
F32 = {"INFERENCE_PRECISION_HINT": "f32"}
NPUW_CPU = {"NPU_USE_NPUW": "YES", "NPUW_DEVICES": "CPU", **F32}
#: setup -> (pipeline properties, golden section, cases): one pipeline and one case per setup (the
#: pipeline's compiles are most of the cost), each case kind once: two windows of 45 s, timestamps
SETUPS: dict[str, tuple[dict[str, Any], str, list[str]]] = {
    "stateful_npuw_cpu": (NPUW_CPU, "npu_stateful_word_timestamps", ["long_en_words_clean"]),
    "stateful_emulated": (F32, "npu_stateful_word_timestamps", ["medium_fr_words_clean"]),
    "static_npuw_cpu": ({**NPUW_CPU, "STATIC_PIPELINE": True}, "npu_static_word_timestamps",
                        ["medium_de_words_timestamps_clean"]),
    "static_emulated": ({**F32, "STATIC_PIPELINE": True}, "npu_static_word_timestamps", ["short_en_words_clean"]),
}
PARAMS = [(setup, case) for setup, (_, _, cases) in SETUPS.items() for case in cases]

_PIPES: dict[str, Any] = {}


def _pipe(setup: str) -> Any:
    if setup not in _PIPES:
        _PIPES[setup] = genai_shim.WhisperPipeline(FOLDER, "NPU", word_timestamps=True, **SETUPS[setup][0])
    return _PIPES[setup]


def _words(res: Any) -> list[list[Any]]:
    """As the goldens record them: [word, start, end, token ids], times to 4 decimals."""
    return [[w.word, round(w.start_ts, 4), round(w.end_ts, 4), [int(t) for t in w.token_ids]] for w in res.words]


@pytest.mark.parametrize(("setup", "case"), PARAMS)
def test_word_timestamps_equal_real_npu(setup: str, case: str) -> None:
    want = GOLDEN[SETUPS[setup][1]]["results"][case]
    kwargs = whisper_case_kwargs(GOLDEN["cases"][case], _pipe(setup))
    res = _pipe(setup).generate(whisper_test_audio(GOLDEN["cases"][case]["audio"]), **kwargs)
    assert res.texts == want["texts"]
    assert res.language == want["language"]
    assert _words(res) == want["words"]
    if "chunks" in want:
        assert [[round(c.start_ts, 4), round(c.end_ts, 4), c.text] for c in res.chunks] == want["chunks"]
    assert res.perf_metrics.get_word_level_timestamps_processing_duration().mean > 0


def test_goldens_show_the_npu_alignment() -> None:
    """The goldens' point (measured on the real 2026.4.1): words on both NPU paths equal each other,
    their tokens equal CPU's, their times are the windows' starts where CPU's are spread."""
    cpu = GOLDEN["cpu_word_timestamps"]["results"]
    stateful = GOLDEN["npu_stateful_word_timestamps"]["results"]
    static = GOLDEN["npu_static_word_timestamps"]["results"]
    cases = [n for n in GOLDEN["cases"] if n.endswith("_clean")]
    assert len(cases) == 4
    n_words = 0
    for name in cases:
        assert stateful[name]["words"] == static[name]["words"]
        assert [w[3] for w in stateful[name]["words"]] == [w[3] for w in cpu[name]["words"]]
        assert {(w[1], w[2]) for w in stateful[name]["words"]} <= {(0.0, 0.0), (30.0, 30.0)}
        n_words += len(stateful[name]["words"])
    assert n_words >= 10
    assert any(w[2] > w[1] for name in cases for w in cpu[name]["words"])
