"""Writes never follow a symlink a model folder may ship, and never leave half a file."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import genai_shim
from ov_npu_emu.runtime.files import write_file


def test_write_file_replaces_a_symlink_instead_of_writing_through_it(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    link = tmp_path / "out.blob"
    link.symlink_to(victim)
    write_file(link, b"blob bytes")
    assert victim.read_text() == "keep me"
    assert not link.is_symlink() and link.read_bytes() == b"blob bytes"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.blob", "victim.txt"]  # no temp file left


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    target = tmp_path / "entry.bin"
    target.write_bytes(b"old")

    def boom(src, dst):  # noqa: ANN001
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        write_file(target, b"new")
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["entry.bin"]


def test_export_blob_into_a_folder_with_a_planted_symlink(stories260k_dir, tmp_path, monkeypatch):
    """EXPORT_BLOB without BLOB_PATH writes ./openvino_model.blob (the working directory, as the
    real 2026.4.1 does): a symlink planted there (to a file outside the folder) is replaced by the
    blob, the file it named is untouched."""
    folder = tmp_path / "model"
    shutil.copytree(stories260k_dir, folder)
    monkeypatch.chdir(folder)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (folder / "openvino_model.blob").symlink_to(victim)
    pipe = genai_shim.LLMPipeline(str(folder), "NPU", NPUW_DEVICES="CPU", MAX_PROMPT_LEN=64, MIN_RESPONSE_LEN=64,
                                  EXPORT_BLOB="YES")
    assert pipe.generate("Once upon a time", max_new_tokens=4)
    assert victim.read_text() == "keep me"
    blob = folder / "openvino_model.blob"
    assert not blob.is_symlink() and blob.stat().st_size > 1000


def test_export_blob_default_path_is_the_working_directory(stories260k_dir, tmp_path, monkeypatch):
    """A model from a folder too: EXPORT_BLOB without BLOB_PATH writes ./openvino_model.blob and
    leaves the model folder alone (measured on the real 2026.4.1: the same)."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    genai_shim.LLMPipeline(str(stories260k_dir), "NPU", NPUW_DEVICES="CPU", MAX_PROMPT_LEN=64, MIN_RESPONSE_LEN=64,
                           EXPORT_BLOB="YES")
    assert (work / "openvino_model.blob").stat().st_size > 1000
    assert not (Path(stories260k_dir) / "openvino_model.blob").exists()
