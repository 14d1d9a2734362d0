"""HostParsedInference: a blob parsed once, loaded into device memory per request, relocated."""

from __future__ import annotations

import dataclasses
import logging
import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np

from ov_npu_emu.errors import BlobFormatError, RelocationError
from ov_npu_emu_npu.blob.format import (
    LOADABLE_SECTIONS,
    R_NPU_64,
    SEC_WEIGHTS,
    MemKind,
)
from ov_npu_emu_npu.blob.integrity import Chunks, seal, trailer_of
from ov_npu_emu_npu.blob.reader import BlobReader, Relocation, SectionInfo, SplitBlob
from ov_npu_emu_npu.blob.validate import DEVICE_MEMORY_LIMIT, check_declared_memory, declared_memory
from ov_npu_emu_npu.driver.bank import BankedWeights, BankWeightsCache, WeightsBank
from ov_npu_emu_npu.driver.memory import ARENA_BASE, WEIGHTS_BASE, AddressSpace, DeviceArena, WeightsCache

__all__ = ["HostParsedInference", "ParsedBlob"]

logger = logging.getLogger(__name__)


class ParsedBlob:
    """What every request of one compiled model shares: sections, relocations, metadata, weights."""

    def __init__(self, blob: bytes | SplitBlob, *, weights_cache: bool = True, bank: WeightsBank | None = None,
                 bank_name: str = "", cache_budget: int | None = None,
                 memory_budget: int | None = DEVICE_MEMORY_LIMIT) -> None:
        """:param bank: the device's weights bank; None keeps the weights private (a view of the blob)
        :param bank_name: the bank scope (``NPUW_WEIGHTS_BANK``); "" is the device's anonymous bank
        :param cache_budget: bytes of decompressed weights the cache may hold (None: no limit;
            banked: the whole bank's); a blob whose matmul_dq weights (meta ``dq_bytes``) exceed
            it caches none of them
        :param memory_budget: bytes one request may declare (NPU_EMU_DEVICE_MEMORY_MB; None: no
            budget): ports, states and the arena, checked against each other and the budget here,
            before any request allocates them
        """
        if isinstance(blob, SplitBlob) and bank is None:
            blob = blob.join()  # private weights are a view of the kept blob
        if not isinstance(blob, SplitBlob):
            blob = bytes(blob)
        reader = BlobReader(blob)
        self.meta: dict[str, Any] = reader.meta
        dq_bytes = self.meta.get("dq_bytes")
        if cache_budget is not None and isinstance(dq_bytes, int) and dq_bytes > cache_budget:
            # All or nothing: a cache holding a few percent of a large model's decompressed
            # weights would cost its whole budget of RAM to spare a few percent of a prefill's
            # decompression (less peak memory, the same TTFT; docs/performance.md, "Memory per setup")
            cache_budget = 0
        self.sections: dict[str, SectionInfo] = {s.name: s for s in reader.iter_sections()}
        if not isinstance(blob, SplitBlob):  # a split blob's weights are not in its bytes
            reader.check_layout()
        missing = [n for n in LOADABLE_SECTIONS if n not in self.sections]
        if missing:
            raise BlobFormatError(f"NPU blob lacks sections {missing}; it is truncated or from another tool")
        # NOBITS sizes are not bounded by the file: a corrupt header must not allocate gigabytes
        arena = sum(self.sections[n].size for n in LOADABLE_SECTIONS if n != SEC_WEIGHTS)
        if arena > DEVICE_MEMORY_LIMIT:
            raise BlobFormatError(f"NPU blob asks for {arena} bytes of device memory (limit {DEVICE_MEMORY_LIMIT}); "
                                  "its section headers are corrupt")
        self.static: list[Relocation] = []
        self.user: dict[str, list[Relocation]] = {}
        sym_sizes = {name: size for name, _, size in reader.iter_symbols()}
        symbols = set(sym_sizes)
        #: bytes one request allocates (ports, states, arena), agreeing fields and within budget
        self.declared = check_declared_memory(
            declared_memory(self.meta, {n: self.sections[n].size for n in LOADABLE_SECTIONS if n != SEC_WEIGHTS},
                            self.sections[SEC_WEIGHTS].size, sym_sizes),
            memory_budget)
        fast = _relocation_groups(reader, self.sections, symbols)
        if fast is None:
            self.static, self.user = _relocations_one_by_one(reader, self.sections, symbols)
        self.symbols = symbols
        #: the static relocations grouped for one vectorised patch per request (None: patched one
        #: by one, which also reports an unknown relocation type)
        self.static_groups = _static_groups(self.static) if fast is None else fast[0]
        if fast is not None:
            self.user = fast[1]  # self.static stays empty: the groups hold the static relocations
        w = self.sections[SEC_WEIGHTS]
        self.bank_name = bank_name
        #: where the constants live when banked (None: the private, flat section below)
        self.banked: BankedWeights | None = None
        self.weights_cache: WeightsCache | BankWeightsCache | None = None
        if bank is None:
            assert not isinstance(blob, SplitBlob)  # joined above
            self.blob = blob
            # weights are mapped read-only and shared by every request (no copy per request)
            self.weights = np.frombuffer(w.data, np.uint8) if w.data else np.zeros(1, np.uint8)
            #: decompressed compressed weights, shared by every request (None: decompress per run)
            self.weights_cache = WeightsCache(cache_budget) if weights_cache else None
        else:
            split = isinstance(blob, SplitBlob)
            # a split blob (compiled in this process): the bank adopts the views of the model's
            # constants, so the weights are never copied between the IR and the device
            image = blob.image if isinstance(blob, SplitBlob) else w.data
            self.banked = BankedWeights(bank, bank_name, image, self.meta.get("constants"))
            # the blob minus its weights: export splices the bank's copy back in, so the weights
            # exist once in the process however many compiled models hold them
            #: a split blob is unsealed (it never left the process): export seals it
            self._sealed = not split
            if isinstance(blob, SplitBlob):
                self._head, self._tail = blob.head, blob.tail
            else:
                off = _section_offset(reader, SEC_WEIGHTS)
                self._head, self._tail = blob[:off], blob[off + w.size:]
            # section views must not pin the blob (and with it a second copy of the weights)
            self.sections = {n: dataclasses.replace(si, data=memoryview(b"" if n == SEC_WEIGHTS else bytes(si.data)))
                             for n, si in self.sections.items()}
            self.weights = np.zeros(1, np.uint8)
            self.weights_cache = BankWeightsCache(self.banked, cache_budget) if weights_cache else None
            self._finalizer = weakref.finalize(self, self.banked.release)
        reader.close()
        del blob, reader

    @property
    def blob(self) -> bytes:
        """The blob as loaded (rebuilt from the bank when the weights are banked)."""
        if self.banked is None:
            return self._blob
        # one buffer, filled in place: a 1B's blobs are gigabytes, and each copy costs a pass
        head, size = len(self._head), self.banked.section_size
        data = bytearray(head + size + len(self._tail))
        data[:head] = self._head
        self.banked.section_into(np.frombuffer(data, np.uint8, size, head))
        data[head + size:] = self._tail
        return bytes(data) if self._sealed else seal(data)

    @blob.setter
    def blob(self, value: bytes) -> None:
        self._blob = value

    def blob_chunks(self) -> Chunks:
        """:attr:`blob` as chunks, the weights not copied out of the bank (export reads them)."""
        if self.banked is None:
            return Chunks([self._blob])
        image = Chunks([self._head, *self.banked.section_chunks(), self._tail])
        return image if self._sealed else Chunks([*image.chunks, trailer_of(image)])

    def release(self) -> None:
        """Drop this blob's references to bank entries now (also done when it is collected)."""
        if self.banked is not None:
            self._finalizer()


