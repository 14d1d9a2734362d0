"""The management core's walked schedule: barrier order, replay equivalence, patches, knobs."""

from __future__ import annotations

import numpy as np
import pytest

from ov_npu_emu.errors import BarrierDeadlockError, ConfigError
from ov_npu_emu_npu.blob.integrity import reseal
from tests.npu.conftest import llm_feed, make_mlp, section_span


def _producers(cl) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for lane in cl.lanes:
        for t in lane:
            for b in t.posts:
                out.setdefault(b, []).append(t.tid)
    return out


def test_schedule_respects_every_barrier_and_fifo(npu_core, stories_decode):
    req = npu_core.compile_model(stories_decode, "NPU").create_infer_request()
    req.infer(llm_feed(stories_decode))
    cl = req.impl.command_list
    sched = cl.schedule
    assert sched is not None and len(sched.tasks) == sum(len(lane) for lane in cl.lanes)
    at = {t.tid: i for i, t in enumerate(sched.tasks)}
    prod = _producers(cl)
    n_waits = 0
    for t in sched.tasks:
        for b in t.waits:  # every producer of a waited barrier ran before the waiter
            n_waits += 1
            assert all(at[p] < at[t.tid] for p in prod.get(b, []))
    assert n_waits > 0  # the decode graph really is gated by barriers
    for lane in cl.lanes:  # each engine FIFO keeps its order
        assert [at[t.tid] for t in lane] == sorted(at[t.tid] for t in lane)
    # the FIFOs interleave: the order is not lane after lane
    lane_of = [t.lane for t in sched.tasks]
    assert sum(a != b for a, b in zip(lane_of, lane_of[1:], strict=False)) > len(cl.lanes)


def test_replay_equals_walking_every_inference(npu_core, stories_decode):
    once = npu_core.compile_model(stories_decode, "NPU").create_infer_request()
    walk = npu_core.compile_model(stories_decode, "NPU", {"NPU_EMU_BARRIER_WALK": "EVERY_INFERENCE"}) \
        .create_infer_request()
    for seed in (1, 2, 3):
        f = llm_feed(stories_decode, seed)
        a = [np.array(x) for x in once.infer(f).values()]
        b = [np.array(x) for x in walk.infer(f).values()]
        assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=False))
    assert walk.impl.command_list.schedule is None  # the per-task walk never made one


def test_patch_swaps_tasks_into_the_schedule(npu_core):
    req = npu_core.compile_model(make_mlp(), "NPU").create_infer_request()
    rng = np.random.default_rng(0)
    x0, x1 = (rng.standard_normal((1, 4, 16)).astype(np.float32) for _ in range(2))
    ref1 = np.array(req.infer({"x": x1})[0])
    req.infer({"x": x0})
    sched = req.impl.command_list.schedule
    out = np.array(req.infer({"x": x1}, share_inputs=True)[0])  # new address: patched, not rebuilt
    assert req.impl.counters["mutable_updates"] == 1
    assert req.impl.command_list.schedule is sched  # barriers unchanged: kept, tasks swapped
    # the replayed DMA reads the patched address (a stale bound task would read x0's buffer)
    np.testing.assert_array_equal(out, ref1)
    assert all(a is b for a, b in zip(sched.runs, (t.run for t in sched.tasks), strict=False))


def test_deadlock_on_replay_path_each_inference(npu_core):
    from ov_npu_emu_npu.blob.format import BARRIER

    blob = npu_core.compile_model(make_mlp(), "NPU").export_model().getvalue()
    off, _ = section_span(blob, ".npu.barriers")
    bad = bytearray(blob)
    bid, producers, consumers = BARRIER.unpack_from(bad, off)
    BARRIER.pack_into(bad, off, bid, producers + 1, consumers)
    req = npu_core.import_model(reseal(bad), "NPU").create_infer_request()
    for _ in range(2):  # no schedule is cached from a failed walk
        with pytest.raises(BarrierDeadlockError, match="no runnable task"):
            req.infer({"x": np.zeros((1, 4, 16), np.float32)})
    assert req.impl.command_list.schedule is None


def test_bad_barrier_walk_value_is_config_error(npu_core):
    with pytest.raises(ConfigError, match="NPU_EMU_BARRIER_WALK"):
        npu_core.compile_model(make_mlp(), "NPU", {"NPU_EMU_BARRIER_WALK": "sometimes"})
    with pytest.raises(ConfigError, match="NPU_EMU_BARRIER_WALK"):
        npu_core.set_property("NPU", {"NPU_EMU_BARRIER_WALK": "sometimes"})
    cm = npu_core.compile_model(make_mlp(), "NPU", {"NPU_EMU_BARRIER_WALK": "every_inference"})
    assert cm.get_property("NPU_EMU_BARRIER_WALK") == "EVERY_INFERENCE"


@pytest.mark.parametrize(("shape", "axes"), [((1, 1, 64), (2,)), ((2, 3, 17), (1, 2)), ((3, 7, 9), (0,))])
def test_bound_reduce_mean_is_bitwise_np_mean(shape, axes):
    from ov_npu_emu_npu.device.kernels import make_kernel

    x = (np.random.default_rng(0).standard_normal(shape) * 10).astype(np.float32)
    ref = np.mean(x, axis=axes, keepdims=True)
    o = np.full(ref.shape, np.nan, np.float32)
    make_kernel("reduce_mean", [x], [o], np.array(axes, np.float64))()
    np.testing.assert_array_equal(o, ref)
