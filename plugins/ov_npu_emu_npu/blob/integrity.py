"""The integrity trailer of an NPU blob: checksums over every byte, checked before any parsing.

A real device must never execute a damaged blob, and a user wants to know *what* is damaged.
So the writer appends, after the ELF image, a table of CRC-32s that covers the whole image with
contiguous ranges -- the ELF header, each section's data (split into 1 MiB pieces so a damaged
weight names its offset), the padding between sections and the section header table -- and a
fixed-size trailer at the very end of the file::

    image | table: n × ENTRY (offset u64, size u64, crc32 u32, label 32s) | TRAILER

``TRAILER`` = magic ``NPUEMUCK``, format u32, entry count u32, table offset u64, table CRC u32,
trailer CRC u32 (over the trailer's preceding bytes). ELF readers ignore bytes that no header
points at, so ``readelf`` still reads the image. :func:`verify` reads only the trailer, the table
and the image ranges -- every size it trusts is bounded by the file size -- and raises
:class:`~ov_npu_emu.errors.BlobFormatError` naming the damaged range; :func:`seal` writes it.

CRC-32 detects accidental damage (bit flips, truncation, splices), not deliberate forgery.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import struct
import zlib
from collections.abc import Callable, Iterator
from typing import Any

from ov_npu_emu.errors import BlobFormatError
from ov_npu_emu_npu.blob.format import ELF_HEADER, SECTION_HEADER, SHT_NOBITS

__all__ = ["ENTRY", "PIECE", "TRAILER", "TRAILER_MAGIC", "Chunks", "elf_sections", "is_sealed", "reseal", "seal",
           "strip", "trailer_of", "verify"]

TRAILER_MAGIC = b"NPUEMUCK"
TRAILER_FORMAT = 1
TRAILER = struct.Struct("<8sIIQII")
ENTRY = struct.Struct("<QQI32s")
#: checksum granularity inside a section: a damaged weight is located to within 1 MiB
PIECE = 1 << 20



class Chunks:
    """An image given as chunks (bytes-likes, in order), read by range without joining them: a
    blob rebuilt from the weights bank is gigabytes, and each joined copy costs a pass."""

    def __init__(self, chunks: list[Any]) -> None:
        self.chunks = [c if isinstance(c, memoryview) and c.format == "B" and c.ndim == 1 else memoryview(c).cast("B")
                       for c in chunks if len(c)]
        self.starts = [0, *itertools.accumulate(len(c) for c in self.chunks)]

    def __len__(self) -> int:
        return self.starts[-1]

    def _parts(self, a: int, b: int) -> Iterator[memoryview]:
        i = max(bisect.bisect_right(self.starts, a) - 1, 0)
        while i < len(self.chunks) and self.starts[i] < b:
            lo = self.starts[i]
            yield self.chunks[i][max(a - lo, 0):min(b, self.starts[i + 1]) - lo]
            i += 1

    def view(self, a: int, b: int) -> bytes | memoryview:
        """Bytes [a, b): a view when one chunk holds them, else a joined copy."""
        parts = list(self._parts(a, min(b, len(self))))
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def crc32(self, a: int, b: int) -> int:
        crc = 0
        for part in self._parts(a, b):
            crc = zlib.crc32(part, crc)
        return crc

    def sha256(self) -> str:
        h = hashlib.sha256()
        for c in self.chunks:
            h.update(c)
        return h.hexdigest()


def elf_sections(read: Callable[[int, int], Any]) -> tuple[dict[str, tuple[int, int, int]], int, int]:
    """({name: (offset, size, type)}, section header table offset, its size) of an ELF image
    read by ``read(a, b)``; struct / value / index errors for headers that are not there."""
    (_, _, _, _, _, _, shoff, _, _, _, _, shentsize, shnum, shstrndx) = ELF_HEADER.unpack(read(0, ELF_HEADER.size))
    table = read(shoff, shoff + shnum * shentsize)
    headers = [SECTION_HEADER.unpack_from(table, i * shentsize) for i in range(shnum)]
    strtab = headers[shstrndx]
    names = bytes(read(strtab[4], strtab[4] + strtab[5]))
    sections = {names[h[0]: names.index(b"\0", h[0])].decode(): (h[4], h[5], h[1]) for h in headers[1:]}
    return sections, shoff, shnum * shentsize


def _ranges(image: bytes | memoryview | Chunks) -> list[tuple[int, int, str]] | None:
    """(offset, size, label) ranges covering ``image`` exactly, from its own ELF headers; None
    when the headers do not describe the image (a section past its end or overlapping another:
    an image edited on purpose, see :func:`reseal`), before any range is listed.
    """
    read = image.view if isinstance(image, Chunks) else (lambda a, b: image[a:b])
    try:
        sections, shoff, table_size = elf_sections(read)
        spans = sorted((off, size, name) for name, (off, size, kind) in sections.items() if kind != SHT_NOBITS and size)
    except (struct.error, ValueError, IndexError, UnicodeDecodeError):  # headers or names that are not there
        return None
    spans.append((shoff, table_size, "section headers"))
    spans.sort()
    end = ELF_HEADER.size
    for off, size, _ in spans:
        if off < end or off + size > len(image):
            return None
        end = off + size
    out: list[tuple[int, int, str]] = []
    pos = ELF_HEADER.size
    out.append((0, ELF_HEADER.size, "ELF header"))
    for off, size, label in spans:
        if off > pos:
            out.append((pos, off - pos, f"padding before {label}"))
        for p in range(off, off + size, PIECE):
            out.append((p, min(PIECE, off + size - p), label))
        pos = off + size
    if pos != len(image):
        out.append((pos, len(image) - pos, "end padding"))
    return out


def seal(image: bytes | bytearray | memoryview, *, by_section: bool = True) -> bytes:
    """``image`` followed by its checksum table and trailer (what export_model returns).

    ``by_section=False`` checksums plain 1 MiB pieces without reading the ELF headers (for images
    that are not well-formed, e.g. fuzzing the parsers behind the checksum).
    """
    view = memoryview(image)
    return b"".join([view, trailer_of(Chunks([view]), by_section=by_section)])


def trailer_of(image: Chunks, *, by_section: bool = True) -> bytes:
    """The checksum table and trailer that :func:`seal` appends to ``image``."""
    ranges = _ranges(image) if by_section else None
    if ranges is None:  # plain pieces; also for an image whose headers do not describe it
        ranges = [(p, min(PIECE, len(image) - p), "image") for p in range(0, len(image), PIECE)]
    table = b"".join(ENTRY.pack(off, size, image.crc32(off, off + size), label.encode()[:32])
                     for off, size, label in ranges)
    n = len(table) // ENTRY.size
    head = struct.pack("<8sIIQI", TRAILER_MAGIC, TRAILER_FORMAT, n, len(image), zlib.crc32(table))
    return b"".join([table, head, struct.pack("<I", zlib.crc32(head))])


def is_sealed(blob: bytes | bytearray | memoryview) -> bool:
    """Whether ``blob`` ends in an integrity trailer's magic (nothing is verified)."""
    return (
        len(blob) >= TRAILER.size
        and bytes(blob[len(blob) - TRAILER.size : len(blob) - TRAILER.size + 8]) == TRAILER_MAGIC
    )


