"""Corrupt, truncated and foreign NPU blobs give typed errors (or, for weight flips, still run)."""

from __future__ import annotations

import io
import json
import random
import re
import struct

import numpy as np
import pytest
from elftools.elf.elffile import ELFFile

import ov_npu_emu as ov
from ov_npu_emu.errors import (
    BlobFieldError,
    BlobFormatError,
    ConfigError,
    MemoryBudgetError,
    RelocationError,
    UserInputError,
)
from ov_npu_emu.testing import make_add_model, make_model_with_memory
from ov_npu_emu_npu.blob.integrity import reseal
from ov_npu_emu_npu.blob.reader import META_HEAD

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def core() -> ov.Core:
    return ov.Core()


@pytest.fixture(scope="module")
def blob(core: ov.Core) -> bytes:
    """A stateful blob: user I/O, a lifted variable, relocations of every kind.  Compiled f32: the
    flips below target the f32 lowering's tasks (user I/O moved by DMA, no f16 converts)."""
    m = make_model_with_memory((1, 4), np.float32, "v")
    return core.compile_model(m, "NPU", {"INFERENCE_PRECISION_HINT": "f32"}).export_model().getvalue()


def _run(core: ov.Core, blob: bytes) -> None:
    """Import, infer twice (mutable command list path) and read the state."""
    cm = core.import_model(blob, "NPU")
    req = cm.create_infer_request()
    for _ in range(2):
        req.infer({p.get_any_name(): np.ones(list(p.get_shape()), p.get_element_type().to_dtype())
                   for p in cm.inputs})
    for s in req.query_state():
        s.state  # noqa: B018


def _sections(blob: bytes) -> dict[str, tuple[int, int, int]]:
    """name -> (header offset, sh_offset, sh_size)."""
    elf = ELFFile(io.BytesIO(blob))
    shoff, shentsize = elf.header["e_shoff"], elf.header["e_shentsize"]
    return {s.name: (shoff + i * shentsize, s["sh_offset"], s["sh_size"]) for i, s in enumerate(elf.iter_sections())}


def test_truncation_at_every_section_boundary(core: ov.Core, blob: bytes) -> None:
    cuts = {0, 1, 4, 16, 63, 64, len(blob) - 1}
    for _, off, size in _sections(blob).values():
        cuts |= {off, off + 1, off + size - 1, off + size}
    for cut in sorted(c for c in cuts if 0 <= c < len(blob)):
        with pytest.raises(BlobFormatError):
            _run(core, blob[:cut])


def test_random_bit_flips_are_all_caught(core: ov.Core, blob: bytes) -> None:
    """The integrity trailer covers every byte (CRC-32 catches every 1-, 2- and 3-bit error, and
    4-bit ones but for ~2^-32): a damaged blob never imports, whatever the flips hit."""
    # hypothesis is not installed in the project venv: a seeded generator, bounded, reproducible
    rng = random.Random(20261130)
    for _ in range(250):
        b = bytearray(blob)
        for _ in range(rng.choice((1, 1, 2, 4))):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        if bytes(b) == blob:  # two flips of the same bit
            continue
        with pytest.raises(BlobFormatError):
            _run(core, bytes(b))


def _results(core: ov.Core, blob: bytes) -> list[np.ndarray]:
    """Outputs of two inferences and the state after them (by position: a flip may rename a port)."""
    cm = core.import_model(blob, "NPU")
    req = cm.create_infer_request()
    out: list[np.ndarray] = []
    for _ in range(2):
        r = req.infer({p.get_any_name(): np.ones(list(p.get_shape()), p.get_element_type().to_dtype())
                       for p in cm.inputs})
        out += [np.array(r[i]) for i in range(len(cm.outputs))]
    return out + [np.array(s.state.data) for s in req.query_state()]


def test_every_metadata_byte_flip_is_typed(core: ov.Core, blob: bytes) -> None:
    """.npu.meta JSON feeds the runtime directly (a flip there used to surface as KeyError).
    Unsealed, the checksum catches every flip. Resealed, the flip reaches the metadata checks
    behind the checksum: each one is refused as a BlobFormatError (BlobFieldError included), or it
    runs and gives the good blob's outputs and state bit for bit (measured: a letter of a name, a
    key the reader does not use) — never another error, never other numbers."""
    _, off, size = _sections(blob)[".npu.meta"]
    want = _results(core, blob)
    typed = ran = 0
    for i in range(off + META_HEAD.size, off + size, 3):
        b = bytearray(blob)
        b[i] ^= 0x20
        with pytest.raises(BlobFormatError, match="NPU blob is damaged: .npu.meta fails its checksum"):
            _run(core, bytes(b))
        try:
            got = _results(core, reseal(bytes(b)))
        except BlobFormatError:
            typed += 1
            continue
        ran += 1
        assert len(got) == len(want) and all(np.array_equal(g, w) for g, w in zip(got, want, strict=True)), i
    assert typed > 0 and ran > 0  # the deeper checks are reached and refuse most flips


