"""Large zeroed buffers whose resident memory follows the bytes written.

numpy asks the kernel for transparent huge pages (``madvise(MADV_HUGEPAGE)``) on every
allocation of 4 MiB or more, so the first write anywhere in a 2 MiB stretch commits all of it.
A buffer written sparsely - the emulated NPU's scratch arena, where a prefill computes only the
real token rows of each head's block (NPU_EMU_SKIP_PADDED_ROWS) - then holds whole huge pages
for a few rows each: measured on llama-3.2-3b-shape int4 (a 21-token prompt), the prefill arena
held 300 of its 342 MB resident where 4 KiB pages held 55 MB. NPUW's KV buffers and present-KV
outputs use it too (they fill row by row), for sizes where huge pages would apply.
"""

from __future__ import annotations

import logging
import math
import mmap

import numpy as np

__all__ = ["zeroed"]

logger = logging.getLogger(__name__)

#: below this numpy does not advise huge pages either: a plain np.zeros
_MIN_BYTES = 4 << 20


def zeroed(shape: int | tuple[int, ...], dtype: np.dtype | type = np.uint8) -> np.ndarray:
    """``np.zeros(shape, dtype)`` on private anonymous 4 KiB pages, each committed at its first
    write (never huge pages, even where the kernel would use them unasked); a plain np.zeros
    where the platform has no such mapping or for small sizes."""
    dt = np.dtype(dtype)
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    nbytes = math.prod(dims) * dt.itemsize
    if nbytes < _MIN_BYTES:
        return np.zeros(dims, dt)
    try:
        buf = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        if hasattr(mmap, "MADV_NOHUGEPAGE"):
            buf.madvise(mmap.MADV_NOHUGEPAGE)
    except (AttributeError, OSError, ValueError) as e:  # no MAP_ANONYMOUS (Windows), no memory map
        logger.debug("zeroed: anonymous mapping of %d bytes unavailable (%s)", nbytes, e)
        return np.zeros(dims, dt)
    # the array's base chain keeps the mapping alive; it is unmapped with the last view
    return np.frombuffer(buf, np.uint8).view(dt).reshape(dims)
