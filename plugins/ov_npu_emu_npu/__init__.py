"""Device plugin "NPU": the emulated NPU, whole.

``compiler/`` turns a static OpenVINO model into an ELF blob (``blob/``: format, writer, reader,
validation); ``driver/`` loads a blob as the Level Zero driver does (pyelftools, relocations,
command lists, queue, fence, weights bank); ``device/`` runs its DMA/DPU/SHAVE tasks by barriers
with a cost model; ``arch.py`` and ``platforms.py`` describe the hardware it emulates.
``plugin.py`` is the device the runtime core sees (``ov_npu_emu.runtime.device``), and ``cli.py``
its commands. Nothing outside this package imports its internals: swapping the NPU means
swapping this folder.
"""

from __future__ import annotations

from ov_npu_emu_npu.cli import ovnpu_add_cli_commands
from ov_npu_emu_npu.plugin import (
    NpuCompiledModel,
    NpuDevice,
    NpuInferRequest,
    ZeroVariableState,
    ovnpu_register_devices,
)

__all__ = [
    "NpuCompiledModel",
    "NpuDevice",
    "NpuInferRequest",
    "ZeroVariableState",
    "ovnpu_add_cli_commands",
    "ovnpu_register_devices",
]
