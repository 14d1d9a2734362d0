"""Compiler pass: attention reading a past KV stored as f16, fused (NPU_EMU_FUSE_KV).

NPUW's generate model stores the KV cache as f16 (KV_CACHE_PRECISION) and computes in f32: each
layer's past K and V input goes through ``Convert(f16 -> f32)``, joins the step's new rows in a
``Concat`` along the sequence axis and (grouped-query models) an ``Unsqueeze -> Broadcast ->
Reshape`` head expansion before ``ScaledDotProductAttention``.  Lowered op by op, every decode
step converts and copies the whole past window (MAX_PROMPT_LEN + MIN_RESPONSE_LEN rows of every
layer), although the attention mask shuts most of it.  This pass finds that pattern so the
lowering emits one ``sdpa_kv`` task instead (operands q, past K, past V, the new K and V rows
stacked by two DMAs, mask):
the kernel (``device/kernels/attention.py``) converts only the rows the mask leaves open and
proves the rest add exact zeros, or falls back to the full conversion for that run.

The pass fires on non-causal attention with a mask and few query rows (decode, speculative
verification), whose K and V inputs both are such joins of one past length; everything else is
lowered as before.  Only the nodes of a fused join are left out of the lowering, and only when
nothing else reads them.
"""

from __future__ import annotations

import dataclasses

import openvino as ov

from ov_npu_emu_npu.compiler.graph import dims

__all__ = ["MAX_QUERY_ROWS", "KvFusion", "KvJoin", "find_kv_fusions"]

#: attention with more query rows (a prefill chunk) keeps the plain lowering: its tasks take
#: token-row windows, and a chunk's converts are a small share of its cost
MAX_QUERY_ROWS = 16
#: the GQA head expansion between the Concat and the SDPA (optimum's and the builder's)
_EXPAND = ("Unsqueeze", "Broadcast", "Reshape")


@dataclasses.dataclass(frozen=True)
class KvJoin:
    """One K or V input of a fused attention: ``past`` (the f16 source of the Convert), ``new``
    (the Concat's second input), the nodes the fusion replaces, and the query heads per KV head."""

    past: ov.Output
    new: ov.Output
    nodes: tuple[ov.Node, ...]
    group: int
    past_len: int


@dataclasses.dataclass(frozen=True)
class KvFusion:
    """An attention whose K and V are read through :class:`KvJoin`."""

    sdpa: ov.Node
    k: KvJoin
    v: KvJoin

    @property
    def replaced(self) -> tuple[ov.Node, ...]:
        return self.k.nodes + self.v.nodes


def _only_reader(node: ov.Node, reader: ov.Node, index: int | None = None) -> bool:
    """``node`` has one output, read by ``reader`` alone (at input ``index`` when given)."""
    if node.get_output_size() != 1:
        return False
    targets = list(node.output(0).get_target_inputs())
    return len(targets) == 1 and targets[0].get_node().get_instance_id() == reader.get_instance_id() and (
        index is None or targets[0].get_index() == index)


def _shape(out: ov.Output) -> tuple[int, ...] | None:
    ps = out.get_partial_shape()
    return dims(ps.to_shape()) if ps.is_static else None


def _join(sdpa: ov.Node, i: int) -> KvJoin | None:
    """Input ``i`` of ``sdpa`` as Convert(f16 past) -> Concat(past, new) [-> head expansion]."""
    src = sdpa.input_value(i).get_node()
    chain: list[ov.Node] = []
    reader, index = sdpa, i
    group = 1
    # Reshape [B, Hkv*G, S, D] <- Broadcast [B, Hkv, G, S, D] <- Unsqueeze [B, Hkv, 1, S, D]
    if src.get_type_name() == "Reshape":
        bc = src.input_value(0).get_node()
        un = bc.input_value(0).get_node() if bc.get_type_name() == "Broadcast" else None
        if un is None or un.get_type_name() != "Unsqueeze":
            return None
        b5, u5, r4 = _shape(bc.output(0)), _shape(un.output(0)), _shape(src.output(0))
        if b5 is None or u5 is None or r4 is None or len(b5) != 5 or len(u5) != 5 or u5[2] != 1:
            return None
        if str(bc.get_attributes().get("mode", "numpy")).lower() not in ("numpy", "bidirectional"):
            return None
        if u5[:2] + u5[3:] != b5[:2] + b5[3:] or r4 != (b5[0], b5[1] * b5[2], b5[3], b5[4]):
            return None
        for node, rd, ix in ((src, sdpa, i), (bc, src, 0), (un, bc, 0)):
            if not _only_reader(node, rd, ix):
                return None
        chain = [src, bc, un]
        group = b5[2]
        reader, index = un, 0
        src = un.input_value(0).get_node()
    if src.get_type_name() != "Concat" or src.get_input_size() != 2 or not _only_reader(src, reader, index):
        return None
    cshape = _shape(src.output(0))
    if cshape is None or len(cshape) != 4 or int(src.get_attributes()["axis"]) % 4 != 2:
        return None
    conv = src.input_value(0).get_node()
    if (conv.get_type_name() != "Convert" or not _only_reader(conv, src, 0)
            or conv.get_input_element_type(0) != ov.Type.f16 or conv.get_output_element_type(0) != ov.Type.f32):
        return None
    past = conv.input_value(0)
    pshape = _shape(past)
    new_shape = _shape(src.input_value(1))
    if pshape is None or new_shape is None or pshape[2] == 0 or new_shape[2] == 0:
        return None
    return KvJoin(past, src.input_value(1), (*chain, src, conv), group, pshape[2])


def _fusion(sdpa: ov.Node) -> KvFusion | None:
    n_in = sdpa.get_input_size()
    if n_in < 4 or n_in > 5 or bool(sdpa.get_attributes().get("causal", False)):
        return None  # no mask (every row open) or attention sinks: the plain lowering
    if n_in == 5 and sdpa.input_value(4).get_node().get_type_name() != "Constant":
        return None
    q = _shape(sdpa.input_value(0))
    if q is None or len(q) != 4 or q[2] > MAX_QUERY_ROWS:
        return None
    k, v = _join(sdpa, 1), _join(sdpa, 2)
    if k is None or v is None or k.group != v.group or k.past_len != v.past_len:
        return None
    if _shape(k.new) != _shape(v.new):
        return None  # the task takes the new K and V rows stacked in one operand
    kshape = _shape(k.past)
    if kshape is None or q[1] != kshape[1] * k.group or q[0] != kshape[0]:
        return None
    return KvFusion(sdpa, k, v)


def find_kv_fusions(model: ov.Model) -> dict[str, KvFusion]:
    """The attention nodes of ``model`` to lower as ``sdpa_kv``, by node name."""
    out: dict[str, KvFusion] = {}
    for node in model.get_ordered_ops():
        if node.get_type_name() == "ScaledDotProductAttention":
            f = _fusion(node)
            if f is not None:
                out[node.get_name()] = f
    return out
