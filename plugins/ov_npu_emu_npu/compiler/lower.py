"""Lowering: OpenVINO ops -> DPU / SHAVE / DMA tasks over values (with CMX staging and tiling).

This module holds the lowerer (values, task builders, the walk over the model), MatMul and
attention; the other op families lower in :mod:`.lower_elementwise`, :mod:`.lower_movement`,
:mod:`.lower_conv` and :mod:`.lower_vision`, each exporting a ``HANDLERS`` table merged into
:data:`_HANDLERS` below.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import openvino as ov

from ov_npu_emu.errors import CompileError, UnsupportedOpError
from ov_npu_emu_npu.arch import HardwareConfig, dma_cycles, dpu_cycles, shave_cycles
from ov_npu_emu_npu.blob.format import MAX_DIMS, MAX_OPERANDS, WEIGHT_FORMATS, TaskKind
from ov_npu_emu_npu.blob.kernel_params import (
    DQ_ACT_BLOCK,
    NO_PARAMS,
    ClampParams,
    KernelParams,
    MatMulDqParams,
    MatMulParams,
    SdpaKvParams,
    SdpaParams,
    pack_params,
)
from ov_npu_emu_npu.compiler.act_scale import KEEP_F32
from ov_npu_emu_npu.compiler.compress import F16_DQ_ROUNDING, CompressedWeight
from ov_npu_emu_npu.compiler.frontend import Prepared
from ov_npu_emu_npu.compiler.fuse_kv import KvFusion, find_kv_fusions
from ov_npu_emu_npu.compiler.graph import DmaSpec, Packed, Place, Task, Value, dims, np_dtype
from ov_npu_emu_npu.compiler.lower_conv import HANDLERS as CONV_HANDLERS
from ov_npu_emu_npu.compiler.lower_einsum import HANDLERS as EINSUM_HANDLERS
from ov_npu_emu_npu.compiler.lower_elementwise import HANDLERS as ELEMENTWISE_HANDLERS
from ov_npu_emu_npu.compiler.lower_movement import HANDLERS as MOVEMENT_HANDLERS
from ov_npu_emu_npu.compiler.lower_vision import HANDLERS as VISION_HANDLERS
from ov_npu_emu_npu.compiler.tiling import lower_tiled_matmul

__all__ = ["Handler", "Lowered", "lower", "refused_ops", "SUPPORTED_OPS"]

logger = logging.getLogger(__name__)

#: lowers one node: reads its inputs' values, adds tasks, records its output values in ``vals``
Handler = Callable[["_Lowerer", ov.Node], None]

#: vector FLOPs per element charged by the cost model (transcendentals cost more)
#: the largest finite f16 value: what NPU_EMU_F16_CLAMP saturates residual Adds to
F16_MAX = 65504.0

_FLOPS = {"exp": 8, "log": 8, "erf": 12, "gelu": 14, "swish": 10, "sigmoid": 10, "tanh": 10,
          "sin": 10, "cos": 10, "softmax": 12, "sdpa": 4, "power": 8, "sqrt": 4, "divide": 4}


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
    def __init__(self, prep: Prepared, hw: HardwareConfig, f16: bool, stage: bool, ping_pong: bool = True,
                 tile_weights: bool = True, fuse_kv: bool = False, clamp_residual: bool = False,
                 higher_precision: frozenset[str] = frozenset(), dynamic_quantization: bool = False) -> None:
        self.prep = prep
        #: NPU_COMPILER_DYNAMIC_QUANTIZATION (f16 mode): 4-bit-weight MatMuls quantize their
        #: activation rows to int8 (MatMulDqParams.act_block)
        self.dynamic_quantization = dynamic_quantization
        #: NPU_COMPILATION_MODE_PARAMS compute-layers-with-higher-precision: op types whose
        #: outputs stay f32 in f16 mode
        self.higher_precision = higher_precision
        #: NPU_EMU_F16_CLAMP: saturate both inputs and the output of every Add of two same-shape
        #: activations to the f16 range (f16 mode only; openvino#37041 clamps T5's FC output so)
        self.clamp_residual = clamp_residual and f16
        self.hw = hw
        self.f16 = f16
        self.stage = stage
        self.ping_pong = ping_pong  # two CMX slots per tiled-MatMul stream (NPU_EMU_PING_PONG)
        self.tile_weights = tile_weights  # MatMuls with plain weights tiled over K/N with CMX weight staging
        self.out = Lowered()
        self.vals: dict[tuple[str, int], Value] = {}
        self.consts: dict[tuple[str, int], ov.Node] = {}
        #: grouped-query KV: (node, port) of a head-broadcast (or its reshape) that only SDPAs read
        #: -> (the un-broadcast [B, Hkv, S, D] value, group size); no task materializes it
        self.kv_groups: dict[tuple[str, int], tuple[Value, int]] = {}
        self._dma_rr = 0
        #: attention reading an f16 past KV, lowered as one sdpa_kv task (fuse_kv.py,
        #: NPU_EMU_FUSE_KV); the Convert/Concat/head-expansion nodes it replaces are not lowered
        self.kv_fusions: dict[str, KvFusion] = find_kv_fusions(prep.model) if fuse_kv else {}
        self.fused_away = {n.get_name() for f in self.kv_fusions.values() for n in f.replaced}
        #: query mode (Core.query_model): a refused op is recorded here (friendly name -> why) and
        #: lowering goes on with placeholder outputs, so every op gets an answer
        self.refused: dict[str, str] | None = None

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
        dtype = np_dtype(node.get_output_element_type(i))
        if self.f16 and ((self.higher_precision and self._higher(node)) or KEEP_F32 in node.get_rt_info()):
            return self.new_value(dims(node.get_output_shape(i)), dtype, Place.SCRATCH)
        return self.scratch(dims(node.get_output_shape(i)), dtype)

    def _higher(self, node: ov.Node) -> bool:
        t = node.get_type_name()
        if t in self.higher_precision:
            return True
        # Add_RMSNorm: the eps Add of an RMSNorm, mean(x^2) + eps
        return (t == "Add" and "Add_RMSNorm" in self.higher_precision
                and any(node.input_value(i).get_node().get_type_name() == "ReduceMean" for i in (0, 1)))

    def inp(self, node: ov.Node, i: int) -> Value:
        src = node.input_value(i)
        key = (src.get_node().get_name(), src.get_index())
        if key in self.vals:
            return self.vals[key]
        cnode = self.consts.get(key)
        if cnode is None:
            raise CompileError(f"input {i} of {node.get_friendly_name()!r} was not lowered", stage="lower")
        # a view of the constant's memory (no copy); the model outlives compilation
        data = np.asarray(cnode.get_data(), dtype=np_dtype(cnode.get_output_element_type(0)))
        v = self.new_value(dims(cnode.get_output_shape(0)), data.dtype, Place.CONST,
                           data=data.reshape(dims(cnode.get_output_shape(0))))
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

    def mm(self, a: Value, b: Value, o: Value, params: MatMulParams, node: ov.Node, macs: int) -> None:
        """One DPU MatMul task; a compressed ``b`` is decompressed per tile by matmul_dq."""
        if b.comp is None:
            self.dpu("matmul", [a, b], [o], params, node, macs)
            return
        c = b.comp
        n, k = b.shape
        act = DQ_ACT_BLOCK if (self.dynamic_quantization and c.fmt in ("u4", "i4") and params.transpose_b
                               and not params.transpose_a) else 0
        dq = MatMulDqParams(params.transpose_a, params.transpose_b, WEIGHT_FORMATS[c.fmt], c.has_zp, F16_DQ_ROUNDING,
                            n, k, act)
        self.dpu("matmul_dq", [a, *c.operands], [o], dq, node, macs)

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
            assert src.data is not None
            return self.new_value(shape, src.dtype, Place.CONST, data=src.data.reshape(shape))
        root = src.root
        return self.new_value(shape, src.dtype, root.place, port=root.port, alias=root)

    # -- tasks ----------------------------------------------------------------------------
    def _task(self, kind: TaskKind, kernel: str, ins: list[Value], outs: list[Value], params: KernelParams | None,
              node: ov.Node | None, cycles: int, lane: int, dma: DmaSpec | None = None) -> Task:
        for v in ins + outs:
            if len(v.shape) > MAX_DIMS:
                raise UnsupportedOpError(
                    f"{kernel}: rank {len(v.shape)} > {MAX_DIMS} is not supported by the NPU descriptors",
                    op_type=node.get_type_name() if node else kernel,
                    node_name=node.get_friendly_name() if node else "")
        if len(ins) + len(outs) > MAX_OPERANDS:
            raise CompileError(f"{kernel}: too many operands", stage="lower")
        packed: list[float] = []
        if params is not None:  # DPU/SHAVE: the kernel's own record, on the engine it runs on
            if params.ENGINE != kind.name:
                raise CompileError(f"{kernel} runs on the {params.ENGINE}, not the {kind.name}", stage="lower")
            packed = list(pack_params(kernel, params))
        t = Task(len(self.out.tasks), kind, kernel, ins, outs, packed,
                 node.get_friendly_name() if node is not None else "", node.get_type_name() if node is not None else "",
                 dma, cycles, lane)
        for v in ins:
            v.root.readers.append(t.tid)
        for v in outs:
            v.root.producers.append(t.tid)
        self.out.tasks.append(t)
        return t

    def shave(
        self, kernel: str, ins: list[Value], outs: list[Value], params: KernelParams, node: ov.Node | None
    ) -> Task:
        elems = max(int(np.prod(v.shape, dtype=np.int64)) for v in ins + outs)
        cyc = shave_cycles(self.hw, elems, _FLOPS.get(kernel, 1))
        return self._task(TaskKind.SHAVE, kernel, ins, outs, params, node, cyc, self.hw.dma_channels + 1)

    def dpu(
        self, kernel: str, ins: list[Value], outs: list[Value], params: KernelParams, node: ov.Node, macs: int
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
        return self._task(TaskKind.DMA, "dma", [src], [dst], None, node, dma_cycles(self.hw, d0 * d1 * row), lane, spec)

    def copy(self, src: Value, dst: Value, node: ov.Node | None) -> None:
        """Whole-tensor copy; a dtype change goes through a SHAVE convert instead of DMA."""
        if src.dtype != dst.dtype:
            self.shave("convert", [src], [dst], NO_PARAMS, node)
        else:
            self.dma(src, 0, dst, 0, 1, 1, src.nbytes, (0, 0), (0, 0), node)

    # -- op handlers ----------------------------------------------------------------------
    def run(self) -> Lowered:
        m = self.prep.model
        params = m.get_parameters()
        for idx, p in enumerate(params):
            v = self.new_value(
                dims(p.get_output_shape(0)), np_dtype(p.get_output_element_type(0)), Place.INPUT, port=idx
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
            if node.get_name() in self.fused_away:
                continue
            try:
                if self.refused is not None and any(node.get_output_partial_shape(i).is_dynamic
                                                    for i in range(node.get_output_size())):
                    raise UnsupportedOpError(f"{t} {node.get_friendly_name()!r} has a dynamic output shape",
                                             op_type=t, node_name=node.get_friendly_name())
                self._lower_node(node, t)
            except (UnsupportedOpError, CompileError) as e:  # e.g. more operands than a descriptor holds
                if self.refused is None:
                    raise
                self.refused[node.get_friendly_name()] = str(e)
                for i in range(node.get_output_size()):  # placeholders; a dynamic one refuses its readers
                    if node.get_output_partial_shape(i).is_static:
                        self.vals[(node.get_name(), i)] = self.node_out(node, i)
        if self.refused is None:
            self._bind_outputs()
        return self.out

    def _lower_node(self, node: ov.Node, t: str) -> None:
        handler = _HANDLERS.get(t)
        if handler is None:
            raise UnsupportedOpError(
                f"the NPU compiler does not support {t} (node {node.get_friendly_name()!r}); "
                "there is no fallback to another device: compile the model on device CPU (or on "
                "HETERO:NPU,CPU; for an LLM through NPUW: NPUW_DEVICES=CPU)",
                op_type=t,
                node_name=node.get_friendly_name(),
            )
        if self.clamp_residual and t == "Add" and self._residual(node):
            self._lower_clamped_add(node, handler)
            return
        handler(self, node)

    def _residual(self, node: ov.Node) -> bool:
        """An Add of two float activations of one shape (a transformer's residual Add)."""
        keys = [(node.input_value(i).get_node().get_name(), node.input_value(i).get_index()) for i in (0, 1)]
        if any(k not in self.vals for k in keys):  # a constant operand (a bias)
            return False
        a, b = (self.vals[k] for k in keys)
        return a.shape == b.shape and a.dtype == b.dtype == np.dtype(np.float16)

    def _clamp(self, v: Value, node: ov.Node) -> Value:
        c = self.scratch(v.shape, v.dtype)
        # saturating: an f16 inf (a value past 65504 stored) becomes +-65504; NaN stays NaN
        self.shave("clamp", [v], [c], ClampParams(-F16_MAX, F16_MAX), node)
        return c

    def _lower_clamped_add(self, node: ov.Node, handler: Handler) -> None:
        """The Add between clamps: its inputs are replaced for every later reader too (the same
        value, saturated), and its output is saturated before anything reads it."""
        for i in (0, 1):
            src = node.input_value(i)
            key = (src.get_node().get_name(), src.get_index())
            self.vals[key] = self._clamp(self.vals[key], node)
        handler(self, node)
        key = (node.get_name(), 0)
        self.vals[key] = self._clamp(self.vals[key], node)

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
            et = np_dtype(res.get_output_element_type(0))
            shape = dims(res.get_output_shape(0))
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

    def _sdpa_kv(self, node: ov.Node, i: int) -> tuple[Value, int]:
        src = node.input_value(i)
        grouped = self.kv_groups.get((src.get_node().get_name(), src.get_index()))
        return grouped if grouped is not None else (self.inp(node, i), 1)

    def _out_of(self, out: ov.Output) -> Value:
        """The lowered value of ``out`` (an output of a lowered node, a parameter or a constant)."""
        key = (out.get_node().get_name(), out.get_index())
        if key not in self.vals and key in self.consts:
            cnode = self.consts[key]
            data = np.asarray(cnode.get_data(), dtype=np_dtype(cnode.get_output_element_type(0)))
            self.vals[key] = self.new_value(dims(cnode.get_output_shape(0)), data.dtype, Place.CONST,
                                            data=data.reshape(dims(cnode.get_output_shape(0))))
        if key not in self.vals:
            raise CompileError(f"{out.get_node().get_friendly_name()!r} was not lowered", stage="lower")
        return self.vals[key]

    def _sdpa_scale(self, node: ov.Node) -> float:
        if node.get_input_size() <= 4:
            return 0.0
        c = self.const_of(node, 4)
        if c is None:
            raise UnsupportedOpError(
                "ScaledDotProductAttention with a non-constant scale",
                op_type="ScaledDotProductAttention",
                node_name=node.get_friendly_name(),
            )
        return float(c.reshape(-1)[0])

    def _sdpa_fused(self, node: ov.Node, f: KvFusion) -> None:
        """One sdpa_kv task: q, past K (f16), past V (f16), the new K and V rows stacked, mask
        (fuse_kv.py); the stack (two DMAs of a few rows) keeps the task within MAX_OPERANDS."""
        q = self.inp(node, 0)
        kn, vn = self._out_of(f.k.new), self._out_of(f.v.new)
        if kn.shape != vn.shape:
            raise CompileError(f"sdpa_kv {node.get_friendly_name()!r}: new K {kn.shape} and V {vn.shape} differ; "
                               "compile with NPU_EMU_FUSE_KV=NO", stage="lower")
        # the joined K/V's type, as the Concat's output would have it (f16 in f16 mode: user
        # inputs in f32 are rounded as op_concat rounds them)
        new = self.scratch((2, *kn.shape), np.dtype(np.float32))
        for i, x in enumerate((kn, vn)):
            if x.dtype != new.dtype:
                y = self.scratch(x.shape, new.dtype)
                self.shave("convert", [x], [y], NO_PARAMS, node)
                x = y
            self.dma(x, 0, new, i * x.nbytes, 1, 1, x.nbytes, (0, 0), (0, 0), node)
        ins = [q, self._out_of(f.k.past), self._out_of(f.v.past), new, self.inp(node, 3)]
        o = self.node_out(node)
        params = SdpaKvParams(False, True, self._sdpa_scale(node), f.k.group, f.k.past_len)
        t = self.shave("sdpa_kv", ins, [o], params, node)
        s_len = f.k.past_len + kn.shape[-2]
        t.cycles = shave_cycles(self.hw, int(np.prod(q.shape)) * s_len * 2, 2)
        self.vals[(node.get_name(), 0)] = o

    def op_sdpa(self, node: ov.Node) -> None:
        fused = self.kv_fusions.get(node.get_name())
        if fused is not None:
            self._sdpa_fused(node, fused)
            return
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
        if has_mask:
            mask = self.inp(node, 3)
            if len(mask.shape) < 2:  # a scalar mask (timm's edgenext): the same bias as [1, 1]
                mask = self.alias(mask, (1,) * (2 - len(mask.shape)) + mask.shape)
            ins.append(mask)
        scale = self._sdpa_scale(node)
        if node.get_input_size() > 5:
            raise UnsupportedOpError(
                "ScaledDotProductAttention with attention sinks",
                op_type="ScaledDotProductAttention",
                node_name=node.get_friendly_name(),
            )
        causal = bool(node.get_attributes().get("causal", False))
        o = self.node_out(node)
        # kv_groups: query heads per K/V head (grouped-query attention; 1 = plain)
        t = self.shave("sdpa", ins, [o], SdpaParams(causal, has_mask, scale, gk), node)
        t.cycles = shave_cycles(self.hw, int(np.prod(q.shape)) * k.shape[-2] * 2, 2)
        self.vals[(node.get_name(), 0)] = o

    def _expand_heads(self, x: Value, g: int, node: ov.Node) -> Value:
        """[B, Hkv, S, D] -> [B, Hkv*G, S, D] by a broadcast task (the ungrouped SDPA input)."""
        b, hkv, s_len, d = x.shape
        o = self.scratch((b, hkv, g, s_len, d), x.dtype)
        self.shave("broadcast", [self.alias(x, (b, hkv, 1, s_len, d))], [o], NO_PARAMS, node)
        return self.alias(o, (b, hkv * g, s_len, d))

    def op_matmul(self, node: ov.Node) -> None:
        a, b = self.inp(node, 0), self.inp(node, 1)
        at = node.get_attributes()
        ta, tb = bool(at.get("transpose_a", False)), bool(at.get("transpose_b", False))
        o = self.node_out(node)
        k = a.shape[-2] if ta and len(a.shape) > 1 else a.shape[-1]
        macs = int(np.prod(o.shape, dtype=np.int64)) * k
        params = MatMulParams(ta, tb)
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
        if self.tile_weights and b.comp is None and lower_tiled_matmul(self, a, b, o, params.transpose_b, node,
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
        # Tiles end on the last row: NPUW right-aligns a prompt in its padded prefill (padding
        # on the left), so the short remainder tile lies over padding and a prompt of up to
        # `tile` tokens is in one tile - the only one a token-row window (device/windowed.py)
        # then runs, each weight decompressed once; start-aligned, such a prompt straddled the
        # remainder tile and its neighbour (two products, two decompressions of every weight).
        for end in range(rows - (rows - 1) // tile * tile, rows + 1, tile):
            r0 = max(0, end - tile)
            r = end - r0
            ca = self.new_value((r, a.shape[-1]), a.dtype, Place.CMX)
            co = self.new_value((r, o.shape[-1]), o.dtype, Place.CMX)
            self.dma(a, r0 * arow, ca, 0, 1, 1, r * arow, (0, 0), (0, 0), node)
            self.mm(ca, b, co, params, node, macs * r // max(rows, 1))
            self.dma(co, 0, o, r0 * orow, 1, 1, r * orow, (0, 0), (0, 0), node)

#: OpenVINO op type -> handler, one module per op family (MatMul and attention live here)
_HANDLERS: dict[str, Handler] = {
    **ELEMENTWISE_HANDLERS,
    **MOVEMENT_HANDLERS,
    **CONV_HANDLERS,
    **VISION_HANDLERS,
    **EINSUM_HANDLERS,
    "ScaledDotProductAttention": _Lowerer.op_sdpa,
    "MatMul": _Lowerer.op_matmul,
}

SUPPORTED_OPS = frozenset(_HANDLERS)


def refused_ops(prep: Prepared, hw: HardwareConfig, *, f16: bool = False) -> dict[str, str]:
    """Query mode: the ops of ``prep.model`` lowering refuses, friendly name -> the error's text."""
    lw = _Lowerer(prep, hw, f16, stage=False)
    lw.refused = {}
    lw.run()
    return lw.refused


def lower(prep: Prepared, hw: HardwareConfig, *, f16: bool = False, stage: bool = True,
          ping_pong: bool = True, tile_weights: bool = True, fuse_kv: bool = False,
          clamp_residual: bool = False, higher_precision: frozenset[str] = frozenset(),
          dynamic_quantization: bool = False) -> Lowered:
    """Lower the prepared model to tasks; producers/readers are filled in here.  ``fuse_kv``:
    attention over an f16 past KV as sdpa_kv tasks (fuse_kv.py, NPU_EMU_FUSE_KV);
    ``clamp_residual``: residual Adds saturated to the f16 range (NPU_EMU_F16_CLAMP, f16 only);
    ``higher_precision``: op types kept f32 in f16 mode (NPU_COMPILATION_MODE_PARAMS);
    ``dynamic_quantization``: int8 activations for 4-bit weights (NPU_COMPILER_DYNAMIC_QUANTIZATION)."""
    lw = _Lowerer(prep, hw, f16, stage, ping_pong, tile_weights, fuse_kv, clamp_residual, higher_precision,
                  dynamic_quantization)
    out = lw.run()
    return out
