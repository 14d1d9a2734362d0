"""CLI compile/inspect/profile, profiling info and the Chrome-trace timeline."""

from __future__ import annotations

import json

import numpy as np
import openvino as ov
import pytest

import ov_npu_emu
from ov_npu_emu.cli import main
from tests.npu.conftest import make_add_relu_model, make_mlp


@pytest.fixture(scope="module")
def mlp_xml(tmp_path_factory):
    path = tmp_path_factory.mktemp("mlp") / "mlp.xml"
    ov.save_model(make_mlp(), str(path))
    return path


def test_compile_then_inspect_json(mlp_xml, tmp_path, capsys):
    blob = tmp_path / "mlp.blob"
    assert main(["compile", str(mlp_xml), "-o", str(blob), "--config", "NPU_EMU_CMX_SIZE=1024"]) == 0
    assert blob.stat().st_size > 0
    capsys.readouterr()
    assert main(["inspect", str(blob), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert set(d) >= {"header", "sections", "symbols", "relocations", "tasks", "barriers", "memory_map"}
    assert d["metadata"]["hw"]["cmx_size"] == 1024
    assert {"DMA", "DPU", "SHAVE"} <= set(d["tasks"])
    assert any(r["user"] == "in" for r in d["relocations"])
    kinds = {m["kind"] for m in d["memory_map"]}
    assert {"WRITE_COMBINE_FW", "WRITE_COMBINE_SHAVE", "WRITE_COMBINE_DMA", "WEIGHTS", "SCRATCH", "CMX"} <= kinds
    # the blob the CLI wrote imports and runs
    x = np.ones((1, 4, 16), np.float32)
    out = ov_npu_emu.Core().import_model(blob.read_bytes(), "NPU").create_infer_request().infer({"x": x})[0]
    assert out.shape == (1, 4, 16)
    assert main(["inspect", str(blob)]) == 0
    assert "Memory map" in capsys.readouterr().out


def test_cli_errors_are_one_line(tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "missing.blob")]) == 1
    assert "does not exist" in capsys.readouterr().err
    bad = tmp_path / "bad.blob"
    bad.write_bytes(b"garbage")
    assert main(["inspect", str(bad)]) == 1
    assert "ov-npu-emu: error:" in capsys.readouterr().err


def test_profile_tiny_llm_decode_writes_trace_with_engine_lanes(tiny_model_dir, tmp_path, capsys):
    trace = tmp_path / "decode.json"
    rc = main(["profile", str(tiny_model_dir / "openvino_model.xml"), "--decode-kv", "31", "--trace", str(trace),
               "--json"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert set(summary["utilization"]) == {"DMA0", "DMA1", "DPU", "SHAVE"}
    assert all(0 < u <= 1 for u in summary["utilization"].values())
    assert sum(summary["busy_us"].values()) >= summary["makespan_us"] > 0
    ev = json.loads(trace.read_text())["traceEvents"]
    # the overlap figure is recomputed from the trace's own spans (a wrong figure fails here)
    def union(cats):
        out = []
        for a, b in sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("ph") == "X" and e["cat"] in cats):
            if out and a <= out[-1][1]:
                out[-1][1] = max(out[-1][1], b)
            else:
                out.append([a, b])
        return out
    dma, comp = union({"DMA"}), union({"DPU", "SHAVE"})
    hidden = sum(max(0, min(b, d) - max(a, c)) for a, b in dma for c, d in comp)
    assert summary["dma_hidden_fraction"] == pytest.approx(hidden / sum(b - a for a, b in dma), abs=0.02)
    lanes = {e["args"]["name"] for e in ev if e.get("name") == "thread_name"}
    assert lanes == {"DMA0", "DMA1", "DPU", "SHAVE"}
    spans = [e for e in ev if e["ph"] == "X"]
    assert {e["cat"] for e in spans} == {"DMA", "DPU", "SHAVE"}
    assert all(e["dur"] > 0 and e["ts"] >= 0 for e in spans)


def test_profiling_info_per_task(npu_core):
    # f32: the two tasks of the exact mode (f16 adds the output's convert back to f32)
    cm = npu_core.compile_model(make_add_relu_model(), "NPU", {"PERF_COUNT": "YES", "INFERENCE_PRECISION_HINT": "f32"})
    req = cm.create_infer_request()
    req.infer({"x": np.ones((2, 3), np.float32)})
    info = req.get_profiling_info()
    assert [p.exec_type for p in info] == ["SHAVE:add", "SHAVE:relu"]
    assert info[0].node_type == "Add"
    # a slow clock too: timedelta keeps whole microseconds, and a small tile costs a few hundred cycles
    slow_hw = {"PERF_COUNT": "YES", "NPU_EMU_DPU_MACS": 8, "NPU_EMU_SHAVE_FLOPS": 8, "NPU_EMU_DDR_BW_GBPS": 1,
               "NPU_EMU_CLOCK_MHZ": 100}
    mlp = npu_core.compile_model(make_mlp(rows=64), "NPU", slow_hw).create_infer_request()
    mlp.infer({"x": np.ones((1, 64, 16), np.float32)})
    info = mlp.get_profiling_info()
    assert {p.exec_type.split(":")[0] for p in info} == {"DMA", "DPU", "SHAVE"}
    assert all(p.real_time.total_seconds() > 0 for p in info)  # estimated device time, slow hardware
    assert sum(p.cpu_time.total_seconds() for p in info) > 0  # measured host time (PERF_COUNT)


def test_inspect_json_lists_compressed_weights(tiny_model_dir_int4, tmp_path, capsys):
    blob = tmp_path / "int4.blob"
    assert main(["compile", str(tiny_model_dir_int4 / "openvino_model.xml"), "-o", str(blob), "--decode-kv", "16"]) == 0
    capsys.readouterr()
    assert main(["inspect", str(blob), "--json"]) == 0
    wf = json.loads(capsys.readouterr().out)["metadata"]["weights_format"]
    assert wf["counts"] == {"i4": 14, "u8": 2}
    assert {r["group_size"] for r in wf["compressed"] if r["format"] == "i4"} == {16}
