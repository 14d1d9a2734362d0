"""Attention masks on token positions: NPUW's static KV layouts keep slots that are not
positions, so masks that depend on positions (sliding windows, ALiBi) are found and rewritten,
and padding rows of the prefill attend to themselves."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from ov_npu_emu.api.core import openvino_core
from ov_npu_emu.errors import CompileError
from ov_npu_emu_npuw.model_io import REQUIRED_INPUTS, KVLayout, find_param, token_input

__all__ = ["PositionMask", "classify_mask", "padding_attends_itself", "position_masks", "rewrite_position_masks"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class PositionMask:
    """How one SDPA's mask depends on positions, when KV slots and positions differ in NPUW's
    layouts: a causal window of ``window`` tokens (0: none) and a per-head linear bias
    ``slopes[h] * (pos(k) - pos(q))`` (ALiBi; empty: none)."""

    window: int = 0
    slopes: tuple[float, ...] = ()


def classify_mask(mask: np.ndarray, capacity: int) -> PositionMask | None:
    """None for a plain causal mask (correct on slots as it is); a PositionMask for a window or a
    linear bias; raises ValueError for anything else.  ``mask`` is [..., capacity, capacity] for
    a ``capacity``-token prompt at positions 0.. with no past."""
    m = mask.reshape(-1, capacity, capacity)
    if m.dtype == np.bool_:
        allowed, bias = m, np.zeros(m.shape, np.float32)
    else:
        # blocked: -inf, or the lowest finite value when it is huge (Gemma 3's window mask has both)
        finite = np.isfinite(m)
        lowest = float(m[finite].min()) if finite.any() else 0.0
        allowed = finite & (m > lowest / 2) if lowest <= -1e4 else finite
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


def _probe_input(p: ov.Node, kv: KVLayout, capacity: int) -> tuple[str, np.ndarray] | None:
    """(name, value) of one input for the mask probe: a ``capacity``-token prompt at positions
    0.. with no past; None for an input that cannot be synthesised."""
    names = p.output(0).get_names()
    name = next((n for n in (*kv.past_names, *REQUIRED_INPUTS) if n in names), "")
    dt = p.get_element_type().to_dtype()
    if name in kv.past_names:
        i = kv.past_names.index(name)
        return name, np.zeros([1, kv.num_heads[i], 0, kv.head_dims[i]], dt)
    if name == "position_ids":
        if p.get_partial_shape().rank.get_length() == 3:  # M-RoPE [3, 1, L]: text positions
            return name, np.ascontiguousarray(np.broadcast_to(np.arange(capacity, dtype=dt), (3, 1, capacity)))
        return name, np.arange(capacity, dtype=dt)[None]
    if name in ("input_ids", "attention_mask"):
        return name, np.ones([1, capacity], dt)
    if "inputs_embeds" in names and p.get_partial_shape().rank.get_length() == 3:
        # a VLM language model: the mask reads the embeddings' shape only
        return "inputs_embeds", np.zeros([1, capacity, p.get_partial_shape()[2].get_length()], dt)
    if "token_type_ids" in names:  # Gemma 3: all text (its image blocks are the prefill's)
        return "token_type_ids", np.zeros([1, capacity], dt)
    return None


def position_masks(stateless: ov.Model, kv: KVLayout, capacity: int) -> dict[str, PositionMask]:
    """Per SDPA whose mask needs token positions in NPUW's layouts: what it computes.

    Exports compute masks from KV *slot* indices (``kv_idx <= q_idx``, ``kv_idx > q_idx - W``,
    ALiBi's ``slope * (kv_idx - q_idx)``), which are positions only in a contiguous cache.
    NPUW's buffers are not: the prefill is right-aligned and padded, a generate step keeps its
    history left-aligned with the new token in the last column.  A causal mask survives that
    (padding is masked by ``attention_mask``); a window or a distance bias does not.  The mask
    subgraph is evaluated once on the CPU plugin for a ``capacity``-token prompt with no past and
    classified per SDPA (see :func:`classify_mask`); those with a window narrower than ``capacity``
    or a bias are rewritten by :func:`rewrite_position_masks`, anything else is a CompileError.
    """
    sdpas = [op for op in stateless.get_ordered_ops() if op.get_type_name() == "ScaledDotProductAttention"]
    sdpas = [op for op in sdpas if op.get_input_size() > 3]
    if not sdpas:
        return {}
    # layers usually share one mask: each distinct mask output is evaluated and classified once
    index: dict[tuple[str, int], int] = {}
    distinct: list[ov.Output] = []
    which = []  # per SDPA: the index of its mask among the distinct ones
    for op in sdpas:
        src = op.input_value(3)
        key = (src.get_node().get_friendly_name(), src.get_index())
        if key not in index:
            index[key] = len(distinct)
            distinct.append(src)
        which.append(index[key])
    # a clone of the mask subgraph alone (the whole model's clone cost more than the probe): its
    # Results hang on the model's own outputs only until they are dropped with ``whole``
    whole = ov.Model([ops.result(src) for src in distinct], stateless.get_parameters(), "masks")
    probe = whole.clone()
    del whole, distinct
    shapes: dict[str, ov.PartialShape] = {}
    feed: dict[str, np.ndarray] = {}
    for p in probe.get_parameters():
        probe_input = _probe_input(p, kv, capacity)
        if probe_input is None:
            return {}  # inputs we cannot synthesize (LoRA, DeepStack rows): leave the masks as they are
        name, value = probe_input
        feed[name] = value
        shapes[name] = ov.PartialShape(list(value.shape))
    try:
        probe.reshape(shapes)
        compiled = openvino_core().compile_model(probe, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        masks = compiled(feed)
    except RuntimeError as e:
        logger.warning(
            "attention masks could not be evaluated (%s); left as they are, so a sliding window "
            "or ALiBi (if the model has one) would apply to KV slots, not positions", e
        )
        return {}
    found: dict[str, PositionMask] = {}
    specs: dict[int, PositionMask | None] = {}
    for op, i in zip(sdpas, which, strict=True):
        mask = np.asarray(masks[i])
        if mask.ndim < 2 or mask.shape[-2:] != (capacity, capacity):
            continue  # not a [.., L, S] mask (e.g. a scalar): nothing position-dependent
        try:
            spec = specs[i] if i in specs else classify_mask(mask, capacity)
        except ValueError as e:
            raise CompileError(
                f"SDPA {op.get_friendly_name()!r}: {e}, so NPUW cannot lay its KV cache out "
                "statically (the mask is computed on KV slot indices)",
                stage="transform",
            ) from None
        specs[i] = spec
        if spec is not None:
            found[op.get_friendly_name()] = spec
    if found:
        logger.info(
            "attention on positions in %d of %d layers: windows %s, ALiBi in %d",
            len(found), len(sdpas), sorted({s.window for s in found.values() if s.window}),
            sum(bool(s.slopes) for s in found.values()),
        )
    return found


def rewrite_position_masks(model: ov.Model, specs: Mapping[str, PositionMask]) -> None:
    """Rewrite each SDPA mask of ``specs`` on token positions instead of KV slots (static shapes).

    The query positions are ``position_ids``; NPUW keeps the history left-aligned from slot 0 and
    the current tokens in the last L slots, so past slot ``j`` holds position ``first + j``, where
    ``first`` (0 for most exports, 1 for Gemma 3's VLM language model) is the newest current
    token's position minus the valid history and current tokens before it.  Allowed:
    ``attention_mask[j] and 0 <= pos(q) - pos(j) (< W)``; the value added where allowed is
    ``slope[h] * (pos(j) - pos(q))`` with ALiBi, else 0.
    """
    if not specs:
        return
    pos = find_param(model, "position_ids").output(0)
    am = find_param(model, "attention_mask").output(0)
    q_len = pos.get_partial_shape()[1].get_length()
    s_len = am.get_partial_shape()[1].get_length()
    if s_len == q_len and any("token_type_ids" in p.output(0).get_names() for p in model.get_parameters()):
        # a prefill without past keeps slots = positions + a constant (right-aligned), where the
        # export's own mask is right, and it alone has Gemma 3's two-way image blocks
        return
    i64 = ov.Type.i64
    q_flat = ops.convert(ops.reshape(pos, ops.constant([q_len], i64), False), i64)
    kv_pos = q_flat
    if s_len > q_len:
        valid = ops.convert(ops.reshape(ops.not_equal(am, ops.constant(np.array(0, am.get_element_type().to_dtype()))),
                                        ops.constant([s_len], i64), False), i64)
        hist = s_len - q_len
        past = ops.reduce_sum(ops.gather(valid, ops.constant(np.arange(hist, dtype=np.int64)), 0), 0, False)
        cur_valid = ops.gather(valid, ops.constant(np.arange(hist, s_len, dtype=np.int64)), 0)
        n_cur = ops.reduce_sum(cur_valid, 0, False)
        # the newest valid current position (padding slots hold anything): max over valid ones
        newest = ops.reduce_max(ops.select(ops.convert(cur_valid, ov.Type.boolean), q_flat,
                                           ops.constant(np.array(np.iinfo(np.int64).min, np.int64))), 0, False)
        first = ops.add(ops.subtract(ops.subtract(newest, past), n_cur), ops.constant(np.array(1, np.int64)))
        kv_pos = ops.concat([ops.add(ops.constant(np.arange(hist, dtype=np.int64)), first), q_flat], 0)
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


def padding_attends_itself(model: ov.Model) -> None:
    """In a padded prefill, let each padding query attend to its own (padding) slot.

    A left-padding query row has every key masked (causal: only earlier slots, all padding).
    Exports whose mask is boolean or filled with -inf make that row NaN, and the NaN hidden
    state becomes NaN K/V in the next layer, which poisons the real rows through 0 * NaN in
    probs @ V (GPTBigCode). Unmasking the diagonal where the key is padding touches no real
    row (their diagonal key is real and already allowed) and keeps the padding rows finite.
    """
    am = find_param(model, "attention_mask").output(0)
    q_len = find_param(model, token_input(model)).get_partial_shape()[1].get_length()
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

