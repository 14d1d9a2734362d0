"""Model folders shipped inside the package, and the one way to find them.

``stories260K/`` is Andrej Karpathy's trained 260K-parameter TinyStories Llama from llama2.c
(MIT, see its LICENSE and README.md) as an optimum-intel style OpenVINO folder: the default
model of ``ov-npu-emu demo`` and the trained model the tests run on.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["BUNDLED_MODELS_DIR", "MODELS_DIR_ENV", "STORIES260K", "find_model"]

#: Folder holding the bundled model folders (this package's directory).
BUNDLED_MODELS_DIR = Path(__file__).resolve().parent

#: Environment variable naming a folder to use instead of the bundled one (``<dir>/stories260K``).
MODELS_DIR_ENV = "OV_NPU_EMU_MODELS_DIR"

#: Name of the bundled trained model.
STORIES260K = "stories260K"


def find_model(name: str = STORIES260K) -> Path:
    """The model folder ``<name>``: ``$OV_NPU_EMU_MODELS_DIR/<name>`` when that variable is set,
    else the copy bundled in ``ov_npu_emu/models/<name>``.

    Raises ``FileNotFoundError`` (naming where it looked) when the folder has no
    ``openvino_model.xml``.
    """
    env = os.environ.get(MODELS_DIR_ENV)
    folder = (Path(env) if env else BUNDLED_MODELS_DIR) / name
    if not (folder / "openvino_model.xml").is_file():
        where = f"${MODELS_DIR_ENV}={env}" if env else "the ov_npu_emu package"
        xml = folder / "openvino_model.xml"
        raise FileNotFoundError(f"model {name!r} not found in {where}: no {xml}")
    return folder
