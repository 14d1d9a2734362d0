"""Host alignment of numpy buffers, for probes that must run a kernel on random data laid out
as the real operands are: BLAS may pick another code path (and summation order) for another
offset of the data past a cache line, so a probe reproduces each operand's offset class."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["ALIGN", "aligned", "mod"]

ALIGN = 64  # the alignment classes probes reproduce: a cache line


def mod(v: np.ndarray) -> int:
    """``v``'s data pointer past a cache-line boundary."""
    return v.__array_interface__["data"][0] % ALIGN


def aligned(shape: tuple[int, ...], dtype: np.dtype, offset: int) -> np.ndarray:
    """A zeroed C-contiguous array whose data pointer is ``offset`` past a cache-line boundary."""
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    buf = np.zeros(nbytes + 2 * ALIGN, np.uint8)
    off = (offset - mod(buf)) % ALIGN
    return buf[off:off + nbytes].view(dtype).reshape(shape)
