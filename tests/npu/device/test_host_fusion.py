"""Host fusion (device/fusion.py): a ping-pong-tiled MatMul runs as one host product, with the
tiles' bits and the same device (cost-model) times; anything the descriptors do not prove stays tiled."""

from __future__ import annotations

import dataclasses

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest

from ov_npu_emu import Core
from ov_npu_emu.errors import ConfigError
from ov_npu_emu_npu.blob.format import SEC_CMX
from ov_npu_emu_npu.device.engines import Schedule
from ov_npu_emu_npu.device.fusion import CALL_WEIGHT_ELEMS, plan_schedule
from tests.npu.conftest import cpu_reference, llm_feed, make_group_conv_cnn, rel_err

#: these tests compare the fused product with the CPU plugin (or check f32 tile plans): exact mode
F32 = {"INFERENCE_PRECISION_HINT": "f32"}


def _matmul(m: int, k: int, n: int, transpose_b: bool) -> ov.Model:
    rng = np.random.default_rng(0)
    x = ops.parameter([1, m, k], np.float32, name="x")
    w = rng.standard_normal((n, k) if transpose_b else (k, n)).astype(np.float32)
    y = ops.matmul(x, ops.constant(w), False, transpose_b)
    return ov.Model([ops.result(ops.relu(y))], [x], "mm")


def _requests(model: ov.Model, config: dict | None = None):  # type: ignore[no-untyped-def]
    core = Core()
    return [core.compile_model(model, "NPU", {**(config or {}), "NPU_EMU_HOST_FUSION": f}).create_infer_request()
            for f in ("YES", "NO")]


def test_stories_decode_fused_bit_for_bit_same_device_times(stories_decode):
    fused, tiled = _requests(stories_decode, {"PERF_COUNT": "YES"})
    for seed in (1, 2):
        f = llm_feed(stories_decode, seed)
        a = [np.array(x) for x in fused.infer(f).values()]
        b = [np.array(x) for x in tiled.infer(f).values()]
        assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    sched = fused.impl.command_list.schedule
    # every MatMul of the step (5 layers x 7 and the LM head), each as one gemv call over the
    # whole weight (its sums do not depend on the column cut, so it has the tiles' bits)
    assert sched.fused_groups == 36
    assert not any(t.kernel in ("matmul", "matmul_acc") for t in sched.plan_tasks)
    assert tiled.impl.command_list.schedule.plan is None
    # the device still runs (and times) every tile: the profile's device times are the tiles'
    pa, pb = fused.get_profiling_info(), tiled.get_profiling_info()
    assert [(p.node_name, p.exec_type, p.real_time) for p in pa] == [(p.node_name, p.exec_type, p.real_time)
                                                                      for p in pb]
    assert fused.impl.timeline().summary() == tiled.impl.timeline().summary()
    assert sum(p.cpu_time.total_seconds() for p in pa) > 0


@pytest.mark.parametrize("transpose_b", [False, True])
def test_k_split_tiles_fused(transpose_b):
    """A 4 KiB CMX cuts K into matmul + matmul_acc chunks and N into tiles: the fused product
    adds the same chunks in the same order."""
    model = _matmul(1, 256, 96, transpose_b)
    fused, tiled = _requests(model, {"NPU_EMU_CMX_SIZE": 4096, **F32})
    x = np.random.default_rng(3).standard_normal((1, 1, 256)).astype(np.float32)
    a, b = np.array(fused.infer({"x": x})[0]), np.array(tiled.infer({"x": x})[0])
    assert np.array_equal(a, b)
    assert rel_err(a, cpu_reference(model, {"x": x})[0]) <= 1e-5
    sched = fused.impl.command_list.schedule
    kernels = {t.kernel for t in sched.tasks}
    assert "matmul_acc" in kernels
    assert sched.fused_groups == 1
    assert not any(t.kernel in ("matmul", "matmul_acc") for t in sched.plan_tasks)  # no tile left on the host


