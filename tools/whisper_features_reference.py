"""Write (or check) tests/fixtures/whisper/features_reference.json: transformers'
WhisperFeatureExtractor on ``whisper_test_audio`` clips, a few mel rows at every 50th frame,
and the summed weight of each mel filter - a small independent reference for
genai_shim.whisper.features.

Needs the fixtures venv (transformers, torch-free path of the feature extractor):

    PYTHONPATH=$PWD:$PWD/plugins /work/venv-fixtures/bin/python tools/whisper_features_reference.py --write
    PYTHONPATH=$PWD:$PWD/plugins /work/venv-fixtures/bin/python tools/whisper_features_reference.py

Without ``--write`` it prints the max abs difference between transformers and genai_shim on the
full spectrograms (the one-off check of docs/genai_shim.md's WhisperPipeline section).

transformers reflects the padded signal at the right edge, openvino.genai counts samples past the
audio as zeros; the two differ only when the audio fills the whole 30 s window (its last frame),
so the clips here are shorter than 30 s.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "fixtures" / "whisper" / "features_reference.json"
#: (name, samples): whisper_test_audio kinds cut below 30 s, and a clip shorter than one hop
CLIPS = (("short", None), ("medium", None), ("long_29s", 29 * 16000), ("tiny_tone", 1200))
ROWS = (0, 17, 40, 63, 79)
FRAME_STEP = 50


def clip(name: str, samples: int | None) -> np.ndarray:
    from ov_npu_emu.testing import whisper_test_audio

    if name == "tiny_tone":
        t = np.arange(samples or 0) / 16000.0
        return (0.5 * np.sin(2 * np.pi * 440.0 * t)).astype(np.float32)
    audio = whisper_test_audio(name.split("_")[0])
    return audio if samples is None else audio[:samples]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write the reference JSON")
    args = ap.parse_args(argv)
    from transformers import WhisperFeatureExtractor as HFExtractor

    from genai_shim.whisper.features import WhisperFeatureExtractor

    hf = HFExtractor(feature_size=80)
    ours = WhisperFeatureExtractor()
    bank_diff = float(np.abs(hf.mel_filters - ours.mel_filter.T).max())
    print(f"mel filter bank: max abs diff {bank_diff:.3g}")
    ref: dict[str, object] = {
        "rows": list(ROWS),
        "frame_step": FRAME_STEP,
        "mel_filter_sums": [round(float(v), 9) for v in hf.mel_filters.sum(axis=0)],
        "clips": {},
    }
    worst = 0.0
    for name, samples in CLIPS:
        audio = clip(name, samples)
        feats = hf(audio, sampling_rate=16000, return_tensors="np").input_features[0]
        diff = float(np.abs(feats - ours.extract(audio).data).max())
        worst = max(worst, diff)
        print(f"{name}: {audio.size} samples, max abs diff {diff:.3g}")
        ref["clips"][name] = {  # type: ignore[index]
            "samples": samples,
            "values": [[round(float(v), 6) for v in feats[r, ::FRAME_STEP]] for r in ROWS],
        }
    print(f"worst max abs diff: {worst:.3g}")
    if args.write:
        OUT.write_text(json.dumps(ref, separators=(",", ":")) + "\n", encoding="utf-8")
        print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
