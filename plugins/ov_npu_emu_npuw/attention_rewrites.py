"""NPUW's attention rewrites of the static models: grouped-query attention without the repeated
KV heads, the RoPE sin/cos tables cached as constants, rotate-half as one MatMul."""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from ov_npu_emu.api.core import openvino_core
from ov_npu_emu.errors import CompileError
from ov_npu_emu_npuw.model_io import find_param

__all__ = ["CALL_POSITIONS", "cache_rope", "group_attention", "read_call_range", "rotate_half_as_matmul"]

#: chunked prefill input: the whole prompt call's positions, for what reads their range
CALL_POSITIONS = "npuw_call_position_ids"
#: reductions over ``position_ids`` (longrope's ``max(position_ids) + 1``): they read the range
_RANGE_READS = ("ReduceMax", "ReduceMin")

logger = logging.getLogger(__name__)


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


def _position_wise(tables: list[np.ndarray], probe: list[np.ndarray], positions: int) -> bool:
    """Whether every row of the sin/cos tables depends on its own position only.

    ``probe`` is the subgraph run with every position set to 1.  A position-wise RoPE gives the
    table's row 1 in each row; one that reads the call's largest position (longrope's short/long
    switch, dynamic NTK scaling) computed the table with that largest position ``positions - 1``
    and the probe with 1, so the rows differ as soon as ``positions`` crosses its threshold.
    (Position 0 cannot tell: its angle is 0 whatever the frequencies.)
    """
    if positions < 2:
        return True
    for table, ones in zip(tables, probe, strict=True):
        changed = [a for a, (t, o) in enumerate(zip(table.shape, ones.shape, strict=False)) if t == positions]
        if len(changed) != 1 or table.shape != ones.shape:
            continue  # not a per-position table: cache_rope leaves it alone anyway
        row = np.take(table, [1], axis=changed[0])
        if not np.allclose(ones, np.broadcast_to(row, ones.shape), rtol=1e-6, atol=1e-7):
            return False
    return True


#: (subgraph key, positions) -> (tables, probe): one NPUW compilation builds the prefill and
#: several generate variants of one model, whose sin/cos subgraphs are the same; evaluating them
#: costs a model clone and a CPU compile each
_ROPE_TABLES: OrderedDict[tuple[str, int], tuple[list[np.ndarray], list[np.ndarray]]] = OrderedDict()
_ROPE_TABLES_KEPT = 8


def _subgraph_key(outputs: list[ov.Node]) -> str:
    """A digest of the subgraph feeding ``outputs``: op types, attributes, wiring, element types
    and constant bytes (not the shapes, which follow the variant's token count; a constant that
    holds one, a target shape, is in the key by its bytes)."""
    h = hashlib.blake2b(digest_size=20)
    index: dict[int, int] = {}
    order: list[ov.Node] = []
    stack = list(reversed(outputs))
    while stack:  # post-order walk: inputs before the op
        node = stack[-1]
        if node.get_instance_id() in index:
            stack.pop()
            continue
        pending = [v.get_node() for v in node.input_values() if v.get_node().get_instance_id() not in index]
        if pending:
            stack.extend(pending)
            continue
        stack.pop()
        index[node.get_instance_id()] = len(order)
        order.append(node)
        h.update(node.get_type_name().encode())
        h.update(repr([(index[v.get_node().get_instance_id()], v.get_index()) for v in node.input_values()]).encode())
        h.update(repr([str(node.get_output_element_type(k)) for k in range(node.get_output_size())]).encode())
        if node.get_type_name() == "Constant":
            h.update(np.ascontiguousarray(node.get_data()).tobytes())
        elif node.get_type_name() != "Parameter":
            h.update(repr(sorted(node.get_attributes().items())).encode())
    h.update(repr([index[n.get_instance_id()] for n in outputs]).encode())
    return h.hexdigest()


