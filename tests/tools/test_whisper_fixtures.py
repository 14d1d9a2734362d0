"""The committed Whisper fixtures (tests/fixtures/whisper) still give their golden.json in the REAL
openvino_genai.WhisperPipeline on CPU (f32), and their configs hold what a Whisper pipeline reads.

An oracle guard: an altered export, tokenizer, generation config, test audio or golden fails here.
tools/make_whisper_fixtures.py --goldens --check re-records every setup (CPU and both NPU paths)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from ov_npu_emu.testing import WHISPER_AUDIO_SECONDS, whisper_test_audio
from tools import whisper_goldens as wg

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = sorted(p for p in (ROOT / "tests" / "fixtures" / "whisper").iterdir()
                  if (p / "golden.json").exists())


def _golden(path: Path) -> dict[str, Any]:
    return json.loads((path / "golden.json").read_text(encoding="utf-8"))


def test_both_exports_are_committed() -> None:
    names = {p.name for p in FIXTURES}
    assert {"whisper-tiny-random-fp32", "whisper-tiny-random-stateless-fp32"} <= names
    stateless = ROOT / "tests" / "fixtures" / "whisper" / "whisper-tiny-random-stateless-fp32"
    assert (stateless / "openvino_decoder_with_past_model.xml").exists()


@pytest.mark.parametrize("kind", sorted(WHISPER_AUDIO_SECONDS))
def test_audio_is_what_the_goldens_heard(kind: str) -> None:
    audio = whisper_test_audio(kind)
    assert audio.dtype.name == "float32" and audio.ndim == 1
    assert audio.size == int(WHISPER_AUDIO_SECONDS[kind] * 16000)
    for path in FIXTURES:
        assert hashlib.sha256(audio.tobytes()).hexdigest() == _golden(path)["audio"][kind]["sha256"], path.name


@pytest.mark.parametrize("path", FIXTURES, ids=[p.name for p in FIXTURES])
def test_generation_config_has_whisper_fields(path: Path) -> None:
    """The fields transformers 5 / optimum drop, written back; Whisper's token layout."""
    gen = wg.load_gen(path)
    cfg = json.loads((path / "config.json").read_text(encoding="utf-8"))
    eot = gen["eos_token_id"]
    assert gen["decoder_start_token_id"] == eot + 1
    langs = list(gen["lang_to_id"].items())
    assert len(langs) == 99 and langs[0] == ("<|en|>", eot + 2) and langs[-1] == ("<|su|>", eot + 100)
    assert [i for _, i in langs] == list(range(eot + 2, eot + 101))  # Whisper's order
    assert gen["task_to_id"] == {"translate": eot + 101, "transcribe": eot + 102}
    assert gen["prev_sot_token_id"] == eot + 104
    assert gen["no_timestamps_token_id"] == eot + 106
    assert cfg["vocab_size"] == gen["no_timestamps_token_id"] + 1 + 1501  # <|0.00|> .. <|30.00|>
    assert gen["is_multilingual"] is True and gen["alignment_heads"] and gen["suppress_tokens"]
    assert gen["begin_suppress_tokens"][-1] == eot and gen["max_initial_timestamp_index"] == 50
    assert cfg["max_source_positions"] == 1500 and cfg["max_target_positions"] == 448
    assert cfg["num_mel_bins"] == 80


@pytest.mark.parametrize("path", FIXTURES, ids=[p.name for p in FIXTURES])
def test_golden_is_robust(path: Path) -> None:
    """Every greedy step of every CPU case is decided by a clear top-1 (and the re-stated rules in
    tools/whisper_goldens.py reproduced the real's ids and chunk times when it was recorded)."""
    g = _golden(path)
    assert g["margins"]["min"] >= wg.MIN_MARGIN
    for name in wg.CASES:
        m = g["margins"][name]
        assert m["min"] >= wg.MIN_MARGIN, name
        assert all(m["reproduces_real"].values()), name
    cpu = g["cpu"]["results"]
    assert any(len(cpu[n].get("chunks", [])) >= 2 for n in wg.CASES if wg.CASES[n].get("return_timestamps"))
    assert len({tuple(cpu[n]["streamed_ids"]) for n in ("short", "medium", "long")}) == 3


@pytest.mark.oracle
@pytest.mark.parametrize("path", FIXTURES, ids=[p.name for p in FIXTURES])
def test_real_whisper_pipeline_gives_the_golden(path: Path) -> None:
    pytest.importorskip("openvino_genai")
    g = _golden(path)
    got = wg.run_cases(path, "CPU", wg.CPU_PROPS, wg.CASES)
    want = g["cpu"]["results"]
    assert set(got) == set(want)
    for name in wg.CASES:
        assert wg.comparable(got[name]) == wg.comparable(want[name]), name
