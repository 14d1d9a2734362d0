"""Weights bank of the CPU passthrough: one copy of the float weights for every model compiled
with the same ``NPUW_WEIGHTS_BANK``.

The OpenVINO CPU plugin packs each MatMul's constant weights into a private buffer per compiled
model (its weights cache, keyed by the constant's address, lives in the CompiledModel), and for
f16 weights under an f32 precision it also keeps the folded f32 constant: measured on 4 MatMuls of
64 MiB f32, +290 MB per compiled model for f32 constants, +550 MB for f16 ones.  NPUW compiles a
prefill, generate variants, ladder rungs and an LM head from one model, so each of them held its
own copy (bench-0.5b: 9.9 GB peak RSS for a 942 MiB f16 file).

A banked model has its large float weights lifted into extra Parameters instead, appended after
the model's own inputs and hidden from its ports; every infer request binds them to the bank's
arrays (``shared_memory``).  An f32 constant is bound in place (no copy at all); an f16/bf16
weight decompressed by a Convert to f32 is converted once per bank, as the CPU plugin would
convert it, so the values a MatMul sees are the same.  The plugin then runs a MatMul on runtime
weights instead of a FullyConnected on packed ones: same greedy ids in the tests, outputs equal at
64 rows and up to 6e-5 apart (outputs ~1) at one row (another summation order), as fast on bench-0.5b's
shapes and slower on small matrices, hence BANK_MIN_MODEL_BYTES (docs/npuw.md "One weights copy
on NPUW_DEVICES=CPU").

Only under an f32 inference precision: with bf16/f16 the plugin would convert runtime weights at
every inference; those compilations keep their private copies.
"""

from __future__ import annotations

import math
import threading
import weakref
from typing import Any

import numpy as np
import openvino as ov
import openvino.opset13 as ops

__all__ = ["BANK_MIN_BYTES", "BANK_MIN_MODEL_BYTES", "BANK_PARAM_PREFIX", "BankEntry", "lift_weights"]

#: constants smaller than this stay in the graph (norm weights, biases, RoPE tables, masks): the
#: copies they cost are small, and as runtime inputs they would only add per-inference work
BANK_MIN_BYTES = 1 << 20  # of the f32 form the plugin computes with
#: a model whose liftable weights total less than this (as f32) keeps its constants: a MatMul on
#: runtime weights costs more per step than FullyConnected on packed ones for small matrices,
#: while the copies saved are small there; from a 0.5B model on, the bank wins on both speed and
#: peak memory (docs/performance_log.md, "Figures that code comments used to quote")
BANK_MIN_MODEL_BYTES = 256 << 20
#: name of the lifted weight inputs (after the model's own inputs)
BANK_PARAM_PREFIX = "npu_emu_bank."

#: the consumers a lifted weight may have: MatMul (either side) and Gather's data (embeddings);
#: a constant feeding anything else may be folded or fused by the plugin, so it stays a constant
_WEIGHT_USERS = {"MatMul": (0, 1), "Gather": (0,)}
_DECOMPRESSIBLE = (ov.Type.f16, ov.Type.bf16)


class BankEntry:
    """One weight as the CPU plugin computes with it (f32), and what keeps its source alive.

    ``source`` is a view of the model's constant: it pins the constant's memory, so the address
    that keys this entry cannot be reused by another constant while the entry lives.
    """

    __slots__ = ("__weakref__", "array", "source", "tensor")

    def __init__(self, source: np.ndarray, array: np.ndarray, tensor: ov.Tensor) -> None:
        self.source = source
        self.array = array
        self.tensor = tensor


_lock = threading.Lock()
#: (bank name, source address, shape, element type) -> entry, alive while a compiled model binds it
_entries: weakref.WeakValueDictionary[tuple[Any, ...], BankEntry] = weakref.WeakValueDictionary()


def _entry(bank: str, const: ov.Node) -> BankEntry:
    src = const.data  # a view of the constant's memory (its base is the Constant)
    key = (bank, src.__array_interface__["data"][0], tuple(src.shape), str(const.get_element_type()))
    with _lock:
        entry = _entries.get(key)
        if entry is None:
            if const.get_element_type() == ov.Type.f32:
                # in place: the model's own constant memory (read-only, hence the tensor view)
                entry = BankEntry(src, src, const.get_tensor_view())
            else:
                # the exact f16/bf16 -> f32 widening the plugin's constant folding does
                array = const.get_data(dtype=np.float32)
                entry = BankEntry(src, array, ov.Tensor(array, shared_memory=True))
            _entries[key] = entry
        return entry


