"""samples/speculative_decoding_lm.py against the same sample under the real openvino_genai."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.genai_shim.conftest import needs_npuw
from tests.samples.sample_runner import ROOT, SAMPLES, only_import_and_device_differ

RUNNER = Path(__file__).parent / "_spec_runner.py"
TIMING = re.compile(r"  (Generate time|TTFT|TTST|TPOT): \d+\.\d\d( ± \d+\.\d\d)? ms(/token)?")


def _run(impl: str, *args: str, device: str = "-") -> list[str]:
    env = dict(os.environ)
    paths = [str(ROOT), str(ROOT / "plugins"), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    sample = str(SAMPLES / "speculative_decoding_lm.py")
    proc = subprocess.run(
        [sys.executable, str(RUNNER), impl, device, sample, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, f"{impl}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout.splitlines()


@needs_npuw
@pytest.mark.parametrize("device", ["-", "CPU"], ids=["main_on_NPU", "main_on_CPU"])
def test_speculative_decoding_sample(stories_dir, real_genai, device):
    """Main model on NPU (the sample as written: the stateful pipeline) and on CPU (both models
    on CPU: the continuous-batching pipeline, fixed candidates and its own counters)."""
    args = [str(stories_dir), str(stories_dir), "Once upon a time"]
    ours, real = _run("ours", *args, device=device), _run("real", *args, device=device)
    assert len(ours) == len(real) > 14
    for a, b in zip(ours, real):
        if TIMING.fullmatch(a):
            assert TIMING.fullmatch(b), b
        else:
            assert a == b  # the text, token / call / accepted counts
    assert len(ours[0].split()) > 20
    assert "  Num accepted draft tokens: 0" not in ours  # the main model as draft: accepted


def test_speculative_sample_differs_only_in_import():
    only_import_and_device_differ("speculative_decoding_lm.py")
