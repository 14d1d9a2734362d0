"""DMA ping-pong in the compiler's MatMul tiling: CMX slots, weight staging, K split, barriers."""

from __future__ import annotations

import json

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest

from ov_npu_emu import Core
from ov_npu_emu.cli import main
from ov_npu_emu.errors import CompileError, ConfigError
from ov_npu_emu_npu.arch import HardwareConfig
from ov_npu_emu_npu.compiler.frontend import prepare
from ov_npu_emu_npu.compiler.graph import Place
from ov_npu_emu_npu.compiler.lower import lower
from ov_npu_emu_npu.compiler.memory import plan_memory
from ov_npu_emu_npu.compiler.schedule import schedule
from ov_npu_emu_npu.compiler.verify import verify_memory, verify_schedule
from ov_npu_emu_npu.device.profiling import overlap_spans
from tests.npu.conftest import cpu_reference, rel_err

#: the tile geometry below is for f32 activations, and the outputs are compared with the CPU
#: plugin at 1e-5: exact mode
F32 = {"INFERENCE_PRECISION_HINT": "f32"}
CMX_32K = {"NPU_EMU_CMX_SIZE": 32768, **F32}


def _matmul(m: int, k: int, n: int, transpose_b: bool = False) -> ov.Model:
    rng = np.random.default_rng(0)
    x = ops.parameter([1, m, k], np.float32, name="x")
    w = rng.standard_normal((n, k) if transpose_b else (k, n)).astype(np.float32)
    return ov.Model([ops.result(ops.matmul(x, ops.constant(w), False, transpose_b))], [x], "mm")


def _run(model: ov.Model, config: dict) -> tuple[np.ndarray, dict]:
    feed = {"x": np.random.default_rng(1).standard_normal(list(model.inputs[0].get_shape())).astype(np.float32)}
    req = Core().compile_model(model, "NPU", {"PERF_COUNT": "YES", **F32, **config}).create_infer_request()
    out = req.infer(feed)[0]
    assert rel_err(out, cpu_reference(model, feed)[0]) <= 1e-5
    return out, req.impl.timeline().summary()


def _lowered(model: ov.Model, cmx: int, ping_pong: bool = True):  # type: ignore[no-untyped-def]
    hw = HardwareConfig(cmx_size=cmx)
    lw = lower(prepare(model), hw, ping_pong=ping_pong)
    plan = plan_memory(lw, hw.cmx_size)
    return lw, schedule(lw, plan.reuse_deps)


def test_issue_matmul_hides_dma_behind_compute_and_matches_cpu(tmp_path):
    """The acceptance line: [1,64,256]x[256,256] with 32 KiB CMX hides >= half its DMA, same outputs;
    with NPU_EMU_PING_PONG=NO the same tiles run in sequence (nothing hidden, longer)."""
    m = _matmul(64, 256, 256)
    xml = tmp_path / "mm.xml"
    ov.save_model(m, xml, compress_to_fp16=False)  # f16 weights would go the matmul_dq way
    from_cli = json.loads(_capture(xml))
    on_out, on = _run(m, CMX_32K)
    off_out, off = _run(m, {**CMX_32K, "NPU_EMU_PING_PONG": "NO"})
    assert from_cli["dma_hidden_fraction"] == pytest.approx(on["dma_hidden_fraction"])
    assert on["dma_hidden_fraction"] >= 0.5
    assert off["dma_hidden_fraction"] < 0.05
    assert on["makespan_cycles"] < 0.8 * off["makespan_cycles"]
    np.testing.assert_array_equal(on_out, off_out)  # same tiles, same sums: only the timing differs


def test_overlap_spans_add_up_to_the_reported_overlap():
    m = _matmul(64, 256, 256)
    feed = {"x": np.ones((1, 64, 256), np.float32)}
    req = Core().compile_model(m, "NPU", {"PERF_COUNT": "YES", **CMX_32K}).create_infer_request()
    req.infer(feed)
    tl = req.impl.timeline()
    spans = overlap_spans(tl)
    assert len(spans) > 10
    assert sum(e - s for s, e in spans) == tl.summary()["dma_compute_overlap_cycles"]


