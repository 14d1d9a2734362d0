"""Stateful LLM IR → static prefill model and static generate variants (stateless, KV as I/O)."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping

import numpy as np
import openvino as ov
import openvino.opset13 as ops
from openvino._offline_transformations import stateful_to_stateless_transformation

from ov_npu_emu.errors import CompileError, UserInputError
from ov_npu_emu_npuw.attention_rewrites import cache_rope, group_attention, read_call_range, rotate_half_as_matmul
from ov_npu_emu_npuw.model_io import (
    DEEPSTACK,
    EMBEDS,
    REQUIRED_INPUTS,
    TOKEN_TYPES,
    VISUAL_MASK,
    KVLayout,
    deepstack_layers,
    find_param,
    find_result,
    token_input,
)
from ov_npu_emu_npuw.position_masks import PositionMask, padding_attends_itself, rewrite_position_masks

__all__ = [
    "EMBED",
    "SCALE_SUFFIX",
    "ZP_SUFFIX",
    "make_generate_model",
    "make_lm_head_model",
    "make_prefill_model",
    "to_stateless",
]

logger = logging.getLogger(__name__)

_PAST = re.compile(r"^past_key_values\.(\d+)\.(key|value)$")


def _names(model: ov.Model) -> set[str]:
    return {n for p in model.inputs for n in p.get_names()}


def to_stateless(model: ov.Model) -> tuple[ov.Model, KVLayout]:
    """Clone ``model`` and lift its KV variables to ``past_key_values.*`` inputs / ``present.*`` outputs.

    Uses OpenVINO's own StatefulToStateless pass (the one real NPUW runs), then checks what it made.
    """
    names = _names(model)
    missing = [n for n in REQUIRED_INPUTS if n not in names and n != "position_ids"
               and not (n == "input_ids" and EMBEDS in names)]
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
        param = find_param(model, name)
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
        res = find_result(model, name)
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
            param = find_param(model, name)
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
        res = find_result(model, name)
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
        old = find_param(model, name)
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
            param = find_param(model, past)
            targets = list(param.output(0).get_target_inputs())
            ps = param.get_partial_shape()
            param.set_partial_shape(ov.PartialShape([ps[0], ps[1], ps[3], ps[2]]))
            param.validate_and_infer_types()
            back = ops.transpose(param.output(0), order)
            for t in targets:
                t.replace_source_output(back.output(0))
        res = find_result(model, present)
        res.input(0).replace_source_output(ops.transpose(res.input_value(0), order).output(0))


EMBED = "npuw_output_embed"


def _head_matmul(model: ov.Model) -> ov.Node | None:
    """The vocabulary MatMul that produces ``logits`` (through Convert/Add/softcap ops), if any."""
    node = find_result(model, "logits").input_value(0).get_node()
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
    res = find_result(model, "logits")
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
    head = ov.Model([find_result(m, "logits")], [param], f"{stateless.get_friendly_name()}_lm_head")
    head.validate_nodes_and_infer_types()
    return head


def _static(model: ov.Model, kv: KVLayout, q_len: int, mask_len: int, has_past: bool) -> None:
    shapes: dict[str, ov.PartialShape] = {"attention_mask": ov.PartialShape([1, mask_len])}
    tokens = token_input(model)
    if tokens == EMBEDS:  # [1, L, E]: the embeddings a VLM pipeline computed
        width = find_param(model, EMBEDS).get_partial_shape()[2]
        shapes[EMBEDS] = ov.PartialShape([1, q_len, width])
    else:
        shapes["input_ids"] = ov.PartialShape([1, q_len])
    pos_rank = find_param(model, "position_ids").get_partial_shape().rank.get_length()
    # M-RoPE (Qwen2-VL): [3, 1, L] positions (temporal, height, width)
    shapes["position_ids"] = ov.PartialShape([3, 1, q_len] if pos_rank == 3 else [1, q_len])
    if TOKEN_TYPES in _names(model):  # Gemma 3's [1, L] (1 on image tokens)
        shapes[TOKEN_TYPES] = ov.PartialShape([1, q_len])
    if VISUAL_MASK in _names(model) and DEEPSTACK in _names(model):  # Qwen3-VL's DeepStack
        shapes[VISUAL_MASK] = ov.PartialShape([1, q_len])
        width = find_param(model, DEEPSTACK).get_partial_shape()[2]
        shapes[DEEPSTACK] = ov.PartialShape([deepstack_layers(model), q_len, width])
    if has_past:
        for i, (name, h, d) in enumerate(zip(kv.past_names, kv.num_heads, kv.head_dims, strict=False)):
            s = mask_len - q_len
            shapes[name] = ov.PartialShape([1, h, d, s] if kv.transposed(i) else [1, h, s, d])
    try:
        model.reshape(shapes)
    except RuntimeError as e:
        raise CompileError(
            f"cannot reshape {model.get_friendly_name()} to static {shapes}: {e}", stage="reshape"
        ) from e  # reshape re-infers every node's types and shapes itself


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
    rewrite_position_masks(m, masks or {})
    padding_attends_itself(m)
    if rope_positions:
        cache_rope(m, rope_positions)
    if chunk:  # after the RoPE cache: a range-reading RoPE it kept reads the whole prompt's range
        read_call_range(m)
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
    rewrite_position_masks(m, masks or {})
    if rope_positions:
        cache_rope(m, rope_positions)
    rotate_half_as_matmul(m)  # exact; −4% per decode step on CPU, neutral on the emulated NPU
    if grouped_attention:  # rewrites one-token attention only
        n = group_attention(m)
        logger.debug("%s: %d attention nodes in grouped-query form", m.get_friendly_name(), n)
    if kv_quant:
        dequantize_past(m, kv, kv_quant, kv_group)
    return m
