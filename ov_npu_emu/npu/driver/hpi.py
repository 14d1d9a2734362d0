"""HostParsedInference: a blob parsed once, loaded into device memory per request, relocated."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from ov_npu_emu.errors import BlobFormatError, RelocationError
from ov_npu_emu.npu.blob.format import (
    LOADABLE_SECTIONS,
    R_NPU_64,
    SEC_WEIGHTS,
    MemKind,
)
from ov_npu_emu.npu.blob.reader import BlobReader, Relocation, SectionInfo
from ov_npu_emu.npu.driver.memory import ARENA_BASE, WEIGHTS_BASE, AddressSpace, DeviceArena, WeightsCache

__all__ = ["HostParsedInference", "ParsedBlob"]

logger = logging.getLogger(__name__)


class ParsedBlob:
    """What every request of one compiled model shares: sections, relocations, metadata, weights."""

    def __init__(self, blob: bytes, *, weights_cache: bool = True) -> None:
        reader = BlobReader(blob)
        #: decompressed compressed weights, shared by every request (None: decompress per run)
        self.weights_cache: WeightsCache | None = WeightsCache() if weights_cache else None
        self.blob = bytes(blob)
        self.meta: dict[str, Any] = reader.meta
        self.sections: dict[str, SectionInfo] = {s.name: s for s in reader.iter_sections()}
        missing = [n for n in LOADABLE_SECTIONS if n not in self.sections]
        if missing:
            raise BlobFormatError(f"NPU blob lacks sections {missing}; it is truncated or from another tool")
        self.static: list[Relocation] = []
        self.user: dict[str, list[Relocation]] = {}
        symbols = {name for name, _, _ in reader.iter_symbols()}
        for r in reader.iter_relocations():
            if r.target not in LOADABLE_SECTIONS:
                raise BlobFormatError(f"relocation in {r.section} targets non-loadable section {r.target}")
            if r.user is None:
                if r.symbol not in LOADABLE_SECTIONS:
                    raise BlobFormatError(f"static relocation against {r.symbol!r}, which is not a loadable section")
                self.static.append(r)
            else:
                if r.symbol not in symbols:
                    raise BlobFormatError(f"user I/O relocation against unknown symbol {r.symbol!r}")
                self.user.setdefault(r.symbol, []).append(r)
        self.symbols = symbols
        w = self.sections[SEC_WEIGHTS]
        # weights are mapped read-only and shared by every request (no copy per request)
        self.weights = np.frombuffer(w.data, np.uint8) if w.data else np.zeros(1, np.uint8)


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
        self.aspace.map(parsed.weights, MemKind.WEIGHTS, SEC_WEIGHTS, base=WEIGHTS_BASE)
        self.section_addr: dict[str, int] = {SEC_WEIGHTS: WEIGHTS_BASE}
        for name, _kind, _size in sizes:
            sec = parsed.sections[name]
            self.section_addr[name] = self.arena.addr(name)
            if not sec.nobits and sec.data:
                self.arena.view(name)[:] = np.frombuffer(sec.data, np.uint8)
        # static relocations: section symbols resolve to where the driver put that section
        for r in parsed.static:
            apply_relocation(self.aspace, self.section_addr[r.target] + r.offset, r, self.section_addr[r.symbol])
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