def _capture(xml) -> str:  # type: ignore[no-untyped-def]
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["profile", str(xml), "--config", "NPU_EMU_CMX_SIZE=32768",
                     "--config", "INFERENCE_PRECISION_HINT=f32", "--json"]) == 0
    return buf.getvalue()


@pytest.mark.parametrize("transpose_b", [False, True])
def test_weights_are_staged_and_wide_rows_split_along_k(transpose_b):
    """A 2048-wide row is 8 KiB, more than half an 8 KiB CMX: K is chunked and accumulated in CMX
    (matmul then matmul_acc), and no DPU task reads anything outside CMX."""
    m = _matmul(4, 2048, 48, transpose_b)
    lw, _ = _lowered(m, 8192)
    dpu = [t for t in lw.tasks if t.kind.name == "DPU"]
    assert {t.kernel for t in dpu} == {"matmul", "matmul_acc"}
    assert all(v.root.place is Place.CMX for t in dpu for v in t.ins + t.outs)
    assert sum(t.kernel == "matmul_acc" for t in dpu) >= len(dpu) // 2
    _run(m, {"NPU_EMU_CMX_SIZE": 8192})


def test_f16_outputs_are_tiled_without_k_split():
    """f16 activations would round every partial sum: K stays whole, the rest is tiled."""
    rng = np.random.default_rng(0)
    x = ops.parameter([1, 32, 128], np.float32, name="x")
    h = ops.relu(x)  # an f16 activation (the user input keeps its f32)
    w = ops.constant(rng.standard_normal((128, 96)).astype(np.float32))
    m = ov.Model([ops.result(ops.relu(ops.matmul(h, w, False, False)))], [x], "mm16")
    feed = {"x": np.random.default_rng(1).standard_normal((1, 32, 128)).astype(np.float32)}
    cfg = {**CMX_32K, "INFERENCE_PRECISION_HINT": "f16"}
    cm = Core().compile_model(m, "NPU", cfg)
    out = cm.create_infer_request().infer(feed)[0]
    assert rel_err(out, cpu_reference(m, feed)[0]) <= 2e-3
    lw = lower(prepare(m), HardwareConfig(cmx_size=32768), f16=True)
    kernels = {t.kernel for t in lw.tasks if t.kind.name == "DPU"}
    assert kernels == {"matmul"} and sum(t.kind.name == "DPU" for t in lw.tasks) > 1


def test_two_slots_per_stream_with_ping_pong_one_without():
    def slots(ping_pong: bool) -> int:
        lw, _ = _lowered(_matmul(64, 256, 256), 32768, ping_pong)
        return sum(1 for v in lw.values if v.slot and v.alias is None and (v.producers or v.readers))

    assert slots(True) == 6 and slots(False) == 3  # activation, weight and output streams


def test_verifier_catches_a_read_before_the_fill_and_an_early_overwrite():
    m = _matmul(64, 256, 256)
    lw, sched = _lowered(m, 32768)
    verify_memory(lw)
    verify_schedule(lw, sched)
    slot_dmas = [t for t in lw.tasks if t.kind.name == "DMA" and any(v.root.slot for v in t.outs)]
    # the third fill of a slot stream reuses the first one's slot: it waits for that slot's readers
    refill = next(t for t in slot_dmas[4:] if sched.waits.get(t.tid))
    saved = sched.waits.pop(refill.tid)
    with pytest.raises(CompileError, match="overwrites CMX slot"):
        verify_schedule(lw, sched)
    sched.waits[refill.tid] = saved
    compute = next(t for t in lw.tasks if t.kind.name == "DPU")
    sched.waits.pop(compute.tid)
    with pytest.raises(CompileError, match="reads CMX slot"):
        verify_schedule(lw, sched)


def test_ping_pong_key_is_a_checked_bool():
    core = Core()
    with pytest.raises(ConfigError):
        core.compile_model(_matmul(4, 16, 16), "NPU", {"NPU_EMU_PING_PONG": "maybe"})
    with pytest.raises(ConfigError, match="NPU_EMU_PING_PONG"):
        core.compile_model(_matmul(4, 16, 16), "NPU", {"NPU_EMU_PINGPONG": "NO"})
