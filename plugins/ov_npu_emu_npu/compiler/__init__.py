"""The NPU compiler: static ov.Model -> lifted, lowered, scheduled, memory-planned ELF blob."""

from __future__ import annotations

from ov_npu_emu_npu.compiler.lower import SUPPORTED_OPS
from ov_npu_emu_npu.compiler.pipeline import COMPILER_VERSION, compile_to_blob

__all__ = ["COMPILER_VERSION", "SUPPORTED_OPS", "compile_to_blob"]
