"""Weightless NPU blobs (``CACHE_MODE=OPTIMIZE_SIZE``): the device's export without the IR's weights.

The real NPU plugin exports a model compiled with ``CACHE_MODE=OPTIMIZE_SIZE`` without the weights
it can find again in the IR's ``.bin`` and takes them back on import from ``WEIGHTS_PATH`` (or from
the ``MODEL_PTR`` model).  Ours does the same with its ELF blobs: every constant of the blob's
``.npu.weights`` section (the compiler's constant table gives their spans) that is byte-identical
to a ``Const`` of the IR's ``.bin`` is cut out and replaced by a reference -- position in the blob,
size, offset in the ``.bin`` and SHA-256.  Import splices the bytes back and checks every hash, so
a wrong or edited ``.bin`` is a typed error naming the constant, never wrong output (the real maps
whatever file it is given).  Constants the compiler made itself (folded, converted) stay inline,
so the restored blob is the exported one byte for byte, integrity trailer included.

Container (docs/npu_blob_format.md, "Weightless container"): ``MAGIC`` | u32 version | u64 header
length | SHA-256 of the header | header (UTF-8 JSON: ``.bin`` size and name, references, size and
SHA-256 of the stripped and of the restored blob) | the stripped blob.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import mmap
import os
import struct
import xml.etree.ElementTree as ET
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from ov_npu_emu.errors import BlobFormatError, ConfigError
from ov_npu_emu.runtime.model_cache import constant_digests
from ov_npu_emu_npu.blob.format import SEC_WEIGHTS
from ov_npu_emu_npu.blob.integrity import ENTRY, TRAILER, TRAILER_MAGIC, Chunks, elf_sections
from ov_npu_emu_npu.blob.reader import BlobReader, SplitBlob
from ov_npu_emu_npu.options import read

__all__ = [
    "MAGIC",
    "MIN_REF_BYTES",
    "VERSION",
    "WeightsIndex",
    "WeightsSource",
    "export_weightless",
    "import_weightless",
    "is_weightless",
    "restore_blob",
    "strip_blob",
]

MAGIC = b"\x13\x37OVNPUEMU-WLESS\x00"
VERSION = 1
_FIXED = struct.Struct("<IQ")

#: smaller constants (scalars, shapes) stay inline: a reference costs ~100 bytes of header
MIN_REF_BYTES = 256

def _ir_consts(xml_path: Path) -> Iterator[tuple[int, int]]:
    """(offset, size) of every Const layer's data in the IR's .bin, from the XML."""
    for _, el in ET.iterparse(xml_path, events=("end",)):
        if el.tag == "layer":
            if el.get("type") == "Const":
                data = el.find("data")
                if data is not None and data.get("offset") is not None:
                    yield int(data.get("offset", 0)), int(data.get("size", 0))
            el.clear()


def _map(f: Any) -> mmap.mmap | bytes:
    """The file read-only and zero-copy (an empty file cannot be mapped)."""
    if os.fstat(f.fileno()).st_size == 0:
        return b""
    return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


#: bytes of a constant's start that key the index (with its size): equal keys are then compared
#: whole, so the .bin is never hashed, only the constants a blob holds
_HEAD = 64


@dataclass
class WeightsIndex:
    """The IR's constants by (size, first bytes) -> their offsets in the .bin, and the SHA-256 of
    each constant once a blob has been found to hold it (built once per .bin and process)."""

    path: str
    bin_size: int
    by_key: dict[tuple[int, bytes], list[int]]
    digests: dict[int, bytes] = field(default_factory=dict)

    @classmethod
    def from_ir(cls, bin_path: str) -> WeightsIndex:
        xml_path = Path(bin_path).with_suffix(".xml")
        if not xml_path.is_file() or not os.path.isfile(bin_path):
            raise ConfigError(
                f"CACHE_MODE=OPTIMIZE_SIZE: cannot find the IR pair {xml_path} / {bin_path} the "
                "constants are located in; pass WEIGHTS_PATH=<model>.bin next to its .xml",
                key="WEIGHTS_PATH",
            )
        st, xst = os.stat(bin_path), xml_path.stat()
        # an export of every NPUW sub-model (prefill, generate variants, LM head) refers to one .bin
        identity = (os.path.abspath(bin_path), st.st_size, st.st_mtime_ns, st.st_ino, xst.st_mtime_ns, xst.st_size)
        cached = _INDEXES.get(identity)
        if cached is not None:
            return cached
        by_key: dict[tuple[int, bytes], list[int]] = {}
        with open(bin_path, "rb") as f:
            data = _map(f)
            try:
                for off, size in _ir_consts(xml_path):
                    if size >= MIN_REF_BYTES and off + size <= len(data):
                        offs = by_key.setdefault((size, bytes(data[off : off + _HEAD])), [])
                        if off not in offs:
                            offs.append(off)
                index = cls(os.path.abspath(bin_path), len(data), by_key)
            finally:
                if isinstance(data, mmap.mmap):
                    data.close()
        _INDEXES.clear()  # one .bin at a time is what an export session needs
        _INDEXES[identity] = index
        return index

    def find(self, piece: memoryview, data: Any) -> tuple[int, bytes] | None:
        """(offset, SHA-256) of an IR constant byte-identical to ``piece``, or None."""
        n = len(piece)
        offs = self.by_key.get((n, bytes(piece[:_HEAD])))
        if not offs:
            return None
        # compared as 8-byte words where the size allows (several times faster than bytes)
        dt = np.uint64 if n % 8 == 0 else np.uint8
        mine = np.frombuffer(piece, dt)
        for off in offs:
            if np.array_equal(np.frombuffer(data, dt, n // np.dtype(dt).itemsize, off), mine):
                digest = self.digests.get(off)
                if digest is None:
                    digest = self.digests[off] = hashlib.sha256(piece).digest()
                return off, digest
        return None


_INDEXES: dict[tuple[Any, ...], WeightsIndex] = {}


def strip_blob(blob: bytes | Chunks, index: WeightsIndex) -> tuple[bytes, list[list[Any]]]:
    """The blob without the constants found in the IR, and the references to them:
    ``[position, size, bin offset, sha256 hex]``, ascending by position. ``blob`` may be given as
    chunks (a blob rebuilt from the weights bank): its constants are then read where they are."""
    image = blob if isinstance(blob, Chunks) else Chunks([blob])
    try:
        end = TRAILER.unpack(bytes(image.view(len(image) - TRAILER.size, len(image))))[3]
        sections, _, _ = elf_sections(image.view)
    except (struct.error, ValueError, IndexError, UnicodeDecodeError) as e:
        raise BlobFormatError(f"NPU blob to export is not well-formed ({e})") from e
    base, w_size, _ = sections.get(SEC_WEIGHTS, (0, 0, 0))
    head, tail = bytes(image.view(0, base)), bytes(image.view(base + w_size, end))
    table = BlobReader(SplitBlob(head, _Hole(w_size), tail)).meta.get("constants", []) if w_size else []
    refs: list[list[Any]] = []
    kept: list[Any] = []
    pos = 0
    with open(index.path, "rb") as f:
        data = _map(f)
        try:
            if len(data) != index.bin_size:
                raise ConfigError(
                    f"CACHE_MODE=OPTIMIZE_SIZE: the weights file {index.path} changed while exporting; export again",
                    key="WEIGHTS_PATH",
                )
            for off, n in sorted(table):
                start = base + int(off)
                if n < MIN_REF_BYTES or start < pos or start + n > len(image):
                    continue
                found = index.find(memoryview(image.view(start, start + n)), data) if len(data) else None
                if found is None:
                    continue  # made by the compiler (folded, converted): stays inline
                kept.append(image.view(pos, start))
                refs.append([start, int(n), found[0], found[1].hex()])
                pos = start + n
        finally:
            if isinstance(data, mmap.mmap):
                data.close()
    kept.append(image.view(pos, len(image)))
    return b"".join(kept), refs


class WeightsSource:
    """Where an import takes the weights from: the WEIGHTS_PATH file or the MODEL_PTR model."""

    def __init__(self, weights_path: str | None, model: ov.Model | None) -> None:
        self.weights_path = weights_path
        self._data: Any = None
        self._file: Any = None
        self._by_hash: dict[bytes, memoryview] | None = None
        if weights_path:
            try:
                self._file = open(weights_path, "rb")  # noqa: SIM115 (closed in close())
                self._data = _map(self._file)
            except OSError as e:
                raise ConfigError(
                    f"Can not open file {weights_path} for mapping. Ensure that file exists and has "
                    "appropriate permissions.",
                    key="WEIGHTS_PATH",
                ) from e
        elif model is not None:
            # the constants by their SHA-256 (hashed once per NPUW CACHE_DIR load, digest_scope)
            self._by_hash = {}
            for digest, raw in constant_digests(model):
                if len(raw) >= MIN_REF_BYTES:
                    self._by_hash.setdefault(digest, raw)
        else:
            raise ConfigError(
                "Blob is weightless but no WEIGHTS_PATH nor MODEL_PTR property is provided! "
                "(it was exported with CACHE_MODE=OPTIMIZE_SIZE): pass WEIGHTS_PATH=<model>.bin of "
                "the IR it was compiled from",
                key="WEIGHTS_PATH",
            )

    def check_size(self, exported_size: int) -> None:
        if self._data is not None and len(self._data) != exported_size:
            raise BlobFormatError(
                f"WEIGHTS_PATH {self.weights_path} is {len(self._data)} bytes but the blob was "
                f"exported from a {exported_size}-byte .bin; pass the .bin of the model it was "
                "compiled from"
            )

    def take(self, name: str, bin_off: int, n: int, sha: str, check: bool = True) -> bytes | memoryview:
        """The constant at ``bin_off``; ``check``: its SHA-256 against the exported one (the
        import checks the whole restored blob anyway, so it asks for this only to name what
        differs)."""
        if self._by_hash is not None:
            found = self._by_hash.get(bytes.fromhex(sha))
            if found is None or len(found) != n:
                raise BlobFormatError(
                    f"MODEL_PTR lacks a constant of blob {name} ({n} bytes, .bin offset {bin_off}); "
                    "pass the model the blob was compiled from, or WEIGHTS_PATH"
                )
            return found
        piece = self._data[bin_off : bin_off + n]
        if len(piece) != n or (check and hashlib.sha256(piece).hexdigest() != sha):
            raise BlobFormatError(
                f"WEIGHTS_PATH {self.weights_path} does not hold the weights this blob was exported "
                f"with (blob {name}: constant at .bin offset {bin_off}, {n} bytes, SHA-256 "
                "mismatch); pass the .bin of the model it was compiled from, unmodified"
            )
        return piece

    def close(self) -> None:
        if self._file is not None:
            if isinstance(self._data, mmap.mmap):
                self._data.close()
            self._file.close()
            self._file = self._data = None


def _spliced(name: str, stripped: bytes, refs: list[list[Any]], source: WeightsSource,
             check: bool = True) -> Iterator[tuple[int, int, Any]]:
    """The restored blob in order, as (restored offset, reference size (0: stripped bytes),
    bytes-like): the stripped bytes between the referenced constants, each taken from ``source``
    (with ``check``, against its hash)."""
    view = memoryview(stripped)
    pos = 0  # position in the restored blob
    cut = 0  # position in the stripped one
    for ref in refs:
        if not isinstance(ref, list) or len(ref) != 4:
            raise BlobFormatError(f"weightless NPU blob {name}: weight references are corrupt; re-export it")
        start, n, bin_off, sha = ref
        if type(start) is not int or type(n) is not int or start < pos or n <= 0 or cut + start - pos > len(view):
            raise BlobFormatError(f"weightless NPU blob {name}: weight references are corrupt; re-export it")
        take = start - pos
        yield pos, 0, view[cut : cut + take]
        cut += take
        yield start, n, source.take(name, int(bin_off), n, str(sha), check)
        pos = start + n
    yield pos, 0, view[cut:]


def restore_blob(
    name: str, stripped: bytes, refs: list[list[Any]], source: WeightsSource, check: bool = True
) -> bytes:
    """Splice the referenced constants back (with ``check``, each checked against its hash)."""
    return b"".join(part for _, _, part in _spliced(name, stripped, refs, source, check))


class _Segments:
    """The restored blob as chunks (stripped bytes and the source's constants), read by range
    without joining them."""

    def __init__(self, stripped: bytes, refs: list[list[Any]], source: WeightsSource, name: str) -> None:
        parts = list(_spliced(name, stripped, refs, source))
        #: restored span -> the source's constant (bytes-like) for each reference
        self.constants: dict[tuple[int, int], Any] = {(pos, n): data for pos, n, data in parts if n}
        self.image = Chunks([data for _, _, data in parts])
        self.size = len(self.image)

    def read(self, a: int, b: int) -> bytes:
        """Restored bytes [a, b) (clipped to the blob)."""
        return bytes(self.image.view(a, b))


class _RestoredImage:
    """A restored blob's weights section for a :class:`SplitBlob`: every constant of the blob's
    table as an array (the source model's own bytes where a reference covers it), and the
    section as chunks for ``join``."""

    def __init__(self, segs: _Segments, w_off: int, w_size: int, table: list[Any]) -> None:
        self.size = w_size
        self.pieces: dict[int, np.ndarray] = {}
        for off, n in table:
            o, n = int(off), int(n)
            if n <= 0 or o < 0 or o + n > w_size:
                raise BlobFormatError(f"the blob's constant table entry ({o}, {n}) lies outside .npu.weights; "
                                      "the blob is corrupt")
            data = segs.constants.get((w_off + o, n))
            piece = np.frombuffer(data, np.uint8) if data is not None else np.frombuffer(
                segs.read(w_off + o, w_off + o + n), np.uint8)
            self.pieces.setdefault(o, piece)
        self._segs, self._off = segs, w_off

    @property
    def chunks(self) -> list[bytes]:
        return [self._segs.read(self._off, self._off + self.size)]

    def __len__(self) -> int:
        return self.size


def restore_split(name: str, stripped: bytes, refs: list[list[Any]], source: WeightsSource,
                  restored_size: int) -> SplitBlob:
    """The exported blob as a :class:`SplitBlob` whose weights are the source model's constants
    themselves (each proven by its SHA-256, as :meth:`WeightsSource.take` found it), never
    joined: what a compilation in this process hands the driver (the weights bank adopts them).
    The stripped bytes were checked against their SHA-256 (:func:`read_header`), so the blob is
    the exported one byte for byte; its integrity trailer is dropped (export seals again)."""
    segs = _Segments(stripped, refs, source, name)
    if segs.size != restored_size:
        raise BlobFormatError(f"weightless NPU blob {name} restores to {segs.size} bytes, not its recorded "
                              f"{restored_size}; re-export it")
    try:
        trailer = TRAILER.unpack(segs.read(segs.size - TRAILER.size, segs.size))
        image = int(trailer[3])  # the checksum table starts where the ELF image ends
        if trailer[0] != TRAILER_MAGIC or not 0 < image <= segs.size:
            raise ValueError("no integrity trailer")
        w_off, w_size, _ = elf_sections(segs.read)[0][SEC_WEIGHTS]
        if not 0 < w_off <= w_off + w_size <= image:
            raise ValueError(f"{SEC_WEIGHTS} lies outside the image")
    except (struct.error, ValueError, IndexError, KeyError, UnicodeDecodeError) as e:
        raise BlobFormatError(f"weightless NPU blob {name}: the restored blob is not an NPU blob ({e}); "
                              "re-export it") from e
    _check_ref_pieces(name, segs, image, int(trailer[2]))
    head, tail = segs.read(0, w_off), segs.read(w_off + w_size, image)
    table = BlobReader(SplitBlob(head, _Hole(w_size), tail)).meta.get("constants") or [(0, w_size)]
    return SplitBlob(head, _RestoredImage(segs, w_off, w_size, table), tail)


def _check_ref_pieces(name: str, segs: _Segments, image: int, count: int) -> None:
    """Each constant is proven by its SHA-256; where it sits is checked here: the integrity
    table's CRC-32 of the piece holding each constant's first byte (a reference edited behind
    the header's hash, e.g. two equal-sized constants traded, puts other bytes there). A piece
    per constant, not the whole blob: the full restore's SHA-256 is what this path saves."""
    raw = segs.read(image, image + count * ENTRY.size)
    if len(raw) != count * ENTRY.size:
        raise BlobFormatError(f"weightless NPU blob {name}: its integrity table is truncated; re-export it")
    pieces = sorted(ENTRY.unpack_from(raw, i * ENTRY.size)[:3] for i in range(count))
    starts = [off for off, _, _ in pieces]
    checked: set[int] = set()
    for start, _n in segs.constants:
        i = bisect.bisect_right(starts, start) - 1
        if i < 0 or i in checked:
            continue
        checked.add(i)
        off, size, crc = pieces[i]
        if zlib.crc32(segs.read(off, off + size)) != crc:
            raise BlobFormatError(
                f"weightless NPU blob {name}: the constant restored at offset {start} is not the one exported "
                "there (integrity CRC mismatch); pass the model it was compiled from, or re-export it")


class _Hole:
    """A section of ``size`` bytes that is not there (BlobReader reads around it)."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size


def is_weightless(blob: bytes | memoryview) -> bool:
    """Whether ``blob`` is a weightless container (not an ELF blob)."""
    return bytes(blob[: len(MAGIC)]) == MAGIC


def export_weightless(blob: bytes | Chunks, weights_path: str, name: str = "") -> bytes:
    """The container of ``blob`` (bytes, or chunks as the weights bank holds it) without the
    constants of the IR whose ``.bin`` is ``weights_path``."""
    image = blob if isinstance(blob, Chunks) else Chunks([blob])
    index = WeightsIndex.from_ir(weights_path)
    stripped, refs = strip_blob(image, index)
    header = {
        "name": name,
        "bin_size": index.bin_size,
        "bin_name": os.path.basename(index.path),
        "refs": refs,
        "size": len(stripped),
        "sha256": hashlib.sha256(stripped).hexdigest(),
        "restored_size": len(image),
        "restored_sha256": image.sha256(),
    }
    h = json.dumps(header, sort_keys=True).encode()
    return b"".join([MAGIC, _FIXED.pack(VERSION, len(h)), hashlib.sha256(h).digest(), h, stripped])


def read_header(container: bytes) -> tuple[dict[str, Any], bytes]:
    """The checked header and the stripped blob of a container; anything else is a BlobFormatError."""
    if not is_weightless(container):
        raise BlobFormatError("not a weightless NPU blob (no ov_npu_emu weightless magic)")
    off = len(MAGIC)
    if len(container) < off + _FIXED.size + 32:
        raise BlobFormatError("weightless NPU blob is truncated (header incomplete); re-export it")
    version, hlen = _FIXED.unpack_from(container, off)
    off += _FIXED.size
    if version != VERSION:
        raise BlobFormatError(
            f"weightless NPU blob version {version} is not supported (this build reads {VERSION}); re-export it"
        )
    digest = bytes(container[off : off + 32])
    off += 32
    raw = bytes(container[off : off + hlen])
    if len(raw) != hlen or hashlib.sha256(raw).digest() != digest:
        raise BlobFormatError("weightless NPU blob header is corrupt (SHA-256 mismatch or truncated); re-export it")
    try:
        header = json.loads(raw)
    except ValueError as e:
        raise BlobFormatError(f"weightless NPU blob header is corrupt: {e}") from e
    stripped = bytes(container[off + hlen :])
    if not isinstance(header, dict):
        raise BlobFormatError("weightless NPU blob header is corrupt; re-export it")
    if len(stripped) != header.get("size") or hashlib.sha256(stripped).hexdigest() != header.get("sha256"):
        raise BlobFormatError("weightless NPU blob is corrupt (stripped blob SHA-256 mismatch); re-export it")
    return header, stripped


def import_weightless(container: bytes, config: Mapping[str, Any]) -> bytes | SplitBlob:
    """The ELF blob of a container, its weights restored from ``WEIGHTS_PATH`` or ``MODEL_PTR``
    and checked against the exported SHA-256."""
    header, stripped = read_header(container)
    weights_path, model_ptr = read(config, "WEIGHTS_PATH"), read(config, "MODEL_PTR")  # typed, checked
    name = str(header.get("name") or "")
    source = WeightsSource(os.fspath(weights_path) if weights_path else None, model_ptr)
    try:
        source.check_size(int(header["bin_size"]))
        if model_ptr is not None:
            # every constant is found by its own SHA-256 (the model's digests): no full copy,
            # no second pass; the driver adopts the model's constants as a compilation does
            return restore_split(name, stripped, header["refs"], source, int(header["restored_size"]))
        # one SHA-256 over the restored blob proves every constant; only when it fails are the
        # constants hashed one by one, so that the error names the one that differs
        full = restore_blob(name, stripped, header["refs"], source, check=False)
        if len(full) != header["restored_size"] or hashlib.sha256(full).hexdigest() != header["restored_sha256"]:
            restore_blob(name, stripped, header["refs"], source, check=True)
            raise BlobFormatError(
                f"weightless NPU blob {name} does not match its exported SHA-256 once its weights are "
                "restored; pass the .bin of the model it was compiled from"
            )
    except (KeyError, TypeError, ValueError) as e:
        raise BlobFormatError(f"weightless NPU blob header is corrupt ({type(e).__name__}: {e}); re-export it") from e
    finally:
        source.close()
    return full
