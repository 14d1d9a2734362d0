"""``ContinuousBatchingPipeline``: a facade over the implementation its constructor picks
(continuous_batching/impl.py): the paged engine (genai_shim/paged/engine.py) or, with a
``draft_model``, speculative decoding (genai_shim/speculative/cb_api.py)."""

from __future__ import annotations

import time
from typing import Any

from genai_shim.continuous_batching.impl import ContinuousBatchingImplBase, make_core, make_impl
from genai_shim.generation_config import GenerationConfig
from genai_shim.paged.engine import GenerationHandle
from genai_shim.paged.scheduler import SchedulerConfig
from genai_shim.results import (
    EncodedGenerationResult,
    GenerationOutput,
    GenerationResult,
    GenerationStatus,
    PipelineMetrics,
)
from genai_shim.tokenizer import Tokenizer
from ov_npu_emu.errors import UserInputError

__all__ = [
    "ContinuousBatchingPipeline",
    "EncodedGenerationResult",
    "GenerationHandle",
    "GenerationOutput",
    "GenerationResult",
    "GenerationStatus",
    "PipelineMetrics",
    "SchedulerConfig",
]


class ContinuousBatchingPipeline:
    """``ContinuousBatchingPipeline(models_path, scheduler_config, device, properties={},
    tokenizer_properties={})`` or ``(models_path, tokenizer, scheduler_config, device,
    **properties)``."""

    def __init__(self, models_path: Any, *args: Any, **kwargs: Any) -> None:
        t0 = time.perf_counter()
        tokenizer: Tokenizer | None = None
        args_l = list(args)
        if args_l and isinstance(args_l[0], Tokenizer):
            tokenizer = args_l.pop(0)
        elif "tokenizer" in kwargs:
            tokenizer = kwargs.pop("tokenizer")
        scheduler_config = args_l.pop(0) if args_l else kwargs.pop("scheduler_config", None)
        device = args_l.pop(0) if args_l else kwargs.pop("device", "CPU")
        props: dict[str, Any] = dict(args_l.pop(0)) if args_l else dict(kwargs.pop("properties", {}) or {})
        kwargs.pop("tokenizer_properties", None)
        props.update(kwargs)
        self._impl: ContinuousBatchingImplBase = make_impl(
            make_core, models_path, tokenizer, scheduler_config, device, props)
        self._impl.load_time = (time.perf_counter() - t0) * 1000.0

    @property
    def compiled(self) -> Any:
        """The compiled paged-attention model."""
        return self._impl.compiled

    def get_tokenizer(self) -> Tokenizer:
        return self._impl.get_tokenizer()

    def get_config(self) -> GenerationConfig:
        return self._impl.get_config()

    def get_metrics(self) -> PipelineMetrics:
        return self._impl.get_metrics()

    def start_chat(self, system_message: str = "") -> None:
        raise UserInputError("genai_shim's ContinuousBatchingPipeline has no chat mode; use LLMPipeline")

    def finish_chat(self) -> None:
        raise UserInputError("genai_shim's ContinuousBatchingPipeline has no chat mode; use LLMPipeline")

    def has_non_finished_requests(self) -> bool:
        return self._impl.has_non_finished_requests()

    def add_request(self, request_id: int, prompt: Any, generation_config: GenerationConfig) -> GenerationHandle:
        """A ``GenerationHandle`` (a SpeculativeHandle with a ``draft_model``: the same methods)."""
        handle: GenerationHandle = self._impl.add_request(request_id, prompt, generation_config)
        return handle

    def step(self) -> None:
        self._impl.step()

    def generate(self, prompts: Any, generation_config: Any = None, streamer: Any = None) -> list[GenerationResult]:
        return self._impl.generate(prompts, generation_config, streamer)
