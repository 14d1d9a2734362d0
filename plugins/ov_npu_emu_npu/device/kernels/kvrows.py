"""The row pass of the ``sdpa_kv`` kernel (:mod:`.attention`): a past K or V stored as f16, read
once. Open rows are converted (exactly: LLVM's fpext, F16C's vcvtph2ps) into the kernel's f32
copy; closed rows are only scanned for the largest magnitude (f16 bits without the sign, so
0x7C00 and up is an infinity or a NaN); rows the copy still holds from an earlier run and that
are closed now are zeroed.  numba, loaded with the first sdpa_kv task (not with the device)."""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit, prange

from ov_npu_emu_npu.device.kernels.gemv import _f32, parallel_loops

__all__ = ["join_rows"]

_JIT: dict[str, Any] = {"nogil": True, "cache": True}


@njit(inline="always", **_JIT)
def _row(src, dst, open_rows, clear_rows, h):
    """Head ``h``: (largest closed |bits|, largest open |bits|)."""
    p, d = src.shape[1], src.shape[2]
    cm = 0
    om = 0
    for j in range(p):
        row = src[h, j]
        m = 0
        for i in range(d):
            b = row[i] & 0x7FFF
            m = b if b > m else m
        if open_rows[j]:
            out = dst[h, j]
            for i in range(d):
                out[i] = _f32(row[i])
            om = m if m > om else om
        else:
            if clear_rows[j]:
                dst[h, j, :] = 0.0
            cm = m if m > cm else cm
    return cm, om


@njit(parallel=True, **_JIT)
def _join_par(src, dst, open_rows, clear_rows, cmax, omax):
    for h in prange(src.shape[0]):
        cmax[h], omax[h] = _row(src, dst, open_rows, clear_rows, h)


@njit(**_JIT)
def _join(src, dst, open_rows, clear_rows, cmax, omax):
    for h in range(src.shape[0]):
        cmax[h], omax[h] = _row(src, dst, open_rows, clear_rows, h)


def join_rows(src: np.ndarray, dst: np.ndarray, open_rows: np.ndarray, clear_rows: np.ndarray,
              cmax: np.ndarray, omax: np.ndarray) -> tuple[int, int]:
    """``src`` (H, P, D) f16 bits as uint16; ``dst`` (H, S >= P, D) f32; ``open_rows`` /
    ``clear_rows`` (P,) uint8; ``cmax`` / ``omax`` (H,) int32 scratch.  Returns the largest
    |bits| of the closed and of the open rows."""
    (_join_par if parallel_loops() and src.size >= 1 << 16 else _join)(src, dst, open_rows, clear_rows, cmax, omax)
    return int(cmax.max(initial=0)), int(omax.max(initial=0))
