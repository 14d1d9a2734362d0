"""LLMPipeline: openvino.genai's LLMPipeline over ov_npu_emu.Core (CPU, NPU), a facade whose
constructor picks one implementation (genai_shim/llm), as the real's llm/pipeline.cpp does."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from genai_shim.continuous_batching.pipeline import SchedulerConfig
from genai_shim.generation_config import GenerationConfig, folder_generation_config
from genai_shim.llm.base import LLMPipelineImplBase
from genai_shim.llm.paged import PagedBackend, PagedLLM
from genai_shim.llm.prompt_lookup import PromptLookupLLM
from genai_shim.llm.speculative import SpeculativeLLM
from genai_shim.llm.stateful import StatefulLLM, has_linear_states
from genai_shim.lora_controller import AdapterController, resolve_adapters
from genai_shim.model_folder import MODEL_XML, model_folder
from genai_shim.npu_compile import compile_npu
from genai_shim.npu_config import get_kv_axes_pos
from genai_shim.pipeline_args import PipelineProperties, parse_ctor, parse_memory_ctor, split_properties
from genai_shim.speculative.draft import DraftModel
from genai_shim.tokenizer import Tokenizer
from ov_npu_emu.errors import ConfigError, NpuEmuError, UserInputError

__all__ = ["LLMPipeline", "SchedulerConfig"]

logger = logging.getLogger(__name__)


def _now() -> float:
    return time.perf_counter()


def _make_core() -> Any:
    """The Core every pipeline compiles through (tests substitute one with other plugins)."""
    from ov_npu_emu import Core

    return Core()


@dataclass
class _Source:
    """Where the model comes from: a folder, or the IR's XML text and weights in memory."""

    folder: Path | None
    tokenizer: Any
    device: Any
    config: Mapping[str, Any] | None
    in_config: GenerationConfig | None = None
    model_xml: str = ""
    weights: Any = None


