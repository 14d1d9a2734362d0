"""Decode-attention models over a past KV stored as f16, as NPUW's generate model has them
(``Convert(f16 past) -> Concat(past, new) [-> GQA head expansion] -> SDPA``): the pattern the
compiler's fuse_kv pass turns into one ``sdpa_kv`` task (NPU_EMU_FUSE_KV)."""

from __future__ import annotations

import numpy as np
import openvino as ov
from openvino import opset13 as ops


def kv_attention_model(heads: int = 8, hkv: int = 2, past: int = 47, new: int = 1, d: int = 16,
                       *, mask_type: ov.Type = ov.Type.f32, causal: bool = False, with_mask: bool = True,
                       past_type: ov.Type = ov.Type.f16, convert_reader: bool = False, expand: bool = True,
                       scale: float | None = None) -> ov.Model:
    """Inputs q [1, H, new, D], past_key / past_value [1, Hkv, past, D] (``past_type``), new_key /
    new_value [1, Hkv, new, D] f32 and (``with_mask``) mask [1, 1, new, past + new]; output the
    attention.  ``expand``: GQA through Unsqueeze -> Broadcast -> Reshape (else Hkv must be H);
    ``convert_reader``: the converted past K is a second output too (so the Convert has another
    reader)."""
    s = past + new
    q = ops.parameter([1, heads, new, d], ov.Type.f32, name="q")
    pk = ops.parameter([1, hkv, past, d], past_type, name="past_key")
    pv = ops.parameter([1, hkv, past, d], past_type, name="past_value")
    nk = ops.parameter([1, hkv, new, d], ov.Type.f32, name="new_key")
    nv = ops.parameter([1, hkv, new, d], ov.Type.f32, name="new_value")
    params = [q, pk, pv, nk, nv]
    conv_k = ops.convert(pk, ov.Type.f32) if past_type != ov.Type.f32 else pk
    conv_v = ops.convert(pv, ov.Type.f32) if past_type != ov.Type.f32 else pv
    k = ops.concat([conv_k, nk], 2)
    v = ops.concat([conv_v, nv], 2)
    if expand and heads != hkv:
        g = heads // hkv
        target = ops.constant(np.array([1, hkv, g, s, d], np.int64))
        flat = ops.constant(np.array([1, heads, s, d], np.int64))
        k = ops.reshape(ops.broadcast(ops.unsqueeze(k, ops.constant(np.array([2], np.int64))), target), flat, False)
        v = ops.reshape(ops.broadcast(ops.unsqueeze(v, ops.constant(np.array([2], np.int64))), target), flat, False)
    args = [q, k, v]
    if with_mask:
        mask = ops.parameter([1, 1, new, s], mask_type, name="mask")
        params.append(mask)
        args.append(mask)
        if scale is not None:
            args.append(ops.constant(np.float32(scale)))
    att = ops.scaled_dot_product_attention(*args, causal=causal)
    outs = [att.output(0)]
    if convert_reader:
        outs.append(conv_k.output(0))
    return ov.Model(outs, params, "kv_attention")


def kv_feed(heads: int = 8, hkv: int = 2, past: int = 47, new: int = 1, d: int = 16, *, used: int = 10,
            seed: int = 0, big: bool = False, mask: str = "min") -> dict[str, np.ndarray]:
    """Random operands with the first ``used`` past slots and the new ones open.  ``big``: K/V
    up to f16's largest values; ``mask``: "min" (additive, finfo.min closed, as NPUW's), "inf"
    (additive -inf), "-1e4" (additive, a moderate closed value some exports use), "bool"."""
    rng = np.random.default_rng(seed)
    s = past + new
    amp = 60000.0 if big else 1.0
    feed = {
        "q": rng.standard_normal((1, heads, new, d)).astype(np.float32),
        "past_key": np.clip(rng.standard_normal((1, hkv, past, d)) * amp, -65504, 65504).astype(np.float16),
        "past_value": np.clip(rng.standard_normal((1, hkv, past, d)) * amp, -65504, 65504).astype(np.float16),
        "new_key": rng.standard_normal((1, hkv, new, d)).astype(np.float32),
        "new_value": rng.standard_normal((1, hkv, new, d)).astype(np.float32),
    }
    is_open = np.zeros((1, 1, new, s), bool)
    is_open[..., :used] = True
    is_open[..., past:] = True
    if mask == "bool":
        feed["mask"] = is_open
    else:
        closed = {"min": np.finfo(np.float32).min, "inf": -np.inf, "-1e4": -1e4}[mask]
        feed["mask"] = np.where(is_open, 0.0, closed).astype(np.float32)
    return feed
