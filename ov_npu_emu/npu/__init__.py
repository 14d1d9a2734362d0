"""The emulated NPU: compiler -> ELF blob -> driver -> barrier-scheduled DMA/DPU/SHAVE device."""

from __future__ import annotations

__all__: list[str] = []
