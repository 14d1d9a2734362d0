"""LLMPipeline's implementations (openvino.genai's LLMPipelineImplBase and its subclasses):
``LLMPipeline`` (genai_shim/pipeline.py) picks one at construction.

- base: what they share (config, chat, inputs to token ids, the call's frame)
- stateful: the stateful model, with the NPU pipeline's limits (StatefulLLMPipeline)
- paged: every call on the continuous-batching engine (ContinuousBatchingAdapter)
- prompt_lookup: prompt lookup decoding on the stateful model (PromptLookupImpl)
- speculative: a draft model (StatefulSpeculativeLLMPipeline / SpeculativeDecodingImpl)
"""

from __future__ import annotations

from genai_shim.llm.base import LLMPipelineImplBase
from genai_shim.llm.paged import PagedLLM
from genai_shim.llm.prompt_lookup import PromptLookupLLM
from genai_shim.llm.speculative import SpeculativeLLM
from genai_shim.llm.stateful import StatefulLLM

__all__ = ["LLMPipelineImplBase", "PagedLLM", "PromptLookupLLM", "SpeculativeLLM", "StatefulLLM"]
