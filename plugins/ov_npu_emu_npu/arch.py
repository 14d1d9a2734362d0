"""Emulated NPU hardware description, element-type codes and the per-task cost model."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from ov_npu_emu.errors import ConfigError

__all__ = [
    "DTYPES",
    "DTYPE_CODES",
    "HardwareConfig",
    "dma_cycles",
    "dpu_cycles",
    "shave_cycles",
]

#: element-type code (stored in operand descriptors) -> numpy dtype; index 0 is "none"
DTYPES: tuple[Any, ...] = (
    None,
    np.float32,
    np.float16,
    np.int64,
    np.int32,
    np.uint8,
    np.int8,
    np.bool_,
    np.float64,
    np.uint16,
    np.int16,
    np.uint32,
    np.uint64,
)
DTYPE_CODES: dict[np.dtype, int] = {np.dtype(t): i for i, t in enumerate(DTYPES) if t is not None}


@dataclasses.dataclass(frozen=True)
class HardwareConfig:
    """What the compiler plans against and the cost model charges; defaults resemble a client NPU
    (a 6-tile NPU4-class part: 2 MiB CMX per tile pair, LPDDR5x bandwidth, ~1.85 GHz)."""

    cmx_size: int = 2 * 1024 * 1024  # bytes of on-chip scratchpad (NPU_EMU_CMX_SIZE)
    ddr_bandwidth_gbps: float = 64.0  # DDR <-> CMX bandwidth, GB/s (NPU_EMU_DDR_BW_GBPS)
    dma_channels: int = 2  # concurrent DMA engines (NPU_EMU_DMA_CHANNELS)
    dpu_macs_per_cycle: int = 4096  # MAC array throughput per clock, all tiles (NPU_EMU_DPU_MACS)
    shave_flops_per_cycle: int = 128  # vector FLOPs per clock over all SHAVE cores (NPU_EMU_SHAVE_FLOPS)
    clock_mhz: float = 1850.0  # NPU clock (NPU_EMU_CLOCK_MHZ)
    task_overhead_cycles: int = 200  # fixed dispatch cost per task (barrier wait, descriptor fetch)

    #: the hardware keys and the fields they set (types and checks: NPU_OPTIONS in options.py)
    KEYS: ClassVar[dict[str, str]] = {
        "NPU_EMU_CMX_SIZE": "cmx_size",
        "NPU_EMU_DDR_BW_GBPS": "ddr_bandwidth_gbps",
        "NPU_EMU_DMA_CHANNELS": "dma_channels",
        "NPU_EMU_DPU_MACS": "dpu_macs_per_cycle",
        "NPU_EMU_SHAVE_FLOPS": "shave_flops_per_cycle",
        "NPU_EMU_CLOCK_MHZ": "clock_mhz",
    }

    @classmethod
    def preset(cls, name: str) -> HardwareConfig:
        """The calibrated preset of an NPU generation (``NPU3720``, ``NPU4000``; see npu/platforms.py)."""
        from ov_npu_emu_npu.platforms import get_platform

        return get_platform(name).hardware()

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> HardwareConfig:
        """Read the ``NPU_EMU_*`` keys of a compile config; unknown values are a ConfigError.

        ``NPU_EMU_PLATFORM=NPU3720|NPU4000`` starts from that generation's preset; the other
        keys then override single fields.
        """
        from ov_npu_emu_npu.options import NPU_OPTIONS

        kw: dict[str, Any] = {}
        platform = NPU_OPTIONS.get(config, "NPU_EMU_PLATFORM")
        if platform:
            kw = dict(cls.preset(platform).to_dict())
        for key, field in cls.KEYS.items():
            if key in config:  # typed and checked (> 0) by the option's converter
                kw[field] = NPU_OPTIONS[key].convert(config[key])
        try:
            return cls(**kw)
        except TypeError as e:  # pragma: no cover - fields and KEYS are kept in sync
            raise ConfigError(f"bad hardware config: {e}") from e

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def bytes_per_cycle(self) -> float:
        return self.ddr_bandwidth_gbps * 1e9 / (self.clock_mhz * 1e6)

    def cycles_to_us(self, cycles: float) -> float:
        return cycles / self.clock_mhz


def dma_cycles(hw: HardwareConfig, nbytes: int) -> int:
    """A DMA moves bytes at DDR bandwidth (shared by the channels)."""
    return hw.task_overhead_cycles + int(nbytes / hw.bytes_per_cycle)


def dpu_cycles(hw: HardwareConfig, macs: int, weight_bytes: int) -> int:
    """DPU work is bound by MACs or by streaming weights from DDR, whichever is slower."""
    compute = macs / hw.dpu_macs_per_cycle
    stream = weight_bytes / hw.bytes_per_cycle
    return hw.task_overhead_cycles + int(max(compute, stream))


def shave_cycles(hw: HardwareConfig, elements: int, flops_per_element: float = 1.0) -> int:
    """SHAVE kernels are vector code: elements x flops each over the aggregate vector width."""
    return hw.task_overhead_cycles + int(elements * flops_per_element / hw.shave_flops_per_cycle)
