"""``ContinuousBatchingPipeline``: a facade over the implementation its constructor picks
(continuous_batching/impl.py): the paged engine (genai_shim/paged/engine.py) or, with a
``draft_model``, speculative decoding (genai_shim/speculative/cb_api.py)."""

from __future__ import annotations

import time
import warnings
from typing import Any

from genai_shim.chat_session import CHAT_DEPRECATION
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
        """Chat on a VLM folder: each str prompt joins the templated history (the real's; a text
        LLM folder's chat is not implemented here)."""
        if not getattr(self._impl, "takes_vision", False):
            raise UserInputError("genai_shim's ContinuousBatchingPipeline has no chat mode on a text LLM folder; "
                                 "use LLMPipeline")
        warnings.warn(CHAT_DEPRECATION, DeprecationWarning, stacklevel=2)
        self._impl.start_chat(system_message)  # type: ignore[attr-defined]

    def finish_chat(self) -> None:
        if not getattr(self._impl, "takes_vision", False):
            raise UserInputError("genai_shim's ContinuousBatchingPipeline has no chat mode on a text LLM folder; "
                                 "use LLMPipeline")
        warnings.warn(CHAT_DEPRECATION, DeprecationWarning, stacklevel=2)
        self._impl.finish_chat()  # type: ignore[attr-defined]

    def has_non_finished_requests(self) -> bool:
        return self._impl.has_non_finished_requests()

    def add_request(self, request_id: int, prompt: Any, *args: Any, **kwargs: Any) -> GenerationHandle:
        """``add_request(request_id, prompt | input_ids, generation_config)``; on a VLM folder
        also ``(request_id, prompt, images, generation_config)`` and ``(request_id, prompt,
        images, videos, generation_config, videos_metadata=[...])``.  A ``GenerationHandle``
        (a SpeculativeHandle with a ``draft_model``: the same methods)."""
        names = {0: (), 1: ("generation_config",), 2: ("images", "generation_config"),
                 3: ("images", "videos", "generation_config")}
        if len(args) not in names:
            raise UserInputError("add_request(request_id, prompt, [images, [videos,]] generation_config)")
        given = dict(zip(names[len(args)], args, strict=True))
        for k in ("images", "videos", "generation_config", "videos_metadata"):
            if k in kwargs:
                if k in given:
                    raise UserInputError(f"add_request() got {k} twice")
                given[k] = kwargs.pop(k)
        if kwargs:
            raise UserInputError(f"add_request() got unexpected arguments {sorted(kwargs)}")
        if "generation_config" not in given:
            raise UserInputError("add_request() needs a generation_config")
        config = given.pop("generation_config")
        if getattr(self._impl, "takes_vision", False):
            handle: GenerationHandle = self._impl.add_request(request_id, prompt, config, **given)  # type: ignore[call-arg]
            return handle
        if any(given.get(k) is not None for k in ("images", "videos")) or given.get("videos_metadata"):
            raise UserInputError("Model doesn't support embeddings.")  # the real's text (a text LLM folder)
        handle = self._impl.add_request(request_id, prompt, config)
        return handle

    def step(self) -> None:
        self._impl.step()

    def generate(self, prompts: Any, *args: Any, **kwargs: Any) -> list[Any]:
        """``generate(prompts | input_ids, generation_config, streamer=None)``: GenerationResult
        (EncodedGenerationResult for ids) per prompt.  On a VLM folder also
        ``generate(prompts | histories, images=[[...], ...], videos=[[...], ...],
        generation_config=[...], streamer=None, videos_metadata_batches=[[...], ...])``:
        VLMDecodedResults per prompt, as the real's."""
        images = kwargs.pop("images", None)
        videos = kwargs.pop("videos", None)
        metas = kwargs.pop("videos_metadata_batches", None)
        args_l = list(args)
        if args_l and _is_batches(args_l[0]):  # generate(prompts, images, [videos,] configs, ...)
            if images is not None:
                raise UserInputError("generate() got images twice")
            images = args_l.pop(0)
            if args_l and _is_batches(args_l[0]):
                videos = args_l.pop(0)
        config = args_l.pop(0) if args_l else kwargs.pop("generation_config", None)
        streamer = args_l.pop(0) if args_l else kwargs.pop("streamer", None)
        if args_l or kwargs:
            raise UserInputError(f"generate() got unexpected arguments {sorted(kwargs) or args_l}")
        if not getattr(self._impl, "takes_vision", False):
            if images is not None or videos is not None or metas is not None:
                raise UserInputError("Model doesn't support embeddings.")  # the real's text
            return self._impl.generate(prompts, config, streamer)
        vision = images is not None or videos is not None or metas is not None
        single = isinstance(prompts, str)
        if single and vision:
            raise UserInputError("generate() with images / videos takes a list of prompts and a list of "
                                 "GenerationConfig (the real's binding has no overload for one str prompt)")
        if single:
            prompts = [prompts]
            config = [config] if isinstance(config, GenerationConfig) else config
        elif isinstance(config, GenerationConfig):
            raise UserInputError("generate() with a list of prompts takes a list of GenerationConfig, one per "
                                 "prompt (the real's binding has no overload for one config)")
        if not isinstance(prompts, (list, tuple)):
            raise UserInputError("generate() on a VLM folder takes a list of str prompts or of ChatHistory, got "
                                 f"{type(prompts).__name__}; token ids do not carry images")
        return self._impl.generate(prompts, config, streamer, images=images,  # type: ignore[call-arg]
                                   videos=videos, videos_metadata=metas, vision_results=vision)


def _is_batches(value: Any) -> bool:
    """A list of lists (generate's positional images / videos, one list per prompt)."""
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(v, (list, tuple)) for v in value)


def _is_histories(prompts: Any) -> bool:
    from genai_shim.chat import ChatHistory

    return isinstance(prompts, (list, tuple)) and bool(prompts) and isinstance(prompts[0], ChatHistory)
