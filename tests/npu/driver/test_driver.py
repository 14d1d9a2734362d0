"""Execution goes through relocated descriptors; mutable command lists patch only changed args."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops

from ov_npu_emu.errors import ConfigError, ExecutionError
from ov_npu_emu_npu.blob import BlobReader
from ov_npu_emu_npu.blob.integrity import reseal
from tests.npu.conftest import cpu_reference, llm_feed, make_add_relu_model, make_mlp, rel_err, section_span


def _two_input_model() -> ov.Model:
    a = ops.parameter([4], np.float32, name="a")
    b = ops.parameter([4], np.float32, name="b")
    return ov.Model([ops.result(ops.subtract(a, b))], [a, b], "sub")


def test_corrupt_user_input_relocation_changes_result(npu_core):
    blob = npu_core.compile_model(_two_input_model(), "NPU").export_model().getvalue()
    feed = {"a": np.array([1, 2, 3, 4], np.float32), "b": np.array([10, 20, 30, 40], np.float32)}
    good = npu_core.import_model(blob, "NPU").create_infer_request().infer(feed)[0]
    np.testing.assert_array_equal(good, feed["a"] - feed["b"])
    # re-point the relocation of input "a" at the symbol of input "b": a - b becomes b - b
    off, size = section_span(blob, ".rela.npu.shave.userin")
    bad = bytearray(blob)
    infos = [int.from_bytes(bad[off + i + 8: off + i + 16], "little") for i in range(0, size, 24)]
    syms = sorted({i >> 32 for i in infos})
    first = infos[0]
    other = [s for s in syms if s != first >> 32][0]
    bad[off + 8: off + 16] = ((other << 32) | (first & 0xFFFFFFFF)).to_bytes(8, "little")
    out = npu_core.import_model(reseal(bad), "NPU").create_infer_request().infer(feed)[0]
    assert not np.array_equal(out, good)
    np.testing.assert_array_equal(out, np.zeros(4, np.float32))


def test_relocation_addend_past_the_tensor_is_a_page_fault(npu_core):
    blob = npu_core.compile_model(make_add_relu_model(), "NPU").export_model().getvalue()
    off, _ = section_span(blob, ".rela.npu.shave.userin")
    bad = bytearray(blob)
    bad[off + 16: off + 24] = (4096).to_bytes(8, "little", signed=True)
    req = npu_core.import_model(reseal(bad), "NPU").create_infer_request()
    with pytest.raises(ExecutionError, match="not mapped"):
        req.infer({"x": np.zeros((2, 3), np.float32)})


def test_mutable_command_list_patches_only_changed_pointers(npu_core):
    cm = npu_core.compile_model(make_mlp(), "NPU")
    req = cm.create_infer_request()
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((1, 4, 16)).astype(np.float32) for _ in range(3)]
    ref = [cpu_reference(make_mlp(), {"x": x})[0] for x in xs]
    out0 = req.infer({"x": xs[0]})[0]  # copies into the bound tensor: same address
    out1 = req.infer({"x": xs[1]})[0]
    c = dict(req.impl.counters)
    assert c["command_list_builds"] == 1 and c["mutable_updates"] == 0 and c["patched_args"] == 0
    # a new user tensor (zero copy) -> only the input's argument pointers are re-patched
    out2 = req.infer({"x": xs[2]}, share_inputs=True)[0]
    c = dict(req.impl.counters)
    assert c["command_list_builds"] == 1 and c["mutable_updates"] == 1
    n_in_relocs = sum(1 for r in cm.impl.parsed.user["in.0"])
    assert c["patched_args"] == n_in_relocs
    for a, b in zip((out0, out1, out2), ref, strict=False):
        assert rel_err(a, b) <= 1e-4
    # a new output tensor is patched the same way
    t = ov.Tensor(np.zeros((1, 4, 16), np.float32))
    req.set_tensor(cm.outputs[0], t)
    req.infer({"x": xs[0]})
    assert req.impl.counters["mutable_updates"] == 2
    assert rel_err(t.data, ref[0]) <= 1e-4


def test_set_state_marks_state_arguments_for_update(npu_core):
    from ov_npu_emu.testing import make_model_with_memory

    req = npu_core.compile_model(make_model_with_memory(), "NPU").create_infer_request()
    one = np.ones((1, 4), np.float32)
    req.infer({"input_data": one})
    st = req.query_state()[0]
    st.state = ov.Tensor(np.full((1, 4), 5, np.float32))
    assert st.update_pending
    out = req.infer({"input_data": one})[0]
    np.testing.assert_array_equal(out, np.full((1, 4), 6, np.float32))
    c = req.impl.counters
    assert c["command_list_builds"] == 1 and c["mutable_updates"] == 1 and c["patched_args"] >= 2
    assert not st.update_pending


@pytest.mark.parametrize("queue", ["inline", "thread"])
@pytest.mark.parametrize("mode", ["interrupt", "polling"])
def test_fence_and_queue_modes(npu_core, mode, queue):
    cm = npu_core.compile_model(make_add_relu_model(), "NPU", {"NPU_EMU_FENCE_MODE": mode, "NPU_EMU_QUEUE_MODE": queue})
    x = np.ones((2, 3), np.float32)
    out = cm.create_infer_request().infer({"x": x})[0]
    assert rel_err(out, cpu_reference(make_add_relu_model(), {"x": x})[0]) == 0.0


def test_bad_fence_or_queue_mode_is_config_error(npu_core):
    with pytest.raises(ConfigError):
        npu_core.compile_model(make_add_relu_model(), "NPU", {"NPU_EMU_FENCE_MODE": "smoke-signals"})
    with pytest.raises(ConfigError):
        npu_core.compile_model(make_add_relu_model(), "NPU", {"NPU_EMU_QUEUE_MODE": "carrier-pigeon"})


@pytest.mark.parametrize("mode", ["interrupt", "polling"])
def test_device_errors_reach_the_waiter_through_the_fence_in_thread_mode(npu_core, mode):
    from ov_npu_emu.errors import BarrierDeadlockError
    from ov_npu_emu_npu.blob.format import BARRIER

    blob = npu_core.compile_model(make_mlp(), "NPU").export_model().getvalue()
    off, _ = section_span(blob, ".npu.barriers")
    bad = bytearray(blob)
    bid, producers, consumers = BARRIER.unpack_from(bad, off)
    BARRIER.pack_into(bad, off, bid, producers + 1, consumers)
    cfg = {"NPU_EMU_QUEUE_MODE": "thread", "NPU_EMU_FENCE_MODE": mode}
    req = npu_core.import_model(reseal(bad), "NPU", cfg).create_infer_request()
    with pytest.raises(BarrierDeadlockError):  # raised on the device thread, re-raised by the fence wait
        req.infer({"x": np.zeros((1, 4, 16), np.float32)})


def test_requests_are_independent(npu_core, stories_decode):
    cm = npu_core.compile_model(stories_decode, "NPU")
    f1, f2 = llm_feed(stories_decode, 1), llm_feed(stories_decode, 2)
    r1, r2 = cm.create_infer_request(), cm.create_infer_request()
    a1 = np.array(r1.infer(f1)[0])
    a2 = np.array(r2.infer(f2)[0])
    assert np.array_equal(np.array(r1.infer(f1)[0]), a1)
    assert not np.array_equal(a1, a2)


def test_import_in_fresh_process_without_compiler(npu_core, stories_decode, tmp_path):
    cm = npu_core.compile_model(stories_decode, "NPU")
    blob = tmp_path / "decode.blob"
    blob.write_bytes(cm.export_model().getvalue())
    feed = llm_feed(stories_decode)
    np.savez(tmp_path / "feed.npz", **feed)
    here = [np.array(x) for x in cm.create_infer_request().infer(feed).values()]
    script = textwrap.dedent(f"""
        import sys, numpy as np
        sys.modules["ov_npu_emu_npu.compiler"] = None  # the runtime must not need the compiler
        import ov_npu_emu
        cm = ov_npu_emu.Core().import_model(open({str(blob)!r}, "rb").read(), "NPU")
        feed = dict(np.load({str(tmp_path / 'feed.npz')!r}))
        res = cm.create_infer_request().infer(feed)
        np.savez({str(tmp_path / 'out.npz')!r}, *[np.array(v) for v in res.values()])
        assert "ov_npu_emu_npu.compiler.pipeline" not in sys.modules
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=str(tmp_path),
                       env={**os.environ, "PYTHONPATH": ":".join(sys.path)})
    assert p.returncode == 0, p.stderr
    there = np.load(tmp_path / "out.npz")
    for i, a in enumerate(here):
        assert np.array_equal(there[f"arr_{i}"], a)


