"""The paged KV-cache engine under continuous batching (openvino.genai's ContinuousBatchingImpl):
the engine itself (engine: requests, step, generate), blocks (block_manager), scheduling
(scheduler), the paged-attention model (paged_model), forks of parallel sampling and beam search
(forks)."""

from __future__ import annotations

from genai_shim.paged.block_manager import BlockManager
from genai_shim.paged.paged_model import PagedModel, prepare_paged_model
from genai_shim.paged.scheduler import Request, Scheduler

__all__ = [
    "BlockManager",
    "PagedModel",
    "Request",
    "Scheduler",
    "prepare_paged_model",
]
