"""KV cache quantisation (``KV_CACHE_PRECISION=u8`` / ``u4``): the storage scheme and its byte counts.

Scheme (ours, documented in docs/npuw.md "Quantised KV cache"), with ``G`` =
NPUW_EMU_KV_GROUP_SIZE (default: the head size ``D``):

* **values** are quantised per token: each head's row of ``D`` values is cut into groups of
  ``G`` values, each with its own scale and zero point;
* **keys** are quantised per channel (KIVI, arXiv 2402.02750: key outliers sit in fixed
  channels): each channel of a head gets one scale and zero point per block of ``G`` tokens.
  The block being filled is re-quantised from exact rows each time a token is added, so the
  host keeps the exact (f16) rows of that one block beside the buffer: the *residual*.

Every group is asymmetric with a float zero point: ``zp`` = the group's minimum (f16),
``scale = (max − zp) / (2^bits − 1)`` (f16), ``q = round((x − zp) / scale)``; the graph
dequantises ``q · scale + zp``.  (An integer zero point ``−min/scale`` kept in f16 overflows for
groups with a small range far from 0, which real K rows have.)

u8 stores one byte per value.  u4 packs two values per byte along the head dimension: byte
``j`` of a row holds value ``j`` in its low nibble and value ``j + D/2`` in its high nibble, so
the graph unpacks with arithmetic only (``hi = floor(b / 16)``, ``lo = b − 16·hi``) and one Concat.

Bytes of one KV tensor with ``H`` heads, ``S`` slots and head size ``D``:
data ``H·S·D·bits/8``; scales + zero points (f16 each) ``H·S·(D/G)·4`` for values and
``H·⌈S/G⌉·D·4`` for keys; residual ``H·G·D·2`` for keys.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "BITS",
    "SCALE_BYTES",
    "dequantize",
    "is_quantized",
    "pack",
    "quantize",
    "quantize_channels",
    "storage_bytes",
    "stored_dim",
    "unpack",
]

#: bits per stored value of each quantised precision
BITS = {"u8": 8, "u4": 4}
#: bytes per group for its scale and zero point (two f16)
SCALE_BYTES = 4


def is_quantized(precision: str) -> bool:
    return precision in BITS


def stored_dim(precision: str, head_dim: int) -> int:
    """Bytes of one stored row of one head (``D`` for u8, ``D/2`` for u4)."""
    return head_dim // 2 if precision == "u4" else head_dim


def storage_bytes(
    precision: str, heads: int, slots: int, head_dim: int, group: int = 0, key: bool = False
) -> tuple[int, int, int]:
    """(data, scale + zero point, residual) bytes of one KV tensor ``[1, heads, slots, head_dim]``."""
    elems = heads * slots * head_dim
    if precision in ("f32", "f16"):
        return elems * (4 if precision == "f32" else 2), 0, 0
    g = group or head_dim
    data = elems * BITS[precision] // 8
    if key:
        return data, heads * (-(-slots // g)) * head_dim * SCALE_BYTES, heads * g * head_dim * 2
    return data, heads * slots * (head_dim // g) * SCALE_BYTES, 0


def _levels(
    x: np.ndarray, axis: int, qmax: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Quantise ``x`` with one (scale, zp) per slice along ``axis`` (reduced, kept as size 1)."""
    lo = x.min(axis=axis, keepdims=True)
    hi = x.max(axis=axis, keepdims=True)
    zp = lo.astype(np.float16)  # the group's minimum, as stored
    z32 = zp.astype(np.float32)
    scale = ((hi - z32) / qmax).astype(np.float16)
    scale = np.where(scale > 0, scale, np.float16(1.0)).astype(np.float16)  # constant group
    q = np.clip(np.rint((x - z32) / scale.astype(np.float32)), 0, qmax).astype(np.uint8)
    return q, scale, zp


def pack(q: np.ndarray, precision: str) -> np.ndarray:
    """Levels ``[..., D]`` → stored bytes (u4: value j low nibble, j + D/2 high nibble)."""
    if BITS[precision] != 4:
        return q
    h = q.shape[-1] // 2
    return (q[..., :h] | (q[..., h:] << 4)).astype(np.uint8)


def unpack(b: np.ndarray, precision: str) -> np.ndarray:
    if BITS[precision] != 4:
        return b
    return np.concatenate([b & 0x0F, b >> 4], axis=-1)


def quantize(x: np.ndarray, precision: str, group: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-token rows ``x[..., D]`` → (stored bytes, scale ``[..., D/G]`` f16, zp f16)."""
    d = x.shape[-1]
    xg = x.astype(np.float32).reshape(*x.shape[:-1], d // group, group)
    q, scale, zp = _levels(xg, -1, (1 << BITS[precision]) - 1)
    return pack(q.reshape(x.shape), precision), scale[..., 0], zp[..., 0]


def quantize_channels(
    x: np.ndarray, precision: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-channel over the tokens of one block: ``x[1, H, n, D]`` → (stored bytes
    ``[1, H, n, D·bits/8]``, scale ``[1, H, 1, D]``, zp ``[1, H, 1, D]``)."""
    q, scale, zp = _levels(x.astype(np.float32), 2, (1 << BITS[precision]) - 1)
    return pack(q, precision), scale, zp


def dequantize(
    q: np.ndarray, scale: np.ndarray, zp: np.ndarray, precision: str, group: int
) -> np.ndarray:
    """Inverse of :func:`quantize`, in f32 (what the graph computes for values)."""
    q = unpack(q, precision)
    d = q.shape[-1]
    qg = q.astype(np.float32).reshape(*q.shape[:-1], d // group, group)
    x = qg * scale.astype(np.float32)[..., None] + zp.astype(np.float32)[..., None]
    return x.reshape(q.shape)
