"""numpy's OpenBLAS on one thread for a while, process-wide, shared by concurrent users.

OpenBLAS's worker threads busy-wait for work; on a 2-core host that other processes (or our own
kernel threads) also use, they wait for cores and a product of a few MFLOP can take a hundred
times its compute (a prefill's attention products: see docs/performance.md, "Large models on
the emulated NPU").
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import threading
from collections.abc import Iterator

from threadpoolctl import ThreadpoolController

__all__ = ["one_blas_thread"]

_BLAS_LOCK = threading.Lock()
_blas_users = 0
_blas_saved: list[tuple[_OpenBLAS, int]] = []


class _OpenBLAS:
    """One loaded OpenBLAS's process-wide thread count, called directly: threadpoolctl finds the
    libraries, but its own setter (3.8 on) obeys only the first Python thread that ever set it,
    while the threads running inferences here come and go (the count of users is kept below)."""

    def __init__(self, path: str) -> None:
        lib = ctypes.CDLL(path)  # the loaded library itself (dlopen of a loaded path)
        names = [(f"{p}openblas_get_num_threads{s}", f"{p}openblas_set_num_threads{s}")
                 for p in ("", "scipy_") for s in ("", "64_")]
        get, put = next(((getattr(lib, g), getattr(lib, t)) for g, t in names
                         if hasattr(lib, g) and hasattr(lib, t)), (None, None))
        if get is None or put is None:
            raise AttributeError(f"no OpenBLAS thread-count functions in {path}")
        get.restype, put.argtypes = ctypes.c_int, [ctypes.c_int]
        self.get_num_threads, self.set_num_threads = get, put


@functools.cache
def blas_libraries() -> list[_OpenBLAS]:
    libs = []
    for info in ThreadpoolController().select(internal_api="openblas").info():
        try:
            libs.append(_OpenBLAS(info["filepath"]))
        except (OSError, AttributeError):  # another build: its threads stay as they are
            pass
    return libs


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """BLAS on one thread inside the block. OpenBLAS's thread count is process-wide, so
    concurrent and nested users share one setting, restored by the last one out."""
    global _blas_users
    with _BLAS_LOCK:
        if _blas_users == 0:
            _blas_saved[:] = [(lib, lib.get_num_threads()) for lib in blas_libraries()]
            for lib, _ in _blas_saved:
                lib.set_num_threads(1)
        _blas_users += 1
    try:
        yield
    finally:
        with _BLAS_LOCK:
            _blas_users -= 1
            if _blas_users == 0:
                for lib, n in _blas_saved:
                    lib.set_num_threads(n)
