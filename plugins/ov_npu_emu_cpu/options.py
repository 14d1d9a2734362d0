"""The CPU passthrough device's own keys, each declared once (:data:`CPU_OPTIONS`).

Everything else a compile config carries goes to the real CPU plugin when it knows the key
(``_ov_config``); the emulator's keys of this device are ``CPU_EMU_*``, so it reads none of the
emulated NPU's ``NPU_EMU_*`` keys (NPUW passes those to whichever device runs its sub-models).
"""

from __future__ import annotations

from ov_npu_emu.options import Option, OptionTable, as_bool

__all__ = ["CPU_OPTIONS"]

CPU_OPTIONS = OptionTable(
    "The CPU device",
    [
        Option("CPU_EMU_WEIGHTS_BANK", as_bool, "YES",
               "YES: sub-models compiled with one `NPUW_WEIGHTS_BANK` name read one f32 copy of each large "
               "MatMul/Gather weight (f32 precision, models of >= 256 MiB of such weights; "
               "[npuw.md](npuw.md#one-weights-copy-on-npuw_devicescpu-the-cpu-devices-weights-bank)); "
               "NO: each compiled model keeps its own weights. The emulated NPU's key is "
               "`NPU_EMU_WEIGHTS_BANK`", origin="ours", scope="device"),
    ],
    prefixes=("CPU_EMU_",),
)
