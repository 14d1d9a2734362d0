"""Weightless NPUW artefacts (CACHE_MODE=OPTIMIZE_SIZE): sub-blobs that hold no IR weights.

The real NPUW exports an LLM without the weights it can find again in the IR's ``.bin`` and
takes them back on import from ``WEIGHTS_PATH`` (or from the ``MODEL_PTR`` model).  Ours asks
each sub-model's device to do it, the same way for every device: the sub-models are compiled with
``CACHE_MODE=OPTIMIZE_SIZE`` (and ``WEIGHTS_PATH``, the IR's ``.bin``), so their ``export_model``
writes weightless blobs, and they are imported with ``WEIGHTS_PATH`` or ``MODEL_PTR``.  NPUW never
parses a device's blob.  The emulated NPU refers to each IR constant by offset and SHA-256 and
checks them on import (plugins/ov_npu_emu_npu/weightless.py); the CPU plugin reads the weights
back by offset and checks nothing, so for it the artefact records the whole ``.bin``'s SHA-256
(:func:`bin_identity`) and import checks it first.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from typing import Any

import openvino as ov

from ov_npu_emu.errors import BlobFormatError, ConfigError
from ov_npu_emu.runtime.device import ir_weights_path

__all__ = ["bin_identity", "check_bin_identity", "weights_path_of"]


def weights_path_of(model: ov.Model, explicit: str | None) -> str:
    """The ``.bin`` a weightless export refers to: WEIGHTS_PATH if given, else the file the
    model was read from."""
    if explicit:
        return os.fspath(explicit)
    recorded = ir_weights_path(model)
    if recorded:
        return recorded
    raise ConfigError(
        "CACHE_MODE=OPTIMIZE_SIZE needs the IR's weights file to refer to, but this model was not "
        "read from an IR file; pass WEIGHTS_PATH=<model>.bin or use CACHE_MODE=OPTIMIZE_SPEED",
        key="CACHE_MODE",
    )


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
