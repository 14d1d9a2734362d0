"""The emulated NPU's weightless export (CACHE_MODE=OPTIMIZE_SIZE): the device's own container.

Compiled with CACHE_MODE=OPTIMIZE_SIZE, the NPU device exports its blob without the IR's
constants (a container, docs/npu_blob_format.md) and restores them on import from WEIGHTS_PATH or
MODEL_PTR, checking each one; edited references behind the header's hash are typed errors too.
"""

from __future__ import annotations

import hashlib
import json
import struct

import pytest

from ov_npu_emu.errors import BlobFormatError, ConfigError
from ov_npu_emu_npu.weightless import MAGIC, VERSION, is_weightless


@pytest.fixture(scope="module")
def emu_core():
    from ov_npu_emu import Core

    return Core()


def _compile(emu_core, xml: str, **cfg):
    return emu_core.compile_model(xml, "NPU", {"INFERENCE_PRECISION_HINT": "f32", **cfg})


@pytest.fixture(scope="module")
def blobs(emu_core, stories_decode, tmp_path_factory):
    """(IR pair, the ELF blob, weightless container) of the static stories260K decoder."""
    import openvino as ov

    out = tmp_path_factory.mktemp("wless") / "decode.xml"
    ov.save_model(stories_decode, out, compress_to_fp16=False)
    xml, bin_path = str(out), str(out.with_suffix(".bin"))
    assert _compile(emu_core, xml).get_property("CACHE_MODE") == "OPTIMIZE_SPEED"
    slim_cm = _compile(emu_core, xml, CACHE_MODE="OPTIMIZE_SIZE")
    assert slim_cm.get_property("CACHE_MODE") == "OPTIMIZE_SIZE"
    return (xml, bin_path), slim_cm._impl.parsed.blob, slim_cm.export_model().getvalue()


def test_weightless_container_restores_the_same_blob(emu_core, blobs):
    (xml, bin_path), full, slim = blobs
    assert is_weightless(slim) and not is_weightless(full) and len(slim) < len(full) // 2
    for key, value in (("WEIGHTS_PATH", bin_path), ("MODEL_PTR", emu_core.read_model(xml))):
        cm = emu_core.import_model(slim, "NPU", {key: value})
        assert cm.export_model().getvalue() == full  # restored byte for byte
    with pytest.raises(ConfigError, match="Blob is weightless but no WEIGHTS_PATH nor MODEL_PTR"):
        emu_core.import_model(slim, "NPU", {})


def _edit(container: bytes, edit) -> bytes:  # noqa: ANN001
    """``edit(header)`` on the container's JSON header, re-hashed: the checks behind the hash."""
    off = len(MAGIC) + 12 + 32
    hlen = struct.unpack_from("<Q", container, len(MAGIC) + 4)[0]
    header = json.loads(container[off : off + hlen])
    edit(header)
    js = json.dumps(header).encode()
    return MAGIC + struct.pack("<IQ", VERSION, len(js)) + hashlib.sha256(js).digest() + js + container[off + hlen :]


def _swap_two_refs(h) -> None:  # noqa: ANN001
    # two equal-sized constants traded: every hash still matches its own bytes, the blob does not
    refs = h["refs"]
    a, b = next((x, y) for x in refs for y in refs if x is not y and x[1] == y[1] and x[3] != y[3])
    a[2:], b[2:] = b[2:], a[2:]


@pytest.mark.parametrize(
    "edit",
    [
        _swap_two_refs,
        lambda h: h["refs"][0].__setitem__(0, -5),
        lambda h: h["refs"].reverse(),
        lambda h: h.__setitem__("restored_size", 1),
        lambda h: h.pop("refs"),
    ],
    ids=["swapped", "negative_position", "unordered", "size", "no_refs"],
)
@pytest.mark.parametrize("source", ["WEIGHTS_PATH", "MODEL_PTR"])
def test_edited_weight_references_are_typed_errors(emu_core, blobs, edit, source):
    """Both restores: WEIGHTS_PATH joins the blob and checks its SHA-256; MODEL_PTR adopts the
    model's constants (split blob) and checks each constant's hash and its first piece's CRC."""
    (xml, bin_path), _, slim = blobs
    value = bin_path if source == "WEIGHTS_PATH" else emu_core.read_model(xml)
    with pytest.raises(BlobFormatError):
        emu_core.import_model(_edit(slim, edit), "NPU", {source: value})


def test_damaged_containers_are_typed_errors(emu_core, blobs):
    (_, bin_path), _, slim = blobs
    for bad in (slim[:40], slim[:-1], slim[:-1] + bytes([slim[-1] ^ 1])):
        with pytest.raises(BlobFormatError):
            emu_core.import_model(bad, "NPU", {"WEIGHTS_PATH": bin_path})
    newer = bytearray(slim)
    struct.pack_into("<I", newer, len(MAGIC), VERSION + 1)
    with pytest.raises(BlobFormatError, match="version .* is not supported"):
        emu_core.import_model(bytes(newer), "NPU", {"WEIGHTS_PATH": bin_path})


def test_model_not_read_from_an_ir_cannot_export_weightless(emu_core, stories_decode):
    cm = emu_core.compile_model(stories_decode, "NPU", {"CACHE_MODE": "OPTIMIZE_SIZE"})
    with pytest.raises(ConfigError, match="WEIGHTS_PATH"):
        cm.export_model()
    with pytest.raises(ConfigError, match="CACHE_MODE"):
        emu_core.compile_model(stories_decode, "NPU", {"CACHE_MODE": "FAST"})


def test_blob_chunks_are_the_blob(emu_core, blobs):
    """Export reads a banked blob as chunks (the weights where the bank keeps them): joined, they
    are the blob byte for byte, and the chunked CRC-32 and SHA-256 are the joined bytes' ones."""
    import zlib

    from ov_npu_emu_npu.blob.integrity import Chunks

    (xml, _), _, _ = blobs
    parsed = _compile(emu_core, xml)._impl.parsed
    assert parsed.banked is not None
    chunks = parsed.blob_chunks()
    joined = b"".join(chunks.chunks)
    assert joined == parsed.blob and len(chunks.chunks) > 3
    assert chunks.sha256() == hashlib.sha256(joined).hexdigest()
    for a, b in ((0, len(joined)), (7, 4100), (len(joined) - 100, len(joined))):
        assert chunks.crc32(a, b) == zlib.crc32(joined[a:b]) and bytes(chunks.view(a, b)) == joined[a:b]
    assert bytes(Chunks([b"ab", b"", b"cd"]).view(1, 3)) == b"bc"
