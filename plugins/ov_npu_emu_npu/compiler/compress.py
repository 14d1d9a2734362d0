"""Recognises weight-decompression subgraphs feeding MatMul / Gather and keeps them compressed."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import openvino as ov
from openvino import opset13 as ops

from ov_npu_emu_npu.compiler.graph import dims

__all__ = ["CompressedWeight", "F16_DQ_ROUNDING", "PLACEHOLDER_PREFIX", "detach_compressed_weights", "unpack4"]

logger = logging.getLogger(__name__)

#: name prefix of the temporary Parameters that stand in for detached weights during folding
PLACEHOLDER_PREFIX = "__npu_compressed_weight."

#: Decompression math is f32 even when the IR multiplies the scale in f16 (NNCF's int4 layout):
#: the DPU's fused decompression works like the CPU plugin's, our oracle. OpenVINO's constant
#: folding would round (q - zp)·scale to f16 instead (<= 1 f16 ulp of a weight apart). The
#: kernels still implement the f16 rounding (the matmul_dq / gather_dq flag) for experiments.
F16_DQ_ROUNDING = False

_INT_TYPES = {"u8": "u8", "i8": "i8", "u4": "u4", "i4": "i4"}


@dataclasses.dataclass
class CompressedWeight:
    """A weight kept as stored: f32 value = ((q - zp) * scale) as [N, K] (f16: just q)."""

    node: str  # friendly name of the subgraph's output node
    fmt: str  # u8 | i8 | u4 | i4 | f16
    shape: tuple[int, int]  # logical f32 shape [N, K]
    q: np.ndarray  # [N, G, gs] (u8/i8), [N, G, gs/2] packed bytes (u4/i4), [N, K] f16
    scale: np.ndarray | None  # [N, G, 1] f16 or f32
    zero_point: np.ndarray | None  # [N, G, 1] (4-bit zero points unpacked to u8)
    mul_f16: bool  # the IR multiplies in f16 (the kernel rounds the same way)

    @property
    def groups(self) -> int:
        return 1 if self.fmt == "f16" else int(self.q.shape[1])

    @property
    def group_size(self) -> int:
        """Values per scale; equals K for channel-wise."""
        return self.shape[1] // self.groups

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in (self.q, self.scale, self.zero_point) if a is not None)

    def describe(self) -> dict[str, object]:
        """The metadata record of this weight."""
        return {"node": self.node, "format": self.fmt, "shape": list(self.shape),
                "group_size": -1 if self.groups == 1 else self.group_size,
                "scale": None if self.scale is None else str(self.scale.dtype),
                "zero_point": self.zero_point is not None, "ir_multiply": "f16" if self.mul_f16 else "f32",
                "bytes": self.nbytes,
                "f32_bytes": self.shape[0] * self.shape[1] * 4}


def unpack4(packed: np.ndarray, count: int, signed: bool) -> np.ndarray:
    """Unpack ``count`` 4-bit values (low nibble first) from uint8 bytes."""
    b = np.asarray(packed).reshape(-1).view(np.uint8)
    v = np.empty(b.size * 2, np.uint8)
    v[0::2] = b & 0xF
    v[1::2] = b >> 4
    v = v[:count]
    if signed:
        return ((v.astype(np.int8) ^ 8) - 8).astype(np.int8)
    return v


def _type(o: ov.Output) -> str:
    return o.get_element_type().get_type_name()


def _const(o: ov.Output) -> ov.Node | None:
    """The Constant behind ``o``, looking through one Convert."""
    n = o.get_node()
    if n.get_type_name() == "Convert":
        n = n.input_value(0).get_node()
    return n if n.get_type_name() == "Constant" else None


def _values(c: ov.Node) -> np.ndarray:
    """A Constant's values, 4-bit types unpacked to u8/i8."""
    t = _type(c.output(0))
    shape = dims(c.get_output_shape(0))
    if t in ("u4", "i4"):
        n = int(np.prod(shape, dtype=np.int64))
        return unpack4(np.asarray(c.get_data()), n, t == "i4").reshape(shape)
    return np.asarray(c.get_data()).reshape(shape)


def _per_group(a: np.ndarray, qshape: tuple[int, ...]) -> np.ndarray | None:
    """Broadcast a scale / zero point to [N, G, 1] when it is per output row (and group)."""
    full = (1,) * (len(qshape) - a.ndim) + tuple(a.shape)
    if len(full) != len(qshape) or full[-1] != 1:
        return None
    if any(d not in (1, q) for d, q in zip(full[:-1], qshape[:-1], strict=False)):
        return None
    b = np.broadcast_to(a.reshape(full), (*qshape[:-1], 1))
    n = qshape[0]
    g = int(np.prod(qshape[1:-1], dtype=np.int64)) if len(qshape) == 3 else 1
    return np.ascontiguousarray(b).reshape(n, g, 1)


