"""The device weights bank: compiled models of the same weights share one copy and one decompressed cache."""

from __future__ import annotations

import gc
import io
import tracemalloc
import weakref

import numpy as np
import pytest
from elftools.elf.elffile import ELFFile

from ov_npu_emu.errors import BlobFormatError, ConfigError, ExecutionError
from ov_npu_emu.modelbuilder import make_model_folder
from ov_npu_emu_npu.blob.format import SEC_WEIGHTS, operand_addr_offset
from ov_npu_emu_npu.blob.integrity import reseal
from ov_npu_emu_npu.blob.reader import BlobReader
from ov_npu_emu_npu.driver import WeightsBank
from ov_npu_emu_npu.driver.bank import BANK_MIN_BYTES
from tests.npu.conftest import cpu_reference, llm_feed, rel_err, static_llm

F32_TOL = 1e-4


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """The builder's small preset, int8 and f32: (prefill-like [1,32] over 8 past, decode [1,1] over 15
    past). 32 rows: the prefill's matmul_dq tasks decompress into the cache (<= 16 read the weights as stored)."""
    out = {}
    for dtype in ("int8", "f32"):
        xml = make_model_folder(tmp_path_factory.mktemp(dtype), "small", dtype) / "openvino_model.xml"
        out[dtype] = (static_llm(xml, 32, 8), static_llm(xml, 1, 15))
    return out


def _bank(cm) -> WeightsBank:
    return cm.impl.parsed.banked.bank


def _run(cm, feed):
    return np.array(cm.create_infer_request().infer(feed)[0])


@pytest.mark.parametrize("dtype", ["int8", "f32"])
def test_two_models_share_the_bank_and_match_cpu(npu_core, small, dtype):
    prefill, decode = small[dtype]
    a = npu_core.compile_model(prefill, "NPU")
    bank = _bank(a)
    after_first = bank.stats()
    b = npu_core.compile_model(decode, "NPU")
    after_second = bank.stats()
    # the second model's weights are all hits: no new device bytes, every entry referenced twice
    assert after_second["weights_bytes"] == after_first["weights_bytes"] > 0
    assert after_second["entries"] == after_first["entries"] == len(a.impl.parsed.banked.entries)
    assert all(e.refs == 2 for e in bank.entries())
    pa, pb = a.impl.parsed, b.impl.parsed
    # what the second model added is its small private image (norms, scales, shape constants)
    assert pb.banked.private_nbytes < 0.05 * after_first["weights_bytes"]
    # the weights exist once in the process: neither model keeps its blob's weights section
    assert pa.sections[SEC_WEIGHTS].data.nbytes == pb.sections[SEC_WEIGHTS].data.nbytes == 0
    # requests add their activations (arena) only; the weights they map are the bank's memory
    req = b.create_infer_request()
    arena = req.impl.hpi.arena.buf.nbytes
    assert arena < after_first["weights_bytes"]
    bank_regions = [r for r in req.impl.hpi.aspace.regions() if ":bank@" in r.name]
    assert {r.base for r in bank_regions} == {e.base for e in bank.entries()}
    assert all(np.shares_memory(r.buf, next(e.buf for e in bank.entries() if e.base == r.base))
               for r in bank_regions)
    for m, cm in ((prefill, a), (decode, b)):
        feed = llm_feed(m)
        assert rel_err(_run(cm, feed), cpu_reference(m, feed)[0]) <= F32_TOL


def test_results_equal_without_the_bank(npu_core, small):
    prefill, decode = small["int8"]
    feed = llm_feed(decode)
    banked = _run(npu_core.compile_model(decode, "NPU"), feed)
    private = npu_core.compile_model(decode, "NPU", {"NPU_EMU_WEIGHTS_BANK": "NO"})
    assert private.impl.parsed.banked is None
    np.testing.assert_array_equal(banked, _run(private, feed))


