"""genai_shim.ASRPipeline (the model-neutral facade; Whisper exports) side by side with the real
openvino_genai.ASRPipeline on the tiny random Whisper fixture under f32 hints: results (one list
of chunks / words per text), languages, ASR perf metrics, its config type, the upstream sample's
flow with word timestamps, and the dispatch errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import genai_shim
from ov_npu_emu.errors import ConfigError
from ov_npu_emu.testing import whisper_test_audio

og = pytest.importorskip("openvino_genai")

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "tests" / "fixtures" / "whisper" / "whisper-tiny-random-fp32"
PROPS = {"INFERENCE_PRECISION_HINT": "f32"}


@pytest.fixture(scope="module")
def ours() -> Any:
    return genai_shim.ASRPipeline(FOLDER, "CPU", **PROPS)


@pytest.fixture(scope="module")
def real() -> Any:
    return og.ASRPipeline(str(FOLDER), "CPU", **PROPS)


def _dump(res: Any) -> tuple[Any, ...]:
    chunks = None if res.chunks is None else [[(c.start_ts, c.end_ts, c.text, list(c.token_ids)) for c in x]
                                              for x in res.chunks]
    m = res.perf_metrics
    raw = m.asr_raw_metrics
    return (res.texts, list(res.scores), list(res.languages), chunks, res.words, str(res), type(m).__name__,
            len(raw.encode_inference_durations), len(raw.decode_inference_durations), m.get_num_generated_tokens(),
            len(raw.word_level_timestamps_processing_durations))


@pytest.mark.parametrize(
    "kind, kwargs",
    [
        ("short", {}),
        ("medium", {"return_timestamps": True, "language": "<|en|>"}),
        ("long", {"task": "translate"}),
        ("long", {"return_timestamps": True, "num_beams": 2}),
    ],
)
def test_matches_real(ours: Any, real: Any, kind: str, kwargs: dict[str, Any]) -> None:
    audio = whisper_test_audio(kind)
    assert _dump(ours.generate(audio, **kwargs)) == _dump(real.generate(audio, **kwargs))


def test_config_objects_match_real(ours: Any, real: Any) -> None:
    audio = whisper_test_audio("medium").tolist()
    got = []
    for pipe, lib in ((ours, genai_shim), (real, og)):
        cfg = pipe.get_generation_config()
        assert type(cfg).__name__ == "ASRGenerationConfig" and cfg.context is None
        cfg.language, cfg.return_timestamps, cfg.max_new_tokens = "<|de|>", True, 9
        first = _dump(pipe.generate(audio, cfg))
        fresh = lib.ASRGenerationConfig()
        fresh.max_new_tokens = 5  # lang_to_id and EOS come from the pipeline's config
        got.append((first, _dump(pipe.generate(audio, fresh))))
    assert got[0] == got[1]
    with pytest.raises(TypeError):
        real.generate(audio, {"max_new_tokens": 3})
    with pytest.raises(TypeError, match="ASRGenerationConfig"):
        ours.generate(audio, {"max_new_tokens": 3})
    # and WhisperPipeline does not take an ASRGenerationConfig (nor does the real)
    with pytest.raises(TypeError):
        og.WhisperPipeline(str(FOLDER), "CPU").generate(audio, og.ASRGenerationConfig())
    with pytest.raises(TypeError):
        genai_shim.WhisperPipeline(FOLDER, "CPU").generate(audio, genai_shim.ASRGenerationConfig())


_REAL_SAMPLE = """
import json, sys
import openvino_genai as og
from ov_npu_emu.testing import whisper_test_audio
folder, suppress = sys.argv[1], json.loads(sys.argv[2])
pipe = og.ASRPipeline(folder, "CPU", INFERENCE_PRECISION_HINT="f32", word_timestamps=True)
config = pipe.get_generation_config()
config.language, config.task, config.return_timestamps, config.word_timestamps = "<|en|>", "transcribe", True, True
config.suppress_tokens = suppress
res = pipe.generate(whisper_test_audio("medium").tolist(), config)
words = [[w.text, list(w.token_ids), w.start_ts, w.end_ts] for w in res.words[0]]
print(json.dumps([str(res), [[c.start_ts, c.end_ts, c.text] for c in res.chunks[0]], words]))
"""


def test_upstream_sample_flow_with_word_timestamps(ours: Any) -> None:
    """samples/python/automatic_speech_recognition's calls: word_timestamps in the constructor and
    the config, language, task, return_timestamps; chunks[0] and words[0]. The tokens that decode
    to an incomplete character are suppressed (the real segfaults on windows made of them); the
    real runs in a child process."""
    pipe = genai_shim.ASRPipeline(FOLDER, "CPU", word_timestamps=True, **PROPS)
    assert pipe.get_generation_config().word_timestamps is False  # as the real: only the Whisper side
    tok = pipe.get_tokenizer()
    first = pipe.get_generation_config().no_timestamps_token_id + 1
    suppress = [i for i in range(first - 1) if "\ufffd" in tok.decode([i])]
    child = subprocess.run([sys.executable, "-c", _REAL_SAMPLE, str(FOLDER), json.dumps(suppress)],
                           capture_output=True, text=True, timeout=300, check=False)
    assert child.returncode == 0, child.stderr[-2000:]
    want = json.loads(child.stdout)
    config = pipe.get_generation_config()
    config.language, config.task, config.return_timestamps, config.word_timestamps = "<|en|>", "transcribe", True, True
    config.suppress_tokens = suppress
    res = pipe.generate(whisper_test_audio("medium").tolist(), config)
    got = [str(res), [[c.start_ts, c.end_ts, c.text] for c in res.chunks[0]],
           [[w.text, list(w.token_ids), w.start_ts, w.end_ts] for w in res.words[0]]]
    assert got == want and got[2], got
    assert res.perf_metrics.get_word_level_timestamps_processing_duration().mean > 0


def test_model_type_dispatch(tmp_path: Path) -> None:
    for name in ("config.json",):
        shutil.copy(FOLDER / name, tmp_path / name)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["model_type"] = "qwen3_asr"
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="runs Whisper models only.*qwen3_asr.*not implemented yet") as err:
        genai_shim.ASRPipeline(tmp_path, "CPU")
    assert err.value.key == "model_type"
    del cfg["model_type"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="config.json must contain 'model_type' field"):
        genai_shim.ASRPipeline(tmp_path, "CPU")
    with pytest.raises(RuntimeError, match="config.json must contain 'model_type' field"):
        og.ASRPipeline(str(tmp_path), "CPU")
    assert np.isfinite(genai_shim.ASRPerfMetrics().get_features_extraction_duration().mean)
