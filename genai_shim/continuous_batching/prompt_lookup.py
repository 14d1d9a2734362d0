"""``ContinuousBatchingPipeline(..., properties={"prompt_lookup": True})``: openvino.genai's
``PromptLookupImpl`` (facts from its ``src/cpp/src/prompt_lookup/``; code written anew).

One paged pipeline in validation mode (:class:`genai_shim.speculative.paged.PagedSide`, the main
model of speculative decoding) whose candidates are not a draft model's but copied from the
request's own prompt + answer (:func:`genai_shim.prompt_lookup.lookup_candidates`).  As the
real, after every step each request that has generated a token gets its candidates appended,
padded with the id ``-1`` up to ``num_assistant_tokens`` (the real keeps the model's input shape
constant; the model's Gather reads ``-1`` as the last embedding row, and a sampled token never
equals ``-1``, so a pad is always rejected), and the next step feeds the last token plus those
candidates, keeps the matching prefix plus the model's own token and rolls the KV cache back past
the rest.  With ``do_sample`` each position is drawn and compared by id (copied candidates have
no probabilities), as the real does.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from genai_shim.decoding import STREAMER_FINISH, RunningSequence, stream_chunk
from genai_shim.generation_config import GenerationConfig, check_supported
from genai_shim.model_folder import MODEL_XML
from genai_shim.perf_metrics import PerfMetrics
from genai_shim.prompt_lookup import lookup_candidates
from genai_shim.results import (
    EncodedGenerationResult,
    GenerationFinishReason,
    GenerationResult,
    PipelineMetrics,
)
from genai_shim.sampling import LogitProcessor, Sampler
from genai_shim.speculative.cb_api import SpeculativeHandle, generate_inputs
from genai_shim.speculative.paged import PagedSide, SpecRequest
from genai_shim.stop_strings import stop_window
from genai_shim.streamers import StreamingStatus, make_streamer
from genai_shim.structured_output import check_structured_output
from genai_shim.tokenizer import Tokenizer
from ov_npu_emu.errors import ConfigError, UserInputError

__all__ = ["NOT_PROMPT_LOOKUP", "PAD_CANDIDATE", "PromptLookupImpl"]

#: the real's padding of a short candidate list (PADDING_TOKEN_ID)
PAD_CANDIDATE = -1

NOT_PROMPT_LOOKUP = (
    "`max_ngram_size` && `num_assistant_tokens` should be specified for `prompt lookup decoding`"
)


class PromptLookupImpl:
    """Prompt lookup decoding behind ``ContinuousBatchingPipeline``; ``load_time`` is set by
    its owner.  Handles are :class:`SpeculativeHandle` (the same methods as the plain
    pipeline's)."""

    #: whether requests carry images (the VLM variant, genai_shim/vlm/continuous_batching.py)
    takes_vision = False

    def __init__(self, core: Any, folder: Path, device: str, props: dict[str, Any], tokenizer: Tokenizer,
                 config: GenerationConfig, scheduler_config: Any, adapters: Any, model_xml: str = MODEL_XML,
                 rows_for: Any = None) -> None:
        if adapters is not None:
            raise ConfigError("genai_shim applies LoRA adapters without prompt_lookup only; drop one of them",
                              key="adapters")
        if not getattr(scheduler_config, "dynamic_split_fuse", True):
            raise ConfigError(
                "genai_shim's prompt lookup in ContinuousBatchingPipeline schedules with "
                "dynamic_split_fuse only; leave SchedulerConfig.dynamic_split_fuse True",
                key="scheduler_config",
            )
        self._tokenizer = tokenizer
        self._config = config
        self.main = PagedSide(core, folder, device, props, True, int(scheduler_config.max_num_batched_tokens),
                              scheduler_config, split_prompts=True, candidate_probabilities=False,
                              model_xml=model_xml, rows_for=rows_for)
        self.stopped: set[int] = set()  # request ids their handles stopped (dropped at the next step)
        self._next_seq = 0
        self._metrics = PipelineMetrics()
        self._usage_sum, self._usage_n = 0.0, 0
        self._perf = PerfMetrics()
        self.load_time = 0.0

    # -- the pipeline's API ------------------------------------------------------------------------
    @property
    def compiled(self) -> Any:
        return self.main.model.compiled

    def get_tokenizer(self) -> Tokenizer:
        return self._tokenizer

    def get_config(self) -> GenerationConfig:
        return self._config.copy()

    def get_metrics(self) -> PipelineMetrics:
        return self._metrics

    def has_non_finished_requests(self) -> bool:
        return bool(self.main.requests)

    def session_metrics(self) -> PerfMetrics:
        return self._perf

    def _resolve(self, c: Any, prompt_len: int) -> GenerationConfig:
        """A request's config completed and checked as the real's add_request does."""
        if not isinstance(c, GenerationConfig):
            raise UserInputError(f"generation_config must be a GenerationConfig, got {type(c).__name__}")
        if not c.is_prompt_lookup():  # PromptLookupImpl's first check
            raise ConfigError(NOT_PROMPT_LOOKUP, key="max_ngram_size")
        c = c.copy()
        if not c.stop_token_ids:
            c.stop_token_ids = set(self._config.stop_token_ids)
        if c.eos_token_id == -1:
            c.set_eos_token_id(self._config.eos_token_id)
        c.validate()
        if c.max_length <= prompt_len:
            raise UserInputError("'max_length' must be greater than the number of prompt tokens")
        if c.is_beam_search() or c.num_return_sequences != 1:
            raise UserInputError("Beam search and parallel sampling are not compatible with assistant generation")
        check_supported(c, assisted=True, folder_defaults=self._config, lora=False, vision=self.takes_vision)
        if c.structured_output_config is not None:
            check_structured_output(c, speculative=True)
        return c

    def _ids(self, prompt: Any) -> list[int]:
        if isinstance(prompt, str):
            arr = np.asarray(self._tokenizer.encode(prompt).input_ids.data)
        elif isinstance(prompt, (ov.Tensor, np.ndarray)):
            arr = np.asarray(prompt.data if isinstance(prompt, ov.Tensor) else prompt)
            if arr.ndim == 2 and arr.shape[0] != 1:
                raise UserInputError("Use multiple tensors to pass a batch.")
        else:
            raise UserInputError(
                f"add_request takes a prompt str or an openvino.Tensor of ids, got {type(prompt).__name__}"
            )
        return [int(t) for t in arr.reshape(-1)]

    def add_request(self, request_id: int, prompt: Any, generation_config: Any) -> SpeculativeHandle:
        if isinstance(generation_config, GenerationConfig) and not generation_config.is_prompt_lookup():
            raise ConfigError(NOT_PROMPT_LOOKUP, key="max_ngram_size")
        ids = self._ids(prompt)
        config = self._resolve(generation_config, len(ids))
        rid = int(request_id)
        if self.main.find(rid) is not None:
            raise UserInputError(f"request {rid} is already running; use another request_id")
        if not self.main.requests:
            self._perf = PerfMetrics()
            self._perf.raw_metrics.m_inference_durations = [0.0]
        r = SpecRequest(rid, self._next_seq, ids, config, config.get_max_new_tokens(len(ids)),
                        LogitProcessor(config, ids), sampler=Sampler(config.rng_seed))
        self._next_seq += 1
        window, strings = stop_window(self._tokenizer, config)
        if strings:
            r.stops = (window, strings, self._tokenizer)
        self.main.requests.append(r)
        return SpeculativeHandle(self, r)

    def step(self) -> None:
        """One model step of every request, then the next candidates of each (the real's
        ContinuousBatchingImpl::step with generate_candidates_for_prompt_lookup)."""
        side = self.main
        while self.stopped:  # requests stopped / cancelled by their handles
            self.drop(self.stopped.pop())
        if not side.requests:
            return
        t0 = time.perf_counter()
        side.step()
        t1 = time.perf_counter()
        for r in side.requests:
            _append_candidates(r)
        self._update_metrics()
        self._metrics.inference_duration = side.last_infer_us
        if side.last_batch > 0:
            raw = self._perf.raw_metrics
            raw.m_batch_sizes.append(side.last_batch)
            raw.m_token_infer_durations.append((time.perf_counter() - t0) * 1e6)
            raw.m_inference_durations[0] += (time.perf_counter() - t0) * 1e6
            raw.m_new_token_times.append(t1)

    def _update_metrics(self) -> None:
        """PipelineMetrics after a step (the cache usage in %, as the plain pipeline's)."""
        m, side = self._metrics, self.main
        m.requests = m.scheduled_requests = len(side.requests)
        used = side.blocks.num_used_blocks / max(side.blocks.num_blocks, 1) * 100.0
        m.cache_usage = used
        m.max_cache_usage = max(m.max_cache_usage, used)
        self._usage_sum += used
        self._usage_n += 1
        m.avg_cache_usage = self._usage_sum / self._usage_n
        m.cache_size_in_bytes = m.kv_cache_size_in_bytes = side.model.cache_bytes

    def drop(self, rid: int) -> None:
        r = self.main.find(rid)
        if r is not None:
            self.main.release(r)
            self.main.requests.remove(r)

    def generate(self, prompts: Any, generation_config: Any, streamer: Any) -> list[GenerationResult]:
        """One GenerationResult per prompt (request ids 0, 1, ...), one PerfMetrics shared."""
        start = time.perf_counter()
        prompts, configs = generate_inputs(prompts, generation_config, self._config, bool(self.main.requests))
        stream = make_streamer(streamer, self._tokenizer)
        if stream is not None and (len(prompts) != 1 or configs[0].is_beam_search()):
            raise UserInputError(
                "Currently streaming is possible only with batch size=1 and only for greedy or multinomial decoding"
            )
        encoded = bool(prompts) and not isinstance(prompts[0], str)
        t_tok = time.perf_counter()
        ids = [self._ids(self._templated(p, c)) for p, c in zip(prompts, configs, strict=True)]
        tok_us = (time.perf_counter() - t_tok) * 1e6
        handles: list[SpeculativeHandle] = []
        try:
            for i, (p, c) in enumerate(zip(ids, configs, strict=True)):
                handles.append(self.add_request(i, ov.Tensor(np.asarray([p], dtype=np.int64)), c))
            self._run(handles, stream)
        finally:
            for h in handles:  # after an error too: nothing stays scheduled
                self.drop(h.request.rid)
        perf = self._perf
        perf.raw_metrics.tokenization_durations.append(tok_us)
        results: list[GenerationResult] = []
        for i, h in enumerate(handles):
            r = h.request
            res: GenerationResult = EncodedGenerationResult() if encoded else GenerationResult()
            res.m_request_id = i
            settled = len(r.tokens) - r.validate  # a stopped request keeps its pending candidates
            tokens = (list(r.prompt) if r.config.echo else []) + r.tokens[:settled]
            if encoded:
                res.m_generation_ids = [tokens]
            else:
                t_d = time.perf_counter()
                res.m_generation_ids = [self._tokenizer.decode(tokens)]
                perf.raw_metrics.detokenization_durations.append((time.perf_counter() - t_d) * 1e6)
            res.m_scores = [r.score]
            res.m_finish_reasons = [r.finish if r.finish is not None else GenerationFinishReason.NONE]
            res.m_status = h.get_status()
            results.append(res)
        perf.raw_metrics.generate_durations = [(time.perf_counter() - start) * 1e6]
        perf.evaluate_statistics(start)
        for res, h in zip(results, handles, strict=True):
            res.perf_metrics = _copy_perf(perf, len(h.request.prompt))
        return results

    def _templated(self, prompt: Any, config: Any) -> Any:
        """generate() templates each str prompt as one user message (add_request does not)."""
        tok = self._tokenizer
        if isinstance(prompt, str) and getattr(config, "apply_chat_template", False) and tok.chat_template:
            text = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True)
            return tok.encode(text, add_special_tokens=False).input_ids
        return prompt

    def _run(self, handles: list[SpeculativeHandle], stream: Any) -> None:
        """Step to the end, streaming the first request's settled tokens after each step."""
        first = handles[0].request
        seq = RunningSequence(first.prompt, first.config, first.max_new)
        window = first.stops[0] if first.stops else 0
        status = StreamingStatus.RUNNING
        try:
            while self.has_non_finished_requests():
                self.step()
                if stream is not None and status == StreamingStatus.RUNNING:
                    seq.tokens = first.tokens[: len(first.tokens) - first.validate]
                    seq.finish = first.finish
                    status = stream_chunk(stream, seq, window)
                    if status != StreamingStatus.RUNNING:
                        if first.finish is None:
                            first.finish = STREAMER_FINISH[status]
                        if status == StreamingStatus.CANCEL:
                            handles[0].cancel()
                        else:
                            handles[0].stop()
        finally:
            if stream is not None:
                stream.end()


def _append_candidates(r: SpecRequest) -> None:
    """Candidates for the next step (the real's generate_candidates_for_prompt_lookup): none
    before the first generated token; else up to ``num_assistant_tokens`` (fewer near
    ``max_new_tokens``) looked up in prompt + answer, padded to ``num_assistant_tokens``.  A
    request a full cache kept from the step keeps its pending ones (the real appends more on
    top, so its answers then run past ``max_new_tokens``)."""
    if not r.tokens or r.validate:
        return  # no token yet, or candidates still pending (the request was not scheduled)
    cfg = r.config
    k = int(cfg.num_assistant_tokens)
    left = max(r.max_new - len(r.tokens) - 1, 0)
    cands = lookup_candidates(r.prompt + r.tokens, min(k, left), int(cfg.max_ngram_size))
    cands += [PAD_CANDIDATE] * (k - len(cands))
    r.append(cands, [0.0] * len(cands))
    r.validate = len(cands)


def _copy_perf(perf: PerfMetrics, num_input_tokens: int) -> PerfMetrics:
    out = copy.copy(perf)
    out.num_input_tokens = num_input_tokens
    return out
