"""A state-machine ELF64 writer: header -> sections -> symbol table -> relocations -> bytes."""

from __future__ import annotations

import dataclasses
import enum
import logging
import struct
from typing import Any, NamedTuple, Protocol

from ov_npu_emu.errors import UserInputError
from ov_npu_emu_npu.blob.format import (
    ELF_HEADER,
    SECTION_HEADER,
    SHT_NOBITS,
    SHT_PROGBITS,
    SHT_RELA,
    SHT_STRTAB,
    SHT_SYMTAB,
    align_up,
)
from ov_npu_emu_npu.blob.integrity import seal
from ov_npu_emu_npu.blob.reader import SplitBlob

__all__ = ["BlobWriter", "RelocEntry", "Symbol", "WriterState"]

logger = logging.getLogger(__name__)

_SYM = struct.Struct("<IBBHQQ")
_RELA = struct.Struct("<QQq")

SHF_WRITE, SHF_ALLOC, SHF_INFO_LINK = 0x1, 0x2, 0x40
STB_LOCAL, STB_GLOBAL = 0, 1
STT_NOTYPE, STT_OBJECT, STT_SECTION = 0, 1, 3
ET_REL = 1


class WriterState(enum.Enum):
    EMPTY = 0
    HEADER = 1
    SECTIONS = 2
    SYMTAB = 3
    RELOCS = 4
    DONE = 5


@dataclasses.dataclass(frozen=True)
class Symbol:
    """A global symbol (user I/O); section symbols are created by the writer."""

    name: str  # e.g. "in.0"
    size: int  # bytes of the tensor it stands for
    value: int = 0  # 0: resolved by the runtime (undefined symbol)


class RelocEntry(NamedTuple):
    """One Elf64_Rela: write S + A at ``offset`` in the target section (a tuple: a large
    prefill's blob has tens of thousands of them)."""

    offset: int  # byte offset inside the target section
    symbol: str  # a section name (section symbol) or a global Symbol name
    rtype: int  # relocation type (format.RELOC_TYPES)
    addend: int  # A


class Chunked(Protocol):
    """Section data given as chunks (``len`` is the total): copied into the blob chunk by chunk."""

    chunks: list[bytes | memoryview]

    def __len__(self) -> int: ...


@dataclasses.dataclass
class _Section:
    name: str
    sh_type: int
    flags: int
    align: int
    data: bytes | bytearray | memoryview | Chunked
    size: int
    link: int = 0
    info: int = 0
    entsize: int = 0


