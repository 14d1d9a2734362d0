"""NPU generation presets (NPU3720, NPU4000): published constants, fitted terms, NPU_EMU_PLATFORM."""

from __future__ import annotations

import pytest

from ov_npu_emu import Core
from ov_npu_emu.errors import ConfigError
from ov_npu_emu_npu.arch import HardwareConfig
from ov_npu_emu_npu.platforms import PLATFORMS, get_platform


def test_presets_carry_the_published_constants():
    mtl, lnl = HardwareConfig.preset("NPU3720"), HardwareConfig.preset("npu4000")
    p3, p4 = PLATFORMS["NPU3720"], PLATFORMS["NPU4000"]
    # Intel: NPU 3 = 4K MACs at 1.4 GHz (11.5 TOPS), NPU 4 = 12K MACs, 48 TOPS
    assert (p3.macs_per_cycle, p3.clock_mhz, p3.tiles) == (4096, 1400.0, 2)
    assert (p4.macs_per_cycle, p4.tiles) == (12288, 6)
    assert p3.peak_tops == pytest.approx(11.47, abs=0.01) and p4.peak_tops == pytest.approx(47.9, abs=0.1)
    assert mtl.cmx_size == 2 * 1_982_464 and lnl.cmx_size == 6 * 1_474_560
    assert mtl.dma_channels == lnl.dma_channels == 2
    for p, hw in ((p3, mtl), (p4, lnl)):
        assert 0 < p.ddr_efficiency <= 1 and 0 < p.mac_efficiency <= 1 and p.step_overhead_ms >= 0
        assert hw.ddr_bandwidth_gbps == pytest.approx(p.dram_gbps * p.ddr_efficiency)
        assert hw.dpu_macs_per_cycle == round(p.macs_per_cycle * p.mac_efficiency)
        assert hw.clock_mhz == p.clock_mhz


def test_platform_key_is_a_base_that_other_keys_override():
    hw = HardwareConfig.from_config({"NPU_EMU_PLATFORM": "NPU3720", "NPU_EMU_CLOCK_MHZ": "1000"})
    assert hw.clock_mhz == 1000.0 and hw.dpu_macs_per_cycle == HardwareConfig.preset("NPU3720").dpu_macs_per_cycle
    with pytest.raises(ConfigError, match="NPU3720"):
        get_platform("NPU9999")
    with pytest.raises(ConfigError, match="unknown NPU platform"):
        Core().set_property("NPU", {"NPU_EMU_PLATFORM": "bogus"})