def test_decompressed_weights_are_filled_once_for_all_sharers(npu_core, small):
    prefill, decode = small["int8"]
    a = npu_core.compile_model(prefill, "NPU")
    b = npu_core.compile_model(decode, "NPU")
    _run(a, llm_feed(prefill))
    bank = _bank(a)
    dq = bank.stats()["dq_bytes"]
    wa, wb = a.impl.parsed.weights_cache, b.impl.parsed.weights_cache
    assert dq > 0 and wa.misses == len(wa) > 0
    assert dq == sum(e.dq_nbytes for e in bank.entries())  # the running total the budget reads
    _run(b, llm_feed(decode))
    # the decode model reads the weights as stored: it neither fills nor needs the cache
    assert wb.misses == 0 and len(wb) == 0
    assert bank.stats()["dq_bytes"] == dq
    c = npu_core.compile_model(prefill, "NPU")
    _run(c, llm_feed(prefill))
    # a second prefill model found every decompressed weight the first one filled
    wc = c.impl.parsed.weights_cache
    assert wc.misses == 0 and wc.shared_hits == len(wa)
    assert bank.stats()["dq_bytes"] == dq


def test_memory_retained_by_a_second_model(npu_core, small):
    """tracemalloc: a second compiled model of the same weights retains far less than the weights."""
    prefill, decode = small["int8"]
    retained = {}
    for flag in ("NO", "YES"):
        cfg = {"NPU_EMU_WEIGHTS_BANK": flag}
        first = npu_core.compile_model(prefill, "NPU", cfg)
        _run(first, llm_feed(prefill))
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        second = npu_core.compile_model(decode, "NPU", cfg)
        _run(second, llm_feed(decode))
        gc.collect()
        retained[flag] = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        weights = second.impl.parsed.meta["memory"]["weights"]
        del first, second
    # measured: NO 4.9 MB (blob 3.5 MB + the rest; the decode model reads its weights as stored,
    # so no f32 cache), YES 1.2 MB (metadata, descriptors, relocations, 53 KB private constants)
    assert retained["NO"] > weights, retained
    assert retained["YES"] < weights / 2 and retained["YES"] < retained["NO"] / 3, retained


def test_last_user_frees_the_bank_entries(npu_core, small):
    prefill, decode = small["int8"]
    a = npu_core.compile_model(prefill, "NPU")
    b = npu_core.compile_model(decode, "NPU")
    ra = a.create_infer_request()
    ra.infer(llm_feed(prefill))
    bank = _bank(a)
    n = bank.stats()["entries"]
    probe = weakref.ref(bank.entries()[0].buf)
    parsed_a = weakref.ref(a.impl.parsed)
    del a
    gc.collect()
    assert parsed_a() is not None  # its request still holds the blob
    del ra
    gc.collect()
    assert parsed_a() is None
    # b still references every entry: nothing freed, refcounts dropped to one
    assert bank.stats()["entries"] == n and all(e.refs == 1 for e in bank.entries())
    assert bank.counters["freed"] == 0 and probe() is not None
    del b
    gc.collect()
    assert bank.stats() == {"entries": 0, "weights_bytes": 0, "dq_bytes": 0, "refs": 0}
    assert bank.counters["freed"] == n and probe() is None


def _banked_dq_relocs(blob: bytes) -> tuple[int, int, int]:
    """(file offset of r_addend, addend, other addend): q operands of two banked matmul_dq weights of one size."""
    meta = BlobReader(blob).meta
    consts = {off: size for off, size in meta["constants"]}
    sec = ELFFile(io.BytesIO(blob)).get_section_by_name(".rela.npu.dpu")
    raw = sec.data()
    addends = {int.from_bytes(raw[i:i + 8], "little"): (sec["sh_offset"] + i + 16,
                                                        int.from_bytes(raw[i + 16:i + 24], "little", signed=True))
               for i in range(0, len(raw), 24)}
    seen: dict[int, int] = {}
    for t in meta["tasks"]:
        if t["kernel"] != "matmul_dq":
            continue
        off, addend = addends[t["offset"] + operand_addr_offset(1)]
        size = consts.get(addend, 0)
        if size >= BANK_MIN_BYTES:
            if size in seen and seen[size] != addend:
                return off, addend, seen[size]
            seen.setdefault(size, addend)
    raise AssertionError("no two banked matmul_dq weights of one size")


