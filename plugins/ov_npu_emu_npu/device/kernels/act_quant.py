"""Dynamic quantization of activations (NPU_COMPILER_DYNAMIC_QUANTIZATION): int8 per block.

A MatMul on a 4-bit weight compiled with dynamic quantization multiplies int8 activations by the
weight's integer codes. Each activation row is cut into blocks of ``block`` consecutive columns
(``ACT_BLOCK``, 32, the compiler's choice: the CPU plugin's default DYNAMIC_QUANTIZATION_GROUP_SIZE
too; :func:`fake_quantize_rows` takes any block); a block
is quantized symmetrically: ``s = max|x| / 127`` (f32), ``q = clip(rint(x / s), -127, 127)``
(nearest, ties to even), the value ``q * s``; an all-zero block is ``s = 0, q = 0``. A row holding
an infinite or NaN value is not quantized (there is no finite scale for it): it multiplies as
float. :func:`fake_quantize_rows` gives the rows' quantized values in f32 (several rows: the
float kernels then multiply them); :func:`quantize_split_row` gives one row's integers and
scales in the layout of the one-row integer kernel (kernels/gemv.py ``_q4a8_row_dot``). Both
compute the same ``s`` and ``q``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from ov_npu_emu_npu.blob.kernel_params import DQ_ACT_BLOCK as ACT_BLOCK

__all__ = ["ACT_BLOCK", "A8_PASS_BYTES", "fake_quantize_rows", "quantize_split_row"]
#: code bytes per pass of the integer kernel (64 columns: two blocks, lanes 0-3 and 4-7)
A8_PASS_BYTES = 32

_JIT: dict[str, Any] = {"nogil": True, "cache": True, "error_model": "numpy"}


@njit(inline="always", **_JIT)
def _scale(amax):
    return amax / np.float32(127.0) if amax > 0 else np.float32(0.0)


@njit(inline="always", **_JIT)
def _code(v, s):
    if s == 0:
        return np.int8(0)
    q = np.rint(v / s)
    return np.int8(min(max(q, np.float32(-127.0)), np.float32(127.0)))


@njit(**_JIT)
def fake_quantize_rows(x, block):
    """Each row of f32 ``x`` [rows, K] replaced in place by its quantized values ``q * s``."""
    rows, k = x.shape
    for r in range(rows):
        xr = x[r]
        if not np.isfinite(xr).all():
            continue
        for b0 in range(0, k, block):
            b1 = min(k, b0 + block)
            amax = np.float32(0.0)
            for j in range(b0, b1):
                amax = max(amax, abs(xr[j]))
            s = _scale(amax)
            for j in range(b0, b1):
                xr[j] = np.float32(_code(xr[j], s)) * s


@njit(**_JIT)
def quantize_split_row(x_split, gh, qa, sa8, xs8):
    """One activation row given as [even columns | odd columns] (``x_split``, K f32) -> the one-row
    integer kernel's operands, or False (nothing written that matters) when the row is not finite.

    ``qa`` [K] int8: the codes in the same [even | odd] layout; ``sa8`` [K / 64 * 8] f32: per pass
    of 32 code bytes (64 columns), the scale of each lane of the kernel's 8 int32 sums (lanes 0-3
    sum the pass's first block of 32 columns, 4-7 its second); ``xs8`` [groups * 8] f32: per
    weight group of ``gh`` code bytes and lane, ``sum of s * q`` over the lane's columns (the zero
    point's term, :func:`..gemv._q4_group_loop`), summed pass by pass in order."""
    half = x_split.shape[0] // 2
    if not np.isfinite(x_split).all():
        return False
    for p in range(half // A8_PASS_BYTES):
        for h in range(2):  # block 2p + h: columns 64p + 32h .. +31, i.e. bytes 16h .. 16h+15 of the pass
            base = p * A8_PASS_BYTES + 16 * h
            amax = np.float32(0.0)
            for t in range(16):
                amax = max(amax, abs(x_split[base + t]), abs(x_split[half + base + t]))
            s = _scale(amax)
            for t in range(16):
                qa[base + t] = _code(x_split[base + t], s)
                qa[half + base + t] = _code(x_split[half + base + t], s)
            for lane in range(4):
                sa8[p * 8 + 4 * h + lane] = s
    xs8[:] = 0
    for p in range(half // A8_PASS_BYTES):
        g = p * A8_PASS_BYTES // gh
        for lane in range(8):  # lane l sums bytes 4l .. 4l+3 of the pass (pmaddwd of pmaddubsw pairs)
            total = 0
            for t in range(4 * lane, 4 * lane + 4):
                total += np.int32(qa[p * A8_PASS_BYTES + t]) + np.int32(qa[half + p * A8_PASS_BYTES + t])
            xs8[g * 8 + lane] += sa8[p * 8 + lane] * np.float32(total)
    return True
