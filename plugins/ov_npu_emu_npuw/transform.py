"""Stateful LLM IR → static prefill model and static generate variants (stateless, KV as I/O)."""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Mapping

import numpy as np
import openvino as ov
import openvino.opset13 as ops
from openvino._offline_transformations import stateful_to_stateless_transformation

from ov_npu_emu.errors import CompileError, UserInputError

__all__ = [
    "EMBED",
    "SCALE_SUFFIX",
    "ZP_SUFFIX",
    "KVLayout",
    "cache_rope",
    "group_attention",
    "make_generate_model",
    "make_lm_head_model",
    "make_prefill_model",
    "rotate_half_as_matmul",
    "PositionMask",
    "position_masks",
    "to_stateless",
]

logger = logging.getLogger(__name__)

_PAST = re.compile(r"^past_key_values\.(\d+)\.(key|value)$")
_REQUIRED = ("input_ids", "attention_mask", "position_ids")


@dataclasses.dataclass(frozen=True)
class KVLayout:
    """Names and per-tensor shape facts of the KV cache, in ``past_key_values`` order."""

    past_names: tuple[str, ...]  # past_key_values.N.key|value
    present_names: tuple[str, ...]  # present.N.key|value (same order)
    num_heads: tuple[int, ...]  # Hkv per tensor
    head_dims: tuple[int, ...]  # D per tensor
    v_transposed: bool = False  # value tensors stored [1, Hkv, D, S] (NPUW_LLM_OPTIMIZE_V_TENSORS)

    def transposed(self, i: int) -> bool:
        """Whether KV tensor ``i`` is stored with the sequence as the last axis."""
        return self.v_transposed and self.past_names[i].endswith(".value")

    def with_v_transposed(self, flag: bool) -> KVLayout:
        return dataclasses.replace(self, v_transposed=flag)


def _names(model: ov.Model) -> set[str]:
    return {n for p in model.inputs for n in p.get_names()}


def to_stateless(model: ov.Model) -> tuple[ov.Model, KVLayout]:
    """Clone ``model`` and lift its KV variables to ``past_key_values.*`` inputs / ``present.*`` outputs.

    Uses OpenVINO's own StatefulToStateless pass (the one real NPUW runs), then checks what it made.
    """
    names = _names(model)
    missing = [n for n in _REQUIRED if n not in names and n != "position_ids"]
    if missing:
        raise UserInputError(
            f"NPUW_LLM needs a stateful LLM with inputs input_ids, attention_mask, beam_idx "
            f"(and position_ids where the model has them); the model lacks {missing}. "
            "Export it with optimum-intel (task text-generation-with-past)."
        )
    if "beam_idx" not in names or not model.get_sinks():
        raise UserInputError(
            "NPUW_LLM needs a stateful LLM (ReadValue/Assign KV variables and a beam_idx input); "
            "this model is stateless. Export it with optimum-intel without --disable-stateful."
        )
    m = model.clone()
    try:
        stateful_to_stateless_transformation(m)
    except RuntimeError as e:
        raise CompileError(
            f"stateful_to_stateless_transformation failed: {e}", stage="transform"
        ) from e
    if "position_ids" not in names:
        # Like the real AddPositionIdsParam: every static sub-model takes positions (unused by
        # a model that derives them from the mask, used by the sliding-window rewrite).
        pos = ops.parameter([-1, -1], ov.Type.i64, name="position_ids")
        pos.output(0).get_tensor().set_names({"position_ids"})
        m.add_parameters([pos])
    past, present, heads, dims = [], [], [], []
    for p in m.inputs:
        name = p.get_any_name()
        mt = _PAST.match(name)
        if not mt:
            continue
        ps = p.get_partial_shape()
        if ps.rank.get_length() != 4 or not ps[1].is_static or not ps[3].is_static:
            raise UserInputError(
                f"KV input {name} has shape {ps}; NPUW needs [batch, kv_heads, seq, head_dim] "
                "with static kv_heads and head_dim"
            )
        past.append(name)
        present.append(f"present.{mt.group(1)}.{mt.group(2)}")
        heads.append(ps[1].get_length())
        dims.append(ps[3].get_length())
    outs = {n for o in m.outputs for n in o.get_names()}
    if not past or any(n not in outs for n in present) or "logits" not in outs:
        raise CompileError(
            f"stateful_to_stateless produced unexpected I/O: inputs {sorted(_names(m))}, "
            f"outputs {sorted(outs)}; expected past_key_values.N.* / present.N.* / logits",
            stage="transform",
        )
    return m, KVLayout(tuple(past), tuple(present), tuple(heads), tuple(dims))


def _result(model: ov.Model, name: str) -> ov.Node:
    for r in model.get_results():
        if name in r.output(0).get_names():
            return r
    raise CompileError(f"output {name} not found", stage="transform")


def _param(model: ov.Model, name: str) -> ov.Node:
    for p in model.get_parameters():
        if name in p.output(0).get_names():
            return p
    raise CompileError(f"input {name} not found", stage="transform")


def _kv_concat(param: ov.Node) -> ov.Node:
    """The Concat(past, new) that consumes a past KV parameter (optimum layout)."""
    targets = list(param.output(0).get_target_inputs())
    for t in targets:
        node = t.get_node()
        if node.get_type_name() == "Concat" and node.get_input_size() == 2 and t.get_index() == 0:
            return node
    raise CompileError(
        f"{param.get_friendly_name()}: expected Concat(past, new) as consumer, found "
        f"{[t.get_node().get_type_name() for t in targets]}",
        stage="transform",
    )


