"""The NPU blob: an ELF64 relocatable file (format constants, struct writer, pyelftools reader)."""

from __future__ import annotations

from ov_npu_emu_npu.blob.format import BLOB_VERSION
from ov_npu_emu_npu.blob.reader import BlobReader
from ov_npu_emu_npu.blob.writer import BlobWriter

__all__ = ["BLOB_VERSION", "BlobReader", "BlobWriter"]
