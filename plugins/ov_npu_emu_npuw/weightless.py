"""Weightless NPUW artefacts (CACHE_MODE=OPTIMIZE_SIZE): sub-blobs that hold no IR weights.

The real NPUW exports an LLM without the weights it can find again in the IR's ``.bin`` and
takes them back on import from ``WEIGHTS_PATH`` (or from the ``MODEL_PTR`` model). Ours does the
same with the emulated NPU's ELF blobs: every constant of a sub-blob's ``.npu.weights`` section
(the compiler's constant table gives their spans) that is byte-identical to a ``Const`` of the
IR's ``.bin`` is cut out of the sub-blob and replaced by a reference -- position in the sub-blob,
size, offset in the ``.bin`` and SHA-256. Import splices the bytes back and checks every hash,
so a wrong or edited ``.bin`` is a typed error naming the constant, never wrong output (the
real maps whatever file it is given). Constants the compiler made itself (folded, converted)
stay inline, so the restored sub-blob is the exported one byte for byte, integrity trailer
included.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from ov_npu_emu.errors import BlobFormatError, ConfigError
from ov_npu_emu_npu.blob.format import SEC_WEIGHTS
from ov_npu_emu_npu.blob.reader import BlobReader

__all__ = [
    "MIN_REF_BYTES",
    "bin_identity",
    "check_bin_identity",
    "WeightsIndex",
    "WeightsSource",
    "restore_blob",
    "strip_blob",
    "weights_path_of",
]

#: smaller constants (scalars, shapes) stay inline: a reference costs ~100 bytes of header
MIN_REF_BYTES = 256

#: where our Core.read_model records the IR's weights file (the key the real runtime uses too)
WEIGHTS_PATH_RT_KEY = "__weights_path"


def weights_path_of(model: ov.Model, explicit: str | None) -> str:
    """The ``.bin`` a weightless export refers to: WEIGHTS_PATH if given, else the file the
    model was read from."""
    if explicit:
        return os.fspath(explicit)
    if model.has_rt_info(WEIGHTS_PATH_RT_KEY):
        return str(model.get_rt_info(WEIGHTS_PATH_RT_KEY).astype(str))
    raise ConfigError(
        "CACHE_MODE=OPTIMIZE_SIZE needs the IR's weights file to refer to, but this model was not "
        "read from an IR file; pass WEIGHTS_PATH=<model>.bin or use CACHE_MODE=OPTIMIZE_SPEED",
        key="CACHE_MODE",
    )


def _ir_consts(xml_path: Path) -> Iterator[tuple[int, int]]:
    """(offset, size) of every Const layer's data in the IR's .bin, from the XML."""
    for _, el in ET.iterparse(xml_path, events=("end",)):
        if el.tag == "layer":
            if el.get("type") == "Const":
                data = el.find("data")
                if data is not None and data.get("offset") is not None:
                    yield int(data.get("offset", 0)), int(data.get("size", 0))
            el.clear()


@dataclass
class WeightsIndex:
    """SHA-256 of each IR constant → its offset in the .bin (built once per export)."""

    path: str
    bin_size: int
    by_hash: dict[bytes, int]

    @classmethod
    def from_ir(cls, bin_path: str) -> WeightsIndex:
        xml_path = Path(bin_path).with_suffix(".xml")
        if not xml_path.is_file() or not os.path.isfile(bin_path):
            raise ConfigError(
                f"CACHE_MODE=OPTIMIZE_SIZE: cannot find the IR pair {xml_path} / {bin_path} the "
                "constants are located in; pass WEIGHTS_PATH=<model>.bin next to its .xml",
                key="WEIGHTS_PATH",
            )
        by_hash: dict[bytes, int] = {}
        with open(bin_path, "rb") as f:
            data = _map(f)
            try:
                for off, size in _ir_consts(xml_path):
                    if size >= MIN_REF_BYTES and off + size <= len(data):
                        by_hash.setdefault(hashlib.sha256(data[off : off + size]).digest(), off)
                return cls(os.path.abspath(bin_path), len(data), by_hash)
            finally:
                if isinstance(data, mmap.mmap):
                    data.close()


def _map(f: Any) -> mmap.mmap | bytes:
    """The file read-only and zero-copy (an empty file cannot be mapped)."""
    if os.fstat(f.fileno()).st_size == 0:
        return b""
    return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def strip_blob(role: str, blob: bytes, index: WeightsIndex) -> tuple[bytes, list[list[Any]]]:
    """The sub-blob without the constants found in the IR, and the references to them:
    ``[position, size, bin offset, sha256 hex]``, ascending by position."""
    reader = BlobReader(blob)
    try:
        sec = reader.elf.get_section_by_name(SEC_WEIGHTS)
        base = int(sec["sh_offset"]) if sec is not None else 0
        table = reader.meta.get("constants", [])
    finally:
        reader.close()
    refs: list[list[Any]] = []
    kept: list[bytes] = []
    pos = 0
    for off, n in sorted(table):
        start = base + int(off)
        if n < MIN_REF_BYTES or start < pos:
            continue
        digest = hashlib.sha256(blob[start : start + n]).digest()
        bin_off = index.by_hash.get(digest)
        if bin_off is None:
            continue  # made by the compiler (folded, converted): stays inline
        kept.append(blob[pos:start])
        refs.append([start, int(n), bin_off, digest.hex()])
        pos = start + n
    kept.append(blob[pos:])
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
            self._by_hash = {}
            for op in model.get_ordered_ops():
                if op.get_type_name() == "Constant" and op.get_byte_size() >= MIN_REF_BYTES:
                    raw = memoryview(np.ascontiguousarray(op.data)).cast("B")
                    self._by_hash.setdefault(hashlib.sha256(raw).digest(), raw)
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

    def take(self, role: str, bin_off: int, n: int, sha: str) -> bytes | memoryview:
        if self._by_hash is not None:
            found = self._by_hash.get(bytes.fromhex(sha))
            if found is None or len(found) != n:
                raise BlobFormatError(
                    f"MODEL_PTR lacks a constant of sub-blob {role} ({n} bytes, .bin offset {bin_off}); "
                    "pass the model the blob was compiled from, or WEIGHTS_PATH"
                )
            return found
        piece = self._data[bin_off : bin_off + n]
        if len(piece) != n or hashlib.sha256(piece).hexdigest() != sha:
            raise BlobFormatError(
                f"WEIGHTS_PATH {self.weights_path} does not hold the weights this blob was exported "
                f"with (sub-blob {role}: constant at .bin offset {bin_off}, {n} bytes, SHA-256 "
                "mismatch); pass the .bin of the model it was compiled from, unmodified"
            )
        return piece

    def close(self) -> None:
        if self._file is not None:
            if isinstance(self._data, mmap.mmap):
                self._data.close()
            self._file.close()
            self._file = self._data = None


def restore_blob(role: str, stripped: bytes, refs: list[list[Any]], source: WeightsSource) -> bytes:
    """Splice the referenced constants back (each checked against its hash)."""
    out: list[bytes | memoryview] = []
    pos = 0  # position in the restored blob
    cut = 0  # position in the stripped one
    for start, n, bin_off, sha in refs:
        if type(start) is not int or type(n) is not int or start < pos or n <= 0:
            raise BlobFormatError(f"NPUW LLM artefact weight references of {role} are corrupt; re-export it")
        take = start - pos
        out.append(stripped[cut : cut + take])
        cut += take
        out.append(source.take(role, int(bin_off), n, str(sha)))
        pos = start + n
    out.append(stripped[cut:])
    return b"".join(out)


def describe(refs: Mapping[str, list[list[Any]]]) -> tuple[int, int]:
    """(constants referenced, bytes referenced) over all sub-blobs."""
    return sum(len(r) for r in refs.values()), sum(n for r in refs.values() for _, n, _, _ in r)


def _file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()


def bin_identity(bin_path: str) -> dict[str, Any]:
    """Size and SHA-256 of the whole .bin (for sub-blobs whose device reads it by offset)."""
    if not os.path.isfile(bin_path):
        raise ConfigError(
            f"CACHE_MODE=OPTIMIZE_SIZE: the weights file {bin_path} does not exist; pass "
            "WEIGHTS_PATH=<model>.bin",
            key="WEIGHTS_PATH",
        )
    return {
        "bin_size": os.path.getsize(bin_path),
        "bin_name": os.path.basename(bin_path),
        "bin_sha256": _file_sha256(bin_path),
    }


def check_bin_identity(bin_path: str, want: Mapping[str, Any]) -> None:
    if not os.path.isfile(bin_path):
        raise ConfigError(
            f"Can not open file {bin_path} for mapping. Ensure that file exists and has appropriate permissions.",
            key="WEIGHTS_PATH",
        )
    size = os.path.getsize(bin_path)
    if size != int(want["bin_size"]):
        raise BlobFormatError(
            f"WEIGHTS_PATH {bin_path} is {size} bytes but the blob was exported from a "
            f"{want['bin_size']}-byte .bin; pass the .bin of the model it was compiled from"
        )
    if _file_sha256(bin_path) != want["bin_sha256"]:
        raise BlobFormatError(
            f"WEIGHTS_PATH {bin_path} does not hold the weights this blob was exported with (SHA-256 "
            "of the .bin differs); pass the .bin of the model it was compiled from, unmodified"
        )
