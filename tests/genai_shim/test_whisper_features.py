"""genai_shim.whisper.features against transformers' WhisperFeatureExtractor (a small reference
written by tools/whisper_features_reference.py) and the real's padding rules; the real's own
features are checked through WhisperPipeline's outputs (test_whisper_pipeline.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from genai_shim.whisper.features import WhisperFeatureExtractor
from ov_npu_emu.errors import ConfigError, UserInputError

ROOT = Path(__file__).resolve().parents[2]
REF = json.loads((ROOT / "tests" / "fixtures" / "whisper" / "features_reference.json").read_text(encoding="utf-8"))
FIXTURE = ROOT / "tests" / "fixtures" / "whisper" / "whisper-tiny-random-fp32"
sys.path.insert(0, str(ROOT / "tools"))
from whisper_features_reference import CLIPS, clip  # noqa: E402


@pytest.fixture(scope="module")
def fx() -> WhisperFeatureExtractor:
    return WhisperFeatureExtractor(FIXTURE / "preprocessor_config.json")


def test_mel_filter_bank_matches_transformers(fx: WhisperFeatureExtractor) -> None:
    assert fx.mel_filter.shape == (80, 201)
    np.testing.assert_allclose(fx.mel_filter.sum(axis=1), REF["mel_filter_sums"], rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("name, samples", CLIPS, ids=[c[0] for c in CLIPS])
def test_log_mel_matches_transformers(fx: WhisperFeatureExtractor, name: str, samples: int | None) -> None:
    feats = fx.extract(clip(name, samples))
    assert feats.data.shape == (80, 3000) and feats.data.dtype == np.float32
    got = feats.data[REF["rows"], :: REF["frame_step"]]
    want = np.array(REF["clips"][name]["values"], dtype=np.float32)
    assert float(np.abs(got - want).max()) < 1e-4  # measured: 2.4e-5 at most


def test_padding_and_windows(fx: WhisperFeatureExtractor) -> None:
    audio = clip("short", None)
    feats = fx.extract(audio)
    assert feats.n_active_frames == audio.size // 160
    # frames that start past the audio hold log10(1e-10), then clamp and (x + 4) / 4
    floor = max(float(feats.data.max()) - 2.0, (-10.0 + 4.0) / 4.0)
    assert np.allclose(feats.data[:, audio.size // 160 + 2:], floor)
    # over 30 s: no padding, one frame per hop; a window past the end is zero-filled
    long = np.tile(audio, 11)
    lf = fx.extract(long)
    assert lf.n_frames == long.size // 160
    win = lf.window(lf.n_frames - 100, 3000)
    assert win.shape == (80, 3000) and not win[:, 100:].any()
    np.testing.assert_array_equal(win[:, :100], lf.data[:, -100:])
    unpadded = fx.extract(audio, pad_to_max_duration=False)
    assert unpadded.n_frames == audio.size // 160


def test_bad_input_and_config(tmp_path: Path) -> None:
    fx = WhisperFeatureExtractor()
    with pytest.raises(UserInputError, match=r"raw_speech too short for reflect padding: size=200, required > 200"):
        fx.extract(np.zeros(200, np.float32))
    assert fx.extract(np.zeros(201, np.float32)).n_frames == 3000
    bad = tmp_path / "preprocessor_config.json"
    bad.write_text(json.dumps({"hop_length": "x"}))
    with pytest.raises(ConfigError, match="hop_length must be a non-negative integer"):
        WhisperFeatureExtractor(bad)
    bad.write_text(json.dumps({"sampling_rate": 8000}))
    with pytest.raises(ConfigError, match="sampling_rate"):
        WhisperFeatureExtractor(bad)
