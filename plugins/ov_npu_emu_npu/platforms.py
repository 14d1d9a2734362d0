"""Per-generation NPU presets: published hardware constants plus fitted efficiency terms.

A :class:`Platform` is what ``NPU_EMU_PLATFORM=<name>`` (or :meth:`HardwareConfig.preset`) selects.
Constants come from published specs (sources in ``docs/npu_calibration_sources.md``); the three
efficiency terms are fitted on published LLM measurements by ``bench/calibrate_npu.py`` (fit and
held-out errors in ``docs/npu_device.md``, section "Calibration").  The model is deliberately
small:

* the NPU streams DDR at ``dram_gbps * ddr_efficiency`` (the platform DRAM peak times a fitted
  fraction),
* the DPU array does ``macs_per_cycle * mac_efficiency`` MACs per clock,
* every pipeline step (one prefill, one decode token) pays ``step_overhead_ms`` on top of the
  device timeline (driver submission, NPUW bookkeeping, sampling: what the device cost model
  does not see).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ov_npu_emu.errors import ConfigError
from ov_npu_emu_npu.arch import HardwareConfig

__all__ = ["PLATFORMS", "Platform", "get_platform"]


@dataclasses.dataclass(frozen=True)
class Platform:
    """One NPU generation on one reference SoC."""

    name: str
    description: str
    # -- published constants ---------------------------------------------------------------
    clock_mhz: float  # NPU clock
    macs_per_cycle: int  # INT8 MACs per clock over all NCE tiles (peak)
    tiles: int  # NCE tiles
    cmx_per_tile: int  # usable CMX bytes per tile (compiler resource model)
    dma_channels: int  # DMA_NN engines
    dram_gbps: float  # platform DRAM peak bandwidth of the reference SoC
    shave_flops_per_cycle: int  # ours: 32 vector FLOPs per SHAVE core and clock (no published figure)
    # -- fitted efficiency terms (bench/calibrate_npu.py) ----------------------------------
    ddr_efficiency: float = 1.0  # fraction of dram_gbps the NPU sustains
    mac_efficiency: float = 1.0  # fraction of the MAC array's peak the DPU sustains
    step_overhead_ms: float = 0.0  # fixed cost per pipeline step (prefill or decode token)
    fitted_on: tuple[str, ...] = ()  # calibration point ids the terms were fitted on

    @property
    def peak_tops(self) -> float:
        return 2 * self.macs_per_cycle * self.clock_mhz * 1e6 / 1e12

    def hardware(self, **overrides: Any) -> HardwareConfig:
        """The HardwareConfig the compiler plans against and the cost model charges."""
        kw: dict[str, Any] = dict(
            cmx_size=self.cmx_per_tile * self.tiles,
            ddr_bandwidth_gbps=self.dram_gbps * self.ddr_efficiency,
            dma_channels=self.dma_channels,
            dpu_macs_per_cycle=max(1, round(self.macs_per_cycle * self.mac_efficiency)),
            shave_flops_per_cycle=self.shave_flops_per_cycle,
            clock_mhz=self.clock_mhz,
        )
        kw.update(overrides)
        return HardwareConfig(**kw)

    def with_terms(self, **terms: Any) -> Platform:
        return dataclasses.replace(self, **terms)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["peak_tops"] = self.peak_tops
        return d


#: The presets.  Published constants: Intel "Lunar Lake AI Hardware Accelerators" deck (4K MACs /
#: 2 NCEs vs 12K MACs / 6 NCEs, 11.5 TOPS at 1.4 GHz, 48 TOPS), npu_compiler resource models (CMX
#: bytes per tile, 2 DMA_NN engines), Intel ARK memory specs of the reference SoCs.  Efficiency
#: terms: bench/calibrate_npu.py (see docs/npu_device.md, "Calibration").
PLATFORMS: dict[str, Platform] = {
    "NPU3720": Platform(
        name="NPU3720",
        description="Meteor Lake NPU (Core Ultra 9 185H, LPDDR5x-7467)",
        clock_mhz=1400.0,
        macs_per_cycle=4096,
        tiles=2,
        cmx_per_tile=1_982_464,
        dma_channels=2,
        dram_gbps=119.5,
        shave_flops_per_cycle=4 * 32,
        ddr_efficiency=0.4385,  # -> 52.4 GB/s
        mac_efficiency=0.9825,  # weakly identified: the prefill is mostly SHAVE attention (docs)
        step_overhead_ms=21.648,
        fitted_on=("mtl-8b-tpot", "arl-0.6b-tpot", "mtl-8b-ttft"),
    ),
    "NPU4000": Platform(
        name="NPU4000",
        description="Lunar Lake NPU 4 (Core Ultra 7 258V, LPDDR5X-8533)",
        clock_mhz=1950.0,  # 48 TOPS / (2 x 12288 MACs)
        macs_per_cycle=12288,
        tiles=6,
        cmx_per_tile=1_474_560,
        dma_channels=2,
        dram_gbps=136.5,
        shave_flops_per_cycle=12 * 32,
        ddr_efficiency=0.7918,  # -> 108.1 GB/s
        mac_efficiency=1.0,  # the fit hit the clamp: peak MACs already give the published TTFT
        step_overhead_ms=21.648,  # not refitted: NPU3720's value (a software-stack cost)
        fitted_on=("lnl-7b-tpot", "lnl-7b-ttft"),
    ),
}


def get_platform(name: str) -> Platform:
    """The preset ``name`` (case-insensitive); unknown names are a ConfigError listing the known ones."""
    key = str(name).strip().upper()
    if key not in PLATFORMS:
        raise ConfigError(f"unknown NPU platform {name!r}; known: {', '.join(PLATFORMS)}", key="NPU_EMU_PLATFORM")
    return PLATFORMS[key]
