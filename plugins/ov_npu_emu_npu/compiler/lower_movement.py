"""Lowering of data-movement ops: reshapes (aliases), transpose, broadcast, gather, scatter, top-k,
concat/split (DMA), pad, and index-evaluated movement (Slice, Tile, ...: a slice or a take task)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import openvino as ov

from ov_npu_emu.errors import UnsupportedOpError
from ov_npu_emu_npu.arch import shave_cycles
from ov_npu_emu_npu.blob.format import SLICE_NONE, WEIGHT_FORMATS
from ov_npu_emu_npu.blob.kernel_params import (
    NO_PARAMS,
    AxisParams,
    GatherDqParams,
    GatherParams,
    PadParams,
    SliceParams,
    TopKParams,
    TransposeParams,
)
from ov_npu_emu_npu.compiler.compress import F16_DQ_ROUNDING
from ov_npu_emu_npu.compiler.graph import Place, Value, dims

if TYPE_CHECKING:
    from ov_npu_emu_npu.compiler.lower import Handler, _Lowerer

__all__ = ["HANDLERS"]

#: data-movement ops lowered through index evaluation (exact, any attributes)
_INDEX_OPS = {"Slice", "StridedSlice", "Tile", "DepthToSpace", "SpaceToDepth", "ShuffleChannels",
              "Roll", "Reverse"}
_ALIAS_OPS = {"Reshape", "Squeeze", "Unsqueeze"}


def _index_map(node: ov.Node, ins: list[ov.Tensor], out_shape: tuple[int, ...]) -> np.ndarray:
    """Run a data-movement op's reference evaluate() on i64 "iota" inputs: it moves elements by
    position, so what comes back is the source index of every output element."""
    if node.get_type_name() == "Roll":
        # OpenVINO's Roll has no evaluate(): np.roll has its semantics (a scalar shift applies to
        # every axis, shifts along a repeated axis add up, negative axes count from the end)
        data, shift, axes = (np.array(t.data) for t in ins)
        return np.roll(data, tuple(int(s) for s in np.broadcast_to(shift.reshape(-1), axes.reshape(-1).shape)),
                       tuple(int(a) for a in axes.reshape(-1))).reshape(out_shape)
    res = ov.Tensor(ov.Type.i64, ov.Shape(list(out_shape)))
    if not node.evaluate([res], ins):
        raise UnsupportedOpError(f"{node.get_type_name()} {node.get_friendly_name()!r} could not be evaluated "
                                 "for index lowering", op_type=node.get_type_name(),
                                 node_name=node.get_friendly_name())
    return np.array(res.data).reshape(out_shape)


def _as_slices(idx: np.ndarray, in_shape: tuple[int, ...]) -> list[tuple[int, int, int]] | None:
    """If ``idx`` (flat source indices) is a plain per-axis strided slice, return (start, stop, step)."""
    if idx.ndim != len(in_shape) or idx.size == 0:
        return None
    start = np.unravel_index(int(idx.flat[0]), in_shape)
    out: list[tuple[int, int, int]] = []
    grids = []
    for ax, n in enumerate(idx.shape):
        step = 1
        if n > 1:
            sel = [0] * idx.ndim
            sel[ax] = 1
            step = int(np.unravel_index(int(idx[tuple(sel)]), in_shape)[ax]) - int(start[ax])
            if step == 0:
                return None
        s0 = int(start[ax])
        grid = s0 + step * np.arange(n)
        if grid.min() < 0 or grid.max() >= in_shape[ax]:
            return None
        stop = s0 + step * n
        out.append((s0, stop if stop >= 0 else SLICE_NONE, step))
        grids.append(grid)
    ref = np.ravel_multi_index(np.ix_(*grids), in_shape)
    if not np.array_equal(np.broadcast_to(ref, idx.shape), idx):
        return None
    return out


def op_alias(lw: _Lowerer, node: ov.Node) -> None:
    src = node.input_value(0)
    grouped = lw.kv_groups.get((src.get_node().get_name(), src.get_index()))
    if grouped is not None:  # the [B, Hkv*G, S, D] reshape of a grouped KV broadcast
        lw.kv_groups[(node.get_name(), 0)] = grouped
        return
    lw.vals[(node.get_name(), 0)] = lw.alias(lw.inp(node, 0), dims(node.get_output_shape(0)))


def op_transpose(lw: _Lowerer, node: ov.Node) -> None:
    x = lw.inp(node, 0)
    perm = [int(p) for p in lw.need_const(node, 1, "permutation").reshape(-1)] or list(range(len(x.shape)))[::-1]
    o = lw.node_out(node)
    lw.shave("transpose", [x], [o], TransposeParams(tuple(perm)), node)
    lw.vals[(node.get_name(), 0)] = o


def _kv_group_size(node: ov.Node, x: Value, mode: str) -> int:
    """G when ``node`` repeats KV heads [B, Hkv, 1, S, D] -> [B, Hkv, G, S, D] for SDPAs only.

    Optimum's (and the builder's) GQA expansion is Unsqueeze -> Broadcast -> Reshape to
    [B, Hkv*G, S, D] feeding the K/V inputs of ScaledDotProductAttention.  The SDPA task then
    reads the Hkv heads once per group (as the NPU's attention kernel does) instead of a
    broadcast copy; any other reader keeps the broadcast task.
    """
    out_shape = dims(node.get_output_shape(0))
    if mode not in ("numpy", "bidirectional") or len(out_shape) != 5 or len(x.shape) != 5:
        return 0
    b, hkv, g, s_len, d = out_shape
    if x.shape != (b, hkv, 1, s_len, d) or g < 2:
        return 0
    for target in node.output(0).get_target_inputs():
        r = target.get_node()
        if r.get_type_name() not in _ALIAS_OPS or dims(r.get_output_shape(0)) != (b, hkv * g, s_len, d):
            return 0
        for use in r.output(0).get_target_inputs():
            if use.get_node().get_type_name() != "ScaledDotProductAttention" or use.get_index() not in (1, 2):
                return 0
    return g


def op_broadcast(lw: _Lowerer, node: ov.Node) -> None:
    x = lw.inp(node, 0)
    out_shape = dims(node.get_output_shape(0))
    mode = str(node.get_attributes().get("mode", "numpy")).lower()
    g = _kv_group_size(node, x, mode)
    if g:
        b, hkv, _, s_len, d = out_shape
        lw.kv_groups[(node.get_name(), 0)] = (lw.alias(x, (b, hkv, s_len, d)), g)
        return
    src = x
    if mode == "explicit":
        axes = [int(a) for a in lw.need_const(node, 2, "axes_mapping").reshape(-1)]
        shape = [1] * len(out_shape)
        for d, a in zip(x.shape, axes, strict=False):
            shape[a] = d
        src = lw.alias(x, tuple(shape))
    o = lw.node_out(node)
    lw.shave("broadcast", [src], [o], NO_PARAMS, node)
    lw.vals[(node.get_name(), 0)] = o


def op_gather(lw: _Lowerer, node: ov.Node) -> None:
    data, idx = lw.inp(node, 0), lw.inp(node, 1)
    axis = int(lw.need_const(node, 2, "axis").reshape(-1)[0]) % len(data.shape)
    bd = int(node.get_attributes().get("batch_dims", 0))
    if bd < 0:
        bd += len(idx.shape)
    o = lw.node_out(node)
    if data.comp is not None:
        # embedding lookup: only the gathered rows are decompressed (axis 0, batch_dims 0)
        c = data.comp
        n, k = data.shape
        dq = GatherDqParams(WEIGHT_FORMATS[c.fmt], c.has_zp, F16_DQ_ROUNDING, n, k)
        t = lw.shave("gather_dq", [c.operands[0], idx, *c.operands[1:]], [o], dq, node)
        t.cycles = shave_cycles(lw.hw, int(np.prod(o.shape, dtype=np.int64)), 3)
    else:
        lw.shave("gather", [data, idx], [o], GatherParams(axis, bd), node)
    lw.vals[(node.get_name(), 0)] = o


def op_gather_elements(lw: _Lowerer, node: ov.Node) -> None:
    data, idx = lw.inp(node, 0), lw.inp(node, 1)
    axis = int(node.get_attributes()["axis"]) % len(data.shape)
    o = lw.node_out(node)
    lw.shave("gather_elements", [data, idx], [o], AxisParams(axis), node)
    lw.vals[(node.get_name(), 0)] = o


def _scatter_runtime(lw: _Lowerer, node: ov.Node, x: Value, u: Value) -> None:
    """Scatter*Update whose indices are computed (MoE routing): one SHAVE task."""
    t = node.get_type_name()
    idx = lw.inp(node, 1)
    o = lw.node_out(node)
    if t == "ScatterNDUpdate":
        lw.shave("scatter_nd", [x, idx, u], [o], NO_PARAMS, node)
    else:
        axis = int(lw.need_const(node, 3, "axis").reshape(-1)[0]) % len(x.shape)
        kernel = "scatter_elements" if t == "ScatterElementsUpdate" else "scatter_update"
        lw.shave(kernel, [x, idx, u], [o], AxisParams(axis), node)
    lw.vals[(node.get_name(), 0)] = o


def op_topk(lw: _Lowerer, node: ov.Node) -> None:
    """TopK (MoE routers): values and indices in one SHAVE task; ties keep the lower index."""
    x = lw.inp(node, 0)
    k = int(lw.need_const(node, 1, "k").reshape(-1)[0])
    attrs = node.get_attributes()
    axis = int(attrs["axis"]) % len(x.shape)
    largest = str(attrs["mode"]).lower() == "max"
    by_index = str(attrs["sort"]).lower() == "index"
    values, indices = lw.node_out(node, 0), lw.node_out(node, 1)
    lw.shave("topk", [x], [values, indices], TopKParams(axis, k, largest, by_index), node)
    lw.vals[(node.get_name(), 0)] = values
    lw.vals[(node.get_name(), 1)] = indices


def op_concat(lw: _Lowerer, node: ov.Node) -> None:
    o = lw.node_out(node)
    axis = int(node.get_attributes()["axis"]) % len(o.shape)
    outer = int(np.prod(o.shape[:axis], dtype=np.int64))
    inner = int(np.prod(o.shape[axis + 1 :], dtype=np.int64)) * o.dtype.itemsize
    pos = 0
    for i in range(node.get_input_size()):
        x = lw.inp(node, i)
        if x.dtype != o.dtype:  # f16 mode: user inputs in f32 join f16 activations
            y = lw.scratch(x.shape, o.dtype)
            lw.shave("convert", [x], [y], NO_PARAMS, node)
            x = y
        ai = x.shape[axis]
        if ai:
            row = ai * inner
            lw.dma(x, 0, o, pos * inner, 1, outer, row, (0, row), (0, o.shape[axis] * inner), node)
        pos += ai
    lw.vals[(node.get_name(), 0)] = o


def op_split(lw: _Lowerer, node: ov.Node) -> None:
    x = lw.inp(node, 0)
    axis = int(lw.need_const(node, 1, "axis").reshape(-1)[0]) % len(x.shape)
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    inner = int(np.prod(x.shape[axis + 1 :], dtype=np.int64)) * x.dtype.itemsize
    pos = 0
    for i in range(node.get_output_size()):
        shape = dims(node.get_output_shape(i))
        o = lw.new_value(shape, x.dtype, Place.SCRATCH)
        ai = shape[axis]
        if ai:
            row = ai * inner
            lw.dma(x, pos * inner, o, 0, 1, outer, row, (0, x.shape[axis] * inner), (0, row), node)
        pos += ai
        lw.vals[(node.get_name(), i)] = o


def op_index(lw: _Lowerer, node: ov.Node) -> None:
    """Data movement with arbitrary attributes: evaluate the op on an index tensor at compile time."""
    x = lw.inp(node, 0)
    n = int(np.prod(x.shape, dtype=np.int64))
    out_shape = dims(node.get_output_shape(0))
    ins = [ov.Tensor(np.arange(n, dtype=np.int64).reshape(x.shape))]
    for i in range(1, node.get_input_size()):
        ins.append(ov.Tensor(np.asarray(lw.need_const(node, i, f"input {i}"), order="C")))
    idx = _index_map(node, ins, out_shape)
    o = lw.node_out(node)
    sl = _as_slices(idx, x.shape)
    if sl is not None:
        lw.shave("slice", [x], [o], SliceParams(tuple(sl)), node)
    else:
        iv = lw.new_value(idx.shape, np.dtype(np.int64), Place.CONST, data=np.ascontiguousarray(idx))
        lw.shave("take", [x, iv], [o], NO_PARAMS, node)
    lw.vals[(node.get_name(), 0)] = o


def op_scatter(lw: _Lowerer, node: ov.Node) -> None:
    """Scatter*Update with constant indices: data and updates joined in one buffer, then one
    gather whose map comes from evaluating the op on index tensors at compile time."""
    if str(node.get_attributes().get("reduction", "none")).lower() != "none":
        raise UnsupportedOpError(
            f"{node.get_type_name()} {node.get_friendly_name()!r}: reductions are not supported on NPU",
            op_type=node.get_type_name(),
            node_name=node.get_friendly_name(),
        )
    x, u = lw.inp(node, 0), lw.inp(node, 2)
    if lw.const_of(node, 1) is None:
        _scatter_runtime(lw, node, x, u)
        return
    n, m = int(np.prod(x.shape, dtype=np.int64)), int(np.prod(u.shape, dtype=np.int64))
    ins = [
        ov.Tensor(np.arange(n, dtype=np.int64).reshape(x.shape)),
        ov.Tensor(np.asarray(lw.need_const(node, 1, "indices"), order="C")),
        ov.Tensor(np.arange(n, n + m, dtype=np.int64).reshape(u.shape)),
    ]
    for i in range(3, node.get_input_size()):
        ins.append(ov.Tensor(np.asarray(lw.need_const(node, i, f"input {i}"), order="C")))
    idx = _index_map(node, ins, dims(node.get_output_shape(0)))
    o = lw.node_out(node)
    joined = lw.scratch((n + m,), o.dtype)
    for src, off in ((x, 0), (u, n * o.dtype.itemsize)):
        if src.dtype != o.dtype:
            y = lw.scratch(src.shape, o.dtype)
            lw.shave("convert", [src], [y], NO_PARAMS, node)
            src = y
        if src.nbytes:
            lw.dma(src, 0, joined, off, 1, 1, src.nbytes, (0, 0), (0, 0), node)
    iv = lw.new_value(idx.shape, np.dtype(np.int64), Place.CONST, data=np.ascontiguousarray(idx))
    lw.shave("take", [joined, iv], [o], NO_PARAMS, node)
    lw.vals[(node.get_name(), 0)] = o


def op_pad(lw: _Lowerer, node: ov.Node) -> None:
    x = lw.inp(node, 0)
    pb = [int(v) for v in lw.need_const(node, 1, "pads_begin").reshape(-1)]
    pe = [int(v) for v in lw.need_const(node, 2, "pads_end").reshape(-1)]
    mode = str(node.get_attributes().get("pad_mode", "constant")).lower()
    if min(pb + pe) < 0:
        raise UnsupportedOpError("Pad with negative pads", op_type="Pad", node_name=node.get_friendly_name())
    value = 0.0
    if mode == "constant" and node.get_input_size() > 3:
        value = float(lw.need_const(node, 3, "pad_value").reshape(-1)[0])
    modes = {"constant": 0, "edge": 1, "reflect": 2, "symmetric": 3}
    o = lw.node_out(node)
    lw.shave("pad", [x], [o], PadParams(modes[mode], value, tuple(pb), tuple(pe)), node)
    lw.vals[(node.get_name(), 0)] = o


HANDLERS: dict[str, Handler] = {
    **dict.fromkeys(_INDEX_OPS, op_index),
    **dict.fromkeys(_ALIAS_OPS, op_alias),
    "Transpose": op_transpose,
    "Broadcast": op_broadcast,
    "Gather": op_gather,
    "GatherElements": op_gather_elements,
    "TopK": op_topk,
    "Concat": op_concat,
    "Split": op_split,
    "VariadicSplit": op_split,
    "ScatterNDUpdate": op_scatter,
    "ScatterUpdate": op_scatter,
    "ScatterElementsUpdate": op_scatter,
    "Pad": op_pad,
}
