"""Running the repo's sample ports as subprocesses, under genai_shim or the real openvino_genai."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples"
EXPECTED = Path(__file__).parent / "expected"
RUNNER = Path(__file__).parent / "_runner.py"
PROMPT = "Once upon a time"


def run(impl: str, device: str, sample: str, *args: str, stdin: str | None = None) -> str:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), str(ROOT / "plugins"), env.get("PYTHONPATH", "")]
    )
    proc = subprocess.run(
        [sys.executable, str(RUNNER), impl, device, str(SAMPLES / sample), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, (
        f"{sample} ({impl}, {device}) failed:\n{proc.stdout}\n{proc.stderr}"
    )
    return proc.stdout


def only_import_and_device_differ(sample: str) -> None:
    text = (SAMPLES / sample).read_text()
    assert len(re.findall(r"^import genai_shim as \w+$", text, flags=re.MULTILINE)) == 1
    assert "openvino_genai" not in text.replace("import genai_shim as openvino_genai", "").replace(
        "openvino_genai.", ""
    ).replace("openvino_genai ", "")
