"""Compiling a stateful LLM for "NPU" as openvino.genai's compile_decoder_for_npu does: the
properties translated for NPUW, a blob imported from BLOB_PATH or exported to it (EXPORT_BLOB),
and the lengths NPUW settled on.  Shared by LLMPipeline and speculative decoding."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openvino as ov

from genai_shim.npu_config import translate_npu_config
from ov_npu_emu.errors import BlobFormatError, ConfigError
from ov_npu_emu.runtime.files import write_file

__all__ = ["DEFAULT_BLOB", "NpuModel", "compile_npu", "import_or_compile"]


@dataclass(frozen=True)
class NpuModel:
    compiled: Any
    #: NPUW aligns the lengths; the pipeline uses what the compiled model reports
    max_prompt_len: int
    min_response_len: int

    @property
    def kv_capacity(self) -> int:
        """Tokens a sequence may hold (prompt + answer) before the pipeline stops it."""
        return self.max_prompt_len + self.min_response_len - 1


def compile_npu(core: Any, model: ov.Model, props: dict[str, Any]) -> NpuModel:
    """``model`` compiled (or imported from BLOB_PATH) as openvino.genai's compile_decoder_for_npu
    does it."""
    npu = translate_npu_config(model, props)
    compiled = import_or_compile(core, lambda: core.compile_model(model, "NPU", npu.config), npu.config,
                                 npu.blob_path, npu.export_blob)
    return NpuModel(
        compiled,
        int(compiled.get_property("NPUW_LLM_MAX_PROMPT_LEN")),
        int(compiled.get_property("NPUW_LLM_MIN_RESPONSE_LEN")),
    )


#: where EXPORT_BLOB writes without BLOB_PATH: the working directory, for a model from a folder
#: too (the real 2026.4.1 does the same)
DEFAULT_BLOB = "openvino_model.blob"


def import_or_compile(core: Any, compile: Callable[[], Any], import_config: dict[str, Any],
                      blob_path: str | None, export_blob: bool) -> Any:
    """openvino.genai's BLOB_PATH / EXPORT_BLOB rule for a decoder on "NPU" (LLMs, Whisper's
    decoder): BLOB_PATH without EXPORT_BLOB imports that blob (with ``import_config``) instead of
    compiling; EXPORT_BLOB compiles (``compile()``) and writes the blob to BLOB_PATH, or to
    ``./openvino_model.blob``; the path must end in ``.blob``."""
    if blob_path and not export_blob:
        path = Path(blob_path)
        if not path.is_file():
            raise BlobFormatError(f"Blob file is not found at: {blob_path}")
        with open(path, "rb") as f:
            return core.import_model(f.read(), "NPU", import_config)
    compiled = compile()
    if export_blob:
        target = os.fspath(blob_path or DEFAULT_BLOB)
        if not target.endswith(".blob"):
            raise ConfigError(f"Please provide a full path to blob file in BLOB_PATH: {target}", key="BLOB_PATH")
        try:
            write_file(target, compiled.export_model().getvalue())  # atomic, never through a symlink
        except OSError as e:
            raise ConfigError(f"Blob file can't be exported to: {target}", key="BLOB_PATH") from e
    return compiled