def _section_offset(reader: BlobReader, name: str) -> int:
    for s in reader.elf.iter_sections():
        if s.name == name:
            return int(s["sh_offset"])
    raise BlobFormatError(f"NPU blob has no {name} section")


StaticGroups = list[tuple[str, str, np.ndarray, np.ndarray]]


def _relocations_one_by_one(reader: BlobReader, sections: Mapping[str, SectionInfo], symbols: set[str],
                            ) -> tuple[list[Relocation], dict[str, list[Relocation]]]:
    """The static relocations and the user-I/O ones by symbol, each entry checked (a corrupt one
    raises, naming it)."""
    static: list[Relocation] = []
    user: dict[str, list[Relocation]] = {}
    for r in reader.iter_relocations():
        if r.target not in LOADABLE_SECTIONS:
            raise BlobFormatError(f"relocation in {r.section} targets non-loadable section {r.target}")
        if not 0 <= r.offset <= sections[r.target].size - 8:  # R_NPU_64 writes 8 bytes
            raise RelocationError(
                f"relocation in {r.section} patches offset {r.offset:#x}, outside {r.target} "
                f"({sections[r.target].size} bytes); the blob is corrupt: recompile and export it again",
                section=r.section, offset=r.offset, symbol=r.symbol)
        if r.user is None:
            if r.symbol not in LOADABLE_SECTIONS:
                raise BlobFormatError(f"static relocation against {r.symbol!r}, which is not a loadable section")
            static.append(r)
        else:
            if r.symbol not in symbols:
                raise BlobFormatError(f"user I/O relocation against unknown symbol {r.symbol!r}")
            user.setdefault(r.symbol, []).append(r)
    return static, user