def _rope_tables(
    model: ov.Model, trig: list[ov.Node], pos: ov.Node, positions: int
) -> tuple[list[np.ndarray], list[np.ndarray]] | None:
    """The ``trig`` outputs for positions ``0..positions-1`` and for all positions 1 (the probe of
    :func:`_position_wise`), evaluated by the CPU plugin in f32; None if it cannot."""
    key = (_subgraph_key(trig), positions)
    if key in _ROPE_TABLES:
        _ROPE_TABLES.move_to_end(key)
        return _ROPE_TABLES[key]
    # Evaluate the sin/cos subgraph for all positions on a throw-away clone of that subgraph
    # alone (its Results hang on the model's own outputs until ``whole`` is dropped)
    whole = ov.Model([ops.result(op.output(0)) for op in trig], [pos], "rope")
    sub = whole.clone()
    del whole
    sub_pos = sub.get_parameters()[0]
    try:
        sub.reshape({sub_pos.output(0): ov.PartialShape([1, positions])})
        compiled = openvino_core().compile_model(sub, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        dtype = pos.get_element_type().to_dtype()
        tables = compiled({0: np.arange(positions, dtype=dtype)[None]})
        probe = compiled({0: np.ones((1, positions), dtype=dtype)})
    except RuntimeError as e:
        logger.debug("RoPE cache: cannot evaluate the sin/cos subgraph (%s); left as is", e)
        return None
    result = ([np.array(tables[i]) for i in range(len(trig))], [np.array(probe[i]) for i in range(len(trig))])
    _ROPE_TABLES[key] = result
    while len(_ROPE_TABLES) > _ROPE_TABLES_KEPT:
        _ROPE_TABLES.popitem(last=False)
    return result


def cache_rope(model: ov.Model, positions: int) -> int:
    """Replace the sin/cos computed from ``position_ids`` by a Gather from precomputed tables.

    Like the real NPUW_LLM_CACHE_ROPE: every Sin/Cos whose value depends on ``position_ids`` alone
    becomes ``Gather(table, position_ids)`` with ``table`` holding positions ``[0, positions)``.
    The tables are computed by the CPU plugin in f32 from the model's own subgraph (so any RoPE
    variant the model computes is cached as it is), and each table must change along exactly one
    axis with the positions.  A table is only right if each position's row depends on that
    position alone: longrope (Phi-3, Phi-4) switches from short to long factors, and dynamic
    scaling changes its base, with the largest position of the call, so a table over all positions
    would apply the long-context form to every step.  :func:`_position_wise` probes for that, and
    such a model keeps its own computation.  Returns how many Sin/Cos outputs were replaced.
    """
    pos = find_param(model, "position_ids")
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
    evaluated = _rope_tables(model, trig, pos, positions)
    if evaluated is None:
        return 0
    tables, probe = evaluated
    if not _position_wise(tables, probe, positions):
        logger.info("RoPE cache: the sin/cos depend on the call's whole position range (longrope or "
                    "dynamic scaling); computed per call instead of cached")
        return 0
    flat = ops.reshape(pos, ops.constant([-1], ov.Type.i64), False)
    done = 0
    for i, op in enumerate(trig):
        shape = list(op.get_output_partial_shape(0).to_shape())
        table = tables[i]
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


def _reduces_positions(op: ov.Node) -> bool:
    """Whether the reduction's constant axes include the token axis of a ``[1, L]`` input."""
    axes = op.input_value(1).get_node()
    if axes.get_type_name() != "Constant":
        return False
    return bool({1, -1} & {int(a) for a in np.asarray(axes.get_data()).ravel()})


def read_call_range(model: ov.Model) -> int:
    """Make every reduction over the tokens of ``position_ids`` read the whole prompt call's.

    A chunked prefill sees one chunk of the prompt per call, but a stateful model given the prompt
    in one call reduces over all of its positions: longrope (Phi-3, Phi-4) picks its short or long
    factors by ``max(position_ids) + 1`` of the call, so a chunk before the original context would
    take the short factors where the whole prompt takes the long ones.  Each ``ReduceMax`` /
    ``ReduceMin`` of ``position_ids`` (through Converts) over the token axis reads a new input
    :data:`CALL_POSITIONS` ``[1, 2]`` instead: the prompt's smallest and largest position, which
    give both reductions the whole call's value.  Returns how many reductions were redirected.
    """
    try:
        pos = find_param(model, "position_ids")
    except CompileError:
        return 0
    reads: list[tuple[ov.Node, list[ov.Node]]] = []
    for op in model.get_ordered_ops():
        if op.get_type_name() not in _RANGE_READS or not _reduces_positions(op):
            continue
        chain, node = [], op.input_value(0).get_node()
        while node.get_type_name() == "Convert":
            chain.append(node)
            node = node.input_value(0).get_node()
        if node.get_instance_id() == pos.get_instance_id():
            reads.append((op, chain))
    if not reads:
        return 0
    call = ops.parameter([1, 2], pos.get_element_type(), name=CALL_POSITIONS)
    call.output(0).get_tensor().set_names({CALL_POSITIONS})
    for op, chain in reads:
        out = call.output(0)
        for conv in reversed(chain):
            out = ops.convert(out, conv.get_destination_type()).output(0)
        op.input(0).replace_source_output(out)
    model.add_parameters([call])
    model.validate_nodes_and_infer_types()
    return len(reads)


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