def _parse_source(args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Source:
    memory = parse_memory_ctor(args, kwargs)
    if memory is not None:
        # LLMPipeline(model: str, weights: Tensor, tokenizer, device, generation_config=None,
        # **properties): the IR's XML text and its weights, no folder.
        model_xml, weights, tokenizer, device, in_config = memory
        return _Source(None, tokenizer, device, None, in_config, model_xml, weights)
    if not args and "models_path" not in kwargs:
        raise UserInputError("LLMPipeline() needs models_path")
    models_path = args[0] if args else kwargs.pop("models_path")
    tokenizer, device, config = parse_ctor(args[1:], kwargs)
    if not isinstance(models_path, (str, bytes, os.PathLike)):
        raise UserInputError(
            f"models_path must be a folder path (str or os.PathLike), got {type(models_path).__name__}"
        )
    return _Source(model_folder(models_path), tokenizer, device, config)


def _check_options(opts: PipelineProperties, adapters: Any) -> None:
    if adapters and (opts.draft is not None or opts.prompt_lookup):
        raise ConfigError(
            "genai_shim applies LoRA adapters in the stateful and NPU pipelines only, not with "
            "draft_model or prompt_lookup; drop one of them",
            key="adapters",
        )
    if opts.draft is not None and not isinstance(opts.draft, DraftModel):
        raise ConfigError(
            "draft_model must be what genai_shim.draft_model(path, device, **properties) "
            f"returns (speculative decoding), got {type(opts.draft).__name__}",
            key="draft_model",
        )


def _generation_config(src: _Source, tokenizer: Tokenizer) -> GenerationConfig:
    if src.folder is None:
        config = src.in_config.copy() if src.in_config is not None else GenerationConfig()
        if config.eos_token_id == -1 and tokenizer.get_eos_token_id() != -1:
            config.set_eos_token_id(tokenizer.get_eos_token_id())
        return config
    return folder_generation_config(src.folder, tokenizer)


class LLMPipeline:
    """``LLMPipeline(models_path, device="CPU", config=None, **properties)`` or
    ``LLMPipeline(models_path, tokenizer, device, config=None, **properties)``.

    One logic for both devices (openvino.genai's StatefulLLMPipeline): on "NPU" the properties
    are translated for NPUW and the model is compiled through ``ov_npu_emu.Core`` with them; the
    prompt/history is capped at MAX_PROMPT_LEN, generation ends silently at the KV capacity,
    and chat re-prefills the whole templated history each turn.  On other devices the stateful
    model runs as is and chat keeps the KV cache between turns; the CPU default is the paged
    (continuous-batching) implementation, as the real's.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        t0 = _now()
        src = _parse_source(args, kwargs)
        opts = split_properties({**(src.config or {}), **kwargs})
        adapters = resolve_adapters(opts.adapters)
        _check_options(opts, adapters)
        device = str(src.device).upper()
        is_npu = device.split(".")[0] == "NPU"
        # Prompt lookup: the real runs it in its continuous-batching pipeline on CPU; on NPU the
        # property has no effect (the stateful NPU pipeline decodes token by token, measured on
        # openvino_genai 2026.4.1), so genai_shim does the same and says so in the log.
        prompt_lookup = opts.prompt_lookup and not is_npu
        if prompt_lookup and opts.backend == "SDPA":
            # the real's text (prompt lookup runs on its paged-attention pipeline only)
            raise ConfigError(
                "User properties are conflicting: some of them requires PagedAttention backend, "
                "while 'ATTENTION_BACKEND' is set to 'SDPA'",
                key="ATTENTION_BACKEND",
            )
        if opts.prompt_lookup and is_npu:
            logger.warning(
                "prompt_lookup has no effect on NPU (as in openvino_genai): decoding one token "
                "per model call"
            )
        core = _make_core()
        # the IR is parsed on a helper thread (OpenVINO releases the GIL while it reads) as the
        # tokenizer loads: a speculative pipeline reads its models itself
        model = _read_ahead(core, src.folder) if src.folder is not None and opts.draft is None else None
        tokenizer = src.tokenizer if src.tokenizer is not None else Tokenizer(src.folder)
        config = _generation_config(src, tokenizer)
        self._impl: LLMPipelineImplBase = _make_impl(core, src, opts, adapters, device, tokenizer, config, model)
        self._impl.load_time = (_now() - t0) * 1000.0

    # -- public API ----------------------------------------------------------------------------
    def get_tokenizer(self) -> Tokenizer:
        return self._impl.tokenizer

    def get_generation_config(self) -> GenerationConfig:
        return self._impl.get_generation_config()

    def set_generation_config(self, config: GenerationConfig) -> None:
        self._impl.set_generation_config(config)

    def start_chat(self, system_message: str = "") -> None:
        """Start a chat (deprecated upstream in favour of ``generate(ChatHistory)``)."""
        self._impl.start_chat(system_message)

    def finish_chat(self) -> None:
        self._impl.finish_chat()

    def __call__(
        self,
        inputs: Any,
        generation_config: GenerationConfig | None = None,
        streamer: Any = None,
        **kwargs: Any,
    ) -> Any:
        return self.generate(inputs, generation_config, streamer, **kwargs)

    def generate(
        self,
        inputs: Any,
        generation_config: GenerationConfig | None = None,
        streamer: Any = None,
        **kwargs: Any,
    ) -> Any:
        """Generate for a str (→ str), list[str] / ChatHistory (→ DecodedResults), or
        TokenizedInputs / ov.Tensor of ids (→ EncodedResults)."""
        return self._impl.generate(inputs, generation_config, streamer, kwargs)


def _read_ahead(core: Any, folder: Path) -> Future[ov.Model]:
    """``core.read_model`` of the folder's IR, started on a helper thread."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="genai_shim-read")
    try:
        return pool.submit(core.read_model, folder / MODEL_XML)
    finally:
        pool.shutdown(wait=False)  # the thread ends after its one task


def _make_impl(
    core: Any, src: _Source, opts: PipelineProperties, adapters: Any, device: str, tokenizer: Tokenizer,
    config: GenerationConfig, read: Future[ov.Model] | None = None,
) -> LLMPipelineImplBase:
    """The implementation, chosen once in the real's order: speculative (a draft model), NPU
    (stateful, NPUW), prompt lookup, the paged CPU default, else the stateful model.  ``read``:
    the folder's IR being read already (:func:`_read_ahead`)."""
    folder, props = src.folder, opts.compile
    is_npu = device.split(".")[0] == "NPU"
    if opts.draft is not None:
        if folder is None:
            raise ConfigError(
                "genai_shim does not implement speculative decoding (draft_model) for a model "
                "given in memory; pass the model's folder instead",
                key="draft_model",
            )
        return SpeculativeLLM(core, folder, device, props, opts.draft, tokenizer, config, opts.backend,
                              opts.scheduler_config)
    if folder is None:
        raw = np.ascontiguousarray(np.asarray(src.weights.data)).reshape(-1).view(np.uint8)
        model = core.read_model(src.model_xml.encode("utf-8"), memoryview(raw))
    else:
        model = read.result() if read is not None else core.read_model(folder / MODEL_XML)
    _, seq_axis = get_kv_axes_pos(model)
    # LoRA goes into the graph before compiling (the real's AdapterController); the paged
    # backend injects its own copy (its model is read and compiled separately).
    lora = None
    if adapters is not None:
        lora = AdapterController(model, adapters, device)
        config.adapters = adapters
    # The real CPU LLMPipeline is its continuous-batching (PagedAttention) pipeline unless
    # ATTENTION_BACKEND=SDPA; the stateful model keeps the few rules that differ between the two.
    paged = not is_npu and opts.backend != "SDPA"
    stateful: dict[str, Any] = {"seq_axis": seq_axis, "lora": lora, "paged_rules": paged,
                                "assisted": bool(opts.prompt_lookup), "linear_states": has_linear_states(model)}
    if is_npu:
        npu = compile_npu(core, model, props)
        return StatefulLLM(npu.compiled, tokenizer, config, is_npu=True, max_prompt_len=npu.max_prompt_len,
                           kv_capacity=npu.kv_capacity, **stateful)
    if opts.prompt_lookup:
        if stateful["linear_states"]:  # rejected candidates are cut from the states
            raise ConfigError(
                "genai_shim's prompt lookup cuts rejected candidates from the model's states, which a "
                "model with recurrent (linear-attention) states cannot do; drop prompt_lookup",
                key="prompt_lookup",
            )
        return PromptLookupLLM(core.compile_model(model, device, props), tokenizer, config, **stateful)
    if paged and folder is not None:
        pa_props = props if adapters is None else {**props, "adapters": adapters}
        backend = PagedBackend(folder, tokenizer, device, pa_props, opts.scheduler_config)
        try:
            backend.engine  # noqa: B018  (compile now)
            return PagedLLM(backend, tokenizer, config, lora=lora is not None)
        except (NpuEmuError, RuntimeError) as e:
            if opts.explicit_pa:
                raise
            # as the real: fall back to the stateful pipeline, saying why
            logger.warning("paged attention is not available (%s); using the stateful model", e)
    return StatefulLLM(core.compile_model(model, device, props), tokenizer, config, **stateful)