@pytest.mark.parametrize(("offset", "value", "what"), [
    (4, b"\x01", "ELFCLASS32"), (5, b"\x02", "big endian"), (18, struct.pack("<H", 62), "x86-64 machine"),
    (0, b"\x7fELG", "bad magic"),
], ids=["class", "endianness", "machine", "magic"])
def test_foreign_elf_headers(core: ov.Core, blob: bytes, offset: int, value: bytes, what: str) -> None:
    b = bytearray(blob)
    b[offset:offset + len(value)] = value
    with pytest.raises(BlobFormatError):
        _run(core, bytes(b))


def _rewrite_meta(blob: bytes, edit) -> bytes:  # noqa: ANN001
    """Replace the metadata JSON in place (same length, space padded) after ``edit(meta)``."""
    _, off, size = _sections(blob)[".npu.meta"]
    magic, major, minor, length = META_HEAD.unpack_from(blob, off)
    meta = json.loads(blob[off + META_HEAD.size: off + META_HEAD.size + length])
    meta.pop("config_hash")  # informational only: makes room for longer edits
    r = edit(meta)
    if isinstance(r, tuple):  # (major, minor) to write
        major, minor = r
    js = json.dumps(meta, separators=(",", ":")).encode()
    assert len(js) <= length, "edited metadata must not grow"
    js = js.ljust(length)
    return reseal(blob[:off] + META_HEAD.pack(magic, major, minor, length) + js + blob[off + META_HEAD.size + length:])


def test_newer_blob_version_is_rejected(core: ov.Core, blob: bytes) -> None:
    with pytest.raises(BlobFormatError, match="version 2.0 is not supported.*recompile"):
        _run(core, _rewrite_meta(blob, lambda m: (2, 0)))


@pytest.mark.parametrize(("edit", "error", "field"), [
    (lambda m: m["inputs"][0].__setitem__("shape", [1 << 20, 1 << 20]), MemoryBudgetError, r"inputs\[0\]\.shape"),
    (lambda m: m["variables"][0].__setitem__("shape", [1 << 30, 64]), MemoryBudgetError, r"variables\[0\]\.shape"),
    (lambda m: m["inputs"][0].__setitem__("element_type", "u4"), BlobFormatError, r"inputs\[0\]\.element_type"),
    (lambda m: m.pop("hw"), BlobFormatError, r"field 'hw'"),
    (lambda m: m["variables"][0].__setitem__("input", 7), BlobFormatError, r"variables\[0\]\.input 7"),
    (lambda m: m["outputs"][0].pop("state"), BlobFormatError, r"outputs\[0\]\.state is missing"),
    (lambda m: m["inputs"][0].__setitem__("shape", [1, 2]), BlobFieldError, r"inputs\[0\]\.shape"),
    (lambda m: m["variables"][0].__setitem__("element_type", "f16"), BlobFieldError, r"variables\[0\]\.shape"),
    (lambda m: m["variables"][0].__setitem__("input", 0), BlobFieldError, r"variables\[0\]\.input"),
], ids=["huge-input", "huge-state", "unknown-type", "no-hw", "bad-var-port", "no-state-key", "input-vs-symbol",
        "state-vs-port", "state-on-plain-port"])
def test_corrupt_metadata_is_typed_and_allocates_nothing(core: ov.Core, blob: bytes, edit, error, field) -> None:  # noqa: ANN001
    # import_model itself refuses it: nothing of the request is allocated
    with pytest.raises(error, match="corrupt NPU blob metadata") as e:
        core.import_model(_rewrite_meta(blob, edit), "NPU")
    assert type(e.value) is error
    named = getattr(e.value, "field", None) or str(e.value)
    assert re.search(field, named), named


def _issue_30(blob: bytes, symbol_bytes: int | None = None, n: int = 500_000_000) -> bytes:
    """Issue 30's example: the state [1, 4] f32 edited to [1, n] in .npu.meta (and, given
    ``symbol_bytes``, its symbols' st_size too), resealed."""
    from tools.fuzz_structure import set_meta

    def edit(m: dict) -> None:
        for p in (m["variables"][0], m["inputs"][1], m["outputs"][1]):
            p["shape"] = [1, n]
    return set_meta(blob, edit, symbols=None if symbol_bytes is None else {"in.1": symbol_bytes,
                                                                           "out.1": symbol_bytes})


