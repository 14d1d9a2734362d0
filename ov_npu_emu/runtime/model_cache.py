"""CACHE_DIR: compiled models kept on disk, keyed by the graph, the config and the versions.

OpenVINO's core does this for every device that can export (``CACHE_DIR`` in the config or on
the core): the first compilation writes the device's exported blob, later ones import it. A
damaged or stale entry is never fatal -- it is reported, recompiled and overwritten.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import openvino as ov

from ov_npu_emu.runtime.files import write_file

__all__ = ["entry_path", "model_hash", "read_entry", "write_entry"]

logger = logging.getLogger("ov_npu_emu")


def model_hash(model: ov.Model) -> str:
    """SHA-256 of the graph: op types, connections, output types/shapes/names, constant bytes."""
    h = hashlib.sha256()
    ops = model.get_ordered_ops()
    index = {op.get_name(): i for i, op in enumerate(ops)}
    for op in ops:
        h.update(op.get_type_name().encode())
        for inp in op.inputs():
            src = inp.get_source_output()
            h.update(f"{index.get(src.get_node().get_name(), -1)}:{src.get_index()};".encode())
        for out in op.outputs():
            h.update(f"{out.get_element_type()}{out.get_partial_shape()}{sorted(out.get_names())}".encode())
        if op.get_type_name() == "Constant":
            h.update(np.ascontiguousarray(op.data).data.cast("B"))
        else:  # attributes change what an op computes (axes, epsilons, modes)
            h.update(json.dumps(op.get_attributes(), sort_keys=True, default=str).encode())
    return h.hexdigest()


def entry_path(cache_dir: str, device: str, model: ov.Model, config: Mapping[str, Any],
               versions: Mapping[str, str]) -> str:
    """Where the compilation of ``model`` for ``device`` with ``config`` is cached."""
    conf = {k: str(v) for k, v in config.items() if k not in ("CACHE_DIR", "CACHE_MODE")}
    payload = json.dumps({"model": model_hash(model), "device": device, "config": conf, "versions": dict(versions)},
                         sort_keys=True)
    key = hashlib.sha256(payload.encode()).hexdigest()[:32]
    return os.path.join(cache_dir, f"{device.lower()}_{key}.blob")


def read_entry(path: str) -> bytes | None:
    """The cached bytes, or None when there is no entry (an unreadable one is reported)."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        logger.warning("CACHE_DIR entry %s could not be read (%s); compiling instead", path, e)
        return None


def write_entry(path: str, data: bytes) -> None:
    """Write atomically (temp file + rename): a crash never leaves half an entry."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_file(path, data)
    except OSError as e:
        logger.warning("could not write CACHE_DIR entry %s: %s", path, e)