def _remove_empty_kv_inputs(model: ov.Model, kv: KVLayout) -> None:
    """Static prefill has no past: Concat(past[0], new) becomes new and the past inputs go away.

    Real exports also read the past length through ShapeOf(past) (transformers' causal-mask and
    cache-position code); with no past that shape is [1, Hkv, 0, D], so each ShapeOf becomes that
    constant (as the real RemoveEmptyKVTensors does) before the parameter is removed.
    """
    for i, name in enumerate(kv.past_names):
        param = _param(model, name)
        concat = _kv_concat(param)
        for t in list(param.output(0).get_target_inputs()):
            user = t.get_node()
            if user.get_instance_id() == concat.get_instance_id():
                continue
            if user.get_type_name() != "ShapeOf":
                raise CompileError(
                    f"{name}: the static prefill model has no past KV, but "
                    f"{user.get_type_name()} {user.get_friendly_name()!r} reads it; only "
                    "Concat(past, new) and ShapeOf(past) can be resolved",
                    stage="transform",
                )
            dt = user.get_output_element_type(0).to_dtype()
            empty = np.array([1, kv.num_heads[i], 0, kv.head_dims[i]], dt)
            user.output(0).replace(ops.constant(empty).output(0))
        concat.output(0).replace(concat.input_value(1))
        model.remove_parameter(param)


def _redirect_new_kv_to_output(model: ov.Model, kv: KVLayout) -> None:
    """present outputs only the new rows: Result(Concat(past, new)) becomes Result(new)."""
    for name in kv.present_names:
        res = _result(model, name)
        src = res.input_value(0).get_node()
        if src.get_type_name() != "Concat" or src.get_input_size() != 2:
            raise CompileError(
                f"{name}: expected Result(Concat(past, new)), found {src.get_type_name()}",
                stage="transform",
            )
        res.input(0).replace_source_output(src.input_value(1))


def _convert_kv_precision(model: ov.Model, kv: KVLayout, et: ov.Type, has_past: bool) -> None:
    """Store KV as ``et`` at the model boundary; compute stays in the model's own precision."""
    if has_past:
        for name in kv.past_names:
            param = _param(model, name)
            orig = param.get_element_type()
            if orig == et:
                continue
            targets = list(param.output(0).get_target_inputs())
            param.set_element_type(et)
            param.validate_and_infer_types()
            conv = ops.convert(param.output(0), orig)
            for t in targets:
                t.replace_source_output(conv.output(0))
    for name in kv.present_names:
        res = _result(model, name)
        src = res.input_value(0)
        if src.get_element_type() != et:
            res.input(0).replace_source_output(ops.convert(src, et).output(0))


#: u8/u4 KV: the past's scale and zero-point inputs are named ``past_key_values.N.key`` + these
SCALE_SUFFIX = ".scale"
ZP_SUFFIX = ".zp"


