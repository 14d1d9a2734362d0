"""CACHE_DIR: compiled models kept on disk, keyed by the graph, the config and the versions.

OpenVINO's core does this for every device that can export (``CACHE_DIR`` in the config or on
the core): the first compilation writes the device's exported blob, later ones import it. A
damaged or stale entry is never fatal -- it is reported, recompiled and overwritten.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import logging
import os
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import openvino as ov

from ov_npu_emu.runtime.files import write_file

__all__ = ["constant_digests", "digest_scope", "entry_path", "model_hash", "read_entry", "write_entry"]

logger = logging.getLogger("ov_npu_emu")


def constant_digests(model: ov.Model) -> list[tuple[bytes, memoryview]]:
    """(SHA-256, bytes) of every Constant of ``model`` in ``get_ordered_ops`` order, hashed on two
    threads (hashlib releases the GIL on large buffers). Inside :func:`digest_scope` for this model
    the table is computed once and reused."""
    scoped = _SCOPE.get()
    if scoped is not None and scoped[0] is model:
        return scoped[1]
    datas = [np.ascontiguousarray(op.data).data.cast("B") for op in model.get_ordered_ops()
             if op.get_type_name() == "Constant"]
    if sum(len(d) for d in datas) < _PARALLEL_HASH_BYTES:
        return [(hashlib.sha256(d).digest(), d) for d in datas]
    with ThreadPoolExecutor(2) as pool:
        return list(zip(pool.map(lambda d: hashlib.sha256(d).digest(), datas), datas, strict=True))


@contextlib.contextmanager
def digest_scope(model: ov.Model) -> Iterator[list[tuple[bytes, memoryview]]]:
    """Within the block, :func:`constant_digests` of ``model`` (the same object) is computed once:
    NPUW's CACHE_DIR hashes the model's constants for its key, and the weightless entry's restore
    finds the constants by the same digests. Only for a block that does not change the model."""
    table = constant_digests(model)
    token = _SCOPE.set((model, table))
    try:
        yield table
    finally:
        _SCOPE.reset(token)


_SCOPE: contextvars.ContextVar[tuple[Any, list[tuple[bytes, memoryview]]] | None] = contextvars.ContextVar(
    "ov_npu_emu_digest_scope", default=None)
#: below this many constant bytes one thread hashes them (a pool costs more than it saves)
_PARALLEL_HASH_BYTES = 64 << 20


def model_hash(model: ov.Model) -> str:
    """SHA-256 of the graph: op types, connections, output types/shapes/names, constant bytes
    (through each constant's own SHA-256, :func:`constant_digests`)."""
    digests = iter(constant_digests(model))
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
            h.update(next(digests)[0])
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