class BlobWriter:
    """Builds an ELF64 relocatable image; each ``write_*`` call must come in order."""

    def __init__(self) -> None:
        self.state = WriterState.EMPTY
        self._sections: list[_Section] = [_Section("", 0, 0, 0, b"", 0)]
        self._ident = b""
        self._machine = 0
        self._sym_index: dict[str, int] = {}
        self._symtab_index = 0

    def _expect(self, *states: WriterState) -> None:
        if self.state not in states:
            raise UserInputError(f"expected state {' or '.join(s.name for s in states)}, got {self.state.name}")

    def write_header(self, machine: int, osabi: int, abi_version: int) -> None:
        self._expect(WriterState.EMPTY)
        # e_ident: magic, ELFCLASS64, little endian, EV_CURRENT, OS/ABI, ABI version, padding
        self._ident = b"\x7fELF" + bytes([2, 1, 1, osabi, abi_version]) + bytes(7)
        self._machine = machine
        self.state = WriterState.HEADER

    def add_section(
        self, name: str, data: bytes | bytearray | Chunked | None, *, nobits_size: int = 0, alloc: bool = False,
        writable: bool = False, align: int = 64, entsize: int = 0,
    ) -> int:
        """Add a PROGBITS section (``data``) or a NOBITS one (``data=None``, ``nobits_size``)."""
        self._expect(WriterState.HEADER, WriterState.SECTIONS)
        if any(s.name == name for s in self._sections):
            raise UserInputError(f"section {name!r} added twice")
        flags = (SHF_ALLOC if alloc else 0) | (SHF_WRITE if writable else 0)
        if data is None:
            sec = _Section(name, SHT_NOBITS, flags, align, b"", nobits_size, entsize=entsize)
        else:
            sec = _Section(name, SHT_PROGBITS, flags, align, data, len(data), entsize=entsize)
        self._sections.append(sec)
        self.state = WriterState.SECTIONS
        return len(self._sections) - 1

    def write_symtab(self, symbols: list[Symbol]) -> dict[str, int]:
        """Section symbols for every section so far, then the global ``symbols``; returns indices."""
        self._expect(WriterState.SECTIONS)
        strtab = bytearray(b"\0")
        entries = [_SYM.pack(0, 0, 0, 0, 0, 0)]
        for idx, sec in enumerate(self._sections[1:], start=1):
            self._sym_index[sec.name] = len(entries)
            entries.append(_SYM.pack(0, (STB_LOCAL << 4) | STT_SECTION, 0, idx, 0, 0))
        first_global = len(entries)
        for s in symbols:
            if s.name in self._sym_index:
                raise UserInputError(f"symbol {s.name!r} defined twice")
            self._sym_index[s.name] = len(entries)
            name_off = len(strtab)
            strtab += s.name.encode() + b"\0"
            # SHN_UNDEF: the runtime supplies the address (a user tensor) at inference time
            entries.append(_SYM.pack(name_off, (STB_GLOBAL << 4) | STT_OBJECT, 0, 0, s.value, s.size))
        strtab_idx = len(self._sections) + 1
        self._sections.append(
            _Section(".symtab", SHT_SYMTAB, 0, 8, b"".join(entries), len(entries) * _SYM.size,
                     link=strtab_idx, info=first_global, entsize=_SYM.size)
        )
        self._symtab_index = len(self._sections) - 1
        self._sections.append(_Section(".strtab", SHT_STRTAB, 0, 1, bytes(strtab), len(strtab)))
        self.state = WriterState.SYMTAB
        return dict(self._sym_index)

    def add_relocations(self, target: str, entries: list[RelocEntry], *, name: str, flags: int = 0) -> None:
        """A SHT_RELA section ``name`` applying ``entries`` to section ``target``."""
        self._expect(WriterState.SYMTAB, WriterState.RELOCS)
        tidx = next((i for i, s in enumerate(self._sections) if s.name == target), None)
        if tidx is None:
            raise UserInputError(f"relocation target section {target!r} does not exist")
        out = bytearray()
        index = self._sym_index
        for offset, symbol, rtype, addend in entries:
            if symbol not in index:
                raise UserInputError(f"relocation against unknown symbol {symbol!r}")
            out += _RELA.pack(offset, (index[symbol] << 32) | rtype, addend)
        self._sections.append(
            _Section(name, SHT_RELA, SHF_INFO_LINK | flags, 8, bytes(out), len(out),
                     link=self._symtab_index, info=tidx, entsize=_RELA.size)
        )
        self.state = WriterState.RELOCS

    def finish(self, split: str | None = None) -> bytes | SplitBlob:
        """Lay out sections, the section-name table and the header table; return the image.

        The image ends in its integrity trailer (:mod:`.integrity`). With ``split`` (the name of a
        section added with chunked data) it is returned unsealed as a :class:`SplitBlob`: bytes
        before that section, its chunks uncopied, bytes after it (``join()`` seals it).
        """
        self._expect(WriterState.SYMTAB, WriterState.RELOCS)
        shstr = bytearray(b"\0")
        name_offs = [0]
        for sec in self._sections[1:]:
            name_offs.append(len(shstr))
            shstr += sec.name.encode() + b"\0"
        name_offs.append(len(shstr))
        shstr += b".shstrtab\0"
        self._sections.append(_Section(".shstrtab", SHT_STRTAB, 0, 1, bytes(shstr), len(shstr)))

        # chunks joined once at the end: section data (weights) is copied exactly once
        chunks: list[bytes | bytearray | memoryview] = []
        pos = ELF_HEADER.size
        offsets = [0]
        cut: tuple[int, Any] | None = None  # (index in chunks, data) of the split section
        for sec in self._sections[1:]:
            start = align_up(pos, max(sec.align, 1))
            chunks.append(bytes(start - pos))
            offsets.append(start)
            pos = start
            if sec.sh_type != SHT_NOBITS:
                if sec.name == split and hasattr(sec.data, "chunks"):
                    cut = (len(chunks), sec.data)
                elif hasattr(sec.data, "chunks"):
                    chunks.extend(sec.data.chunks)
                else:
                    chunks.append(sec.data)
                pos += sec.size
        shoff = align_up(pos, 8)
        chunks.append(bytes(shoff - pos))
        for i, sec in enumerate(self._sections):
            chunks.append(SECTION_HEADER.pack(name_offs[i], sec.sh_type, sec.flags, 0, offsets[i], sec.size,
                                     sec.link, sec.info, sec.align if i else 0, sec.entsize))
        header = ELF_HEADER.pack(
            self._ident, ET_REL, self._machine, 1, 0, 0, shoff, 0, ELF_HEADER.size, 0, 0,
            SECTION_HEADER.size, len(self._sections), len(self._sections) - 1,
        )
        self.state = WriterState.DONE
        if split is not None:
            if cut is None:
                raise UserInputError(f"cannot split the blob at {split!r}: no such chunked section")
            i, data = cut
            return SplitBlob(b"".join([header, *chunks[:i]]), data, b"".join(chunks[i:]))
        out = seal(b"".join([header, *chunks]))
        logger.debug("blob written: %d bytes, %d sections", len(out), len(self._sections))
        return out
