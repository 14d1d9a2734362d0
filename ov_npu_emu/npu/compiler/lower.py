"""Lowering: OpenVINO ops -> DPU / SHAVE / DMA tasks over values (with CMX staging and tiling)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import openvino as ov

from ov_npu_emu.errors import CompileError, UnsupportedOpError
from ov_npu_emu.npu.arch import HardwareConfig, dma_cycles, dpu_cycles, shave_cycles
from ov_npu_emu.npu.blob.format import MAX_DIMS, MAX_OPERANDS, SLICE_NONE, WEIGHT_FORMATS, TaskKind
from ov_npu_emu.npu.compiler.compress import CompressedWeight
from ov_npu_emu.npu.compiler.frontend import Prepared
from ov_npu_emu.npu.compiler.graph import DmaSpec, Packed, Place, Task, Value
from ov_npu_emu.npu.compiler.tiling import lower_tiled_matmul

__all__ = ["Lowered", "lower", "SUPPORTED_OPS"]

logger = logging.getLogger(__name__)

_BINARY = {
    "Add": "add", "Subtract": "subtract", "Multiply": "multiply", "Divide": "divide",
    "Power": "power", "Maximum": "maximum", "Minimum": "minimum",
    "SquaredDifference": "squared_difference", "Equal": "equal", "NotEqual": "not_equal",
    "Less": "less", "LessEqual": "less_equal", "Greater": "greater", "GreaterEqual": "greater_equal",
    "LogicalAnd": "logical_and", "LogicalOr": "logical_or", "LogicalXor": "logical_xor",
    "FloorMod": "floor_mod", "Mod": "mod",
    "BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor",
}
_UNARY = {
    "Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp", "Log": "log",
    "Sqrt": "sqrt", "Negative": "negative", "Abs": "abs", "Sin": "sin", "Cos": "cos",
    "Erf": "erf", "Floor": "floor", "Ceiling": "ceiling", "LogicalNot": "logical_not",
    "SoftPlus": "softplus", "HSwish": "hswish", "HSigmoid": "hsigmoid", "Sign": "sign",
    "Mish": "mish", "Tan": "tan", "Atan": "atan", "BitwiseNot": "bitwise_not",
}
#: vector FLOPs per element charged by the cost model (transcendentals cost more)
_FLOPS = {"exp": 8, "log": 8, "erf": 12, "gelu": 14, "swish": 10, "sigmoid": 10, "tanh": 10,
          "sin": 10, "cos": 10, "softmax": 12, "sdpa": 4, "power": 8, "sqrt": 4, "divide": 4}
#: data-movement ops lowered through index evaluation (exact, any attributes)
_INDEX_OPS = {"Slice", "StridedSlice", "Tile", "DepthToSpace", "SpaceToDepth", "ShuffleChannels",
              "Roll", "Reverse"}
_ALIAS_OPS = {"Reshape", "Squeeze", "Unsqueeze"}
#: Decompression math is f32 even when the IR multiplies the scale in f16 (NNCF's int4 layout):
#: the DPU's fused decompression works like the CPU plugin's, our oracle. OpenVINO's constant
#: folding would round (q - zp)·scale to f16 instead (<= 1 f16 ulp of a weight apart). The
#: kernels still implement the f16 rounding (flag 1.0) for experiments.
_F16_DQ = 0.0


def _np_dtype(t: ov.Type) -> np.dtype:
    if t == ov.Type.boolean:
        return np.dtype(np.bool_)
    return np.dtype(t.to_dtype())


def _index_map(node: ov.Node, ins: list[ov.Tensor], out_shape: tuple[int, ...]) -> np.ndarray:
    """Run a data-movement op's reference evaluate() on i64 "iota" inputs: it moves elements by
    position, so what comes back is the source index of every output element."""
    res = ov.Tensor(ov.Type.i64, ov.Shape(list(out_shape)))
    if not node.evaluate([res], ins):
        raise UnsupportedOpError(f"{node.get_type_name()} {node.get_friendly_name()!r} could not be evaluated "
                                 "for index lowering", op_type=node.get_type_name(),
                                 node_name=node.get_friendly_name())
    return np.array(res.data).reshape(out_shape)


class Lowered:
    """Result of lowering: values, tasks in topological order, port bookkeeping."""

    def __init__(self) -> None:
        self.values: list[Value] = []
        self.tasks: list[Task] = []
        self.inputs: list[Value] = []  # per model input port
        self.outputs: list[Value] = []  # per model output port
        self.state_pairs: list[tuple[int, int]] = []  # (input port, output port) of lifted variables
        self.compressed: list[Value] = []  # weights kept compressed (Value.comp set)


class _Lowerer:
    def __init__(self, prep: Prepared, hw: HardwareConfig, f16: bool, stage: bool, ping_pong: bool = True) -> None:
        self.prep = prep
        self.hw = hw
        self.f16 = f16
        self.stage = stage
        self.ping_pong = ping_pong  # two CMX slots per tiled-MatMul stream (NPU_EMU_PING_PONG)
        self.out = Lowered()
        self.vals: dict[tuple[str, int], Value] = {}
        self.consts: dict[tuple[str, int], ov.Node] = {}
        #: grouped-query KV: (node, port) of a head-broadcast (or its reshape) that only SDPAs read
        #: -> (the un-broadcast [B, Hkv, S, D] value, group size); no task materializes it
        self.kv_groups: dict[tuple[str, int], tuple[Value, int]] = {}
        self._dma_rr = 0

    # -- values ---------------------------------------------------------------------------
    def new_value(self, shape: tuple[int, ...], dtype: np.dtype, place: Place, **kw: Any) -> Value:
        v = Value(len(self.out.values), tuple(int(d) for d in shape), np.dtype(dtype), place, **kw)
        self.out.values.append(v)
        return v

    def act_dtype(self, dtype: np.dtype) -> np.dtype:
        # f16 mode: NPU-like f16 storage of float activations (weights and user I/O keep their type)
        return np.dtype(np.float16) if self.f16 and dtype == np.float32 else dtype

    def scratch(self, shape: tuple[int, ...], dtype: np.dtype) -> Value:
        return self.new_value(shape, self.act_dtype(np.dtype(dtype)), Place.SCRATCH)

    def node_out(self, node: ov.Node, i: int = 0) -> Value:
        return self.scratch(tuple(node.get_output_shape(i)), _np_dtype(node.get_output_element_type(i)))

    def inp(self, node: ov.Node, i: int) -> Value:
        src = node.input_value(i)
        key = (src.get_node().get_name(), src.get_index())
        if key in self.vals:
            return self.vals[key]
        cnode = self.consts.get(key)
        if cnode is None:
            raise CompileError(f"input {i} of {node.get_friendly_name()!r} was not lowered", stage="lower")
        # a view of the constant's memory (no copy); the model outlives compilation
        data = np.asarray(cnode.get_data(), dtype=_np_dtype(cnode.get_output_element_type(0)))
        v = self.new_value(tuple(cnode.get_output_shape(0)), data.dtype, Place.CONST,
                           data=data.reshape(tuple(cnode.get_output_shape(0))))
        self.vals[key] = v
        return v

    def compressed_value(self, cw: CompressedWeight) -> Value:
        """The [N, K] f32 weight as a value whose bytes are (q, scale[, zp]) in .npu.weights."""
        parts = [self.new_value(cw.q.shape, cw.q.dtype, Place.CONST, data=cw.q)]
        for a in (cw.scale, cw.zero_point):
            if a is not None:
                parts.append(self.new_value(a.shape, a.dtype, Place.CONST, data=a))
        v = self.new_value(cw.shape, np.dtype(np.float32), Place.CONST)
        v.comp = Packed(cw.fmt, parts, cw.zero_point is not None, cw.mul_f16, cw.describe())
        self.out.compressed.append(v)
        return v

    def mm(self, a: Value, b: Value, o: Value, params: list[float], node: ov.Node, macs: int) -> None:
        """One DPU MatMul task; a compressed ``b`` is decompressed per tile by matmul_dq."""
        if b.comp is None:
            self.dpu("matmul", [a, b], [o], params, node, macs)
            return
        c = b.comp
        n, k = b.shape
        dq = [WEIGHT_FORMATS[c.fmt], 1.0 if c.has_zp else 0.0, _F16_DQ, n, k]
        self.dpu("matmul_dq", [a, *c.operands], [o], [*params, *dq], node, macs)

    def const_of(self, node: ov.Node, i: int) -> np.ndarray | None:
        src = node.input_value(i).get_node()
        if src.get_type_name() != "Constant":
            return None
        return np.array(src.get_data())

    def need_const(self, node: ov.Node, i: int, what: str) -> np.ndarray:
        c = self.const_of(node, i)
        if c is None:
            raise UnsupportedOpError(
                f"{node.get_type_name()} {node.get_friendly_name()!r}: {what} must be constant on NPU "
                "(reshape the model to static shapes so it folds)",
                op_type=node.get_type_name(), node_name=node.get_friendly_name())
        return c

    def alias(self, src: Value, shape: tuple[int, ...]) -> Value:
        if src.place is Place.CONST and src.alias is None:
            return self.new_value(shape, src.dtype, Place.CONST, data=src.data.reshape(shape))
        root = src.root
        return self.new_value(shape, src.dtype, root.place, port=root.port, alias=root)

    # -- tasks ----------------------------------------------------------------------------
    def _task(self, kind: TaskKind, kernel: str, ins: list[Value], outs: list[Value], params: list[float],
              node: ov.Node | None, cycles: int, lane: int, dma: DmaSpec | None = None) -> Task:
        for v in ins + outs:
            if len(v.shape) > MAX_DIMS:
                raise UnsupportedOpError(
                    f"{kernel}: rank {len(v.shape)} > {MAX_DIMS} is not supported by the NPU descriptors",
                    op_type=node.get_type_name() if node else kernel,
                    node_name=node.get_friendly_name() if node else "")
        if len(ins) + len(outs) > MAX_OPERANDS:
            raise CompileError(f"{kernel}: too many operands", stage="lower")
        t = Task(len(self.out.tasks), kind, kernel, ins, outs, [float(p) for p in params],
                 node.get_friendly_name() if node is not None else "", node.get_type_name() if node is not None else "",
                 dma, cycles, lane)
        for v in ins:
            v.root.readers.append(t.tid)
        for v in outs:
            v.root.producers.append(t.tid)
        self.out.tasks.append(t)
        return t

    def shave(
        self, kernel: str, ins: list[Value], outs: list[Value], params: list[float], node: ov.Node | None
    ) -> Task:
        elems = max(int(np.prod(v.shape, dtype=np.int64)) for v in ins + outs)
        cyc = shave_cycles(self.hw, elems, _FLOPS.get(kernel, 1))
        return self._task(TaskKind.SHAVE, kernel, ins, outs, params, node, cyc, self.hw.dma_channels + 1)

    def dpu(
        self, kernel: str, ins: list[Value], outs: list[Value], params: list[float], node: ov.Node, macs: int
    ) -> Task:
        wbytes = sum(v.nbytes for v in ins if v.root.place is Place.CONST)
        return self._task(
            TaskKind.DPU, kernel, ins, outs, params, node, dpu_cycles(self.hw, macs, wbytes), self.hw.dma_channels
        )

    def dma(
        self,
        src: Value,
        src_off: int,
        dst: Value,
        dst_off: int,
        d0: int,
        d1: int,
        row: int,
        ss: tuple[int, int],
        ds: tuple[int, int],
        node: ov.Node | None,
    ) -> Task:
        lane = self._dma_rr % self.hw.dma_channels
        self._dma_rr += 1
        spec = DmaSpec(src, src_off, dst, dst_off, d0, d1, row, ss, ds)
        return self._task(TaskKind.DMA, "dma", [src], [dst], [], node, dma_cycles(self.hw, d0 * d1 * row), lane, spec)

    def copy(self, src: Value, dst: Value, node: ov.Node | None) -> None:
        """Whole-tensor copy; a dtype change goes through a SHAVE convert instead of DMA."""
        if src.dtype != dst.dtype:
            self.shave("convert", [src], [dst], [], node)
        else:
            self.dma(src, 0, dst, 0, 1, 1, src.nbytes, (0, 0), (0, 0), node)

    # -- op handlers ----------------------------------------------------------------------
    def run(self) -> Lowered:
        m = self.prep.model
        params = m.get_parameters()
        for idx, p in enumerate(params):
            v = self.new_value(
                tuple(p.get_output_shape(0)), _np_dtype(p.get_output_element_type(0)), Place.INPUT, port=idx
            )
            self.vals[(p.get_name(), 0)] = v
            self.out.inputs.append(v)
        for name, cw in self.prep.compressed.items():
            self.vals[(name, 0)] = self.compressed_value(cw)
        for node in m.get_ordered_ops():
            t = node.get_type_name()
            if t in ("Parameter", "Result"):
                continue
            if t == "Constant":
                self.consts[(node.get_name(), 0)] = node
                continue
            handler = _HANDLERS.get(t)
            if handler is None:
                if t in _BINARY:
                    handler = _Lowerer.op_binary
                elif t in _UNARY:
                    handler = _Lowerer.op_unary
                elif t in _INDEX_OPS:
                    handler = _Lowerer.op_index
                elif t in _ALIAS_OPS:
                    handler = _Lowerer.op_alias
                else:
                    raise UnsupportedOpError(
                        f"the NPU compiler does not support {t} (node {node.get_friendly_name()!r}); "
                        "there is no fallback to another device: compile the model on device CPU (for an LLM "
                        "through NPUW: NPUW_DEVICES=CPU)",
                        op_type=t,
                        node_name=node.get_friendly_name(),
                    )
            handler(self, node)
        self._bind_outputs()
        return self.out

    def _bind_outputs(self) -> None:
        m = self.prep.model
        n_user = self.prep.n_user_outputs
        bound: set[int] = set()
        for j, res in enumerate(m.get_results()):
            src = res.input_value(0)
            key = (src.get_node().get_name(), src.get_index())
            if key not in self.vals and key in self.consts:
                self.inp(res, 0)
            v = self.vals[key]
            et = _np_dtype(res.get_output_element_type(0))
            shape = tuple(res.get_output_shape(0))
            root = v.root
            lifted = j >= n_user
            # write straight into the user's output buffer when the value is ours alone
            if (
                not lifted
                and root.place is Place.SCRATCH
                and root.vid not in bound
                and root.producers
                and root.dtype == et
            ):
                root.place, root.port = Place.OUTPUT, j
                bound.add(root.vid)
                for a in self.out.values:
                    if a.alias is root:
                        a.place, a.port = Place.OUTPUT, j
                self.out.outputs.append(v if v.shape == shape else self.alias(v, shape))
                continue
            out = self.new_value(shape, et, Place.OUTPUT, port=j)
            self.copy(v if v.shape == shape else self.alias(v, shape), out, None)
            self.out.tasks[-1].node = res.get_friendly_name()
            self.out.tasks[-1].op = "Result"
            self.out.outputs.append(out)
        for k in range(len(self.prep.variables)):
            self.out.state_pairs.append((self.prep.n_user_inputs + k, n_user + k))

    def op_binary(self, node: ov.Node) -> None:
        a, b = self.inp(node, 0), self.inp(node, 1)
        o = self.node_out(node)
        kernel = _BINARY[node.get_type_name()]
        params: list[float] = []
        if kernel == "divide":
            params = [1.0 if node.get_attributes().get("m_pythondiv", True) else 0.0]
        self.shave(kernel, [a, b], [o], params, node)
        self.vals[(node.get_name(), 0)] = o

    def op_unary(self, node: ov.Node) -> None:
        o = self.node_out(node)
        self.shave(_UNARY[node.get_type_name()], [self.inp(node, 0)], [o], [], node)
        self.vals[(node.get_name(), 0)] = o

    def op_alias(self, node: ov.Node) -> None:
        src = node.input_value(0)
        grouped = self.kv_groups.get((src.get_node().get_name(), src.get_index()))
        if grouped is not None:  # the [B, Hkv*G, S, D] reshape of a grouped KV broadcast
            self.kv_groups[(node.get_name(), 0)] = grouped
            return
        self.vals[(node.get_name(), 0)] = self.alias(self.inp(node, 0), tuple(node.get_output_shape(0)))

    def op_convert(self, node: ov.Node) -> None:
        x = self.inp(node, 0)
        dst = _np_dtype(node.get_output_element_type(0))
        if x.place is Place.CONST and x.alias is None:
            data = x.data.astype(dst) if dst.kind in "fb" or x.dtype.kind not in "f" else np.trunc(x.data).astype(dst)
            self.vals[(node.get_name(), 0)] = self.new_value(x.shape, dst, Place.CONST, data=data)
            return
        if self.act_dtype(dst) == x.dtype:
            self.vals[(node.get_name(), 0)] = self.alias(x, x.shape)
            return
        o = self.node_out(node)
        self.shave("convert", [x], [o], [], node)
        self.vals[(node.get_name(), 0)] = o

    def op_gelu(self, node: ov.Node) -> None:
        mode = str(node.get_attributes().get("approximation_mode", "ERF")).upper()
        o = self.node_out(node)
        self.shave("gelu", [self.inp(node, 0)], [o], [1.0 if mode == "TANH" else 0.0], node)
        self.vals[(node.get_name(), 0)] = o

    def op_swish(self, node: ov.Node) -> None:
        beta = 1.0
        if node.get_input_size() > 1:
            beta = float(self.need_const(node, 1, "beta").reshape(-1)[0])
        o = self.node_out(node)
        self.shave("swish", [self.inp(node, 0)], [o], [beta], node)
        self.vals[(node.get_name(), 0)] = o

    def op_clamp(self, node: ov.Node) -> None:
        at = node.get_attributes()
        o = self.node_out(node)
        self.shave("clamp", [self.inp(node, 0)], [o], [float(at["min"]), float(at["max"])], node)
        self.vals[(node.get_name(), 0)] = o

    def op_select(self, node: ov.Node) -> None:
        o = self.node_out(node)
        self.shave("select", [self.inp(node, i) for i in range(3)], [o], [], node)
        self.vals[(node.get_name(), 0)] = o

    def op_softmax(self, node: ov.Node) -> None:
        x = self.inp(node, 0)
        axis = int(node.get_attributes().get("axis", 1)) % len(x.shape)
        o = self.node_out(node)
        self.shave("log_softmax" if node.get_type_name() == "LogSoftmax" else "softmax", [x], [o], [axis], node)
        self.vals[(node.get_name(), 0)] = o

    def op_reduce(self, node: ov.Node) -> None:
        x = self.inp(node, 0)
        axes = sorted({int(a) % len(x.shape) for a in self.need_const(node, 1, "axes").reshape(-1)})
        o = self.node_out(node)
        kernel = {
            "ReduceMean": "reduce_mean",
            "ReduceSum": "reduce_sum",
            "ReduceMax": "reduce_max",
            "ReduceMin": "reduce_min",
            "ReduceProd": "reduce_prod",
            "ReduceL2": "reduce_l2",
        }[node.get_type_name()]
        self.shave(kernel, [x], [o], axes, node)
        self.vals[(node.get_name(), 0)] = o

    def op_transpose(self, node: ov.Node) -> None:
        x = self.inp(node, 0)
        perm = [int(p) for p in self.need_const(node, 1, "permutation").reshape(-1)] or list(range(len(x.shape)))[::-1]
        o = self.node_out(node)
        self.shave("transpose", [x], [o], perm, node)
        self.vals[(node.get_name(), 0)] = o

    def _kv_group_size(self, node: ov.Node, x: Value, mode: str) -> int:
        """G when ``node`` repeats KV heads [B, Hkv, 1, S, D] -> [B, Hkv, G, S, D] for SDPAs only.

        Optimum's (and the builder's) GQA expansion is Unsqueeze -> Broadcast -> Reshape to
        [B, Hkv*G, S, D] feeding the K/V inputs of ScaledDotProductAttention.  The SDPA task then
        reads the Hkv heads once per group (as the NPU's attention kernel does) instead of a
        broadcast copy; any other reader keeps the broadcast task.
        """
        out_shape = tuple(node.get_output_shape(0))
        if mode not in ("numpy", "bidirectional") or len(out_shape) != 5 or len(x.shape) != 5:
            return 0
        b, hkv, g, s_len, d = out_shape
        if x.shape != (b, hkv, 1, s_len, d) or g < 2:
            return 0
        for target in node.output(0).get_target_inputs():
            r = target.get_node()
            if r.get_type_name() not in _ALIAS_OPS or tuple(r.get_output_shape(0)) != (b, hkv * g, s_len, d):
                return 0
            for use in r.output(0).get_target_inputs():
                if use.get_node().get_type_name() != "ScaledDotProductAttention" or use.get_index() not in (1, 2):
                    return 0
        return g

    def op_broadcast(self, node: ov.Node) -> None:
        x = self.inp(node, 0)
        out_shape = tuple(node.get_output_shape(0))
        mode = str(node.get_attributes().get("mode", "numpy")).lower()
        g = self._kv_group_size(node, x, mode)
        if g:
            b, hkv, _, s_len, d = out_shape
            self.kv_groups[(node.get_name(), 0)] = (self.alias(x, (b, hkv, s_len, d)), g)
            return
        src = x
        if mode == "explicit":
            axes = [int(a) for a in self.need_const(node, 2, "axes_mapping").reshape(-1)]
            shape = [1] * len(out_shape)
            for d, a in zip(x.shape, axes, strict=False):
                shape[a] = d
            src = self.alias(x, tuple(shape))
        o = self.node_out(node)
        self.shave("broadcast", [src], [o], [], node)
        self.vals[(node.get_name(), 0)] = o

    def op_gather(self, node: ov.Node) -> None:
        data, idx = self.inp(node, 0), self.inp(node, 1)
        axis = int(self.need_const(node, 2, "axis").reshape(-1)[0]) % len(data.shape)
        bd = int(node.get_attributes().get("batch_dims", 0))
        if bd < 0:
            bd += len(idx.shape)
        o = self.node_out(node)
        if data.comp is not None:
            # embedding lookup: only the gathered rows are decompressed (axis 0, batch_dims 0)
            c = data.comp
            n, k = data.shape
            dq = [WEIGHT_FORMATS[c.fmt], 1.0 if c.has_zp else 0.0, _F16_DQ, n, k]
            t = self.shave("gather_dq", [c.operands[0], idx, *c.operands[1:]], [o], dq, node)
            t.cycles = shave_cycles(self.hw, int(np.prod(o.shape, dtype=np.int64)), 3)
        else:
            self.shave("gather", [data, idx], [o], [axis, bd], node)
        self.vals[(node.get_name(), 0)] = o

    def op_gather_elements(self, node: ov.Node) -> None:
        data, idx = self.inp(node, 0), self.inp(node, 1)
        axis = int(node.get_attributes()["axis"]) % len(data.shape)
        o = self.node_out(node)
        self.shave("gather_elements", [data, idx], [o], [axis], node)
        self.vals[(node.get_name(), 0)] = o

    def _scatter_runtime(self, node: ov.Node, x: Value, u: Value) -> None:
        """Scatter*Update whose indices are computed (MoE routing): one SHAVE task."""
        t = node.get_type_name()
        idx = self.inp(node, 1)
        o = self.node_out(node)
        if t == "ScatterNDUpdate":
            self.shave("scatter_nd", [x, idx, u], [o], [], node)
        else:
            axis = int(self.need_const(node, 3, "axis").reshape(-1)[0]) % len(x.shape)
            kernel = "scatter_elements" if t == "ScatterElementsUpdate" else "scatter_update"
            self.shave(kernel, [x, idx, u], [o], [axis], node)
        self.vals[(node.get_name(), 0)] = o

    def op_topk(self, node: ov.Node) -> None:
        """TopK (MoE routers): values and indices in one SHAVE task; ties keep the lower index."""
        x = self.inp(node, 0)
        k = int(self.need_const(node, 1, "k").reshape(-1)[0])
        attrs = node.get_attributes()
        axis = int(attrs["axis"]) % len(x.shape)
        mode = 1.0 if str(attrs["mode"]).lower() == "max" else 0.0
        by_index = 1.0 if str(attrs["sort"]).lower() == "index" else 0.0
        values, indices = self.node_out(node, 0), self.node_out(node, 1)
        self.shave("topk", [x], [values, indices], [axis, k, mode, by_index], node)
        self.vals[(node.get_name(), 0)] = values
        self.vals[(node.get_name(), 1)] = indices

    def op_concat(self, node: ov.Node) -> None:
        o = self.node_out(node)
        axis = int(node.get_attributes()["axis"]) % len(o.shape)
        outer = int(np.prod(o.shape[:axis], dtype=np.int64))
        inner = int(np.prod(o.shape[axis + 1 :], dtype=np.int64)) * o.dtype.itemsize
        pos = 0
        for i in range(node.get_input_size()):
            x = self.inp(node, i)
            if x.dtype != o.dtype:  # f16 mode: user inputs in f32 join f16 activations
                y = self.scratch(x.shape, o.dtype)
                self.shave("convert", [x], [y], [], node)
                x = y
            ai = x.shape[axis]
            if ai:
                row = ai * inner
                self.dma(x, 0, o, pos * inner, 1, outer, row, (0, row), (0, o.shape[axis] * inner), node)
            pos += ai
        self.vals[(node.get_name(), 0)] = o

    def op_split(self, node: ov.Node) -> None:
        x = self.inp(node, 0)
        axis = int(self.need_const(node, 1, "axis").reshape(-1)[0]) % len(x.shape)
        outer = int(np.prod(x.shape[:axis], dtype=np.int64))
        inner = int(np.prod(x.shape[axis + 1 :], dtype=np.int64)) * x.dtype.itemsize
        pos = 0
        for i in range(node.get_output_size()):
            shape = tuple(node.get_output_shape(i))
            o = self.new_value(shape, x.dtype, Place.SCRATCH)
            ai = shape[axis]
            if ai:
                row = ai * inner
                self.dma(x, pos * inner, o, 0, 1, outer, row, (0, x.shape[axis] * inner), (0, row), node)
            pos += ai
            self.vals[(node.get_name(), i)] = o

    def op_index(self, node: ov.Node) -> None:
        """Data movement with arbitrary attributes: evaluate the op on an index tensor at compile time."""
        x = self.inp(node, 0)
        n = int(np.prod(x.shape, dtype=np.int64))
        out_shape = tuple(node.get_output_shape(0))
        ins = [ov.Tensor(np.arange(n, dtype=np.int64).reshape(x.shape))]
        for i in range(1, node.get_input_size()):
            ins.append(ov.Tensor(np.ascontiguousarray(self.need_const(node, i, f"input {i}"))))
        idx = _index_map(node, ins, out_shape)
        o = self.node_out(node)
        sl = _as_slices(idx, x.shape)
        if sl is not None:
            self.shave("slice", [x], [o], [v for s in sl for v in s], node)
        else:
            iv = self.new_value(idx.shape, np.dtype(np.int64), Place.CONST, data=np.ascontiguousarray(idx))
            self.shave("take", [x, iv], [o], [], node)
        self.vals[(node.get_name(), 0)] = o

    def op_scatter(self, node: ov.Node) -> None:
        """Scatter*Update with constant indices: data and updates joined in one buffer, then one
        gather whose map comes from evaluating the op on index tensors at compile time."""
        if str(node.get_attributes().get("reduction", "none")).lower() != "none":
            raise UnsupportedOpError(
                f"{node.get_type_name()} {node.get_friendly_name()!r}: reductions are not supported on NPU",
                op_type=node.get_type_name(),
                node_name=node.get_friendly_name(),
            )
        x, u = self.inp(node, 0), self.inp(node, 2)
        if self.const_of(node, 1) is None:
            self._scatter_runtime(node, x, u)
            return
        n, m = int(np.prod(x.shape, dtype=np.int64)), int(np.prod(u.shape, dtype=np.int64))
        ins = [
            ov.Tensor(np.arange(n, dtype=np.int64).reshape(x.shape)),
            ov.Tensor(np.ascontiguousarray(self.need_const(node, 1, "indices"))),
            ov.Tensor(np.arange(n, n + m, dtype=np.int64).reshape(u.shape)),
        ]
        for i in range(3, node.get_input_size()):
            ins.append(ov.Tensor(np.ascontiguousarray(self.need_const(node, i, f"input {i}"))))
        idx = _index_map(node, ins, tuple(node.get_output_shape(0)))
        o = self.node_out(node)
        joined = self.scratch((n + m,), o.dtype)
        for src, off in ((x, 0), (u, n * o.dtype.itemsize)):
            if src.dtype != o.dtype:
                y = self.scratch(src.shape, o.dtype)
                self.shave("convert", [src], [y], [], node)
                src = y
            if src.nbytes:
                self.dma(src, 0, joined, off, 1, 1, src.nbytes, (0, 0), (0, 0), node)
        iv = self.new_value(idx.shape, np.dtype(np.int64), Place.CONST, data=np.ascontiguousarray(idx))
        self.shave("take", [joined, iv], [o], [], node)
        self.vals[(node.get_name(), 0)] = o

    def _sdpa_kv(self, node: ov.Node, i: int) -> tuple[Value, int]:
        src = node.input_value(i)
        grouped = self.kv_groups.get((src.get_node().get_name(), src.get_index()))
        return grouped if grouped is not None else (self.inp(node, i), 1)

    def op_sdpa(self, node: ov.Node) -> None:
        q = self.inp(node, 0)
        (k, gk), (v, gv) = self._sdpa_kv(node, 1), self._sdpa_kv(node, 2)
        grouped_ok = (
            len(q.shape) == len(k.shape) == len(v.shape) == 4
            and q.shape[0] == k.shape[0] == v.shape[0]
            and q.shape[1] == k.shape[1] * gk
        )
        if gk != gv or not grouped_ok:  # read the KV heads expanded (the plain SDPA task)
            k = self._expand_heads(k, gk, node) if gk > 1 else k
            v = self._expand_heads(v, gv, node) if gv > 1 else v
            gk = gv = 1
        ins = [q, k, v]
        has_mask = node.get_input_size() > 3
        scale = 0.0
        if has_mask:
            ins.append(self.inp(node, 3))
        if node.get_input_size() > 4:
            c = self.const_of(node, 4)
            if c is None:
                raise UnsupportedOpError(
                    "ScaledDotProductAttention with a non-constant scale",
                    op_type="ScaledDotProductAttention",
                    node_name=node.get_friendly_name(),
                )
            scale = float(c.reshape(-1)[0])
        if node.get_input_size() > 5:
            raise UnsupportedOpError(
                "ScaledDotProductAttention with attention sinks",
                op_type="ScaledDotProductAttention",
                node_name=node.get_friendly_name(),
            )
        causal = bool(node.get_attributes().get("causal", False))
        o = self.node_out(node)
        # params[3]: query heads per K/V head (grouped-query attention; 1 = plain)
        t = self.shave("sdpa", ins, [o], [1.0 if causal else 0.0, 1.0 if has_mask else 0.0, scale, float(gk)], node)
        t.cycles = shave_cycles(self.hw, int(np.prod(q.shape)) * k.shape[-2] * 2, 2)
        self.vals[(node.get_name(), 0)] = o

    def _expand_heads(self, x: Value, g: int, node: ov.Node) -> Value:
        """[B, Hkv, S, D] -> [B, Hkv*G, S, D] by a broadcast task (the ungrouped SDPA input)."""
        b, hkv, s_len, d = x.shape
        o = self.scratch((b, hkv, g, s_len, d), x.dtype)
        self.shave("broadcast", [self.alias(x, (b, hkv, 1, s_len, d))], [o], [], node)
        return self.alias(o, (b, hkv * g, s_len, d))

    def op_matmul(self, node: ov.Node) -> None:
        a, b = self.inp(node, 0), self.inp(node, 1)
        at = node.get_attributes()
        ta, tb = bool(at.get("transpose_a", False)), bool(at.get("transpose_b", False))
        o = self.node_out(node)
        k = a.shape[-2] if ta and len(a.shape) > 1 else a.shape[-1]
        macs = int(np.prod(o.shape, dtype=np.int64)) * k
        params = [1.0 if ta else 0.0, 1.0 if tb else 0.0]
        self.vals[(node.get_name(), 0)] = o
        # stage the activation rows through CMX: DDR -> CMX (DMA), DPU in CMX, CMX -> DDR (DMA)
        rows = int(np.prod(a.shape[:-1], dtype=np.int64))
        batch_ok = (
            len(a.shape) >= 2
            and not ta
            and int(np.prod(o.shape[:-1], dtype=np.int64)) == rows
            and b.root.place is Place.CONST
            and len(b.shape) == 2
            and a.dtype == o.dtype
        )
        if not (self.stage and batch_ok):
            self.mm(a, b, o, params, node, macs)
            return
        # plain weights: activation, weight and output tiles through CMX slots (ping-pong, K split)
        if b.comp is None and lower_tiled_matmul(self, a, b, o, bool(params[1]), node,
                                                 slots=2 if self.ping_pong else 1):
            return
        arow = a.shape[-1] * a.dtype.itemsize
        orow = o.shape[-1] * o.dtype.itemsize
        # compressed weights (or no tiling fits): only the activation rows are staged, a tile
        # pair in half of CMX, and matmul_dq reads the weight from DDR
        tile = max(1, (self.hw.cmx_size // 2) // max(1, arow + orow))
        if arow + orow > self.hw.cmx_size // 2:
            self.mm(a, b, o, params, node, macs)
            return
        for r0 in range(0, rows, tile):
            r = min(tile, rows - r0)
            ca = self.new_value((r, a.shape[-1]), a.dtype, Place.CMX)
            co = self.new_value((r, o.shape[-1]), o.dtype, Place.CMX)
            self.dma(a, r0 * arow, ca, 0, 1, 1, r * arow, (0, 0), (0, 0), node)
            self.mm(ca, b, co, params, node, macs * r // max(rows, 1))
            self.dma(co, 0, o, r0 * orow, 1, 1, r * orow, (0, 0), (0, 0), node)

    def _conv_pads(
        self, node: ov.Node, x_shape: tuple[int, ...], kshape: tuple[int, ...], strides: list[int], dil: list[int]
    ) -> tuple[list[int], list[int]]:
        at = node.get_attributes()
        pb, pe = (
            [int(p) for p in at.get("pads_begin", [0] * len(kshape))],
            [int(p) for p in at.get("pads_end", [0] * len(kshape))],
        )
        auto = str(at.get("auto_pad", "explicit")).lower()
        if auto == "valid":
            return [0] * len(kshape), [0] * len(kshape)
        if auto in ("same_upper", "same_lower"):
            pb, pe = [], []
            for d, k, s, dl in zip(x_shape[2:], kshape, strides, dil, strict=False):
                out = -(-d // s)
                total = max(0, (out - 1) * s + (k - 1) * dl + 1 - d)
                lo = total // 2 if auto == "same_upper" else total - total // 2
                pb.append(lo)
                pe.append(total - lo)
        return pb, pe

    def op_conv(self, node: ov.Node) -> None:
        x, w = self.inp(node, 0), self.inp(node, 1)
        at = node.get_attributes()
        group = node.get_type_name() == "GroupConvolution"
        kshape = w.shape[3:] if group else w.shape[2:]
        nd = len(kshape)
        strides, dil = [int(s) for s in at["strides"]], [int(d) for d in at["dilations"]]
        pb, pe = self._conv_pads(node, x.shape, kshape, strides, dil)
        groups = w.shape[0] if group else 1
        o = self.node_out(node)
        macs = int(np.prod(o.shape)) * int(np.prod(w.shape)) // max(w.shape[0] * (w.shape[1] if group else 1), 1)
        params = [groups, nd, *strides, *dil, *pb, *pe]
        self.vals[(node.get_name(), 0)] = o
        half = self.hw.cmx_size // 2
        per_channel = o.nbytes // max(o.shape[1], 1)
        if not (
            self.stage
            and not group
            and o.shape[0] == 1
            and w.root.place is Place.CONST
            and w.alias is None
            and x.dtype == o.dtype
            and x.nbytes + per_channel <= half
        ):
            self.dpu("conv", [x, w], [o], params, node, macs)
            return
        # input resident in CMX; output channels tiled so each tile's result fits beside it
        cx = self.new_value(x.shape, x.dtype, Place.CMX)
        self.dma(x, 0, cx, 0, 1, 1, x.nbytes, (0, 0), (0, 0), node)
        tile = max(1, (half - x.nbytes) // per_channel)
        for c0 in range(0, o.shape[1], tile):
            c = min(tile, o.shape[1] - c0)
            wt = self.new_value((c, *w.shape[1:]), w.dtype, Place.CONST, data=w.data[c0 : c0 + c])
            co = self.new_value((1, c, *o.shape[2:]), o.dtype, Place.CMX)
            self.dpu("conv", [cx, wt], [co], params, node, macs * c // o.shape[1])
            self.dma(co, 0, o, c0 * per_channel, 1, 1, co.nbytes, (0, 0), (0, 0), node)

    def op_pool(self, node: ov.Node) -> None:
        x = self.inp(node, 0)
        at = node.get_attributes()
        t = node.get_type_name()
        kshape = [int(k) for k in at["kernel"]]
        strides = [int(s) for s in at["strides"]]
        dil = [int(d) for d in at.get("dilations", [1] * len(kshape))]
        pb, pe = self._conv_pads(node, x.shape, tuple(kshape), strides, dil)
        o = self.node_out(node)
        # ceil rounding: pad the end so the kernel's sliding window yields the node's output size
        for i, d in enumerate(x.shape[2:]):
            need = (o.shape[2 + i] - 1) * strides[i] + (kshape[i] - 1) * dil[i] + 1 - (d + pb[i] + pe[i])
            pe[i] += max(0, need)
        if t == "MaxPool":
            if node.get_output_size() > 1 and node.output(1).get_target_inputs():
                raise UnsupportedOpError(
                    "MaxPool indices output is not supported", op_type=t, node_name=node.get_friendly_name()
                )
            params = [len(kshape), *kshape, *strides, *dil, *pb, *pe]
            self.shave("maxpool", [x], [o], params, node)
        else:
            excl = 1.0 if at.get("exclude-pad", at.get("exclude_pad", False)) else 0.0
            real_pe = [int(p) for p in self._conv_pads(node, x.shape, tuple(kshape), strides, dil)[1]]
            params = [len(kshape), *kshape, *strides, *dil, *pb, *pe, excl, *real_pe]
            self.shave("avgpool", [x], [o], params, node)
        self.vals[(node.get_name(), 0)] = o


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


def _op_prelu(self: _Lowerer, node: ov.Node) -> None:
    o = self.node_out(node)
    self.shave("prelu", [self.inp(node, 0), self.inp(node, 1)], [o], [], node)
    self.vals[(node.get_name(), 0)] = o


def _op_elu(self: _Lowerer, node: ov.Node) -> None:
    o = self.node_out(node)
    self.shave("elu", [self.inp(node, 0)], [o], [float(node.get_attributes()["alpha"])], node)
    self.vals[(node.get_name(), 0)] = o


def _op_pad(self: _Lowerer, node: ov.Node) -> None:
    x = self.inp(node, 0)
    pb = [int(v) for v in self.need_const(node, 1, "pads_begin").reshape(-1)]
    pe = [int(v) for v in self.need_const(node, 2, "pads_end").reshape(-1)]
    mode = str(node.get_attributes().get("pad_mode", "constant")).lower()
    if min(pb + pe) < 0:
        raise UnsupportedOpError("Pad with negative pads", op_type="Pad", node_name=node.get_friendly_name())
    value = 0.0
    if mode == "constant" and node.get_input_size() > 3:
        value = float(self.need_const(node, 3, "pad_value").reshape(-1)[0])
    modes = {"constant": 0, "edge": 1, "reflect": 2, "symmetric": 3}
    o = self.node_out(node)
    self.shave("pad", [x], [o], [modes[mode], value, *pb, *pe], node)
    self.vals[(node.get_name(), 0)] = o


def _op_mvn(self: _Lowerer, node: ov.Node) -> None:
    x = self.inp(node, 0)
    at = node.get_attributes()
    axes = sorted({int(a) % len(x.shape) for a in self.need_const(node, 1, "axes").reshape(-1)})
    inside = str(at.get("eps_mode", "INSIDE_SQRT")).upper() == "INSIDE_SQRT"
    o = self.node_out(node)
    self.shave(
        "mvn",
        [x],
        [o],
        [1.0 if at.get("normalize_variance", True) else 0.0, float(at["eps"]), 1.0 if inside else 0.0, *axes],
        node,
    )
    self.vals[(node.get_name(), 0)] = o


def _op_cumsum(self: _Lowerer, node: ov.Node) -> None:
    x = self.inp(node, 0)
    axis = int(self.need_const(node, 1, "axis").reshape(-1)[0]) % len(x.shape) if node.get_input_size() > 1 else 0
    at = node.get_attributes()
    o = self.node_out(node)
    self.shave("cumsum", [x], [o], [axis, 1.0 if at.get("exclusive") else 0.0, 1.0 if at.get("reverse") else 0.0], node)
    self.vals[(node.get_name(), 0)] = o


_HANDLERS: dict[str, Callable[[_Lowerer, ov.Node], None]] = {
    "PRelu": _op_prelu,
    "Elu": _op_elu,
    "Pad": _op_pad,
    "MVN": _op_mvn,
    "CumSum": _op_cumsum,
    "Convert": _Lowerer.op_convert,
    "Gelu": _Lowerer.op_gelu,
    "Swish": _Lowerer.op_swish,
    "Clamp": _Lowerer.op_clamp,
    "Select": _Lowerer.op_select,
    "Softmax": _Lowerer.op_softmax,
    "LogSoftmax": _Lowerer.op_softmax,
    "ReduceMean": _Lowerer.op_reduce,
    "ReduceSum": _Lowerer.op_reduce,
    "ReduceMax": _Lowerer.op_reduce,
    "ReduceMin": _Lowerer.op_reduce,
    "ReduceProd": _Lowerer.op_reduce,
    "ReduceL2": _Lowerer.op_reduce,
    "Transpose": _Lowerer.op_transpose,
    "Broadcast": _Lowerer.op_broadcast,
    "Gather": _Lowerer.op_gather,
    "TopK": _Lowerer.op_topk,
    "GatherElements": _Lowerer.op_gather_elements,
    "Concat": _Lowerer.op_concat,
    "Split": _Lowerer.op_split,
    "VariadicSplit": _Lowerer.op_split,
    "ScatterNDUpdate": _Lowerer.op_scatter,
    "ScatterUpdate": _Lowerer.op_scatter,
    "ScatterElementsUpdate": _Lowerer.op_scatter,
    "ScaledDotProductAttention": _Lowerer.op_sdpa,
    "MatMul": _Lowerer.op_matmul,
    "Convolution": _Lowerer.op_conv,
    "GroupConvolution": _Lowerer.op_conv,
    "MaxPool": _Lowerer.op_pool,
    "AvgPool": _Lowerer.op_pool,
}

SUPPORTED_OPS = frozenset(_HANDLERS) | frozenset(_BINARY) | frozenset(_UNARY) | _INDEX_OPS | _ALIAS_OPS


def lower(prep: Prepared, hw: HardwareConfig, *, f16: bool = False, stage: bool = True,
          ping_pong: bool = True) -> Lowered:
    """Lower the prepared model to tasks; producers/readers are filled in here."""
    lw = _Lowerer(prep, hw, f16, stage, ping_pong)
    out = lw.run()
    return out
