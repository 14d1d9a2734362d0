"""tools/vlm_check.py on one committed VLM fixture (the real on CPU and NPU with NPUW on CPU, ours
on CPU and the emulated NPU, f32): everything equal, the exit code 0; and a differing text is
caught (check() False)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("openvino_genai")

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "vlm" / "llava-fp32"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "tools" / "vlm_check.py"), *args, "--tokens", "6"],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)


def test_fixture_matches_the_real() -> None:
    proc = _run(str(FIXTURE))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ours CPU      6/6 equal to real CPU" in proc.stdout
    assert "ours NPU+vis  6/6 equal to real NPU" in proc.stdout
    assert "over-long    same error" in proc.stdout


def test_a_changed_model_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One prompt of ours on CPU answers otherwise (its text altered after the run): the check
    fails; the real ran once (CPU), ours three times (CPU, NPU, NPU with the vision there)."""
    sys.path.insert(0, str(ROOT / "tools"))
    import vlm_check

    calls: list[str] = []
    real_run = vlm_check._run

    def fake_run(mod, folder, device, props, tokens, video):  # noqa: ANN001, ANN202
        out = real_run(mod, folder, device, props, tokens, video)
        calls.append(mod.__name__)
        if mod.__name__ == "genai_shim" and device == "CPU":
            out[1] = (out[1][0], out[1][1] + "!", out[1][2])  # one prompt's text differs
        return out

    monkeypatch.setattr(vlm_check, "_run", fake_run)
    assert vlm_check.check(FIXTURE, defaults=False, tokens=4, real_npu=False) is False
    assert calls.count("genai_shim") == 3 and calls.count("openvino_genai") == 1
