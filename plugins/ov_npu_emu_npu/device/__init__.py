"""The emulated NPU device: management core, DMA/DPU/SHAVE engines, kernels, timeline."""

from __future__ import annotations

from ov_npu_emu_npu.device.engines import DecodedTask, ManagementCore, decode_task
from ov_npu_emu_npu.device.profiling import Timeline, chrome_trace, simulate_timeline

__all__ = ["DecodedTask", "ManagementCore", "Timeline", "chrome_trace", "decode_task", "simulate_timeline"]
