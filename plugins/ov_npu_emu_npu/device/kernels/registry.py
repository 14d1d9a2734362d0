"""The kernel library's registry: kernel name -> *maker*.

A maker takes the operand views and the task's parameter record (ov_npu_emu_npu.blob.kernel_params,
unpacked by make_kernel) and returns a zero-argument callable.
Makers run once per command-list build, so scratch arrays a kernel needs are allocated there,
never on the per-inference path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ov_npu_emu_npu.blob.kernel_params import KernelParams

__all__ = ["KERNELS", "Maker", "Runner", "kernel"]

Runner = Callable[[], None]
Maker = Callable[[Sequence[np.ndarray], Sequence[np.ndarray], KernelParams], Runner]
KERNELS: dict[str, Maker] = {}


def kernel(*names: str) -> Callable[[Maker], Maker]:
    """Register the decorated maker under ``names``."""

    def deco(fn: Maker) -> Maker:
        for n in names:
            KERNELS[n] = fn
        return fn

    return deco
