"""The kernel library's registry: kernel name -> *maker*.

A maker takes the operand views and the task's parameter record (ov_npu_emu_npu.blob.kernel_params,
unpacked by make_kernel) and returns a zero-argument callable.
Makers run once per command-list build, so scratch arrays a kernel needs are allocated there,
never on the per-inference path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

__all__ = ["KERNELS", "Maker", "Runner", "kernel"]

Runner = Callable[[], None]
#: (inputs, outputs, params) -> runner; params is the kernel's own record from
#: ov_npu_emu_npu.blob.kernel_params (a KernelParams subclass, so typed Any here)
Maker = Callable[[Sequence[np.ndarray], Sequence[np.ndarray], Any], Runner]
KERNELS: dict[str, Maker] = {}
_M = TypeVar("_M", bound=Maker)


def kernel(*names: str) -> Callable[[_M], _M]:
    """Register the decorated maker under ``names``."""

    def deco(fn: _M) -> _M:
        for n in names:
            KERNELS[n] = fn
        return fn

    return deco
