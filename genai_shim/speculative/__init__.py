"""Speculative decoding with a draft model, one package for both pipelines (openvino.genai's
``speculative_decoding/``): the draft model's description (draft), the stateful FastDraft
pipeline of LLMPipeline on NPU (stateful), the continuous-batching one over two paged models
(paged) and the ContinuousBatchingPipeline API over it (cb_api)."""

from __future__ import annotations

from genai_shim.speculative.draft import (
    DEFAULT_NUM_ASSISTANT_TOKENS,
    DraftModel,
    draft_model,
    tokenizers_equal,
)
from genai_shim.speculative.paged import CBSpeculativeDecoder, uses_continuous_batching
from genai_shim.speculative.stateful import SpeculativeDecoder, generate_speculative

__all__ = [
    "DEFAULT_NUM_ASSISTANT_TOKENS",
    "CBSpeculativeDecoder",
    "DraftModel",
    "SpeculativeDecoder",
    "draft_model",
    "generate_speculative",
    "tokenizers_equal",
    "uses_continuous_batching",
]