def _fail(what: str) -> BlobFormatError:
    return BlobFormatError(f"NPU blob is damaged: {what}; it must not run -- re-export or recompile the model")


def verify(blob: bytes | bytearray | memoryview) -> int:
    """Check every checksum of a sealed blob; return the image length (where the table starts).

    Raises :class:`BlobFormatError` naming the first damaged range (its label and file offset).
    """
    view = memoryview(blob)
    total = len(view)
    if total < TRAILER.size:
        raise _fail(f"{total} bytes is shorter than its integrity trailer (truncated)")
    magic, fmt, n, table_off, table_crc, crc = TRAILER.unpack_from(view, total - TRAILER.size)
    if magic != TRAILER_MAGIC:
        raise _fail(
            "no integrity trailer at the end of the file (truncated, extended, or written by an "
            "ov-npu-emu older than blob format 1.2)"
        )
    if zlib.crc32(view[total - TRAILER.size : total - 4]) != crc:
        raise _fail(f"the integrity trailer at file offset {total - TRAILER.size:#x} fails its checksum")
    if fmt != TRAILER_FORMAT:
        raise _fail(f"integrity trailer format {fmt} is unknown (this runtime reads {TRAILER_FORMAT})")
    table_end = total - TRAILER.size
    # bounded before use: the table sits exactly between the image and the trailer
    if n == 0 or table_off + n * ENTRY.size != table_end:
        raise _fail(f"the checksum table ({n} entries at {table_off:#x}) does not fit the file")
    if zlib.crc32(view[table_off:table_end]) != table_crc:
        raise _fail(f"the checksum table at file offset {table_off:#x} fails its checksum")
    pos = 0
    for i in range(n):
        off, size, want, label = ENTRY.unpack_from(view, table_off + i * ENTRY.size)
        name = label.rstrip(b"\0").decode("ascii", "replace")
        if off != pos or size == 0 or off + size > table_off:
            raise _fail(f"checksum table entry {i} ({name}) does not continue the image at {pos:#x}")
        if zlib.crc32(view[off : off + size]) != want:
            raise _fail(f"{name} fails its checksum (file offset {off:#x}..{off + size - 1:#x})")
        pos = off + size
    if pos != table_off:
        raise _fail(f"the checksum table covers {pos} of the {table_off} image bytes")
    return table_off


def reseal(blob: bytes | bytearray) -> bytes:
    """Recompute the checksums of a sealed blob edited on purpose (tools, tests of the deeper
    checks); the trailer tells where the image ends, nothing is verified."""
    if not is_sealed(blob):
        raise _fail("no integrity trailer to recompute")
    table_off = TRAILER.unpack_from(blob, len(blob) - TRAILER.size)[3]
    return seal(memoryview(blob)[:table_off])


def strip(blob: bytes) -> bytes:
    """The verified image of a sealed blob (without its table and trailer)."""
    return blob[: verify(blob)]
