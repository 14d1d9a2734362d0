"""LLMPipeline with a ``draft_model``: openvino.genai's StatefulSpeculativeLLMPipeline (a model on
NPU) or its continuous-batching speculative pipeline (both on CPU), chosen where the real does
(genai_shim/speculative)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from genai_shim.generation_config import GenerationConfig
from genai_shim.llm.base import LLMPipelineImplBase
from genai_shim.speculative.draft import DraftModel
from genai_shim.speculative.paged import CBSpeculativeDecoder, uses_continuous_batching
from genai_shim.speculative.stateful import SpeculativeDecoder, generate_speculative
from genai_shim.tokenizer import Tokenizer

__all__ = ["SpeculativeLLM"]


class SpeculativeLLM(LLMPipelineImplBase):
    """Speculative decoding owns both models; every call prefills the prompt into both."""

    def __init__(
        self, core: Any, folder: Path, device: str, props: dict[str, Any], draft: DraftModel,
        tokenizer: Tokenizer, config: GenerationConfig, backend: str | None, scheduler_config: Any,
    ) -> None:
        super().__init__(tokenizer, config)
        self.speculative = True
        # the continuous-batching pipeline unless a model is on NPU (then the stateful
        # FastDraft one), as the real routes it
        self.decoder: SpeculativeDecoder | CBSpeculativeDecoder
        if uses_continuous_batching(device, draft.device, backend):
            self.decoder = CBSpeculativeDecoder(core, folder, device, props, draft, tokenizer, scheduler_config)
        else:
            self.decoder = SpeculativeDecoder(core, folder, device, props, draft, tokenizer, config)

    def generate_inputs(self, inputs: Any, config: GenerationConfig, streamer: Any, start: float) -> Any:
        return generate_speculative(self.decoder, inputs, config, streamer, start, self.chat, self.load_time)
