"""The model folder every pipeline starts from (an optimum-intel export: openvino_model.xml + tokenizer IR)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ov_npu_emu.errors import IRReadError

__all__ = ["MODEL_XML", "model_folder"]

MODEL_XML = "openvino_model.xml"


def model_folder(models_path: Any, what: str = "an optimum-intel export folder") -> Path:
    """``models_path`` as a Path to a folder holding ``openvino_model.xml``, else IRReadError."""
    folder = Path(os.fsdecode(models_path))
    if not (folder / MODEL_XML).is_file():
        raise IRReadError(f"{MODEL_XML} was not found in {os.fspath(folder)!r}; pass {what}")
    return folder
