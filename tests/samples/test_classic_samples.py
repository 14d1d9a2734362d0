"""OpenVINO's classic runtime samples run on the emulated NPU with only the import changed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import openvino as real_ov
import pytest

from ov_npu_emu.testing import make_small_cnn

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "samples" / "sync_benchmark.py"


def _run(script: Path, *args: str) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "plugins"), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def cnn_xml(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cnn") / "cnn.xml"
    real_ov.save_model(make_small_cnn(), path, compress_to_fp16=False)
    return path


@pytest.mark.parametrize("device", ["NPU", "CPU"])
def test_sync_benchmark_runs_on_our_devices(cnn_xml, device):
    out = _run(SAMPLE, str(cnn_xml), device, "0.2")
    count = int(re.search(r"Count: +(\d+) iterations", out).group(1))
    assert count >= 10
    assert re.search(r"Throughput: [\d.]+ FPS", out)


def test_sync_benchmark_is_the_openvino_sample_but_for_the_import(cnn_xml, tmp_path):
    text = SAMPLE.read_text()
    assert text.count("import ov_npu_emu as ov") == 1
    real = tmp_path / "sync_benchmark_real.py"
    real.write_text(text.replace("import ov_npu_emu as ov", "import openvino as ov"))
    out = _run(real, str(cnn_xml), "CPU", "0.2")
    assert "Count:" in out and "Throughput:" in out
