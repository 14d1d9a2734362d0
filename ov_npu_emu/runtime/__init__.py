"""Device contract shared by every device plugin (public for plugin authors)."""

from __future__ import annotations

from ov_npu_emu.runtime.device import (
    Device,
    DeviceCompiledModel,
    DeviceInferRequest,
    MergedConfig,
    PortInfo,
    ProfilingInfo,
    VariableState,
)

__all__ = [
    "Device",
    "DeviceCompiledModel",
    "DeviceInferRequest",
    "MergedConfig",
    "PortInfo",
    "ProfilingInfo",
    "VariableState",
]
