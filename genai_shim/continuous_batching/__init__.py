"""Continuous batching over a paged KV cache (openvino.genai's ContinuousBatchingPipeline and
the PagedAttention backend of its CPU LLMPipeline): see docs/genai_shim.md."""

from __future__ import annotations

from genai_shim.continuous_batching.pipeline import (
    ContinuousBatchingPipeline,
    EncodedGenerationResult,
    GenerationHandle,
    GenerationOutput,
    GenerationResult,
    GenerationStatus,
    PipelineMetrics,
    SchedulerConfig,
)
from genai_shim.paged.block_manager import BlockManager
from genai_shim.paged.paged_model import PagedModel, prepare_paged_model
from genai_shim.paged.scheduler import Request, Scheduler

__all__ = [
    "BlockManager",
    "ContinuousBatchingPipeline",
    "EncodedGenerationResult",
    "GenerationHandle",
    "GenerationOutput",
    "GenerationResult",
    "GenerationStatus",
    "PagedModel",
    "PipelineMetrics",
    "Request",
    "Scheduler",
    "SchedulerConfig",
    "prepare_paged_model",
]
