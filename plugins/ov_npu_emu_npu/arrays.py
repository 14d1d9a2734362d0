"""Array helpers shared by the NPU compiler and driver."""

from __future__ import annotations

import numpy as np

#: bytes compared per step by :func:`same_contents` (the bool temporary of one step)
_COMPARE_CHUNK = 4 << 20


def same_contents(a: np.ndarray, b: np.ndarray) -> bool:
    """``np.array_equal(a, b)`` (NaN unequal) without its whole-array bool temporary.

    Weights compared here are up to gigabytes (an 8B model's embedding): ``a == b`` would
    allocate a byte per element at the build's memory peak. Two views of the same memory
    (NPUW sub-models cloned from one IR share their Constants' data) are equal without a read.
    """
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.size == 0:
        return True
    if (a.flags.c_contiguous and b.flags.c_contiguous
            and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
            and not np.issubdtype(a.dtype, np.inexact)):  # NaN != NaN even in place
        return True
    fa, fb = a.reshape(-1), b.reshape(-1)
    step = max(1, _COMPARE_CHUNK // a.itemsize)
    return all(np.array_equal(fa[i:i + step], fb[i:i + step]) for i in range(0, fa.size, step))