def _relocation_groups(reader: BlobReader, sections: Mapping[str, SectionInfo], symbols: set[str],
                       ) -> tuple[StaticGroups, dict[str, list[Relocation]]] | None:
    """The static relocations grouped as :func:`_static_groups` groups them, and the user-I/O
    ones by symbol, read as arrays; None when any entry is one the loop over
    :meth:`BlobReader.iter_relocations` would refuse (it then names the fault) or patch one by one."""
    got = reader.relocation_tables()
    if got is None:
        return None
    names, tables = got
    user: dict[str, list[Relocation]] = {}
    pairs: dict[tuple[str, str], tuple[list[np.ndarray], list[np.ndarray]]] = {}
    by_target: dict[str, list[np.ndarray]] = {}
    for section, target, kind, entries in tables:
        if not entries.size:
            continue
        if target not in LOADABLE_SECTIONS or sections[target].size < 8:
            return None
        offsets = entries["offset"]
        if int(offsets.max()) > sections[target].size - 8:
            return None
        sym = (entries["info"] >> np.uint64(32)).astype(np.int64)
        rtype = (entries["info"] & np.uint64(0xFFFFFFFF)).astype(np.int64)
        if kind is not None:
            for off, t, add, si in zip(offsets.tolist(), rtype.tolist(), entries["addend"].tolist(), sym.tolist(),
                                       strict=True):
                if names[si] not in symbols:
                    return None
                user.setdefault(names[si], []).append(Relocation(section, target, off, t, add, names[si], kind))
            continue
        if target == SEC_WEIGHTS or bool((rtype != R_NPU_64).any()):
            return None
        for si in np.unique(sym).tolist():
            if names[si] not in LOADABLE_SECTIONS:
                return None
            pick = sym == si
            offs, adds = pairs.setdefault((target, names[si]), ([], []))
            offs.append(offsets[pick].astype(np.int64))
            adds.append(entries["addend"][pick].astype(np.int64))
        by_target.setdefault(target, []).append(offsets.astype(np.int64))
    for parts in by_target.values():
        o = np.sort(np.concatenate(parts))
        if o.size > 1 and int(np.diff(o).min()) < 8:
            return None
    groups = [(t, name, np.concatenate(offs), np.concatenate(adds)) for (t, name), (offs, adds) in pairs.items()]
    return groups, user


def _static_groups(static: list[Relocation]) -> list[tuple[str, str, np.ndarray, np.ndarray]] | None:
    """(target, symbol, offsets, addends) per pair, for relocations that can be patched at once:
    all R_NPU_64, none in the weights section, no two patching overlapping bytes (so the order
    of the patches does not matter); None otherwise (the loop of :func:`apply_relocation`)."""
    if not static or any(r.rtype != R_NPU_64 or r.target == SEC_WEIGHTS for r in static):
        return None
    by_target: dict[str, list[int]] = {}
    pairs: dict[tuple[str, str], tuple[list[int], list[int]]] = {}
    for r in static:
        by_target.setdefault(r.target, []).append(r.offset)
        offs, adds = pairs.setdefault((r.target, r.symbol), ([], []))
        offs.append(r.offset)
        adds.append(r.addend)
    for offsets in by_target.values():
        o = np.sort(np.asarray(offsets, np.int64))
        if o.size > 1 and int(np.diff(o).min()) < 8:
            return None
    return [(t, sym, np.asarray(offs, np.int64), np.asarray(adds, np.int64))
            for (t, sym), (offs, adds) in pairs.items()]


