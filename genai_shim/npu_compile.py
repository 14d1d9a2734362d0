"""Compiling a stateful LLM for "NPU" as openvino.genai's compile_decoder_for_npu does: the
properties translated for NPUW, a blob imported from BLOB_PATH or exported to it (EXPORT_BLOB),
and the lengths NPUW settled on.  Shared by LLMPipeline and speculative decoding."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openvino as ov

from genai_shim.npu_config import translate_npu_config
from ov_npu_emu.errors import BlobFormatError, ConfigError
from ov_npu_emu.runtime.files import write_file

__all__ = ["NpuModel", "compile_npu"]


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


def compile_npu(core: Any, model: ov.Model, props: dict[str, Any], folder: Path | None) -> NpuModel:
    npu = translate_npu_config(model, props)
    if npu.blob_path is not None and not npu.export_blob:
        path = Path(npu.blob_path)
        if not path.is_file():
            raise BlobFormatError(f"Blob file is not found at: {npu.blob_path}")
        with open(path, "rb") as f:
            compiled = core.import_model(f.read(), "NPU", npu.config)
    else:
        compiled = core.compile_model(model, "NPU", npu.config)
        if npu.export_blob:
            # A model from memory exports next to the working directory, as the real does.
            target = npu.blob_path or os.fspath((folder or Path()) / "openvino_model.blob")
            if not target.endswith(".blob"):
                raise ConfigError(f"Please provide a full path to blob file in BLOB_PATH: {target}", key="BLOB_PATH")
            try:
                write_file(target, compiled.export_model().getvalue())  # atomic, never through a symlink
            except OSError as e:
                raise ConfigError(f"Blob file can't be exported to: {target}", key="BLOB_PATH") from e
    return NpuModel(
        compiled,
        int(compiled.get_property("NPUW_LLM_MAX_PROMPT_LEN")),
        int(compiled.get_property("NPUW_LLM_MIN_RESPONSE_LEN")),
    )