def test_without_mutable_command_lists_every_rebind_rebuilds(npu_core):
    cm = npu_core.compile_model(make_mlp(), "NPU", {"NPU_EMU_MUTABLE_COMMAND_LIST": "NO"})
    req = cm.create_infer_request()
    x = np.random.default_rng(0).standard_normal((1, 4, 16)).astype(np.float32)
    outs = [req.infer({"x": x.copy()}, share_inputs=True)[0] for _ in range(3)]
    c = req.impl.counters
    assert c["command_list_builds"] == 3 and c["mutable_updates"] == 0
    assert all(np.array_equal(o, outs[0]) for o in outs)


def test_barrier_with_an_extra_producer_deadlocks_with_typed_error(npu_core):
    from ov_npu_emu.errors import BarrierDeadlockError
    from ov_npu_emu_npu.blob.format import BARRIER

    blob = npu_core.compile_model(make_mlp(), "NPU").export_model().getvalue()
    off, size = section_span(blob, ".npu.barriers")
    assert size >= BARRIER.size
    bad = bytearray(blob)
    bid, producers, consumers = BARRIER.unpack_from(bad, off)
    BARRIER.pack_into(bad, off, bid, producers + 1, consumers)  # a producer that never posts
    req = npu_core.import_model(reseal(bad), "NPU").create_infer_request()
    with pytest.raises(BarrierDeadlockError, match="no runnable task"):
        req.infer({"x": np.zeros((1, 4, 16), np.float32)})


