"""Reads an NPU blob with pyelftools: validates magic and version first, then exposes its parts."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import struct
from collections.abc import Iterator
from typing import IO, Any, cast

import numpy as np
from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection
from elftools.elf.sections import SymbolTableSection

from ov_npu_emu.errors import BlobFieldError, BlobFormatError
from ov_npu_emu_npu.blob.format import (
    BLOB_MAGIC,
    BLOB_VERSION,
    EM_NPU_EMU,
    SEC_META,
    SUPPORTED_VERSIONS,
    VPU_SHF_USERINPUT,
    VPU_SHF_USEROUTPUT,
)
from ov_npu_emu_npu.blob.integrity import is_sealed, seal, verify
from ov_npu_emu_npu.blob.validate import validate_meta

__all__ = ["BlobReader", "META_HEAD", "Relocation", "SectionInfo", "SplitBlob", "pack_meta"]

logger = logging.getLogger(__name__)

#: what pyelftools raises on corrupt input besides ELFError (it indexes and does arithmetic on
#: header fields without checking them, e.g. st_shndx "SHN_UNDEF" used as a section number)
_ELF_ERRORS = (ELFError, struct.error, ValueError, IndexError, KeyError, TypeError, AttributeError,
               UnicodeDecodeError, OverflowError)

#: Elf64_Rela: r_offset, r_info (symbol << 32 | type), r_addend
_RELA = struct.Struct("<QQq")
_RELA_DTYPE = np.dtype([("offset", "<u8"), ("info", "<u8"), ("addend", "<i8")])
#: .npu.meta header: magic, major, minor, JSON length
META_HEAD = struct.Struct("<8sHHI")


def pack_meta(meta: dict[str, Any]) -> bytes:
    """Serialize the metadata section (used by the compiler; lives here so both sides agree)."""
    js = json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()
    return META_HEAD.pack(BLOB_MAGIC, BLOB_VERSION[0], BLOB_VERSION[1], len(js)) + js


@dataclasses.dataclass(frozen=True)
class SectionInfo:
    """One section as the loader needs it."""

    index: int  # section header index
    name: str  # e.g. ".npu.dpu"
    size: int  # sh_size (NOBITS sections have no file data)
    nobits: bool  # SHT_NOBITS: allocate and zero, nothing to copy
    alloc: bool  # SHF_ALLOC: loaded into device memory
    data: memoryview  # file contents, a zero-copy view of the blob (empty for NOBITS)
    offset: int = 0  # sh_offset: where the contents lie in the file


@dataclasses.dataclass(frozen=True)
class Relocation:
    """One Elf64_Rela entry, resolved to names."""

    section: str  # name of the relocation section (".rela.npu.dpu.userin")
    target: str  # section the entry patches
    offset: int  # r_offset inside ``target``
    rtype: int  # relocation type
    addend: int  # r_addend
    symbol: str  # symbol name; section symbols carry their section's name
    user: str | None  # "in" / "out" for user-I/O relocations (section flags), else None


@dataclasses.dataclass
class SplitBlob:
    """A blob handed over in three parts, the way a compiler and driver in one process share it:
    the bytes before one section (``head``), that section's data as chunks it never copies
    (``image``: ``chunks`` in file order and ``pieces``, read-only uint8 arrays by section
    offset), and the bytes after it (``tail``). ``join()`` gives the ordinary (sealed) blob.
    It never left the process, so it carries no integrity trailer and is not verified."""

    head: bytes
    image: Any
    tail: bytes

    @property
    def hole(self) -> int:
        return len(self.image)

    def __len__(self) -> int:
        return len(self.head) + self.hole + len(self.tail)

    def join(self) -> bytes:
        return seal(b"".join([self.head, *self.image.chunks, self.tail]))


class _HoleStream(io.RawIOBase):
    """Seekable reads over head + (hole) + tail; the hole reads as zeros (ELF parsing never
    reads section contents it is not asked for)."""

    def __init__(self, split: SplitBlob) -> None:
        self._s = split
        self._pos = 0
        self._tail0 = len(split.head) + split.hole

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = 0) -> int:
        self._pos = pos if whence == 0 else self._pos + pos if whence == 1 else len(self._s) + pos
        return self._pos

    def read(self, n: int = -1) -> bytes:
        end = len(self._s) if n is None or n < 0 else min(len(self._s), self._pos + n)
        out = bytearray()
        p = self._pos
        head, tail = self._s.head, self._s.tail
        while p < end:
            if p < len(head):
                q = min(end, len(head))
                out += head[p:q]
            elif p < self._tail0:
                q = min(end, self._tail0)
                out += bytes(q - p)
            else:
                q = end
                out += tail[p - self._tail0:q - self._tail0]
            p = q
        self._pos = end
        return bytes(out)


class BlobReader:
    """A thin layer over ``ELFFile`` keeping pyelftools' naming (get_section_by_name, iter_*)."""

    def __init__(self, blob: bytes | SplitBlob) -> None:
        self._split: SplitBlob | None
        if isinstance(blob, SplitBlob):
            self._split, self._blob = blob, blob.head
        elif isinstance(blob, (bytes, bytearray, memoryview)):
            self._split, self._blob = None, blob if isinstance(blob, bytes) else bytes(blob)
        else:
            raise BlobFormatError(f"an NPU blob must be bytes, got {type(blob).__name__}")
        if self._blob[:4] != b"\x7fELF":
            raise BlobFormatError(
                "not an NPU blob: missing ELF magic; export it with CompiledModel.export_model() on device NPU"
            )
        if (
            self._split is None
            and len(self._blob) >= 20
            and not is_sealed(self._blob)
            and struct.unpack_from("<H", self._blob, 18)[0] != EM_NPU_EMU
        ):
            raise BlobFormatError(
                "foreign ELF file (another e_machine, no ov-npu-emu integrity trailer); "
                "this is not an ov-npu-emu NPU blob"
            )
        #: bytes of the ELF image; a blob from bytes is checked against its integrity trailer
        #: before anything else reads it, and sections must lie inside the image
        self.image_size = len(self._split) if self._split is not None else verify(self._blob)
        try:
            # _HoleStream is a raw binary stream: the reads ELFFile makes of an IO[bytes]
            stream = cast("IO[bytes]", _HoleStream(self._split)) if self._split is not None else io.BytesIO(self._blob)
            self.elf = ELFFile(stream)
            machine = self.elf.header["e_machine"]
            sec = self.elf.get_section_by_name(SEC_META)
        except _ELF_ERRORS as e:
            raise BlobFormatError(f"corrupt NPU blob (ELF structure unreadable): {e}") from e
        if machine not in (EM_NPU_EMU, f"EM_{EM_NPU_EMU}") and machine != EM_NPU_EMU:
            raise BlobFormatError(f"foreign ELF file (e_machine {machine!r}); this is not an ov-npu-emu NPU blob")
        if sec is None:
            raise BlobFormatError(f"NPU blob has no {SEC_META} section; it is foreign or truncated")
        head = sec.data()[: META_HEAD.size]
        if len(head) < META_HEAD.size:
            raise BlobFormatError(f"{SEC_META} is truncated")
        magic, major, minor, length = META_HEAD.unpack(head)
        if magic != BLOB_MAGIC:
            raise BlobFormatError(f"bad blob magic {magic!r}; this is not an ov-npu-emu NPU blob")
        if major not in SUPPORTED_VERSIONS or (major == BLOB_VERSION[0] and minor > BLOB_VERSION[1]):
            raise BlobFormatError(
                f"blob format version {major}.{minor} is not supported by this runtime "
                f"(supports {BLOB_VERSION[0]}.0-{BLOB_VERSION[0]}.{BLOB_VERSION[1]}); recompile the model"
            )
        self.version = (major, minor)
        try:
            self.meta: dict[str, Any] = json.loads(sec.data()[META_HEAD.size : META_HEAD.size + length])
        except ValueError as e:
            raise BlobFormatError(f"{SEC_META} JSON is corrupt: {e}") from e
        validate_meta(self.meta)

    def close(self) -> None:
        """Drop the blob: pyelftools' objects form reference cycles around the stream, so
        without this the blob (weights included) lives until the cyclic GC runs."""
        self.elf.stream.close()
        self._blob = b""
        self._split = None

    def get_section_by_name(self, name: str) -> SectionInfo | None:
        for s in self.iter_sections():
            if s.name == name:
                return s
        return None

    def _view(self, off: int, size: int) -> memoryview:
        """File bytes [off, off + size) without a copy (of a split blob: the hole reads as empty)."""
        if self._split is None:
            return memoryview(self._blob)[off : off + size]
        head, tail0 = len(self._split.head), len(self._split.head) + self._split.hole
        if off + size <= head:
            return memoryview(self._split.head)[off : off + size]
        if off >= tail0:
            return memoryview(self._split.tail)[off - tail0 : off - tail0 + size]
        return memoryview(b"")

    def iter_sections(self) -> Iterator[SectionInfo]:
        total = self.image_size
        try:
            for i, s in enumerate(self.elf.iter_sections()):
                nobits = s["sh_type"] == "SHT_NOBITS"
                off, size = s["sh_offset"], s["sh_size"]
                if not nobits and off + size > total:
                    raise BlobFormatError(f"section {s.name} runs past the end of the blob (truncated)")
                # a view, not s.data(): weights can be gigabytes and must not be copied per lookup
                yield SectionInfo(
                    i,
                    s.name,
                    size,
                    nobits,
                    bool(s["sh_flags"] & 0x2),
                    memoryview(b"") if nobits else self._view(off, size),
                    off,
                )
        except _ELF_ERRORS as e:
            raise BlobFormatError(f"corrupt NPU blob section table: {e}") from e

    def check_layout(self) -> None:
        """The file ranges of the ELF header, the sections with contents and the section header
        table must not overlap (the writer lays them out one after the other): a section header
        pointing into another section's bytes is a BlobFieldError naming it."""
        h = self.elf.header
        spans = [(0, h["e_ehsize"], "the ELF header"), (h["e_shoff"], h["e_shnum"] * h["e_shentsize"],
                                                        "the section header table")]
        spans += [(s.offset, s.size, f"section {s.name}") for s in self.iter_sections() if not s.nobits and s.size]
        spans.sort()
        for (o1, n1, a), (o2, _, b) in zip(spans, spans[1:], strict=False):
            if o1 + n1 > o2:
                raise BlobFieldError(
                    f"corrupt NPU blob: {b} (file offset {o2:#x}) overlaps {a} ({o1:#x}..{o1 + n1 - 1:#x}); "
                    "recompile the model and export it again", field=f"{b} (sh_offset)")

    def iter_symbols(self) -> Iterator[tuple[str, int, int]]:
        """(name, value, size) of the global (user I/O) symbols."""
        symtab = self.elf.get_section_by_name(".symtab")
        if not isinstance(symtab, SymbolTableSection):  # absent, or its header was corrupted
            raise BlobFormatError("NPU blob has no valid .symtab")
        try:
            for sym in symtab.iter_symbols():
                if sym["st_info"]["bind"] == "STB_GLOBAL":
                    yield sym.name, sym["st_value"], sym["st_size"]
        except _ELF_ERRORS as e:
            raise BlobFormatError(f"corrupt NPU blob symbol table: {e}") from e

    def relocation_tables(self) -> tuple[list[str], list[tuple[str, str, str | None, np.ndarray]]] | None:
        """The relocations as arrays: (symbol names, [(section, target, user, entries)]) with
        ``entries`` a structured array of ``offset`` (u8), ``info`` (u8) and ``addend`` (i8), the
        same entries :meth:`iter_relocations` yields one by one; None where that would raise (its
        error names the fault)."""
        try:
            sections = list(self.elf.iter_sections())
            names = [sec.name for sec in sections]
            symtab = self.elf.get_section_by_name(".symtab")
            if not isinstance(symtab, SymbolTableSection):
                return None
            symbols = [
                names[sym["st_shndx"]] if sym["st_info"]["type"] == "STT_SECTION" else sym.name
                for sym in symtab.iter_symbols()
            ]
            tables = []
            for sec in sections:
                if not isinstance(sec, RelocationSection):
                    continue
                flags = sec["sh_flags"]
                user = "in" if flags & VPU_SHF_USERINPUT else "out" if flags & VPU_SHF_USEROUTPUT else None
                if not sec.is_RELA() or sec["sh_entsize"] != _RELA.size or sec["sh_size"] % _RELA.size:
                    return None
                entries = np.frombuffer(sec.data(), _RELA_DTYPE)
                if entries.size and int(entries["info"].max() >> np.uint64(32)) >= len(symbols):
                    return None
                tables.append((sec.name, names[sec["sh_info"]], user, entries))
            return symbols, tables
        except _ELF_ERRORS:
            return None

    def iter_relocations(self) -> Iterator[Relocation]:
        # section names and symbols are read once: pyelftools re-parses a section header per
        # get_section() and a symbol per get_symbol(), which made loading a big blob spend
        # seconds here (one lookup per relocation); the Elf64_Rela entries are unpacked directly
        try:
            sections = list(self.elf.iter_sections())
            names = [sec.name for sec in sections]
            symtab = self.elf.get_section_by_name(".symtab")
            if not isinstance(symtab, SymbolTableSection):
                raise BlobFormatError("NPU blob has no valid .symtab")
            symbols = [
                names[sym["st_shndx"]] if sym["st_info"]["type"] == "STT_SECTION" else sym.name
                for sym in symtab.iter_symbols()
            ]
            for sec in sections:
                if not isinstance(sec, RelocationSection):
                    continue
                flags = sec["sh_flags"]
                user = "in" if flags & VPU_SHF_USERINPUT else "out" if flags & VPU_SHF_USEROUTPUT else None
                target = names[sec["sh_info"]]
                if not sec.is_RELA() or sec["sh_entsize"] != _RELA.size or sec["sh_size"] % _RELA.size:
                    raise BlobFormatError(f"relocation section {sec.name} is not an array of Elf64_Rela")
                for off, info, addend in _RELA.iter_unpack(sec.data()):
                    yield Relocation(sec.name, target, off, info & 0xFFFFFFFF, addend, symbols[info >> 32], user)
        except _ELF_ERRORS as e:
            raise BlobFormatError(f"corrupt NPU blob relocations: {e}") from e