def _patch_u64(dst: np.ndarray, offsets: np.ndarray, values: np.ndarray) -> None:
    """Little-endian u64 ``values`` (int64, taken modulo 2**64) into ``dst`` (uint8) at ``offsets``."""
    dst[offsets[:, None] + np.arange(8)] = values.astype("<i8").view(np.uint8).reshape(-1, 8)


def apply_relocation(aspace: AddressSpace, where: int, r: Relocation, s: int) -> None:
    """Patch one relocation: the single place relocation types are interpreted."""
    match r.rtype:
        case t if t == R_NPU_64:
            aspace.write_u64(where, s + r.addend)
        case _:
            raise RelocationError(f"unknown relocation type {r.rtype} in {r.section}", section=r.section,
                                  offset=r.offset, symbol=r.symbol)


class HostParsedInference:
    """Device memory of one request: descriptors, params, scratch, CMX; weights mapped shared."""

    def __init__(self, parsed: ParsedBlob) -> None:
        self.parsed = parsed
        self.aspace = AddressSpace()
        sizes = [(n, k, parsed.sections[n].size) for n, k in LOADABLE_SECTIONS.items() if n != SEC_WEIGHTS]
        self.arena = DeviceArena(sizes)
        self.aspace.map(self.arena.buf, MemKind.WRITE_COMBINE_FW, "device", base=ARENA_BASE)
        if parsed.banked is None:
            self.aspace.map(parsed.weights, MemKind.WEIGHTS, SEC_WEIGHTS, base=WEIGHTS_BASE)
        else:
            # the bank's device memory, mapped at the bank's addresses (shared by every blob using it)
            for base, buf, name in parsed.banked.regions():
                self.aspace.map(buf, MemKind.WEIGHTS, name, base=base)
        # banked: constants are placed one by one; the private image stands for the section
        self.section_addr: dict[str, int] = {
            SEC_WEIGHTS: WEIGHTS_BASE if parsed.banked is None else parsed.banked.private_base}
        for name, _kind, _size in sizes:
            sec = parsed.sections[name]
            self.section_addr[name] = self.arena.addr(name)
            if not sec.nobits and sec.data:
                self.arena.view(name)[:] = np.frombuffer(sec.data, np.uint8)
        # static relocations: section symbols resolve to where the driver put that section
        if parsed.static_groups is not None:
            for target, sym, offsets, addends in parsed.static_groups:
                if sym == SEC_WEIGHTS and parsed.banked is not None:
                    values = parsed.banked.addresses(addends)
                else:
                    values = self.section_addr[sym] + addends
                _patch_u64(self.arena.view(target), offsets, values)
        for r in () if parsed.static_groups is not None else parsed.static:
            if r.symbol == SEC_WEIGHTS and parsed.banked is not None:
                # S + A with S the constant holding A: the bank placed constants one by one
                s = parsed.banked.address(r.addend) - r.addend
            else:
                s = self.section_addr[r.symbol]
            apply_relocation(self.aspace, self.section_addr[r.target] + r.offset, r, s)
        self.io_addr: dict[str, int] = {}

    def apply_input_output(self, bindings: Mapping[str, int]) -> list[tuple[str, int]]:
        """applyInputOutput: patch the user-I/O relocations of the given symbols; returns patched spots."""
        patched: list[tuple[str, int]] = []
        for sym, va in bindings.items():
            for r in self.parsed.user.get(sym, ()):
                apply_relocation(self.aspace, self.section_addr[r.target] + r.offset, r, va)
                patched.append((r.target, r.offset))
            self.io_addr[sym] = va
        return patched
