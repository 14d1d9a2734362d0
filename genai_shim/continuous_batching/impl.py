"""ContinuousBatchingPipeline's implementations, chosen once at construction as the real's
ContinuousBatchingPipeline does: PromptLookupImpl with ``prompt_lookup=True``
(continuous_batching/prompt_lookup.py), SpeculativeDecodingImpl with a ``draft_model``
(genai_shim/speculative/cb_api.py), else ContinuousBatchingImpl (genai_shim/paged/engine.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

from genai_shim.continuous_batching.prompt_lookup import PromptLookupImpl
from genai_shim.generation_config import GenerationConfig, folder_generation_config
from genai_shim.lora_controller import resolve_adapters
from genai_shim.model_folder import MODEL_XML, model_folder
from genai_shim.paged.engine import PagedEngine
from genai_shim.paged.scheduler import SchedulerConfig
from genai_shim.results import GenerationResult, PipelineMetrics
from genai_shim.speculative.cb_api import SpeculativeDecodingImpl
from genai_shim.tokenizer import Tokenizer
from ov_npu_emu.errors import ConfigError, UserInputError

__all__ = ["ContinuousBatchingImplBase", "make_core", "make_impl"]


class ContinuousBatchingImplBase(Protocol):
    """What ContinuousBatchingPipeline forwards to (the real's ICBPipelineImpl's part here)."""

    load_time: float

    @property
    def compiled(self) -> Any: ...

    def get_tokenizer(self) -> Tokenizer: ...

    def get_config(self) -> GenerationConfig: ...

    def get_metrics(self) -> PipelineMetrics: ...

    def has_non_finished_requests(self) -> bool: ...

    def add_request(self, request_id: int, prompt: Any, generation_config: Any) -> Any: ...

    def step(self) -> None: ...

    def generate(self, prompts: Any, generation_config: Any, streamer: Any) -> list[GenerationResult]: ...


def make_core() -> Any:
    from ov_npu_emu import Core

    return Core()


def _is_scheduler_config(obj: Any) -> bool:
    return all(hasattr(obj, k) for k in ("max_num_batched_tokens", "num_kv_blocks", "dynamic_split_fuse"))


def _check_scheduler_config(scheduler_config: Any) -> None:
    if not isinstance(scheduler_config, SchedulerConfig) and not _is_scheduler_config(scheduler_config):
        raise UserInputError(
            "scheduler_config must be a genai_shim.SchedulerConfig, got "
            f"{type(scheduler_config).__name__}"
        )


def make_impl(
    core_factory: Any, models_path: Any, tokenizer: Tokenizer | None, scheduler_config: Any, device: Any,
    props: dict[str, Any],
) -> PagedEngine | SpeculativeDecodingImpl | PromptLookupImpl:  # (a VLM folder: a PagedEngine subclass)
    """Check the pipeline's arguments (in the real's order) and build its implementation."""
    _check_scheduler_config(scheduler_config)
    from genai_shim.vlm.continuous_batching import is_vlm_folder, make_vlm_impl

    vlm = Path(os.fsdecode(models_path)) if isinstance(models_path, (str, bytes, os.PathLike)) else None
    folder = vlm if vlm is not None and is_vlm_folder(vlm) else model_folder(models_path)
    props.pop("ATTENTION_BACKEND", None)  # this pipeline is the paged backend whatever it says
    props.pop("scheduler_config", None)
    draft = props.pop("draft_model", None)  # speculative decoding (speculative/cb_api.py)
    prompt_lookup = props.pop("prompt_lookup", False)  # continuous_batching/prompt_lookup.py
    if not isinstance(prompt_lookup, bool):
        raise ConfigError(f"prompt_lookup must be a bool, got {type(prompt_lookup).__name__}", key="prompt_lookup")
    if prompt_lookup and draft is not None:  # the real's text
        raise ConfigError("Speculative decoding and prompt lookup decoding are mutually exclusive",
                          key="prompt_lookup")
    if props.get("STATIC_PIPELINE"):  # never dropped silently: the real runs it, genai_shim not here
        raise ConfigError(
            "STATIC_PIPELINE is not implemented by genai_shim's ContinuousBatchingPipeline; use LLMPipeline",
            key="STATIC_PIPELINE")
    props.pop("STATIC_PIPELINE", None)
    adapters = resolve_adapters(props.pop("adapters", None))  # LoRA (genai_shim/lora_controller.py)
    if getattr(scheduler_config, "use_cache_eviction", False) or getattr(
        scheduler_config, "use_sparse_attention", False
    ):
        raise ConfigError(
            "genai_shim's continuous batching does not implement cache eviction or sparse "
            "attention; leave use_cache_eviction / use_sparse_attention False",
            key="scheduler_config",
        )
    device = str(device).upper()
    if device.split(".")[0] == "NPU":
        raise ConfigError(
            "the paged-attention (continuous batching) backend runs on CPU here; NPU uses the "
            "stateful NPUW pipeline (LLMPipeline(..., 'NPU'))",
            key="device",
        )
    if is_vlm_folder(folder) and not (folder / MODEL_XML).is_file():  # the real's EMBEDDINGS input type
        if draft is not None:  # the real's text
            raise ConfigError("Speculative decoding is not supported for models with embeddings", key="draft_model")
        return make_vlm_impl(core_factory(), folder, device, props, tokenizer, scheduler_config, adapters,
                             prompt_lookup=prompt_lookup)
    tokenizer = tokenizer if tokenizer is not None else Tokenizer(folder)
    config = folder_generation_config(folder, tokenizer)
    core = core_factory()
    if prompt_lookup:
        return PromptLookupImpl(core, folder, device, props, tokenizer, config, scheduler_config, adapters)
    if draft is not None:
        return SpeculativeDecodingImpl(core, folder, device, props, draft, tokenizer, config, scheduler_config,
                                       adapters)
    return PagedEngine(core, folder, device, props, tokenizer, config, scheduler_config, adapters)
