"""``ov-npu-emu benchmark``: benchmark_app's report on our devices and the real CPU beside it."""

from __future__ import annotations

import re

import numpy as np
import openvino
import pytest

from ov_npu_emu.cli import main


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    ops = openvino.opset13
    x = ops.parameter([1, 3, 16, 16], openvino.Type.f32, name="image")
    w = ops.constant(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32))
    y = ops.relu(ops.convolution(x, w, [1, 1], [1, 1], [1, 1], [1, 1]))
    path = tmp_path_factory.mktemp("bench") / "cnn.xml"
    openvino.save_model(openvino.Model([ops.reduce_mean(y, ops.constant([2, 3]), False)], [x], "cnn"), path)
    dyn = path.parent / "dyn.xml"
    x = ops.parameter([-1, 8], openvino.Type.f32, name="x")
    openvino.save_model(openvino.Model([ops.relu(x)], [x], "dyn"), dyn)
    return path, dyn


def _report(text: str) -> list[dict[str, float]]:
    reports = []
    for block in text.split("[Step 11/11]")[1:]:
        nums = {key: float(re.search(rf"{key}:\s+([\d.]+)", block).group(1))
                for key in ("Count", "Duration", "Median", "Average", "Min", "Max", "Throughput")}
        reports.append(nums)
    return reports


@pytest.mark.parametrize("device", ["NPU", "CPU"])
@pytest.mark.parametrize("api", ["async", "sync"])
def test_report_as_benchmark_app_prints_it(cnn, capsys, device, api):
    assert main(["benchmark", "-m", str(cnn[0]), "-d", device, "-niter", "12", "-api", api, "--baseline"]) == 0
    out = capsys.readouterr().out
    assert f"Execution Devices:['{device}']" in out and "the real OpenVINO plugin" in out
    ours, real = _report(out)
    for r in (ours, real):
        assert r["Count"] == 12 and r["Duration"] > 0 and r["Throughput"] > 0
        assert r["Min"] <= r["Median"] <= r["Max"] and r["Min"] <= r["Average"] <= r["Max"]
    assert re.search(r"ours / real: median latency [\d.]+x, throughput [\d.]+x", out)


def test_dynamic_inputs_need_a_shape(cnn, capsys):
    assert main(["benchmark", "-m", str(cnn[1]), "-niter", "2"]) == 1
    assert "dynamic shape [?,8]: give -shape" in capsys.readouterr().err
    assert main(["benchmark", "-m", str(cnn[1]), "-niter", "2", "-shape", "x[3,8]"]) == 0
    assert _report(capsys.readouterr().out)[0]["Count"] == 2
    assert main(["benchmark", "-m", str(cnn[1]), "-niter", "2", "-shape", "y[3,8]"]) == 1
    assert "does not have" in capsys.readouterr().err
    assert main(["benchmark", "-m", str(cnn[1]), "-niter", "2", "-shape", "[3,x]"]) == 1
    assert "whole numbers" in capsys.readouterr().err