def test_issue_30_state_grown_in_the_metadata_fails_at_import(core: ov.Core, blob: bytes) -> None:
    # before: imported, then create_infer_request took 11.8 s and 2 GB RSS; now the port's shape
    # disagrees with its symbol (16 bytes) and import_model names it
    with pytest.raises(BlobFieldError, match=r"inputs\[1\]\.shape \[1, 500000000\] f32 is 2000000000 bytes, "
                       r"but its symbol in\.1 declares 16") as e:
        core.import_model(_issue_30(blob), "NPU")
    assert e.value.field == "inputs[1].shape"


def test_a_consistent_state_over_the_budget_fails_at_import(core: ov.Core, blob: bytes) -> None:
    # metadata and symbols agree on 2 GB: the budget (NPU_EMU_DEVICE_MEMORY_MB) decides
    grown = _issue_30(blob, 2_000_000_000)
    with pytest.raises(MemoryBudgetError, match="NPU_EMU_DEVICE_MEMORY_MB") as e:
        core.import_model(grown, "NPU", {"NPU_EMU_DEVICE_MEMORY_MB": 1024})
    assert (e.value.field, e.value.size, e.value.budget) == ("variables[0] (v)", 2_000_000_000, 1024 << 20)
    assert e.value.total > 2_000_000_000


def test_ports_together_over_the_default_budget(core: ov.Core, blob: bytes) -> None:
    from tools.fuzz_structure import set_meta

    n = 1_250_000_000  # 5 GB each: each fits the device's address window, both do not fit the budget

    def edit(m: dict) -> None:
        m["inputs"][0]["shape"] = m["outputs"][0]["shape"] = [1, n]
    grown = set_meta(blob, edit, symbols={"in.0": 4 * n, "out.0": 4 * n})
    with pytest.raises(MemoryBudgetError) as e:
        core.import_model(grown, "NPU")
    assert e.value.field == "inputs[0] (input_data)" and e.value.total > 10**10
    assert e.value.budget == 7936 << 20


def test_the_budget_key(core: ov.Core, blob: bytes) -> None:
    from ov_npu_emu_npu.options import NPU_OPTIONS

    assert NPU_OPTIONS.get({}, "NPU_EMU_DEVICE_MEMORY_MB") == 7936 << 20
    _run(core, blob)
    with pytest.raises(MemoryBudgetError) as e:  # a real blob over a budget of 0 bytes
        core.import_model(blob, "NPU", {"NPU_EMU_DEVICE_MEMORY_MB": 0})
    assert e.value.budget == 0 and e.value.size > 0
    with pytest.raises(ConfigError) as c:
        core.import_model(blob, "NPU", {"NPU_EMU_DEVICE_MEMORY_MB": "lots"})
    assert c.value.key == "NPU_EMU_DEVICE_MEMORY_MB"
    # -1: no budget; a state grown to 2 GB consistently then imports (its pages are not touched)
    cm = core.import_model(_issue_30(blob, 2_000_000_000), "NPU", {"NPU_EMU_DEVICE_MEMORY_MB": -1})
    assert cm.inputs[0].get_shape() == [1, 4]


def test_huge_nobits_section_size_does_not_allocate(core: ov.Core, blob: bytes) -> None:
    hdr, _, _ = _sections(blob)[".npu.scratch"]
    b = bytearray(blob)
    struct.pack_into("<Q", b, hdr + 32, 1 << 42)  # Elf64_Shdr.sh_size: 4 TiB of scratch
    with pytest.raises(BlobFormatError, match="device memory"):
        _run(core, reseal(b))


def test_relocation_offset_out_of_range(core: ov.Core, blob: bytes) -> None:
    elf = ELFFile(io.BytesIO(blob))
    rela = next(s for s in elf.iter_sections() if s.name.startswith(".rela") and s.num_relocations())
    b = bytearray(blob)
    struct.pack_into("<Q", b, rela["sh_offset"], 1 << 40)  # r_offset of the first entry
    with pytest.raises(RelocationError, match=r"patches offset 0x10000000000, outside \.npu\.") as e:
        core.import_model(reseal(b), "NPU")
    assert e.value.offset == 1 << 40


def test_cpu_blob_on_npu_and_npu_blob_on_cpu(core: ov.Core, blob: bytes) -> None:
    cpu_blob = core.compile_model(make_add_model(), "CPU").export_model().getvalue()
    with pytest.raises(BlobFormatError, match="not an NPU blob"):
        core.import_model(cpu_blob, "NPU")
    with pytest.raises(BlobFormatError, match="CPU"):
        core.import_model(blob, "CPU")


def test_non_bytes_import(core: ov.Core) -> None:
    with pytest.raises(UserInputError, match="^import_model needs bytes, a binary stream or a Tensor, got int$"):
        core.import_model(12345, "NPU")
    with pytest.raises(BlobFormatError):
        core.import_model(b"", "NPU")