def test_a_shifted_tile_descriptor_keeps_its_matmul_tiled(stories_decode):
    """The descriptors decide: a weight load pointing one row off no longer forms the MatMul."""
    req = Core().compile_model(stories_decode, "NPU").create_infer_request()
    req.infer(llm_feed(stories_decode, 1))
    cl = req.impl.command_list
    tasks = cl.schedule.tasks
    cmx = (cl.hpi.section_addr[SEC_CMX], cl.hpi.section_addr[SEC_CMX] + cl.hpi.parsed.sections[SEC_CMX].size)
    node_of = {int(t["tid"]): str(t["node"]) for t in cl.hpi.parsed.meta["tasks"]}

    def plan(ts):  # type: ignore[no-untyped-def]
        s = Schedule(list(ts), [t.run for t in ts])
        plan_schedule(s, cl.hpi.aspace.array, cmx, node_of, set())
        return s

    good = plan(tasks)
    # the first weight load into CMX (from the weights region, above the arena's CMX)
    i = next(i for i, t in enumerate(tasks) if t.dma is not None and cmx[0] <= t.dma[1] < cmx[1]
             and t.dma[0] >= 0x2_0000_0000)
    src, *rest = tasks[i].dma
    row = tasks[i].dma[4]
    bad = list(tasks)
    bad[i] = dataclasses.replace(tasks[i], dma=(src + row, *rest))
    shifted = plan(bad)
    assert good.fused_groups >= 20
    assert shifted.fused_groups == good.fused_groups - 1
    assert tasks[i].tid in {t.tid for m in good.plan_members for t in m}
    assert tasks[i].tid not in {t.tid for m in shifted.plan_members for t in m}  # its tiles run as fetched


def test_patched_input_address_plans_again():
    """The fused product reads the activation where the (patched) descriptors now point."""
    model = _matmul(1, 128, 256, True)
    req = Core().compile_model(model, "NPU", {"NPU_EMU_CMX_SIZE": 65536, **F32}).create_infer_request()
    rng = np.random.default_rng(0)
    x0, x1 = (rng.standard_normal((1, 1, 128)).astype(np.float32) for _ in range(2))
    req.infer({"x": x0})
    assert req.impl.command_list.schedule.fused_groups == 1
    out = np.array(req.infer({"x": x1}, share_inputs=True)[0])  # new address: a patch, not a rebuild
    assert req.impl.counters["mutable_updates"] == 1
    assert req.impl.command_list.schedule.fused_groups == 1
    tiled = _requests(model, {"NPU_EMU_CMX_SIZE": 65536, **F32})[1]
    np.testing.assert_array_equal(out, np.array(tiled.infer({"x": x1})[0]))


def test_host_fusion_key():
    with pytest.raises(ConfigError, match="NPU_EMU_HOST_FUSION"):
        Core().compile_model(_matmul(1, 16, 16, True), "NPU", {"NPU_EMU_HOST_FUSION": "sometimes"})
    cm = Core().compile_model(_matmul(1, 16, 16, True), "NPU", {"NPU_EMU_HOST_FUSION": "no"})
    assert cm.get_property("NPU_EMU_HOST_FUSION") == "NO"


def test_large_matmul_fused_in_column_blocks():
    """A weight over CALL_WEIGHT_ELEMS runs as several column blocks, still the tiles' bits."""
    model = _matmul(1, 512, 1024, True)
    assert 512 * 1024 > CALL_WEIGHT_ELEMS
    fused, tiled = _requests(model, F32)
    x = np.random.default_rng(4).standard_normal((1, 1, 512)).astype(np.float32)
    a, b = np.array(fused.infer({"x": x})[0]), np.array(tiled.infer({"x": x})[0])
    assert np.array_equal(a, b)
    assert fused.impl.command_list.schedule.fused_groups == 1


def test_output_placed_over_its_activation():
    """8 KiB CMX: the memory plan puts the FC's output where its activation was (the tiles load
    it before the first store); the fused product copies the activation aside first, as the
    loads did, and gives the tiles' bits."""
    model = make_group_conv_cnn()
    fused, tiled = _requests(model, {"NPU_EMU_CMX_SIZE": 8192, **F32})
    for seed in (1, 2):
        feed = {"image": np.random.default_rng(seed).standard_normal((1, 3, 16, 16)).astype(np.float32)}
        a, b = np.array(fused.infer(feed)[0]), np.array(tiled.infer(feed)[0])
        assert np.array_equal(a, b)
        assert rel_err(a, cpu_reference(model, feed)[0]) <= 1e-4
    sched = fused.impl.command_list.schedule
    assert sched.fused_groups == 1
    assert any(t.kernel == "matmul" for t in sched.tasks)  # the FC's tiles, replaced in the plan
    assert not any(t.kernel == "matmul" for t in sched.plan_tasks)