def _match(out: ov.Output) -> CompressedWeight | None:
    """Match Const(int) -> Convert [-> Subtract(zp)] -> Multiply(scale) [-> Reshape] [-> Convert]."""
    if out.get_partial_shape().is_dynamic:  # a data-dependent size (query_model lets such ops through)
        return None
    shape = dims(out.get_shape())
    if len(shape) != 2 or _type(out) != "f32":
        return None
    node, converted = out.get_node(), False
    while node.get_type_name() in ("Convert", "Reshape"):
        if node.get_type_name() == "Reshape" and node.input_value(1).get_node().get_type_name() != "Constant":
            return None
        converted |= node.get_type_name() == "Convert"
        node = node.input_value(0).get_node()
    name = out.get_node().get_friendly_name()
    if node.get_type_name() == "Constant":
        if converted and _type(node.output(0)) == "f16" and dims(node.get_output_shape(0)) == shape:
            # views of the Constants' data (get_data keeps its node alive): no copy of the weights
            return CompressedWeight(name, "f16", shape, np.asarray(node.get_data()).reshape(shape), None, None,
                                    False)
        return None
    if node.get_type_name() != "Multiply":
        return None
    for qi in (0, 1):
        cw = _match_multiply(node, qi, shape, name)
        if cw is not None:
            return cw
    return None


def _match_multiply(node: ov.Node, qi: int, shape: tuple[int, int], name: str) -> CompressedWeight | None:
    """The weight when input ``qi`` of Multiply ``node`` is [Subtract(zp) <-] Convert <- Const(int)
    and the other input its scale."""
    sc = _const(node.input_value(1 - qi))
    if sc is None or _type(sc.output(0)) not in ("f16", "f32"):
        return None
    src = node.input_value(qi).get_node()
    zp_c = None
    if src.get_type_name() == "Subtract":
        zp_c = _const(src.input_value(1))
        if zp_c is None:
            return None
        src = src.input_value(0).get_node()
    if src.get_type_name() != "Convert":
        return None
    qc = src.input_value(0).get_node()
    fmt = _INT_TYPES.get(_type(qc.output(0))) if qc.get_type_name() == "Constant" else None
    if fmt is None:
        return None
    qshape = dims(qc.get_output_shape(0))
    if len(qshape) not in (2, 3) or qshape[0] != shape[0] or int(np.prod(qshape[1:])) != shape[1]:
        return None
    if fmt in ("u4", "i4") and qshape[-1] % 2:
        return None  # a group must start on a byte boundary
    # views of the Constants' data, as the codes: copying every scale cost the load more than
    # the rest of this matching
    scale = _per_group(np.asarray(sc.get_data()).reshape(dims(sc.get_output_shape(0))), qshape)
    zp = None
    if zp_c is not None:
        zp = _per_group(_values(zp_c), qshape)
        if zp is None:
            return None
    if scale is None:
        return None
    g = qshape[1] if len(qshape) == 3 else 1
    if fmt in ("u4", "i4"):
        q = np.asarray(qc.get_data()).view(np.uint8).reshape(shape[0], g, shape[1] // g // 2)
    else:
        q = np.asarray(qc.get_data()).reshape(shape[0], g, shape[1] // g)
    return CompressedWeight(name, fmt, shape, q, scale, zp, _type(node.output(0)) == "f16")


def _consumers_ok(out: ov.Output) -> bool:
    for t in out.get_target_inputs():
        n = t.get_node()
        typ = n.get_type_name()
        if typ == "MatMul" and t.get_index() == 1:
            continue
        if typ == "Gather" and t.get_index() == 0:
            axis = n.input_value(2).get_node()
            if axis.get_type_name() == "Constant" and int(np.array(axis.get_data()).reshape(-1)[0]) == 0 \
                    and int(n.get_attributes().get("batch_dims", 0)) == 0:
                continue
        return False
    return True


def detach_compressed_weights(model: ov.Model) -> tuple[dict[str, CompressedWeight], list[ov.Node]]:
    """Replace each matched decompression output by a placeholder Parameter (before folding).

    ConstantFolding would otherwise turn every u8/i4 weight into an f32 Constant.  Returns the
    weights keyed by placeholder name and the placeholders (the caller removes them again).
    """
    found: dict[str, CompressedWeight] = {}
    placeholders: list[ov.Node] = []
    seen: set[tuple[str, int]] = set()
    for n in model.get_ordered_ops():
        typ = n.get_type_name()
        if typ not in ("MatMul", "Gather"):
            continue
        out = n.input_value(1 if typ == "MatMul" else 0)
        key = (out.get_node().get_name(), out.get_index())
        if key in seen:
            continue
        seen.add(key)
        cw = _match(out)
        if cw is None or not _consumers_ok(out):
            continue
        name = f"{PLACEHOLDER_PREFIX}{len(found)}"
        p = ops.parameter(list(cw.shape), ov.Type.f32, name=name)
        for t in list(out.get_target_inputs()):
            t.replace_source_output(p.output(0))
        found[p.get_name()] = cw
        placeholders.append(p)
    if placeholders:
        model.add_parameters(placeholders)
    logger.debug("kept %d weights compressed", len(found))
    return found, placeholders