def _contracted_dim(reader: ov.Input, rank: int) -> int | None:
    """The dimension of a weight that the reader's output does not have (MatMul: the reduced K;
    Gather: the gathered axis), or None when every dimension reaches the output."""
    node = reader.get_node()
    attrs = node.get_attributes()
    if node.get_type_name() == "MatMul":
        transposed = attrs["transpose_b"] if reader.get_index() == 1 else not attrs["transpose_a"]
        # B [K, N] (or [N, K] transposed); A [M, K] (or [K, M] transposed)
        return rank - 1 if transposed else rank - 2
    axis = node.input_value(2).get_node()
    if axis.get_type_name() != "Constant" or int(axis.data.reshape(-1)[0]) not in (0, -rank):
        return None
    return 0 if node.input_value(0).get_partial_shape().rank.get_length() == rank else None


def _weight_readers(const: ov.Node) -> list[tuple[ov.Input, int]] | None:
    """The inputs that read this weight as f32 (directly, or through Converts that decompress an
    f16/bf16 constant) with the dimension each may leave dynamic; None when the constant is not
    a plain float weight of MatMuls / embedding Gathers."""
    et = const.get_element_type()
    users = list(const.output(0).get_target_inputs())
    if et == ov.Type.f32:
        readers = users
    elif et in _DECOMPRESSIBLE and users and all(
        u.get_node().get_type_name() == "Convert" and u.get_node().get_output_element_type(0) == ov.Type.f32
        for u in users
    ):
        readers = [r for u in users for r in u.get_node().output(0).get_target_inputs()]
    else:
        return None
    rank = len(const.get_output_shape(0))
    out = []
    for r in readers:
        if r.get_index() not in _WEIGHT_USERS.get(r.get_node().get_type_name(), ()):
            return None
        dim = _contracted_dim(r, rank)
        if dim is None or rank < 2:
            return None
        out.append((r, dim))
    return out or None


def lift_weights(model: ov.Model, bank: str) -> tuple[ov.Model, list[BankEntry]]:
    """A clone of ``model`` whose large float weights are Parameters appended after its own
    inputs, and the bank entries to bind to them, in order.  ``model`` is not changed (a clone
    shares the constants' memory, so nothing is copied here except f16/bf16 -> f32 once per bank).

    Each lifted Parameter leaves the one dimension its reader reduces dynamic: the CPU plugin
    allocates (and touches) memory for a static input at compile time and frees it only at the
    first inference with the bound tensor, so static weight inputs cost a transient copy per
    compiled model (and a permanent one for a sub-model never run); a dynamic dimension that does
    not reach the reader's output keeps the rest of the graph static (same kernels, outputs
    bit-identical in bank tests).  A weight read by two readers with different reduced dimensions
    (tied embeddings: Gather rows, LM head columns) gets one Parameter per reader, bound to the
    same array.
    """
    lifted = model.clone()
    weights = []
    for node in lifted.get_ordered_ops():
        if node.get_type_name() != "Constant" or 4 * math.prod(node.get_output_shape(0)) < BANK_MIN_BYTES:
            continue
        readers = _weight_readers(node)
        if readers is not None:
            weights.append((node, readers))
    if sum(4 * math.prod(node.get_output_shape(0)) for node, _ in weights) < BANK_MIN_MODEL_BYTES:
        return model, []
    params: list[ov.Node] = []
    entries: list[BankEntry] = []
    for node, readers in weights:
        entry = _entry(bank, node)
        by_dim: dict[int, ov.Node] = {}
        for reader, dim in readers:
            param = by_dim.get(dim)
            if param is None:
                shape = ov.PartialShape(list(entry.array.shape))
                shape[dim] = ov.Dimension()
                param = by_dim[dim] = ops.parameter(shape, ov.Type.f32, name=f"{BANK_PARAM_PREFIX}{len(params)}")
                param.output(0).get_tensor().set_names({param.get_friendly_name()})
                params.append(param)
                entries.append(entry)
            reader.replace_source_output(param.output(0))
    if params:
        lifted.add_parameters(params)
        lifted.validate_nodes_and_infer_types()
    return lifted, entries