def test_corrupt_weight_relocation_changes_result_and_spares_sharers(npu_core, small):
    """A q relocation re-pointed at another layer's weight (another bank entry) changes the result;
    the good model sharing the entries keeps its result: the decompressed cache is keyed by the
    operand addresses, not by the task."""
    _, decode = small["int8"]
    feed = llm_feed(decode)
    blob = npu_core.compile_model(decode, "NPU").export_model().getvalue()
    good_cm = npu_core.import_model(blob, "NPU")
    good = _run(good_cm, feed)
    off, addend, other = _banked_dq_relocs(blob)
    bad = bytearray(blob)
    bad[off:off + 8] = other.to_bytes(8, "little", signed=True)
    bad_cm = npu_core.import_model(reseal(bad), "NPU")
    # same weights: the corrupted blob shares every bank entry with the good one
    assert bad_cm.impl.parsed.banked.entries == good_cm.impl.parsed.banked.entries
    out = _run(bad_cm, feed)
    assert not np.allclose(out, good, atol=1e-3)
    np.testing.assert_array_equal(_run(good_cm, feed), good)
    np.testing.assert_array_equal(_run(npu_core.import_model(blob, "NPU"), feed), good)
    # a shift that runs past the entry reads unmapped device memory: a page fault, not a neighbour
    bad[off:off + 8] = (addend + 64).to_bytes(8, "little", signed=True)
    with pytest.raises(ExecutionError, match="page fault"):
        _run(npu_core.import_model(reseal(bad), "NPU"), feed)


def test_export_rebuilds_the_identical_blob(npu_core, small):
    cm = npu_core.compile_model(small["int8"][1], "NPU")
    blob = cm.export_model().getvalue()
    again = npu_core.import_model(blob, "NPU")
    assert again.impl.parsed.banked.entries == cm.impl.parsed.banked.entries  # the same entry objects
    assert again.export_model().getvalue() == blob
    assert BlobReader(blob).get_section_by_name(SEC_WEIGHTS).size == cm.impl.parsed.banked.section_size


def test_fingerprint_collision_is_resolved_by_full_compare():
    bank = WeightsBank()
    a = np.arange(1 << 16, dtype=np.uint32).view(np.uint8).copy()
    b = a.copy()
    b[12345] ^= 0xFF  # not a sampled byte: same size and fingerprint, different content
    ea, eb, ea2 = bank.acquire("", a), bank.acquire("", b), bank.acquire("", a.copy())
    assert ea is ea2 and ea is not eb and ea.key == eb.key
    assert bank.counters["compared_bytes"] >= 2 * a.size
    np.testing.assert_array_equal(eb.buf, b)
    assert not eb.buf.flags.writeable
    bank.release([ea, eb, ea2])
    assert bank.stats()["entries"] == 0


def test_bank_names_scope_sharing(npu_core, small):
    _, decode = small["int8"]
    x = npu_core.compile_model(decode, "NPU", {"NPUW_WEIGHTS_BANK": "x"})
    x2 = npu_core.compile_model(decode, "NPU", {"NPUW_WEIGHTS_BANK": "x"})
    y = npu_core.compile_model(decode, "NPU", {"NPUW_WEIGHTS_BANK": "y"})
    bank = _bank(x)
    assert x.get_property("NPUW_WEIGHTS_BANK") == "x" and y.get_property("NPUW_WEIGHTS_BANK") == "y"
    assert x.impl.parsed.banked.entries == x2.impl.parsed.banked.entries
    assert not {e.base for e in x.impl.parsed.banked.entries} & {e.base for e in y.impl.parsed.banked.entries}
    assert {e.bank for e in bank.entries()} == {"x", "y"}
    assert len(bank.entries("x")) == len(bank.entries("y"))


def test_bad_bank_flag_is_a_config_error(npu_core, small):
    with pytest.raises(ConfigError, match="NPU_EMU_WEIGHTS_BANK"):
        npu_core.compile_model(small["f32"][1], "NPU", {"NPU_EMU_WEIGHTS_BANK": "maybe"})
    with pytest.raises(ConfigError, match="NPU_EMU_WEIGHTS_BANK"):
        npu_core.set_property("NPU", {"NPU_EMU_WEIGHTS_BANK": "maybe"})


@pytest.mark.parametrize("table", ["abc", [[0]], [[0, 1 << 40]], [[-64, 128]]])
def test_corrupt_constant_table_is_a_blob_format_error(table):
    from ov_npu_emu_npu.driver.bank import BankedWeights

    with pytest.raises(BlobFormatError, match="constant table"):
        BankedWeights(WeightsBank(), "", memoryview(bytes(256)), table)
