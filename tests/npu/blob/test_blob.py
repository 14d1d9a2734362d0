"""The blob is valid ELF64 to pyelftools and GNU readelf; bad blobs are typed errors."""

from __future__ import annotations

import io
import shutil
import subprocess

import pytest
from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection

from ov_npu_emu.errors import BlobFormatError, UserInputError
from ov_npu_emu_npu.blob import BlobReader, BlobWriter
from ov_npu_emu_npu.blob.format import (
    LOADABLE_SECTIONS,
    R_NPU_64,
    SEC_META,
    VPU_SHF_USERINPUT,
    VPU_SHF_USEROUTPUT,
)
from ov_npu_emu_npu.blob.integrity import reseal
from ov_npu_emu_npu.blob.reader import META_HEAD
from ov_npu_emu_npu.blob.writer import RelocEntry, Symbol
from ov_npu_emu_npu.compiler import compile_to_blob
from tests.npu.conftest import make_mlp


@pytest.fixture(scope="module")
def blob() -> bytes:
    # f32: the sections listed below are the f32 lowering's (user input moved by DMA)
    return compile_to_blob(make_mlp(), {"INFERENCE_PRECISION_HINT": "f32"})


def test_writer_state_machine_rejects_out_of_order_calls():
    w = BlobWriter()
    with pytest.raises(UserInputError, match="expected state HEADER"):
        w.add_section(".x", b"1")
    w.write_header(0x4E50, 0xFF, 1)
    with pytest.raises(UserInputError):
        w.write_symtab([])
    w.add_section(".x", b"abc")
    with pytest.raises(UserInputError, match="twice"):
        w.add_section(".x", b"abc")
    w.write_symtab([Symbol("in.0", 4)])
    with pytest.raises(UserInputError):
        w.add_section(".late", b"")
    with pytest.raises(UserInputError, match="unknown symbol"):
        w.add_relocations(".x", [RelocEntry(0, "nope", R_NPU_64, 0)], name=".rela.x")


def test_writer_round_trip_through_pyelftools():
    w = BlobWriter()
    w.write_header(0x4E50, 0xFF, 1)
    w.add_section(".a", b"\x01" * 16, alloc=True)
    w.add_section(".bss", None, nobits_size=128, alloc=True, writable=True)
    w.write_symtab([Symbol("in.0", 8), Symbol("out.0", 12)])
    w.add_relocations(".a", [RelocEntry(0, ".bss", R_NPU_64, 64)], name=".rela.a")
    w.add_relocations(".a", [RelocEntry(8, "in.0", R_NPU_64, 4)], name=".rela.a.userin", flags=VPU_SHF_USERINPUT)
    elf = ELFFile(io.BytesIO(w.finish()))
    assert elf.get_section_by_name(".a").data() == b"\x01" * 16
    assert elf.get_section_by_name(".bss")["sh_size"] == 128
    syms = {s.name: s["st_size"] for s in elf.get_section_by_name(".symtab").iter_symbols() if s.name}
    assert syms == {"in.0": 8, "out.0": 12}
    rel = [
        (r["r_offset"], r["r_info_type"], r["r_addend"]) for r in elf.get_section_by_name(".rela.a").iter_relocations()
    ]
    assert rel == [(0, R_NPU_64, 64)]
    user = elf.get_section_by_name(".rela.a.userin")
    assert user["sh_flags"] & VPU_SHF_USERINPUT
    assert user["sh_info"] == elf.get_section_index(".a")


def test_compiled_blob_has_every_section_and_user_io_relocations(blob):
    elf = ELFFile(io.BytesIO(blob))
    names = {s.name for s in elf.iter_sections()}
    assert set(LOADABLE_SECTIONS) | {SEC_META, ".symtab", ".strtab", ".shstrtab"} <= names
    rela = [s for s in elf.iter_sections() if isinstance(s, RelocationSection)]
    flags = [s["sh_flags"] for s in rela]
    assert any(f & VPU_SHF_USERINPUT for f in flags) and any(f & VPU_SHF_USEROUTPUT for f in flags)
    reader = BlobReader(blob)
    relocs = list(reader.iter_relocations())
    assert {r.user for r in relocs} == {None, "in", "out"}
    assert {r.symbol for r in relocs if r.user} == {"in.0", "out.0"}
    assert reader.meta["inputs"][0]["names"] == ["x"]


@pytest.mark.skipif(shutil.which("readelf") is None, reason="GNU readelf not installed")
def test_readelf_parses_blob_without_warnings(blob, tmp_path):
    path = tmp_path / "m.blob"
    path.write_bytes(blob)
    p = subprocess.run(["readelf", "-S", "-r", "-s", "-W", str(path)], capture_output=True, text=True)
    assert p.returncode == 0
    assert p.stderr == ""
    for name in (
        ".npu.dpu",
        ".npu.shave",
        ".npu.dma",
        ".npu.weights",
        ".rela.npu.dpu",
        ".rela.npu.dma.userin",
        ".userout",
    ):
        assert name in p.stdout
    assert "in.0" in p.stdout and "out.0" in p.stdout


def test_foreign_and_corrupt_blobs_are_blob_format_errors(blob):
    with pytest.raises(BlobFormatError, match="ELF magic"):
        BlobReader(b"not an elf at all")
    with pytest.raises(BlobFormatError):
        BlobReader(blob[:100])
    ls = shutil.which("ls")
    if ls:
        with pytest.raises(BlobFormatError, match="foreign"):
            BlobReader(open(ls, "rb").read())


def test_version_mismatch_is_rejected(blob):
    elf = ELFFile(io.BytesIO(blob))
    off = elf.get_section_by_name(SEC_META)["sh_offset"]
    bad = bytearray(blob)
    magic, major, minor, n = META_HEAD.unpack_from(bad, off)
    META_HEAD.pack_into(bad, off, magic, major + 1, minor, n)
    with pytest.raises(BlobFormatError, match=f"version {major + 1}.{minor} is not supported"):
        BlobReader(reseal(bad))
    # a newer minor (unknown kernels) is rejected; an older minor of the same major is read
    META_HEAD.pack_into(bad, off, magic, major, minor + 1, n)
    with pytest.raises(BlobFormatError, match=f"version {major}.{minor + 1} is not supported"):
        BlobReader(reseal(bad))
    META_HEAD.pack_into(bad, off, magic, major, 0, n)
    assert BlobReader(reseal(bad)).meta["model_name"] == BlobReader(blob).meta["model_name"]
    bad2 = bytearray(blob)
    bad2[off : off + 8] = b"XXXXXXXX"
    with pytest.raises(BlobFormatError, match="magic"):
        BlobReader(reseal(bad2))


def test_import_rejects_corrupt_blob_through_core(npu_core, blob):
    with pytest.raises(BlobFormatError):
        npu_core.import_model(blob[: len(blob) // 2], "NPU")
    with pytest.raises(BlobFormatError):
        npu_core.import_model(b"\x7fELF" + bytes(60), "NPU")