def test_static_weight_relocation_drives_the_result(npu_core):
    """Shift the weights source of the first weight DMA by one row: the output changes (the DPU
    reads weights from CMX, where a DMA out of .npu.weights staged them)."""
    blob = npu_core.compile_model(make_mlp(), "NPU").export_model().getvalue()
    x = {"x": np.random.default_rng(0).standard_normal((1, 4, 16)).astype(np.float32)}
    good = npu_core.import_model(blob, "NPU").create_infer_request().infer(x)[0]
    reader_relocs = [r for r in BlobReader(blob)
                     .iter_relocations() if r.section == ".rela.npu.dma" and r.symbol == ".npu.weights"]
    off, size = section_span(blob, ".rela.npu.dma")
    bad = bytearray(blob)
    for i in range(0, size, 24):
        r_off = int.from_bytes(bad[off + i: off + i + 8], "little")
        if r_off == reader_relocs[0].offset:
            add = int.from_bytes(bad[off + i + 16: off + i + 24], "little", signed=True)
            bad[off + i + 16: off + i + 24] = (add + 64).to_bytes(8, "little", signed=True)
            break
    out = npu_core.import_model(reseal(bad), "NPU").create_infer_request().infer(x)[0]
    assert not np.allclose(out, good)


def test_address_space_lookups_follow_map_and_unmap():
    """resolve() serves repeated lookups from the last region found; a mapping made or removed
    since, a read running into the next mapping, or an address past every mapping is resolved
    afresh (a page fault where nothing is mapped), never answered from that memo."""
    from ov_npu_emu_npu.driver.memory import AddressSpace, MemKind

    aspace = AddressSpace()
    a = aspace.map(np.arange(64, dtype=np.uint8), MemKind.IO, "a", base=0x1000)
    assert aspace.bytes_at(0x1008, 4).tolist() == [8, 9, 10, 11]
    # a region mapped right behind "a" inside its extent: its addresses are its own from now on
    b = aspace.map(np.full(16, 200, np.uint8), MemKind.IO, "b", base=0x1020)
    assert aspace.bytes_at(0x1020, 2).tolist() == [200, 200]
    assert aspace.bytes_at(0x1008, 4).tolist() == [8, 9, 10, 11]  # "a" again, now limited by "b"
    assert aspace.bytes_at(0x101E, 4).tolist() == [30, 31, 32, 33]  # past b's base: "a" (as bisect finds it)
    assert aspace.resolve(0x1021, 1)[0] is b
    aspace.unmap(a)
    with pytest.raises(ExecutionError, match="page fault"):
        aspace.bytes_at(0x1008, 4)
    with pytest.raises(ExecutionError, match="page fault"):
        aspace.bytes_at(0x1020, 17)  # one byte past "b"


def test_relocations_patched_at_once_equal_one_by_one(npu_core, monkeypatch):
    """The driver reads a blob's relocations as arrays and patches a request's static ones in one
    numpy store per (section, symbol): device memory and user-I/O relocations are those of the
    entry-by-entry loop (which corrupt blobs still take, to name the faulty entry)."""
    from ov_npu_emu_npu.driver import hpi

    blob = npu_core.compile_model(make_mlp(), "NPU").export_model().getvalue()
    fast = hpi.ParsedBlob(blob)
    assert fast.static_groups and not fast.static
    monkeypatch.setattr(hpi, "_relocation_groups", lambda *a: None)
    grouped = hpi.ParsedBlob(blob)
    assert grouped.static and grouped.static_groups is not None
    assert {k: [(r.target, r.offset, r.addend) for r in v] for k, v in fast.user.items()} == \
        {k: [(r.target, r.offset, r.addend) for r in v] for k, v in grouped.user.items()}
    monkeypatch.setattr(hpi, "_static_groups", lambda static: None)
    loop = hpi.ParsedBlob(blob)
    assert loop.static_groups is None
    mem = [hpi.HostParsedInference(p).arena.buf for p in (fast, grouped, loop)]
    assert np.array_equal(mem[0], mem[2]) and np.array_equal(mem[1], mem[2])
    assert mem[2].any()
