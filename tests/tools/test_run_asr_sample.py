"""tools/run_asr_sample.py's own logic without openvino.genai's sample: the WAV it writes reads
back through its stand-in librosa as the audio, the fixture copy suppresses the incomplete-character
tokens, and a small sample of our own (one ``import openvino_genai`` line, librosa.load, an
ASRPipeline) runs on both sides with the same output; a wrong sample rate is refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ov_npu_emu.testing import whisper_test_audio
from tools import run_asr_sample as ras

pytest.importorskip("openvino_genai")

#: a sample of our own in the upstream layout: what the tool needs of one (not upstream's text)
_SAMPLE = '''import sys
import librosa
import openvino_genai

speech, _ = librosa.load(sys.argv[2], sr=16000)
pipe = openvino_genai.ASRPipeline(sys.argv[1], sys.argv[3])
res = pipe.generate(speech.tolist(), max_new_tokens=8)
print(res.texts, [round(float(s), 3) for s in res.scores])
'''


def test_wav_round_trip_through_stand_in_librosa(tmp_path: Path) -> None:
    audio = whisper_test_audio("short")
    ras.write_wav(tmp_path / "a.wav", audio)
    (tmp_path / "librosa").mkdir()
    (tmp_path / "librosa" / "__init__.py").write_text(ras._LIBROSA)
    sys.path.insert(0, str(tmp_path))
    try:
        import librosa  # the stand-in just written

        got, sr = librosa.load(tmp_path / "a.wav", sr=16000)
        assert sr == 16000 and got.dtype == np.float32 and got.shape == audio.shape
        assert np.abs(got - audio).max() <= 0.5 / 32768 + 1e-7  # 16-bit rounding only
        with pytest.raises(ValueError, match="16-bit mono WAV at 22050 Hz only"):
            librosa.load(tmp_path / "a.wav")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("librosa", None)


def test_fixture_copy_suppresses_incomplete_tokens(tmp_path: Path) -> None:
    import genai_shim

    src = ras.FIXTURES / "whisper-tiny-random-fp32"
    cfg = json.loads(ras.fixture_copy(src, tmp_path / "m").joinpath("generation_config.json").read_text())
    tok = genai_shim.Tokenizer(str(src))
    incomplete = {i for i in range(cfg["eos_token_id"]) if "\ufffd" in tok.decode([i])}
    assert incomplete and incomplete <= set(cfg["suppress_tokens"])
    before = json.loads((src / "generation_config.json").read_text()).get("suppress_tokens") or []
    assert set(before) <= set(cfg["suppress_tokens"])


def test_own_sample_same_on_both_sides(tmp_path: Path) -> None:
    upstream = tmp_path / "genai"
    (upstream / ras.SAMPLE).parent.mkdir(parents=True)
    (upstream / ras.SAMPLE).write_text(_SAMPLE)
    proc = subprocess.run([sys.executable, str(ras.ROOT / "tools" / "run_asr_sample.py"), "--upstream", str(upstream),
                           "--runs", "cpu", "--audio", "short", "--work", str(tmp_path / "w")],
                          capture_output=True, text=True, timeout=600, cwd=ras.ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "cpu: same output (1 lines; whisper-tiny-random-fp32, short audio)" in proc.stdout
