"""Lowering of the ops of vision models: Interpolate (every mode of opset4 and opset11, and opset1's
as the CPU plugin maps them, through per-axis tables the op's own ``evaluate()`` computes),
AdaptiveAvgPool / AdaptiveMaxPool, DetectionOutput, and PriorBox /
PriorBoxClustered (shape-only ops: evaluated at compile time).

Interpolate and AdaptiveAvgPool are linear and separable: each output is a product of per-axis
weights over a box of inputs (nearest, linear, linear_onnx, cubic, the pillow modes; a triangle
filter's normalisation is a product of per-axis sums too).  So the compiler finds, for each
resampled axis, the [out, in] matrix the op applies along it, by evaluating a one-axis copy of the
node on one-hot rows, and the ``resample`` kernel applies the matrices axis after axis.  A matrix
whose rows are one-hot (nearest) becomes an index vector: a copy, exact for any element type.
Linear modes on integer data (u8 images resized by a PrePostProcessor) resample in f32 and round
half to even, as the CPU plugin does (measured: its u8 result is its f32 result so rounded).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import openvino as ov

from ov_npu_emu.errors import UnsupportedOpError
from ov_npu_emu_npu.arch import shave_cycles
from ov_npu_emu_npu.blob.format import MAX_OPERANDS
from ov_npu_emu_npu.blob.kernel_params import (
    NO_PARAMS,
    AdaptiveMaxParams,
    ClampParams,
    DetectionOutputParams,
    ResampleParams,
)
from ov_npu_emu_npu.compiler.graph import Place, Value, dims, np_dtype

if TYPE_CHECKING:
    from ov_npu_emu_npu.compiler.lower import Handler, _Lowerer

__all__ = ["HANDLERS", "interpolate_tables"]


def _refuse(node: ov.Node, what: str) -> UnsupportedOpError:
    return UnsupportedOpError(f"{node.get_type_name()} {node.get_friendly_name()!r}: {what} is not supported on NPU",
                              op_type=node.get_type_name(), node_name=node.get_friendly_name())


def _const_input(node: ov.Node, i: int) -> np.ndarray:
    src = node.input_value(i).get_node()
    if src.get_type_name() != "Constant":
        raise UnsupportedOpError(
            f"{node.get_type_name()} {node.get_friendly_name()!r}: input {i} must be constant on NPU "
            "(reshape the model to static shapes so it folds)",
            op_type=node.get_type_name(), node_name=node.get_friendly_name())
    return np.array(src.get_data()).reshape(-1)


#: Interpolate of opset1 as opset11: its modes, and its coordinates as the CPU plugin maps them
#: (measured: asymmetric, or align_corners, and nearest_mode "simple"); area has no counterpart
_V0_MODES = {"nearest": "nearest", "linear": "linear_onnx", "cubic": "cubic"}


def _interp_attrs(node: ov.Node) -> dict[str, Any]:
    """The node's attributes in opset4/opset11 terms (opset1's mapped), with ``version``."""
    at = dict(node.get_attributes())
    version = node.get_type_info().version_id
    rank = len(node.get_input_shape(0))
    if version == "opset1":
        if str(at["mode"]) not in _V0_MODES:
            raise _refuse(node, f"Interpolate-1 mode {at['mode']}")
        at = {"mode": _V0_MODES[str(at["mode"])], "shape_calculation_mode": "sizes", "antialias": False,
              "coordinate_transformation_mode": "align_corners" if at.get("align_corners") else "asymmetric",
              "nearest_mode": "simple", "cube_coeff": -0.75, "pads_begin": at.get("pads_begin"),
              "pads_end": at.get("pads_end"), "axes": [int(a) for a in at["axes"]]}
        version = "opset11"
    elif version not in ("opset4", "opset11"):
        raise _refuse(node, f"Interpolate of {version}")
    at["version"] = version
    at["pads_begin"] = [int(p) for p in (at.get("pads_begin") or [0] * rank)]
    at["pads_end"] = [int(p) for p in (at.get("pads_end") or [0] * rank)]
    return at


def _probe_axis(node: ov.Node, at: dict[str, Any], d: int, scale: float | None, in_len: int, out_len: int
                ) -> np.ndarray:
    """The [out_len, in_len] matrix Interpolate ``node`` (attributes ``at``) applies along axis ``d``.

    A copy of the node over [in_len, 1, in_len, 1] resamples axis 2 as the node resamples axis
    ``d`` (same mode, coordinate transformation, scale or size, pads) and axis 3 from 1 to 1 (the
    identity; linear_onnx's reference wants two spatial axes); evaluated on the rows
    of an identity matrix, its output is the matrix, transposed.
    """
    from openvino import opset10, opset11, opset13

    pb, pe = [0, 0, at["pads_begin"][d], 0], [0, 0, at["pads_end"][d], 0]
    shape = [in_len, 1, in_len, 1]
    probe = opset13.parameter(shape, np.float32)
    mode, calc = str(at["mode"]), str(at["shape_calculation_mode"])
    axes = np.array([2, 3], np.int64)
    sizes = np.array([out_len, 1], np.int64)
    scales = np.array([scale if scale is not None else out_len / max(in_len + pb[2] + pe[2], 1), 1.0], np.float32)
    # the CPU plugin resamples "linear" with antialias as a plain 2-tap bilinear (measured: its
    # matrix for 7 inputs and 4 outputs is the one without antialias; the reference's triangle
    # filter differs by up to 0.7 relative); the NPU follows the CPU plugin, its tests' oracle
    antialias = bool(at["antialias"]) and mode != "linear"
    # and bicubic_pillow with Pillow's a = -0.5 whatever cube_coeff says (the reference reads
    # cube_coeff: 0.1 relative apart at the default -0.75)
    cube_coeff = -0.5 if mode == "bicubic_pillow" else float(at["cube_coeff"])
    kw = {"pads_begin": pb, "pads_end": pe, "coordinate_transformation_mode": str(at["coordinate_transformation_mode"]),
          "nearest_mode": str(at["nearest_mode"]), "antialias": antialias, "cube_coeff": cube_coeff,
          "axes": axes}
    if at["version"] == "opset11":
        second = scales if calc == "scales" else sizes
        n = opset11.interpolate(probe, second, mode, calc, **kw)
        ins = [second, axes]
    else:
        n = opset10.interpolate(probe, sizes, scales, mode, calc, **kw)
        ins = [sizes, scales, axes]
    res = ov.Tensor(ov.Type.f32, ov.Shape([in_len, 1, out_len, 1]))
    data = np.eye(in_len, dtype=np.float32).reshape(shape)
    if not n.evaluate([res], [ov.Tensor(data), *(ov.Tensor(a) for a in ins)]):
        raise _refuse(node, f"mode {mode} (no reference evaluation)")
    return np.array(res.data).reshape(in_len, out_len).T.copy()


def _interp_axes(node: ov.Node, at: dict[str, Any]) -> tuple[list[int], dict[int, float]]:
    """The interpolated axes and, per axis, the scale the node was given (scales mode)."""
    rank = len(node.get_input_shape(0))
    if "axes" in at:  # opset1: an attribute
        return [a % rank for a in at["axes"]], {}
    v11 = at["version"] == "opset11"
    axes_in = 2 if v11 else 3
    axes = [int(a) % rank for a in _const_input(node, axes_in)] if node.get_input_size() > axes_in else \
        list(range(rank))
    scales: dict[int, float] = {}
    if str(at["shape_calculation_mode"]) == "scales":
        given = _const_input(node, 1 if v11 else 2).astype(np.float64)
        scales = {a: float(s) for a, s in zip(axes, given, strict=False)}
    return axes, scales


def interpolate_tables(node: ov.Node) -> list[tuple[int, np.ndarray]]:
    """(axis, [out, in] matrix) for each axis Interpolate ``node`` changes (pads included)."""
    at = _interp_attrs(node)
    in_shape, out_shape = dims(node.get_input_shape(0)), dims(node.get_output_shape(0))
    pb, pe = at["pads_begin"], at["pads_end"]
    if min(pb + pe, default=0) < 0:
        raise _refuse(node, "negative pads")
    axes, scales = _interp_axes(node, at)
    tables = []
    for d in range(len(in_shape)):
        if d in axes:
            w = _probe_axis(node, at, d, scales.get(d), in_shape[d], out_shape[d])
        elif pb[d] or pe[d]:  # padded but not resampled: zeros around the identity
            w = np.zeros((out_shape[d], in_shape[d]), np.float32)
            w[pb[d]:pb[d] + in_shape[d]] = np.eye(in_shape[d], dtype=np.float32)
        else:
            continue
        if w.shape == (in_shape[d], in_shape[d]) and np.array_equal(w, np.eye(in_shape[d])):
            continue
        tables.append((d, w))
    return tables


def _adaptive_bins(in_len: int, out_len: int) -> np.ndarray:
    """[out, 2] (start, end) of AdaptiveAvgPool/AdaptiveMaxPool's bins along one axis."""
    i = np.arange(out_len, dtype=np.int64)
    return np.stack([(i * in_len) // out_len, -((-(i + 1) * in_len) // out_len)], axis=1)


#: modes whose integer result is the f32 result rounded half to even (the CPU plugin's)
_ROUNDED_MODES = ("linear", "linear_onnx")


def _resample(lw: _Lowerer, node: ov.Node, x: Value, tables: list[tuple[int, np.ndarray]]) -> None:
    o = lw.node_out(node)
    lw.vals[(node.get_name(), 0)] = o
    if not tables:  # nothing changes: a copy
        lw.copy(x, o, node)
        return
    onehot = all(bool(((w == 0) | (w == 1)).all() and (w.sum(axis=1) == 1).all()) for _, w in tables)
    if onehot or x.dtype.kind == "f":
        _resample_into(lw, node, x, tables, o)
        return
    mode = str(node.get_attributes().get("mode", "averaging"))
    if node.get_type_name() != "Interpolate" or mode not in _ROUNDED_MODES or o.dtype.kind not in "iu":
        raise _refuse(node, f"{mode} of {x.dtype} data")
    # integer data: to f32, resample, round half to even, saturate into the integer output
    f32 = np.dtype(np.float32)
    xf = lw.scratch(x.shape, f32)
    lw.shave("convert", [x], [xf], NO_PARAMS, node)
    yf = lw.scratch(o.shape, f32)
    _resample_into(lw, node, xf, tables, yf)
    rf = lw.scratch(o.shape, f32)
    lw.shave("round_even", [yf], [rf], NO_PARAMS, node)
    info = np.iinfo(o.dtype)
    lw.shave("clamp", [rf], [o], ClampParams(float(info.min), float(info.max)), node)


def _resample_into(lw: _Lowerer, node: ov.Node, x: Value, tables: list[tuple[int, np.ndarray]], o: Value) -> None:
    # shrinking axes first: later steps see fewer elements
    tables = sorted(tables, key=lambda t: t[1].shape[0] / max(t[1].shape[1], 1))
    ops: list[Value] = []
    gather: list[bool] = []
    cycles = 0
    shape = list(x.shape)
    for d, w in tables:
        onehot = bool(((w == 0) | (w == 1)).all() and (w.sum(axis=1) == 1).all())
        table = np.ascontiguousarray(w.argmax(axis=1).astype(np.int64) if onehot else w.astype(np.float32))
        ops.append(lw.new_value(table.shape, table.dtype, Place.CONST, data=table))
        gather.append(onehot)
        shape[d] = w.shape[0]
        taps = 1 if onehot else int((w != 0).sum(axis=1).max())
        cycles += shave_cycles(lw.hw, int(np.prod(shape, dtype=np.int64)), 2 * taps)
    # a descriptor holds MAX_OPERANDS operands: x, the tables and the output; more axes chain tasks
    per_task = MAX_OPERANDS - 2
    src = x
    for k in range(0, len(tables), per_task):
        last = k + per_task >= len(tables)
        if last:
            dst = o
        else:
            part_shape = list(src.shape)
            for d, w in tables[k:k + per_task]:
                part_shape[d] = w.shape[0]
            dst = lw.scratch(tuple(part_shape), o.dtype)
        params = ResampleParams(tuple(d for d, _ in tables[k:k + per_task]), tuple(gather[k:k + per_task]))
        t = lw.shave("resample", [src, *ops[k:k + per_task]], [dst], params, node)
        t.cycles = cycles * len(params.axes) // len(tables)
        src = dst


def op_interpolate(lw: _Lowerer, node: ov.Node) -> None:
    _resample(lw, node, lw.inp(node, 0), interpolate_tables(node))


def op_adaptive_pool(lw: _Lowerer, node: ov.Node) -> None:
    x = lw.inp(node, 0)
    in_shape, out_shape = x.shape, dims(node.get_output_shape(0))
    axes = [d for d in range(2, len(in_shape)) if in_shape[d] != out_shape[d]]
    if node.get_type_name() == "AdaptiveAvgPool":
        tables = []
        for d in axes:
            w = np.zeros((out_shape[d], in_shape[d]), np.float32)
            for i, (s, e) in enumerate(_adaptive_bins(in_shape[d], out_shape[d])):
                w[i, s:e] = 1.0 / (e - s)
            tables.append((d, w))
        _resample(lw, node, x, tables)
        return
    if node.get_output_size() > 1 and node.output(1).get_target_inputs():
        raise _refuse(node, "the indices output of AdaptiveMaxPool")
    o = lw.node_out(node)
    lw.vals[(node.get_name(), 0)] = o
    if not axes:
        lw.copy(x, o, node)
        return
    bins = [lw.new_value((out_shape[d], 2), np.dtype(np.int64), Place.CONST,
                         data=_adaptive_bins(in_shape[d], out_shape[d])) for d in axes]
    lw.shave("adaptive_max", [x, *bins], [o], AdaptiveMaxParams(tuple(axes)), node)


def op_fold(lw: _Lowerer, node: ov.Node) -> None:
    """Shape-only ops (PriorBox, PriorBoxClustered): evaluated at compile time into constants.

    The front end's constant folding already does this at static shapes; this handles a node
    folding left (and says why when its inputs are not constant)."""
    ins = [ov.Tensor(np.ascontiguousarray(_const_input(node, i)).astype(np_dtype(node.get_input_element_type(i))))
           for i in range(node.get_input_size())]
    outs = [ov.Tensor(node.get_output_element_type(i), node.get_output_shape(i)) for i in range(node.get_output_size())]
    if not node.evaluate(outs, ins):
        raise _refuse(node, "evaluation at compile time")
    for i, t in enumerate(outs):
        data = np.array(t.data).reshape(dims(node.get_output_shape(i)))
        lw.vals[(node.get_name(), i)] = lw.new_value(data.shape, data.dtype, Place.CONST, data=data)


_CODE_TYPES = {"caffe.PriorBoxParameter.CENTER_SIZE": True, "caffe.PriorBoxParameter.CORNER": False}


def op_detection_output(lw: _Lowerer, node: ov.Node) -> None:
    if node.get_input_size() > 3:
        raise _refuse(node, "DetectionOutput with the auxiliary (ARM) inputs")
    at = node.get_attributes()
    code = str(at.get("code_type", "caffe.PriorBoxParameter.CORNER"))
    if code not in _CODE_TYPES:
        raise _refuse(node, f"code_type {code}")
    keep = [int(k) for k in at.get("keep_top_k", [-1])] or [-1]
    num_priors = node.get_input_shape(2)[2] // (4 if bool(at.get("normalized", True)) else 5)
    num_classes = int(at["num_classes"]) if "num_classes" in at else node.get_input_shape(1)[1] // max(num_priors, 1)
    params = DetectionOutputParams(
        num_classes, int(at.get("background_label_id", 0)), int(at.get("top_k", -1)), keep[0], _CODE_TYPES[code],
        bool(at.get("share_location", True)), bool(at.get("variance_encoded_in_target", False)),
        float(at.get("nms_threshold", 0.0)), float(at.get("confidence_threshold", 0.0)),
        bool(at.get("clip_after_nms", False)), bool(at.get("clip_before_nms", False)),
        bool(at.get("decrease_label_id", False)), bool(at.get("normalized", True)),
        int(at.get("input_height", 1)), int(at.get("input_width", 1)))
    ins = [lw.inp(node, i) for i in range(3)]
    o = lw.node_out(node)
    t = lw.shave("detection_output", ins, [o], params, node)
    # decoding, sorting and NMS over every prior and class
    priors = int(np.prod(ins[1].shape, dtype=np.int64))
    t.cycles = shave_cycles(lw.hw, priors, 40)
    lw.vals[(node.get_name(), 0)] = o


HANDLERS: dict[str, Handler] = {
    "Interpolate": op_interpolate,
    "AdaptiveAvgPool": op_adaptive_pool,
    "AdaptiveMaxPool": op_adaptive_pool,
    "PriorBox": op_fold,
    "PriorBoxClustered": op_fold,
    "DetectionOutput": op_detection_output,
}
