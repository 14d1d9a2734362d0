"""ACTIVATIONS_SCALE_FACTOR: per-tensor activation scaling, a graph transformation run by the
front end before lowering (f16 mode only), so that the device's kernels stay unchanged.

A transformer's residual stream grows layer by layer and its writers (the MLP down-projection,
the attention output projection) can pass the f16 maximum 65504.  With a factor ``s`` the
stream is carried divided by ``s``:

* every **residual Add** (an Add of two activations of one shape, one of them written by a
  MatMul / Convolution — optionally through bias Adds, Multiplies by a constant and reshapes —
  or by another residual Add; or, in a post-norm block, one an RMSNorm reads) outputs
  ``value / s``;
* its **writers** compute ``value / s`` from the start: the MatMul's activation input is divided
  by ``s`` first (``MatMul(x / s, W) = MatMul(x, W) / s``, so the f16 store of its output is
  already in range), a bias constant is divided by ``s`` as well; any other input of a residual
  Add (the embedding that starts the stream) gets a ``* 1/s`` Multiply;
* an **MVN** (LayerNorm) normalizing the variance absorbs it too, its eps divided by ``s^2``
  (inside the square root) or ``s`` (outside);
* an **RMSNorm** reading the stream absorbs the factor: ``x / sqrt(mean(x^2) + eps)`` is
  invariant under ``x -> x / s`` once ``eps`` becomes ``eps / s^2`` (so the result stays exact);
  recognised in its decomposed forms ``x * 1/sqrt(mean(x^2)+eps)``, ``x * (mean(x^2)+eps)^-0.5``
  and ``x / sqrt(mean(x^2)+eps)``;
* **every other reader** of a scaled value (an op, a model output) reads it through a ``* s``
  Multiply; one that only model outputs read is kept f32 (the f32 user output, not an f16 store).

This is what OpenVINO's ``ActivationsScaling`` pass does for the GPU plugin's f16 inference
(``ov::hint::activations_scale_factor``: scale down the inputs of Conv/MatMul, move the scale-up
down the graph until a normalization absorbs it; a factor <= 0 disables it); the code here is
our own.  A power of two keeps the divisions exact in f16.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import openvino as ov
from openvino import opset13 as ops

__all__ = ["KEEP_F32", "scale_activations"]

#: rt_info key of a node whose float output the lowering keeps f32 in f16 mode
KEEP_F32 = "npu_emu_keep_f32"

_Key = tuple[str, int]
_SHAPE_OPS = ("Reshape", "Squeeze", "Unsqueeze", "Transpose")


@dataclasses.dataclass
class _Writer:
    """A linear layer writing a residual Add: the MatMul/Convolution, the bias Adds after it (node,
    index of the constant) and the outputs between it and the Add."""

    layer: ov.Node
    biases: list[tuple[ov.Node, int]]
    path: list[ov.Output]


@dataclasses.dataclass
class _Norm:
    """An RMSNorm reading the stream x: the square of x, the eps Add (and its constant's index),
    the node multiplying (dividing) x by the rsqrt (sqrt) and its input reading x, and the inner
    nodes with e (each holds its unscaled value / s**e)."""

    square: ov.Node
    eps_add: ov.Node | None
    eps_index: int
    final: ov.Node
    final_index: int
    inner: list[tuple[ov.Node, int]]

    def eps(self) -> ov.Output:
        assert self.eps_add is not None
        return self.eps_add.input_value(self.eps_index)


def _key(out: ov.Output) -> _Key:
    return (out.get_node().get_name(), out.get_index())


def _const_value(out: ov.Output) -> np.ndarray | None:
    node = out.get_node()
    return np.array(node.get_data()) if node.get_type_name() == "Constant" else None


def _is_scalar_const(out: ov.Output, value: float | None = None) -> bool:
    data = _const_value(out)
    if data is None or data.size != 1:
        return False
    return value is None or float(data.reshape(-1)[0]) == value


class _Scaler:
    def __init__(self, model: ov.Model, s: float) -> None:
        self.model = model
        self.s = float(s)
        self.const: set[str] = set()  # nodes whose value depends on no input
        self.scaled: dict[_Key, ov.Output] = {}  # outputs that carry value / s
        self.residuals: set[str] = set()
        self.absorbed: set[tuple[str, int]] = set()  # (reader node, input index) that read value / s as is

    # -- helpers ---------------------------------------------------------------------------
    def _is_const(self, out: ov.Output) -> bool:
        return out.get_node().get_name() in self.const

    def _factor(self, out: ov.Output, value: float) -> ov.Node:
        return ops.constant(np.array(value, dtype=out.get_element_type().to_dtype()))

    def _scale_down_input(self, node: ov.Node, i: int) -> None:
        src = node.input_value(i)
        down = ops.multiply(src, self._factor(src, 1.0 / self.s))
        down.set_friendly_name(f"{node.get_friendly_name()}/act_scale_down")
        node.input(i).replace_source_output(down.output(0))

    def _writer(self, out: ov.Output) -> _Writer | None:
        """``out`` as a linear layer's output: a MatMul/Convolution, then (each read by the next
        only, model outputs aside) bias Adds of a constant, Multiplies by a constant and
        Reshape/Squeeze/Unsqueeze/Transpose (GPT-2's ``addmm`` + ``view``, Granite's residual
        multiplier).  All of these commute with a factor once the bias is divided by it."""
        biases: list[tuple[ov.Node, int]] = []
        path: list[ov.Output] = []
        cur = out
        while True:
            node = cur.get_node()
            t = node.get_type_name()
            if t in ("MatMul", "Convolution"):
                return None if self._is_const(node.input_value(0)) else _Writer(node, biases, path)
            ins = [node.input_value(i) for i in range(node.get_input_size())]
            if not ins or (t in _SHAPE_OPS and self._is_const(ins[0])):
                return None
            if t in _SHAPE_OPS and all(self._is_const(x) for x in ins[1:]):
                nxt = ins[0]
            elif t in ("Add", "Multiply") and [self._is_const(x) for x in ins].count(True) == 1:
                k = [self._is_const(x) for x in ins].index(False)
                nxt = ins[k]
                if t == "Add":
                    biases.append((node, 1 - k))
            else:
                return None
            if len([r for r in nxt.get_target_inputs() if r.get_node().get_type_name() != "Result"]) != 1:
                return None
            path.append(nxt)
            cur = nxt

    # -- the pass --------------------------------------------------------------------------
    def run(self) -> int:
        order = self.model.get_ordered_ops()
        for n in order:
            t = n.get_type_name()
            # a ShapeOf of a static shape folds to a constant later (a Reshape's target shape)
            if t == "Constant" or (t == "ShapeOf" and n.get_input_partial_shape(0).is_static) \
                    or (t not in ("Parameter", "ReadValue") and n.get_input_size() > 0
                        and all(self._is_const(n.input_value(i)) for i in range(n.get_input_size()))):
                self.const.add(n.get_name())
        for n in order:
            if self._is_residual(n):
                self._scale_residual(n)
        if not self.residuals:
            return 0
        for out in list(self.scaled.values()):
            self._absorb_rms_norms(out)
            self._absorb_mvns(out)
        for out in list(self.scaled.values()):
            self._scale_up_readers(out)
        self.model.validate_nodes_and_infer_types()
        return len(self.residuals)

    def _is_residual(self, n: ov.Node) -> bool:
        if n.get_type_name() != "Add" or n.get_output_element_type(0) not in (ov.Type.f32, ov.Type.f16):
            return False
        ins = [n.input_value(i) for i in (0, 1)]
        if any(self._is_const(x) or not x.get_partial_shape().is_static for x in ins):
            return False
        if ins[0].get_shape() != ins[1].get_shape():
            return False
        if any(_key(x) in self.scaled or self._writer(x) is not None for x in ins):
            return True
        # a post-norm block (Gemma-2, OLMo-2): the writer is a norm, the stream feeds the next RMSNorm
        return bool(self._rms_norms(n.output(0)))

    def _scale_residual(self, n: ov.Node) -> None:
        for i in (0, 1):
            src = n.input_value(i)
            if _key(src) in self.scaled:
                continue
            w = self._writer(src)
            if w is None:  # the embedding that starts the stream
                self._scale_down_input(n, i)
                continue
            self._scale_down_input(w.layer, 0)
            for bias, i_const in w.biases:
                self._scale_down_input(bias, i_const)
            for inner in w.path:  # model outputs (the numerics report's captures) read the unscaled value
                readers = [r for r in inner.get_target_inputs() if r.get_node().get_type_name() == "Result"]
                if readers:
                    self._restore(inner, readers, self.s)
            self.scaled[_key(src)] = src
        self.residuals.add(n.get_name())
        self.scaled[(n.get_name(), 0)] = n.output(0)

    def _rms_norms(self, x: ov.Output) -> list[_Norm]:
        """The RMSNorms reading ``x`` (found, not changed)."""
        norms = []
        for tin in x.get_target_inputs():
            sq = tin.get_node()
            t = sq.get_type_name()
            square = (t == "Power" and tin.get_index() == 0 and _is_scalar_const(sq.input_value(1), 2.0)) \
                or (t == "Multiply" and _key(sq.input_value(0)) == _key(sq.input_value(1)) == _key(x))
            found = self._rms_tail(x, sq) if square else None
            if found is not None and (found.eps_add is None or _const_value(found.eps()) is not None):
                norms.append(found)
        return norms

    def _absorb_rms_norms(self, x: ov.Output) -> None:
        """Each RMSNorm reading ``x``: its eps becomes eps / s^2, its two reads of ``x`` are absorbed."""
        for norm in self._rms_norms(x):
            if norm.eps_add is not None:
                data = _const_value(norm.eps())
                assert data is not None  # _rms_norms checked it
                new = ops.constant((data / np.float64(self.s) ** 2).astype(data.dtype))
                norm.eps_add.input(norm.eps_index).replace_source_output(new.output(0))
            for node, e in norm.inner:  # model outputs (the numerics report's captures) read the unscaled value
                readers = [r for r in node.output(0).get_target_inputs() if r.get_node().get_type_name() == "Result"]
                if readers:
                    self._restore(node.output(0), readers, self.s ** e)
            for i in range(norm.square.get_input_size()):
                if _key(norm.square.input_value(i)) == _key(x):
                    self.absorbed.add((norm.square.get_name(), i))
            self.absorbed.add((norm.final.get_name(), norm.final_index))

    def _absorb_mvns(self, x: ov.Output) -> None:
        """Each MVN (LayerNorm) normalizing the variance of ``x`` is re-made with its eps scaled so
        that it reads ``x / s`` exactly: eps / s^2 inside the square root, eps / s outside."""
        for tin in list(x.get_target_inputs()):
            mvn = tin.get_node()
            if mvn.get_type_name() != "MVN" or mvn.get_input_size() != 2 or tin.get_index() != 0:
                continue  # MVN-1 (no axes input) is left to the scale-up
            attrs = mvn.get_attributes()
            if not attrs["normalize_variance"]:
                continue  # x - mean(x) scales with x: not invariant
            inside = str(attrs["eps_mode"]).upper() == "INSIDE_SQRT"
            eps = float(attrs["eps"]) / (self.s ** 2 if inside else self.s)
            new = ops.mvn(x, mvn.input_value(1), True, eps, "inside_sqrt" if inside else "outside_sqrt")
            new.set_friendly_name(mvn.get_friendly_name())
            for r in list(mvn.output(0).get_target_inputs()):
                r.replace_source_output(new.output(0))
            self.absorbed.add((new.get_name(), 0))

    @staticmethod
    def _only_reader(node: ov.Node) -> ov.Node | None:
        """The one op reading ``node`` (model outputs aside), else None."""
        readers = [r.get_node() for r in node.output(0).get_target_inputs() if r.get_node().get_type_name() != "Result"]
        return readers[0] if len(readers) == 1 else None

    def _rms_tail(self, x: ov.Output, sq: ov.Node) -> _Norm | None:
        """From the square of x: ReduceMean -> [Add eps] -> (Sqrt -> Divide(c, .) | Power(-0.5)) ->
        Multiply(x, .), or ... -> Sqrt -> Divide(x, .).  (eps Add, final node, its input reading x)."""
        # each inner node's value is its unscaled value / s**e: (node, e), for model outputs reading it
        inner: list[tuple[ov.Node, int]] = [(sq, 2)]
        mean = self._only_reader(sq)
        if mean is None or mean.get_type_name() != "ReduceMean":
            return None
        cur, eps_add = mean, None
        inner.append((mean, 2))
        nxt = self._only_reader(cur)
        if nxt is not None and nxt.get_type_name() == "Add" and any(self._is_const(nxt.input_value(i)) for i in (0, 1)):
            eps_add, cur = nxt, nxt
            inner.append((nxt, 2))
        end = self._rsqrt_tail(x, cur, inner)
        if end is None:
            return None
        eps_index = 0 if eps_add is None or self._is_const(eps_add.input_value(0)) else 1
        return _Norm(sq, eps_add, eps_index, end[0], end[1], inner)

    def _rsqrt_tail(self, x: ov.Output, cur: ov.Node, inner: list[tuple[ov.Node, int]]) -> tuple[ov.Node, int] | None:
        """After mean(x^2) + eps: the node that multiplies (divides) x by its rsqrt (sqrt), and the input reading x."""
        nxt = self._only_reader(cur)
        if nxt is None:
            return None
        if nxt.get_type_name() == "Sqrt":
            root = nxt
            inner.append((root, 1))
            nxt = self._only_reader(root)
            if nxt is None or nxt.get_type_name() != "Divide":
                return None
            if _key(nxt.input_value(0)) == _key(x) and _key(nxt.input_value(1)) == _key(root.output(0)):
                return nxt, 0  # x / sqrt(...)
            if not _is_scalar_const(nxt.input_value(0)):
                return None
        elif not (nxt.get_type_name() == "Power" and _is_scalar_const(nxt.input_value(1), -0.5)):
            return None
        inner.append((nxt, -1))  # c / sqrt(...) or (...) ** -0.5
        final = self._only_reader(nxt)
        if final is None or final.get_type_name() != "Multiply":
            return None
        for i in (0, 1):
            if _key(final.input_value(i)) == _key(x) and _key(final.input_value(1 - i)) == _key(nxt.output(0)):
                return final, i
        return None

    def _restore(self, out: ov.Output, readers: list[ov.Input], factor: float) -> None:
        """``readers`` (model outputs) read ``out * factor``, computed in f32."""
        up = ops.multiply(out, self._factor(out, factor))
        up.set_friendly_name(f"{out.get_node().get_friendly_name()}/act_scale_up")
        up.get_rt_info()[KEEP_F32] = True
        for tin in readers:
            tin.replace_source_output(up.output(0))

    def _scale_up_readers(self, x: ov.Output) -> None:
        readers = [tin for tin in x.get_target_inputs()
                   if tin.get_node().get_name() not in self.residuals
                   and (tin.get_node().get_name(), tin.get_index()) not in self.absorbed]
        if not readers:
            return
        to_results = [tin for tin in readers if tin.get_node().get_type_name() == "Result"]
        to_ops = [tin for tin in readers if tin.get_node().get_type_name() != "Result"]
        if to_ops:
            up = ops.multiply(x, self._factor(x, self.s))
            up.set_friendly_name(f"{x.get_node().get_friendly_name()}/act_scale_up")
            for tin in to_ops:
                tin.replace_source_output(up.output(0))
        if to_results:  # the f32 user output, not an f16 store
            self._restore(x, to_results, self.s)


def scale_activations(model: ov.Model, s: float) -> int:
    """Carry ``model``'s residual streams divided by ``s`` (in place); the number of residual Adds
    scaled (0: the model has none, and is unchanged)."""
    if s <= 0:
        return 0
    return _Scaler(model, s).run()
