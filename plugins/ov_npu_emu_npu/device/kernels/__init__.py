"""Numpy kernels the DPU and SHAVE engines run over views of device memory, by family:
:mod:`.elementwise`, :mod:`.movement`, :mod:`.attention`, :mod:`.linear` (DPU), :mod:`.dequant`,
:mod:`.vision`.

Each entry of :data:`KERNELS` is a *maker* (see :mod:`.registry`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ov_npu_emu.errors import ExecutionError
from ov_npu_emu_npu.blob.kernel_params import KernelParams, unpack_params
from ov_npu_emu_npu.device.kernels import (  # noqa: F401 - registers
    accumulate,
    dequant,
    elementwise,
    linear,
    movement,
    vision,
)
from ov_npu_emu_npu.device.kernels.attention import RowWindow, _sdpa
from ov_npu_emu_npu.device.kernels.dequant import DQ_TILE_BYTES, TileDequantizer, dequantize
from ov_npu_emu_npu.device.kernels.registry import KERNELS, Maker, Runner, kernel

__all__ = ["DQ_TILE_BYTES", "KERNELS", "Maker", "RowWindow", "Runner", "TileDequantizer", "dequantize", "kernel",
           "make_kernel"]


def make_kernel(name: str, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray],
                params: np.ndarray | Sequence[float] | KernelParams, window: RowWindow | None = None) -> Runner:
    """Bind kernel ``name`` to its operand views; ``params`` is the task's f64 parameter block (or
    its record), unpacked here once so every kernel reads named fields (KernelParamsError if it
    does not fit the kernel's record)."""
    maker = KERNELS.get(name)
    if maker is None:
        raise ExecutionError(f"kernel {name!r} is not in this device's kernel library")
    record = unpack_params(name, params)
    if window is not None and name == "sdpa":
        return _sdpa(ins, outs, record, window)
    return maker(ins, outs, record)
