"""openvino.genai's prompt-lookup pipeline (PromptLookupImpl) as LLMPipeline runs it on CPU: the
stateful model checks candidates looked up in the prompt / answer so far (genai_shim/prompt_lookup.py),
one KV sequence (infer request) per prompt."""

from __future__ import annotations

from typing import Any

import numpy as np

from genai_shim.decoding import stream_chunk
from genai_shim.generation_config import GenerationConfig
from genai_shim.llm.base import DecodeCall
from genai_shim.llm.stateful import StatefulLLM
from genai_shim.prompt_lookup import run_prompt_lookup
from genai_shim.results import EncodedResults
from ov_npu_emu.errors import ConfigError, UserInputError

__all__ = ["PromptLookupLLM"]


class PromptLookupLLM(StatefulLLM):
    """Prompt lookup decoding on the stateful model (the paged pipeline's rules)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pl_requests: list[Any] = []  # one more request per extra prompt

    def check_before_validate(self, config: GenerationConfig) -> None:
        if not config.is_prompt_lookup():
            # the real text (a RuntimeError from PromptLookupImpl::add_request, before validate)
            raise ConfigError(
                "`max_ngram_size` && `num_assistant_tokens` should be specified for "
                "`prompt lookup decoding`",
                key="max_ngram_size",
            )

    def check_request(self, ids: np.ndarray, mask: np.ndarray, config: GenerationConfig, keep_kv: bool) -> bool:
        if config.echo:
            raise UserInputError("Echo is not supported in the stateful pipeline")
        self.check_max_length(mask, config)
        return False  # every call prefills the whole prompt (the output is the same)

    def decode(self, call: DecodeCall) -> EncodedResults:
        seqs, config, stream = call.seqs, call.config, call.stream
        while len(self._pl_requests) < len(seqs) - 1:  # one KV sequence per prompt
            self._pl_requests.append(self.compiled.create_infer_request())
        requests = [self.request, *self._pl_requests[: len(seqs) - 1]]
        stream_stopped, self.cancelled = run_prompt_lookup(
            seqs,
            requests,
            self.requests(),
            self._sampler,
            lambda s: self.check_finish(s, config, call.stop_window, call.stop_strings),
            config,
            call.perf,
            stream,
            call.stop_window,
        )
        if stream is not None:
            if not stream_stopped:
                stream_chunk(stream, seqs[0], 0)
            stream.end()
            stream.end()  # the real's prompt-lookup pipeline ends the streamer twice
        return self.encoded_results(seqs, call.perf, call.keep_kv)