def test_device_errors_in_thread_queue_mode_neither_hang_nor_poison_the_queue(core: ov.Core, blob: bytes) -> None:
    """Under the threaded queue every broken blob fails with its own error — a bit flip anywhere
    fails its checksum at import (measured: all 80 of this seed), a resealed DMA row-count flip is
    refused by the device in the queue's thread, a relocation out of range at import — and the
    shared queue then still runs a good blob."""
    import threading

    from ov_npu_emu.errors import ExecutionError

    cfg = {"NPU_EMU_QUEUE_MODE": "thread", "NPU_EMU_FENCE_MODE": "polling"}
    rng = random.Random(7)
    cases: list[tuple[bytes, type[Exception], str]] = []
    for _ in range(80):
        b = bytearray(blob)
        b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        cases.append((bytes(b), BlobFormatError, "NPU blob is damaged: .* fails its checksum|the checksum table"))
    _, off, _ = _sections(blob)[".npu.dma"]
    b = bytearray(blob)
    b[off + 51] ^= 0x80
    cases.append((reseal(b), ExecutionError, "corrupt"))
    rela = next(s for s in ELFFile(io.BytesIO(blob)).iter_sections()
                if s.name.startswith(".rela") and s.num_relocations())
    b = bytearray(blob)
    struct.pack_into("<Q", b, rela["sh_offset"], 1 << 40)
    cases.append((reseal(b), RelocationError, "outside"))
    outcome: list[object] = []

    def work() -> None:
        try:
            for data, _, _ in cases:
                try:
                    req = core.import_model(data, "NPU", cfg).create_infer_request()
                    req.infer({"input_data": np.ones((1, 4), np.float32)})
                    outcome.append(None)
                except Exception as e:  # noqa: BLE001 - each is checked against its case below
                    outcome.append(e)
            req = core.import_model(blob, "NPU", cfg).create_infer_request()
            outcome.append(req.infer({"input_data": np.ones((1, 4), np.float32)})[0].copy())
        except BaseException as e:  # handed to the test thread
            outcome.append(e)

    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "an inference hung"
    assert len(outcome) == len(cases) + 1, outcome[-1]
    for i, ((_, kind, text), got) in enumerate(zip(cases, outcome[:-1], strict=True)):
        assert type(got) is kind and re.search(text, str(got)), (i, got)
    assert isinstance(outcome[-1], np.ndarray), outcome[-1]
    np.testing.assert_array_equal(outcome[-1], np.ones((1, 4), np.float32))


def test_dma_row_count_flip_is_rejected_not_run_for_minutes(core: ov.Core, blob: bytes) -> None:
    from ov_npu_emu.errors import ExecutionError
    from ov_npu_emu_npu.blob.format import DMA_DESC

    _, off, size = _sections(blob)[".npu.dma"]
    assert size % DMA_DESC.size == 0
    b = bytearray(blob)
    b[off + 51] ^= 0x80  # the top bit of d0 (row count) of the first descriptor: 2**31 + 1 rows
    with pytest.raises(ExecutionError, match="corrupt"):
        _run(core, reseal(b))


def test_reseal_of_a_section_size_past_the_end_is_bounded(core: ov.Core, blob: bytes) -> None:
    """reseal (the tools' and these tests' way past the checksum) used to list 1 MiB checksum
    pieces of a section as large as its edited header said — 2**40 bytes took all the host's
    memory; headers that do not describe the image are now checksummed in plain pieces, and the
    importer refuses the size."""
    hdr, _, _ = _sections(blob)[".npu.dma"]
    b = bytearray(blob)
    struct.pack_into("<Q", b, hdr + 32, 1 << 40)  # Elf64_Shdr.sh_size
    sealed = reseal(b)
    assert len(sealed) < len(blob) + 4096
    with pytest.raises(BlobFormatError, match=r"section \.npu\.dma runs past the end of the blob"):
        _run(core, sealed)


@pytest.mark.parametrize("walk", ["ONCE", "EVERY_INFERENCE"])
def test_barrier_id_past_the_list_is_execution_error(core: ov.Core, blob: bytes, walk: str) -> None:
    """A barrier-list entry naming a barrier the command list does not have (was an IndexError
    deep in the walk, reported as "inference failed: list index out of range")."""
    from ov_npu_emu.errors import ExecutionError

    _, off, size = _sections(blob)[".npu.barrier_lists"]
    b = bytearray(blob)
    struct.pack_into("<I", b, off + size - 4, 1 << 17)  # the last entry: barrier 131072
    cm = core.import_model(reseal(b), "NPU", {"NPU_EMU_BARRIER_WALK": walk})
    with pytest.raises(ExecutionError, match=r"^task \d+ names barrier 131072, but the command list has \d+; "
                                             r"the descriptor is corrupt$"):
        cm.create_infer_request().infer({"input_data": np.ones((1, 4), np.float32)})