def dequantize_past(model: ov.Model, kv: KVLayout, precision: str, group: int) -> None:
    """u8/u4 KV: each static past input becomes stored bytes + f16 scale + f16 zero point,
    dequantised ``q · scale + zp`` by the graph (scheme: kvquant.py; keys per channel with one
    scale row per block of G tokens, gathered to the tokens; values per token and group).  Run last, on a static
    model: the other rewrites keep seeing the plain past Parameter."""
    from ov_npu_emu_npuw.kvquant import stored_dim

    for name, d in zip(kv.past_names, kv.head_dims, strict=False):
        old = _param(model, name)
        shape = old.get_partial_shape().to_shape()
        _, h, s, d_ = shape
        if d_ != d:
            raise CompileError(f"{name}: expected head dim {d}, got shape {list(shape)}", stage="transform")
        g = group or d
        if d % g or (precision == "u4" and d % 2):
            raise CompileError(
                f"KV head dim {d} of {name} does not split into groups of {g}"
                + (" (u4 also needs an even head dim)" if precision == "u4" else "")
                + "; set NPUW_EMU_KV_GROUP_SIZE to a divisor of it",
                stage="transform",
            )
        ng = d // g
        key = name.endswith(".key")
        aux = [1, h, -(-s // g), d] if key else [1, h, s, ng]
        data = ops.parameter([1, h, s, stored_dim(precision, d)], ov.Type.u8, name=name)
        data.output(0).set_names({name})
        scale = ops.parameter(aux, ov.Type.f16, name=name + SCALE_SUFFIX)
        scale.output(0).set_names({name + SCALE_SUFFIX})
        zp = ops.parameter(aux, ov.Type.f16, name=name + ZP_SUFFIX)
        zp.output(0).set_names({name + ZP_SUFFIX})
        x = ops.convert(data, ov.Type.f32).output(0)
        if precision == "u4":  # low nibble: values [0, D/2), high nibble: [D/2, D)
            hi = ops.floor(ops.multiply(x, ops.constant(np.float32(1 / 16)))).output(0)
            lo = ops.subtract(x, ops.multiply(hi, ops.constant(np.float32(16)))).output(0)
            x = ops.concat([lo, hi], 3).output(0)
        sc = ops.convert(scale, ov.Type.f32).output(0)
        z = ops.convert(zp, ov.Type.f32).output(0)
        if key:  # per channel, one row of scales per block of g tokens: spread to the tokens
            block = ops.constant(np.arange(s, dtype=np.int64) // g)
            axis = ops.constant(np.int64(2))
            sc = ops.gather(sc, block, axis).output(0)
            z = ops.gather(z, block, axis).output(0)
        elif ng > 1:
            grouped = ops.constant(np.array([1, h, s, ng, g], np.int64))
            x = ops.reshape(x, grouped, False).output(0)
            sc = ops.unsqueeze(sc, ops.constant(np.int64(4))).output(0)
            z = ops.unsqueeze(z, ops.constant(np.int64(4))).output(0)
        y = ops.add(ops.multiply(x, sc), z).output(0)
        if ng > 1 and not key:
            y = ops.reshape(y, ops.constant(np.array([1, h, s, d], np.int64)), False).output(0)
        y = ops.convert(y, old.get_element_type()).output(0)
        for t in list(old.output(0).get_target_inputs()):
            t.replace_source_output(y)
        model.replace_parameter(model.get_parameter_index(old), data)
        model.add_parameters([scale, zp])
    model.validate_nodes_and_infer_types()


def _transpose_v(model: ov.Model, kv: KVLayout, has_past: bool) -> None:
    """Store V as [1,H,D,S] (real OptimizeValueTensors' layout) by transposing at the boundary."""
    order = ops.constant([0, 1, 3, 2], ov.Type.i64)
    for i, (past, present) in enumerate(zip(kv.past_names, kv.present_names, strict=False)):
        if not kv.transposed(i):
            continue
        if has_past:
            param = _param(model, past)
            targets = list(param.output(0).get_target_inputs())
            ps = param.get_partial_shape()
            param.set_partial_shape(ov.PartialShape([ps[0], ps[1], ps[3], ps[2]]))
            param.validate_and_infer_types()
            back = ops.transpose(param.output(0), order)
            for t in targets:
                t.replace_source_output(back.output(0))
        res = _result(model, present)
        res.input(0).replace_source_output(ops.transpose(res.input_value(0), order).output(0))


def _kv_heads(out: ov.Output) -> ov.Output:
    """The un-repeated KV tensor [B, Hkv, S, D] behind a GQA head repeat, else ``out`` itself.

    optimum exports ``repeat_kv`` as Reshape(Broadcast(Unsqueeze(kv, 2), [B, Hkv, G, S, D])).
    """
    reshape = out.get_node()
    if reshape.get_type_name() != "Reshape":
        return out
    bcast = reshape.input_value(0).get_node()
    if bcast.get_type_name() != "Broadcast":
        return out
    unsq = bcast.input_value(0).get_node()
    if unsq.get_type_name() != "Unsqueeze":
        return out
    kv = unsq.input_value(0)
    kv_shape, q_shape = kv.get_partial_shape(), out.get_partial_shape()
    if not (kv_shape.is_static and q_shape.is_static and kv_shape.rank.get_length() == 4):
        return out
    b, hkv, s, d = kv_shape.to_shape()
    _, hq, s2, d2 = q_shape.to_shape()
    if (s, d) != (s2, d2) or hq % hkv:
        return out
    return kv


def _is_swap_last_two(node: ov.Node) -> bool:
    if node.get_type_name() != "Transpose":
        return False
    order = node.input_value(1).get_node()
    if order.get_type_name() != "Constant":
        return False
    return [int(x) for x in order.get_data().ravel()] == [0, 1, 3, 2]


def _stored_transposed(v: ov.Output) -> ov.Output | None:
    """``Concat(Transpose(past_T), new)`` on axis 2 → ``Concat(past_T, Transpose(new))`` on axis 3.

    With NPUW_LLM_OPTIMIZE_V_TENSORS the past V arrives as [B, H, D, S] and ``_transpose_v``
    turns it back for the model; when the attention can read [B, H, D, S] itself (MatMul with
    transpose_b), both transposes of the long past go away and only the one new row is moved.
    An f16→f32 Convert between the past and its Transpose is kept (on the untransposed past).
    """
    concat = v.get_node()
    if concat.get_type_name() != "Concat" or concat.get_input_size() != 2:
        return None
    rank = v.get_partial_shape().rank.get_length()
    if concat.get_attributes()["axis"] not in (2, 2 - rank):
        return None
    past, new = concat.input_value(0), concat.input_value(1)
    convert = None
    if past.get_node().get_type_name() == "Convert":
        convert = past.get_node()
        past = convert.input_value(0)
    if not _is_swap_last_two(past.get_node()):
        return None
    stored = past.get_node().input_value(0)  # [B, H, D, S−1]
    if convert is not None:
        stored = ops.convert(stored, convert.get_destination_type()).output(0)
    order = ops.constant([0, 1, 3, 2], ov.Type.i64)
    return ops.concat([stored, ops.transpose(new, order).output(0)], 3).output(0)


def _head_independent(mask: ov.Output) -> bool:
    """A 4-D attention mask that is the same for every head ([B|1, 1, 1, S]), or a scalar."""
    ps = mask.get_partial_shape()
    if ps.rank.is_dynamic:
        return False
    r = ps.rank.get_length()
    if r == 0:
        return True
    return (
        r == 4
        and ps[1].is_static
        and ps[1].get_length() == 1
        and ps[2].is_static
        and ps[2].get_length() == 1
    )


def group_attention(model: ov.Model) -> int:
    """Rewrite each non-causal SDPA of a one-token model as grouped-query MatMul/Softmax/MatMul.

    For one query token the query heads that share a KV head become the rows of one small GEMM
    ([B, Hkv, G, D] x [B, Hkv, S, D]^T), so the KV heads are never broadcast to Hq and K is never
    transposed in memory (MatMul's transpose_b reads it in place).  On the CPU plugin the SDPA of
    a static one-token model otherwise runs as Broadcast + Transpose(K) + an MHA subgraph per
    layer; this form has ~16 fewer runtime nodes per layer and gave bit-identical outputs
    (docs/npuw.md, "grouped attention").  Returns how many SDPA nodes were rewritten.
    """
    done = 0
    for sdpa in model.get_ordered_ops():
        if sdpa.get_type_name() != "ScaledDotProductAttention" or sdpa.get_attributes().get(
            "causal", False
        ):
            continue
        if sdpa.get_input_size() > 5:  # attention sinks: leave it to the device
            continue
        q = sdpa.input_value(0)
        k, v = _kv_heads(sdpa.input_value(1)), _kv_heads(sdpa.input_value(2))
        qs, ks, vs = (x.get_partial_shape() for x in (q, k, v))
        if not (qs.is_static and ks.is_static and vs.is_static) or qs.rank.get_length() != 4:
            continue
        b, hq, lq, d = qs.to_shape()
        hkv = ks.to_shape()[1]
        if lq != 1 or vs.to_shape()[1] != hkv or hq % hkv:
            continue
        mask = sdpa.input_value(3) if sdpa.get_input_size() > 3 else None
        if mask is not None and not _head_independent(mask):
            continue  # a per-head mask would not line up with the grouped heads
        et = q.get_element_type()
        qg = ops.reshape(q, ops.constant([b, hkv, hq // hkv, d], ov.Type.i64), False)
        scores = ops.matmul(qg, k, False, True)  # [B, Hkv, G, S]
        if sdpa.get_input_size() > 4:
            scale = sdpa.input_value(4)
        else:
            scale = ops.constant(np.array([1.0 / np.sqrt(d)], et.to_dtype()))
        scores = ops.multiply(scores, scale)
        if mask is not None:
            if mask.get_element_type() == ov.Type.boolean:  # True = attend
                zero = ops.constant(np.array(0, et.to_dtype()))
                neg = ops.constant(np.array(-np.inf, et.to_dtype()))
                mask = ops.select(mask, zero, neg).output(0)
            scores = ops.add(scores, mask)
        probs = ops.softmax(scores, -1)
        v_t = _stored_transposed(v)
        if v_t is not None:  # V kept as [B, Hkv, D, S] (OPTIMIZE_V_TENSORS): read it in place
            out = ops.matmul(probs, v_t, False, True)  # [B, Hkv, G, D]
        else:
            out = ops.matmul(probs, v, False, False)  # [B, Hkv, G, D]
        out = ops.reshape(out, ops.constant([b, hq, 1, d], ov.Type.i64), False)
        out.set_friendly_name(sdpa.get_friendly_name())
        sdpa.output(0).replace(out.output(0))
        done += 1
    if done:
        model.validate_nodes_and_infer_types()
    return done


def _only_input(node: ov.Node, param: ov.Node) -> bool:
    """Whether ``node`` depends on no Parameter other than ``param`` (and on ``param``)."""
    seen: set[int] = set()
    stack = [node]
    found = False
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if n.get_type_name() == "Parameter":
            if n.get_friendly_name() != param.get_friendly_name():
                return False
            found = True
        stack.extend(n.input_value(i).get_node() for i in range(n.get_input_size()))
    return found


def cache_rope(model: ov.Model, positions: int) -> int:
    """Replace the sin/cos computed from ``position_ids`` by a Gather from precomputed tables.

    Like the real NPUW_LLM_CACHE_ROPE: every Sin/Cos whose value depends on ``position_ids`` alone
    becomes ``Gather(table, position_ids)`` with ``table`` holding positions ``[0, positions)``.
    The tables are computed by the CPU plugin in f32 from the model's own subgraph (so any RoPE
    variant the model computes is cached as it is), and each table must change along exactly one
    axis with the positions.  Returns how many Sin/Cos outputs were replaced.
    """
    pos = _param(model, "position_ids")
    q_len = pos.get_partial_shape()
    if not q_len.is_static or q_len.rank.get_length() != 2 or q_len[0].get_length() != 1:
        return 0
    trig = [
        op
        for op in model.get_ordered_ops()
        if op.get_type_name() in ("Sin", "Cos") and _only_input(op, pos)
    ]
    if not trig:
        return 0
    # Evaluate the sin/cos subgraph for all positions on a throw-away clone.
    clone = model.clone()
    by_name = {op.get_friendly_name(): op for op in clone.get_ordered_ops()}
    sub_pos = _param(clone, "position_ids")
    sub = ov.Model([by_name[op.get_friendly_name()].output(0) for op in trig], [sub_pos], "rope")
    try:
        sub.reshape({sub_pos.output(0): ov.PartialShape([1, positions])})
        compiled = ov.Core().compile_model(sub, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        tables = compiled({0: np.arange(positions, dtype=pos.get_element_type().to_dtype())[None]})
    except RuntimeError as e:
        logger.debug("RoPE cache: cannot evaluate the sin/cos subgraph (%s); left as is", e)
        return 0
    flat = ops.reshape(pos, ops.constant([-1], ov.Type.i64), False)
    done = 0
    for i, op in enumerate(trig):
        shape = list(op.get_output_partial_shape(0).to_shape())
        table = np.asarray(tables[i])
        changed = [a for a, (d, t) in enumerate(zip(shape, table.shape, strict=False)) if d != t]
        if (
            len(table.shape) != len(shape)
            or len(changed) != 1
            or table.shape[changed[0]] != positions
        ):
            continue
        gathered = ops.gather(ops.constant(table), flat, ops.constant(changed[0], ov.Type.i64))
        out = ops.reshape(gathered, ops.constant(shape, ov.Type.i64), False)
        out.set_friendly_name(op.get_friendly_name())
        op.output(0).replace(out.output(0))
        done += 1
    if done:
        model.validate_nodes_and_infer_types()
    return done


def _halves(concat: ov.Node) -> ov.Output | None:
    """``x`` when ``concat`` is HF's rotate_half: Concat(−x[..., h:], x[..., :h]) on the last
    axis, with the halves taken by one Split/VariadicSplit of ``x`` in two equal parts."""
    if concat.get_input_size() != 2:
        return None
    neg, first = concat.input_value(0), concat.input_value(1)
    if neg.get_node().get_type_name() != "Negative":
        return None
    second = neg.get_node().input_value(0)
    split = second.get_node()
    if (
        split.get_type_name() not in ("Split", "VariadicSplit")
        or first.get_node().get_instance_id() != split.get_instance_id()
        or second.get_index() != 1
        or first.get_index() != 0
        or split.get_output_size() != 2
    ):
        return None
    x = split.input_value(0)
    ps = x.get_partial_shape()
    if not ps.rank.is_static or not ps[ps.rank.get_length() - 1].is_static:
        return None
    rank, d = ps.rank.get_length(), ps[ps.rank.get_length() - 1].get_length()
    axis = concat.get_attributes()["axis"]
    if axis not in (-1, rank - 1) or d % 2:
        return None
    if list(split.get_output_partial_shape(0)) != list(split.get_output_partial_shape(1)):
        return None
    return x


def rotate_half_as_matmul(model: ov.Model) -> int:
    """Replace each HF ``rotate_half`` (Split, Negative, Concat) by one MatMul with a constant
    ±1 permutation matrix: x·R has exactly one non-zero product per output, so it is exact;
    three runtime nodes become one.  Returns how many were replaced."""
    done = 0
    for concat in model.get_ordered_ops():
        if concat.get_type_name() != "Concat":
            continue
        x = _halves(concat)
        if x is None:
            continue
        d = x.get_partial_shape()[x.get_partial_shape().rank.get_length() - 1].get_length()
        h = d // 2
        rot = np.zeros((d, d), x.get_element_type().to_dtype())
        rot[np.arange(h) + h, np.arange(h)] = -1  # out[i] = −x[i + h]
        rot[np.arange(h), np.arange(h) + h] = 1  # out[i + h] = x[i]
        # [out, in] with transpose_b: the layout the CPU plugin's FullyConnected takes as is
        out = ops.matmul(x, ops.constant(np.ascontiguousarray(rot.T)), False, True)
        out.set_friendly_name(concat.get_friendly_name())
        concat.output(0).replace(out.output(0))
        done += 1
    if done:
        model.validate_nodes_and_infer_types()
    return done


@dataclasses.dataclass(frozen=True)
class PositionMask:
    """How one SDPA's mask depends on positions, when KV slots and positions differ in NPUW's
    layouts: a causal window of ``window`` tokens (0: none) and a per-head linear bias
    ``slopes[h] * (pos(k) - pos(q))`` (ALiBi; empty: none)."""

    window: int = 0
    slopes: tuple[float, ...] = ()


def _classify(mask: np.ndarray, capacity: int) -> PositionMask | None:
    """None for a plain causal mask (correct on slots as it is); a PositionMask for a window or a
    linear bias; raises ValueError for anything else.  ``mask`` is [..., capacity, capacity] for
    a ``capacity``-token prompt at positions 0.. with no past."""
    m = mask.reshape(-1, capacity, capacity)
    if m.dtype == np.bool_:
        allowed, bias = m, np.zeros(m.shape, np.float32)
    else:
        lowest = float(m.min())
        allowed = m > lowest / 2 if lowest <= -1e4 else np.ones(m.shape, bool)
        bias = np.where(allowed, m, 0).astype(np.float64)
    dist = np.arange(capacity)[:, None] - np.arange(capacity)[None, :]  # pos(q) - pos(k)
    causal = dist >= 0
    window = int(allowed[0, -1].sum())
    if not all((a == (causal & (dist < window))).all() for a in allowed):
        raise ValueError("its allowed (query, key) pairs are neither causal nor a causal window")
    window = 0 if window >= capacity else window
    slopes: tuple[float, ...] = ()
    if bias.any():
        # a row-constant offset does not change softmax: only bias(k) - bias(q) matters
        rel = bias - np.diagonal(bias, axis1=1, axis2=2)[:, :, None]
        slopes = tuple(float(-rel[h, -1, 0] / (capacity - 1)) for h in range(len(rel)))
        expect = -np.asarray(slopes)[:, None, None] * dist[None]
        if not np.allclose(np.where(allowed, rel, 0), np.where(allowed, expect, 0), rtol=1e-4, atol=1e-3):
            raise ValueError("it adds a position bias that is not linear in the distance (not ALiBi)")
    if not window and not slopes:
        return None
    return PositionMask(window, slopes)


def position_masks(stateless: ov.Model, kv: KVLayout, capacity: int) -> dict[str, PositionMask]:
    """Per SDPA whose mask needs token positions in NPUW's layouts: what it computes.

    Exports compute masks from KV *slot* indices (``kv_idx <= q_idx``, ``kv_idx > q_idx - W``,
    ALiBi's ``slope * (kv_idx - q_idx)``), which are positions only in a contiguous cache.
    NPUW's buffers are not: the prefill is right-aligned and padded, a generate step keeps its
    history left-aligned with the new token in the last column.  A causal mask survives that
    (padding is masked by ``attention_mask``); a window or a distance bias does not.  The mask
    subgraph is evaluated once on the CPU plugin for a ``capacity``-token prompt with no past and
    classified per SDPA (see :func:`_classify`); those with a window narrower than ``capacity``
    or a bias are rewritten by :func:`_position_masks`, anything else is a CompileError.
    """
    m = stateless.clone()
    sdpas = [op for op in m.get_ordered_ops() if op.get_type_name() == "ScaledDotProductAttention"]
    sdpas = [op for op in sdpas if op.get_input_size() > 3]
    if not sdpas:
        return {}
    probe = ov.Model([ops.result(op.input_value(3)) for op in sdpas], m.get_parameters(), "masks")
    shapes: dict[str, ov.PartialShape] = {}
    feed: dict[str, np.ndarray] = {}
    for p in probe.get_parameters():
        names = p.output(0).get_names()
        name = next((n for n in (*kv.past_names, *_REQUIRED) if n in names), "")
        dt = p.get_element_type().to_dtype()
        if name in kv.past_names:
            i = kv.past_names.index(name)
            shape = [1, kv.num_heads[i], 0, kv.head_dims[i]]
            feed[name] = np.zeros(shape, dt)
        elif name == "position_ids":
            shape = [1, capacity]
            feed[name] = np.arange(capacity, dtype=dt)[None]
        elif name in ("input_ids", "attention_mask"):
            shape = [1, capacity]
            feed[name] = np.ones(shape, dt)
        else:
            return {}  # inputs we cannot synthesize (embeddings, LoRA): leave the masks as they are
        shapes[name] = ov.PartialShape(shape)
    try:
        probe.reshape(shapes)
        compiled = ov.Core().compile_model(probe, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        masks = compiled(feed)
    except RuntimeError as e:
        logger.warning(
            "attention masks could not be evaluated (%s); left as they are, so a sliding window "
            "or ALiBi (if the model has one) would apply to KV slots, not positions", e
        )
        return {}
    found: dict[str, PositionMask] = {}
    for i, op in enumerate(sdpas):
        mask = np.asarray(masks[i])
        if mask.ndim < 2 or mask.shape[-2:] != (capacity, capacity):
            continue  # not a [.., L, S] mask (e.g. a scalar): nothing position-dependent
        try:
            spec = _classify(mask, capacity)
        except ValueError as e:
            raise CompileError(
                f"SDPA {op.get_friendly_name()!r}: {e}, so NPUW cannot lay its KV cache out "
                "statically (the mask is computed on KV slot indices)",
                stage="transform",
            ) from None
        if spec is not None:
            found[op.get_friendly_name()] = spec
    if found:
        logger.info(
            "attention on positions in %d of %d layers: windows %s, ALiBi in %d",
            len(found), len(sdpas), sorted({s.window for s in found.values() if s.window}),
            sum(bool(s.slopes) for s in found.values()),
        )
    return found


def _position_masks(model: ov.Model, specs: Mapping[str, PositionMask]) -> None:
    """Rewrite each SDPA mask of ``specs`` on token positions instead of KV slots (static shapes).

    The query positions are ``position_ids``; a past slot ``j`` holds position ``j`` (NPUW keeps
    the history left-aligned from 0) and the last L slots hold the current tokens.  Allowed:
    ``attention_mask[j] and 0 <= pos(q) - pos(j) (< W)``; the value added where allowed is
    ``slope[h] * (pos(j) - pos(q))`` with ALiBi, else 0.
    """
    if not specs:
        return
    pos = _param(model, "position_ids").output(0)
    am = _param(model, "attention_mask").output(0)
    q_len = pos.get_partial_shape()[1].get_length()
    s_len = am.get_partial_shape()[1].get_length()
    i64 = ov.Type.i64
    q_flat = ops.convert(ops.reshape(pos, ops.constant([q_len], i64), False), i64)
    kv_pos = q_flat
    if s_len > q_len:
        kv_pos = ops.concat([ops.constant(np.arange(s_len - q_len, dtype=np.int64)), q_flat], 0)
    dist = ops.subtract(
        ops.reshape(q_flat, ops.constant([1, 1, q_len, 1], i64), False),
        ops.reshape(kv_pos, ops.constant([1, 1, 1, s_len], i64), False),
    )
    keep = ops.reshape(
        ops.not_equal(am, ops.constant(np.array(0, am.get_element_type().to_dtype()))),
        ops.constant([1, 1, 1, s_len], i64),
        False,
    )
    causal = ops.logical_and(keep, ops.greater_equal(dist, ops.constant(np.array(0, np.int64))))
    for op in model.get_ordered_ops():
        spec = specs.get(op.get_friendly_name())
        if spec is None or op.get_type_name() != "ScaledDotProductAttention":
            continue
        allowed = causal
        if spec.window:
            allowed = ops.logical_and(causal, ops.less(dist, ops.constant(np.array(spec.window, np.int64))))
        old = op.input_value(3)
        et = old.get_element_type()
        if et == ov.Type.boolean:
            if spec.slopes:
                raise CompileError(f"{op.get_friendly_name()}: a boolean mask cannot carry ALiBi",
                                   stage="transform")
            new = allowed.output(0)
        else:
            dt = et.to_dtype()
            value = ops.constant(np.array(0, dt))
            if spec.slopes:  # [1, H, 1, 1] slopes times [1, 1, L, S] distances
                slopes = np.asarray(spec.slopes, dt).reshape(1, -1, 1, 1)
                value = ops.multiply(ops.constant(-slopes), ops.convert(dist, et))
            fill = ops.constant(np.array(_mask_fill(old), dt))
            new = ops.select(allowed, value, fill).output(0)
        op.input(3).replace_source_output(new)
    model.validate_nodes_and_infer_types()


def _padding_attends_itself(model: ov.Model) -> None:
    """In a padded prefill, let each padding query attend to its own (padding) slot.

    A left-padding query row has every key masked (causal: only earlier slots, all padding).
    Exports whose mask is boolean or filled with -inf make that row NaN, and the NaN hidden
    state becomes NaN K/V in the next layer, which poisons the real rows through 0 * NaN in
    probs @ V (GPTBigCode). Unmasking the diagonal where the key is padding touches no real
    row (their diagonal key is real and already allowed) and keeps the padding rows finite.
    """
    am = _param(model, "attention_mask").output(0)
    q_len = _param(model, "input_ids").get_partial_shape()[1].get_length()
    s_len = am.get_partial_shape()[1].get_length()
    i64 = ov.Type.i64
    pad = ops.reshape(
        ops.equal(am, ops.constant(np.array(0, am.get_element_type().to_dtype()))),
        ops.constant([1, 1, 1, s_len], i64),
        False,
    )
    q_slot = ops.constant(np.arange(s_len - q_len, s_len, dtype=np.int64).reshape(1, 1, q_len, 1))
    k_slot = ops.constant(np.arange(s_len, dtype=np.int64).reshape(1, 1, 1, s_len))
    fix = ops.logical_and(ops.equal(q_slot, k_slot), pad)
    done = 0
    for op in model.get_ordered_ops():
        if op.get_type_name() != "ScaledDotProductAttention" or op.get_input_size() < 4:
            continue
        old = op.input_value(3)
        if old.get_partial_shape().rank.get_length() < 2:
            continue  # a scalar mask: no rows to fix
        if old.get_element_type() == ov.Type.boolean:
            new = ops.logical_or(old, fix)
        else:
            new = ops.select(fix, ops.constant(np.array(0, old.get_element_type().to_dtype())), old)
        op.input(3).replace_source_output(new.output(0))
        done += 1
    if done:
        model.validate_nodes_and_infer_types()


def _mask_fill(mask: ov.Output) -> float:
    """The fill value of a Select(cond, 0, fill) mask, else f16's lowest (NaN-free under f32)."""
    node = mask.get_node()
    if node.get_type_name() == "Select":
        fill = node.input_value(2).get_node()
        if fill.get_type_name() == "Constant" and fill.get_output_shape(0) == []:
            return float(fill.get_data())
    return float(np.finfo(np.float16).min)


EMBED = "npuw_output_embed"


def _head_matmul(model: ov.Model) -> ov.Node | None:
    """The vocabulary MatMul that produces ``logits`` (through Convert/Add/softcap ops), if any."""
    node = _result(model, "logits").input_value(0).get_node()
    hops = 0
    while node.get_type_name() != "MatMul" and hops < 8 and node.get_input_size() >= 1:
        node = node.input_value(0).get_node()
        hops += 1
    if (
        node.get_type_name() != "MatMul"
        or node.input_value(0).get_partial_shape().rank.get_length() != 3
    ):
        return None
    return node


def _slice_logits_to_last(model: ov.Model, keep: int = 1) -> None:
    """Compute the LM head for the last ``keep`` positions only (real NPUW_SLICE_OUT):
    [1,S,E] → [1,keep,E]."""
    mm = _head_matmul(model)
    if mm is None:
        logger.debug("logits are not produced by a MatMul; computing all positions")
        return
    sl = ops.slice(
        mm.input_value(0),
        ops.constant([-keep], ov.Type.i64),
        ops.constant([2**62], ov.Type.i64),
        ops.constant([1], ov.Type.i64),
        ops.constant([1], ov.Type.i64),
    )
    mm.input(0).replace_source_output(sl.output(0))


def _redirect_logits_to_embed(model: ov.Model) -> None:
    """With a shared head, the model outputs the last hidden state instead of logits."""
    mm = _head_matmul(model)
    if mm is None:
        raise CompileError(
            "shared LM head: no vocabulary MatMul found before 'logits'", stage="transform"
        )
    res = _result(model, "logits")
    embed = ops.result(mm.input_value(0))
    embed.output(0).get_tensor().set_names({EMBED})
    model.remove_result(res)
    model.add_results([embed])


def make_lm_head_model(stateless: ov.Model, positions: int = 1) -> ov.Model | None:
    """The LM head cut out of the model: ``npuw_output_embed [1,N,E]`` → ``logits [1,N,V]``
    (N = ``positions``: NPUW_LLM_MAX_GENERATION_TOKEN_LEN)."""
    m = stateless.clone()
    mm = _head_matmul(m)
    if mm is None:
        return None
    hidden = mm.input_value(0)
    width = hidden.get_partial_shape()[2]
    if not width.is_static:
        return None
    param = ops.parameter([1, positions, width.get_length()], hidden.get_element_type(), name=EMBED)
    param.output(0).get_tensor().set_names({EMBED})
    mm.input(0).replace_source_output(param.output(0))
    head = ov.Model([_result(m, "logits")], [param], f"{stateless.get_friendly_name()}_lm_head")
    head.validate_nodes_and_infer_types()
    return head


def _static(model: ov.Model, kv: KVLayout, q_len: int, mask_len: int, has_past: bool) -> None:
    shapes: dict[str, ov.PartialShape] = {
        "input_ids": ov.PartialShape([1, q_len]),
        "attention_mask": ov.PartialShape([1, mask_len]),
        "position_ids": ov.PartialShape([1, q_len]),
    }
    if has_past:
        for i, (name, h, d) in enumerate(zip(kv.past_names, kv.num_heads, kv.head_dims, strict=False)):
            s = mask_len - q_len
            shapes[name] = ov.PartialShape([1, h, d, s] if kv.transposed(i) else [1, h, s, d])
    try:
        model.reshape(shapes)
    except RuntimeError as e:
        raise CompileError(
            f"cannot reshape {model.get_friendly_name()} to static {shapes}: {e}", stage="reshape"
        ) from e
    model.validate_nodes_and_infer_types()


def make_prefill_model(
    stateless: ov.Model,
    kv: KVLayout,
    max_prompt: int,
    chunk: int,
    kv_type: ov.Type,
    shared_head: bool = False,
    rope_positions: int = 0,
    max_gen_len: int = 1,
    masks: Mapping[str, PositionMask] | None = None,
    kv_quant: str = "",
    kv_group: int = 0,
) -> ov.Model:
    """Static prefill: [1,P] without past (whole prompt) or [1,C] chunk with [1,H,P−C,D] past.

    ``rope_positions`` > 0 precomputes RoPE sin/cos for that many positions (NPUW_LLM_CACHE_ROPE).
    With a shared head, the last ``max_gen_len`` hidden states are output (the head's width).
    """
    m = stateless.clone()
    m.set_friendly_name(f"{stateless.get_friendly_name()}_prefill")
    if chunk:
        _redirect_new_kv_to_output(m, kv)
    else:
        _remove_empty_kv_inputs(m, kv)
    _convert_kv_precision(m, kv, kv_type, has_past=bool(chunk) and not kv_quant)
    _transpose_v(m, kv, has_past=bool(chunk))
    _slice_logits_to_last(m, max_gen_len if shared_head else 1)
    if shared_head:
        _redirect_logits_to_embed(m)
    _static(m, kv, chunk or max_prompt, max_prompt, has_past=bool(chunk))
    _position_masks(m, masks or {})
    _padding_attends_itself(m)
    if rope_positions:
        cache_rope(m, rope_positions)
    rotate_half_as_matmul(m)
    if kv_quant and chunk:
        dequantize_past(m, kv, kv_quant, kv_group)
    return m


def make_generate_model(
    stateless: ov.Model,
    kv: KVLayout,
    kv_size: int,
    kv_type: ov.Type,
    shared_head: bool = False,
    grouped_attention: bool = False,
    rope_positions: int = 0,
    max_gen_len: int = 1,
    masks: Mapping[str, PositionMask] | None = None,
    kv_quant: str = "",
    kv_group: int = 0,
) -> ov.Model:
    """Static generate variant: [1,M] tokens, [1,K] mask, past [1,H,K−M,D], present [1,H,M,D]
    (M = ``max_gen_len``, 1 unless NPUW_LLM_MAX_GENERATION_TOKEN_LEN says otherwise)."""
    m = stateless.clone()
    m.set_friendly_name(f"{stateless.get_friendly_name()}_kv{kv_size}")
    _redirect_new_kv_to_output(m, kv)
    _convert_kv_precision(m, kv, kv_type, has_past=not kv_quant)
    _transpose_v(m, kv, has_past=True)
    if shared_head:
        _redirect_logits_to_embed(m)
    _static(m, kv, max_gen_len, kv_size, has_past=True)
    _position_masks(m, masks or {})
    if rope_positions:
        cache_rope(m, rope_positions)
    rotate_half_as_matmul(m)  # exact; −4% per decode step on CPU, neutral on the emulated NPU
    if grouped_attention:  # rewrites one-token attention only
        n = group_attention(m)
        logger.debug("%s: %d attention nodes in grouped-query form", m.get_friendly_name(), n)
    if kv_quant:
        dequantize_past(m, kv, kv_quant, kv_group)
    return m
