"""The NPU driver: blob loading (HostParsedInference), relocation, command lists, queue, fence."""

from __future__ import annotations

from ov_npu_emu_npu.device.kernels import RowWindow
from ov_npu_emu_npu.driver.bank import BankedWeights, BankEntry, WeightsBank
from ov_npu_emu_npu.driver.command import FENCE_MODES, QUEUE_MODES, CommandList, CommandQueue, Fence
from ov_npu_emu_npu.driver.hpi import HostParsedInference, ParsedBlob
from ov_npu_emu_npu.driver.memory import AddressSpace, DeviceArena, Region

__all__ = [
    "FENCE_MODES",
    "QUEUE_MODES",
    "AddressSpace",
    "BankEntry",
    "BankedWeights",
    "CommandList",
    "CommandQueue",
    "DeviceArena",
    "Fence",
    "HostParsedInference",
    "ParsedBlob",
    "Region",
    "RowWindow",
    "WeightsBank",
]
