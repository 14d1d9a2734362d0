"""The ``ContinuousBatchingPipeline`` API of speculative decoding (a ``draft_model`` in its
properties; the real's SpeculativeDecodingImpl): ``generate`` with one config per prompt,
``add_request`` / ``step`` with handles. The pipeline itself is
:class:`genai_shim.speculative.paged.CBSpeculativeDecoder`."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from genai_shim.generation_config import GenerationConfig, check_supported
from genai_shim.results import (
    EncodedGenerationResult,
    GenerationFinishReason,
    GenerationOutput,
    GenerationResult,
    GenerationStatus,
    PipelineMetrics,
)
from genai_shim.speculative.draft import DraftModel
from genai_shim.speculative.paged import CBSpeculativeDecoder, SpecRequest
from genai_shim.structured_output import check_structured_output
from genai_shim.tokenizer import Tokenizer
from ov_npu_emu.errors import ConfigError, UserInputError

__all__ = ["SpeculativeDecodingImpl", "SpeculativeHandle", "generate_inputs"]


def generate_inputs(
    prompts: Any, generation_config: Any, default: GenerationConfig, running: bool
) -> tuple[list[Any], list[Any]]:
    """A speculative / prompt-lookup generate()'s prompts as a list with one config each (a single
    GenerationConfig counts as a list of one); refused while requests are running."""
    prompts = [prompts] if isinstance(prompts, (str, ov.Tensor)) else list(prompts)
    if isinstance(generation_config, GenerationConfig):
        generation_config = [generation_config]
    configs = list(generation_config) if generation_config is not None else [default] * len(prompts)
    if len(configs) != len(prompts):
        raise UserInputError(
            f"generate() got {len(prompts)} prompts and {len(configs)} generation configs; "
            "pass one config per prompt"
        )
    if running:
        raise UserInputError(
            "Generate cannot be called while ContinuousBatchingPipeline is already in running "
            "state. Use ContinuousBatchingPipeline::add_request"
        )
    return prompts, configs


class SpeculativeHandle:
    """``GenerationHandle`` of a request added to a speculative ContinuousBatchingPipeline."""

    def __init__(self, spec: Any, request: SpecRequest) -> None:
        # spec: a CBSpeculativeDecoder or prompt lookup's pipeline (main, stopped, session_metrics)
        self._spec = spec
        self._r = request
        self._read = 0
        self._status: Any = None  # set when stopped / cancelled by the user

    def get_status(self) -> Any:
        if self._status is not None:
            return self._status
        if self._r in self._spec.main.requests:
            return GenerationStatus.RUNNING
        return GenerationStatus.IGNORED if self._r.ignored else GenerationStatus.FINISHED

    @property
    def request(self) -> SpecRequest:
        """The request this handle reads (its main-model side)."""
        return self._r

    def _settled(self) -> int:
        """Tokens a handle may read: not the candidates still to be checked (prompt lookup
        keeps them between steps) and, until the request finishes, not the last tokens a stop
        string may still take back (the real's stream window)."""
        r = self._r
        end = len(r.tokens) - r.validate
        if r.finish is None and r.stops is not None:
            end = max(end - r.stops[0], min(self._read, end))
        return end

    def can_read(self) -> bool:
        return self._settled() > self._read

    def _output(self, start: int) -> Any:
        end = self._settled()
        out = GenerationOutput()
        out.generated_ids = list(self._r.tokens[start:end])
        out.generated_log_probs = list(self._r.logps[start:end])
        out.score = self._r.score
        out.finish_reason = self._r.finish if self._r.finish is not None else GenerationFinishReason.NONE
        return out

    def _check_usable(self) -> None:
        if self._status is not None:
            raise UserInputError("GenerationHandle cannot be used after it is stopped / cancelled.")

    def read(self) -> dict[int, Any]:
        self._check_usable()
        out = self._output(self._read)
        self._read = self._settled()
        return {0: out}

    def read_all(self) -> list[Any]:
        """What ``read`` has not returned yet, as one output ([] when everything was read: the
        real's read_all gathers the outputs still in the stream)."""
        self._check_usable()
        if self._read >= self._settled() and self._read > 0:
            return []
        out = self._output(self._read)
        self._read = self._settled()
        return [out]

    def _end(self, status_name: str) -> None:
        if self._r in self._spec.main.requests and self._status is None:
            # as the real: still counted as running until the next step() drops it
            self._status = GenerationStatus[status_name]
            self._spec.stopped.add(self._r.rid)

    def stop(self) -> None:
        self._end("STOP")

    def cancel(self) -> None:
        self._end("CANCEL")

    def get_perf_metrics(self) -> Any:
        return self._spec.session_metrics()


class SpeculativeDecodingImpl:
    """``ContinuousBatchingPipeline(..., properties={"draft_model": ...})``: the pipeline runs
    speculative decoding over two paged models; ``load_time`` is set by its owner."""

    def __init__(self, core: Any, folder: Path, device: str, props: dict[str, Any], draft: Any,
                 tokenizer: Tokenizer, config: GenerationConfig, scheduler_config: Any, adapters: Any) -> None:
        if not isinstance(draft, DraftModel):
            raise ConfigError(
                "draft_model must be what genai_shim.draft_model(path, device, **properties) returns, "
                f"got {type(draft).__name__}",
                key="draft_model",
            )
        if adapters is not None:
            raise ConfigError("genai_shim applies LoRA adapters without draft_model only; drop one of them",
                              key="adapters")
        self._tokenizer = tokenizer
        self._config = config
        self._spec = CBSpeculativeDecoder(core, folder, device, props, draft, tokenizer, scheduler_config)
        self._metrics = PipelineMetrics()
        self.load_time = 0.0

    @property
    def compiled(self) -> Any:
        raise AttributeError("'ContinuousBatchingPipeline' object has no attribute '_model'")

    def get_tokenizer(self) -> Tokenizer:
        return self._tokenizer

    def get_config(self) -> GenerationConfig:
        return self._config.copy()

    def get_metrics(self) -> PipelineMetrics:
        return self._metrics

    def has_non_finished_requests(self) -> bool:
        return bool(self._spec.main.requests)

    def _resolve(self, c: Any) -> GenerationConfig:
        """A request's config as the pipeline completes and checks it (stop ids, EOS, candidates)."""
        if not isinstance(c, GenerationConfig):
            raise UserInputError(f"generation_config must be a GenerationConfig, got {type(c).__name__}")
        c = c.copy()
        if not c.stop_token_ids:
            c.stop_token_ids = set(self._config.stop_token_ids)
        if c.eos_token_id == -1:
            c.set_eos_token_id(self._config.eos_token_id)
        self._spec.prepare(c)
        check_supported(c, assisted=True, folder_defaults=self._config, lora=False)
        if c.structured_output_config is not None:
            check_structured_output(c, speculative=True)
        return c

    def add_request(self, request_id: int, prompt: Any, generation_config: Any) -> SpeculativeHandle:
        """The request joins both models (the draft's paused until the main model's first
        token); ``step`` advances all of them."""
        spec = self._spec
        if isinstance(generation_config, GenerationConfig) and not generation_config.is_assisting_generation():
            # generate() completes the config (5 candidates); add_request does not: the real's
            # step() then fails with this text
            raise ConfigError(
                "Speculative decoding should have initialized options `assistant_confidence_threshold` "
                "xor `num_assistant_tokens` in `GenerationConfig`.",
                key="num_assistant_tokens",
            )
        config = self._resolve(generation_config)
        if isinstance(prompt, str):
            ids = np.asarray(spec.tokenizer.encode(prompt).input_ids.data).reshape(-1)
        elif isinstance(prompt, (ov.Tensor, np.ndarray)):
            ids = np.asarray(prompt.data if isinstance(prompt, ov.Tensor) else prompt).reshape(-1)
        else:
            raise UserInputError(
                f"add_request takes a prompt str or an openvino.Tensor of ids, got {type(prompt).__name__}"
            )
        rid = int(request_id)
        if spec.main.find(rid) is not None:
            raise UserInputError(f"request {rid} is already running; use another request_id")
        if not spec.main.requests:
            spec.begin_session()
        spec.add(rid, [int(t) for t in ids], config)
        return SpeculativeHandle(spec, spec.main.requests[-1])

    def step(self) -> None:
        """One speculative step of every request."""
        spec = self._spec
        while spec.stopped:  # requests stopped / cancelled by their handles
            spec.drop(spec.stopped.pop())
        if spec.main.requests:
            spec.step(spec.session_metrics())

    def generate(self, prompts: Any, generation_config: Any, streamer: Any) -> list[GenerationResult]:
        """``generate`` with a draft model: one GenerationResult per prompt,
        each with the call's speculative metrics (``extended_perf_metrics``)."""
        start = time.perf_counter()
        spec = self._spec
        prompts, configs = generate_inputs(prompts, generation_config, self._config, bool(spec.main.requests))
        resolved = [self._resolve(c) for c in configs]
        encoded = bool(prompts) and not isinstance(prompts[0], str)
        t_tok = time.perf_counter()
        ids: list[list[int]] = []
        tok = spec.tokenizer
        for p, c in zip(prompts, resolved, strict=True):
            if isinstance(p, str):
                if c.apply_chat_template and tok.chat_template:
                    text = tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True)
                    ids.append(list(map(int, np.asarray(tok.encode(text, add_special_tokens=False).input_ids.data)[0])))
                else:
                    ids.append(list(map(int, np.asarray(tok.encode(p).input_ids.data)[0])))
            elif isinstance(p, (ov.Tensor, np.ndarray)):
                arr = np.asarray(p.data if isinstance(p, ov.Tensor) else p, dtype=np.int64)
                ids.append(list(map(int, arr.reshape(-1))))
            else:
                raise UserInputError(f"generate() takes prompt strs or openvino.Tensors of ids, got {type(p).__name__}")
        tok_us = (time.perf_counter() - t_tok) * 1e6
        seqs, perf = spec.run(ids, resolved, streamer)
        perf.raw_metrics.tokenization_durations.append(tok_us)
        results = []
        for i, s in enumerate(seqs):
            r = EncodedGenerationResult() if encoded else GenerationResult()
            r.m_request_id = i
            if encoded:
                r.m_generation_ids = [list(s.tokens)]
            else:
                t_d = time.perf_counter()
                r.m_generation_ids = [tok.decode(s.tokens)]
                perf.raw_metrics.detokenization_durations.append((time.perf_counter() - t_d) * 1e6)
            r.m_scores = [float(s.score if s.score is not None else sum(s.logps))]
            finish = s.finish if s.finish is not None else GenerationFinishReason.NONE
            r.m_finish_reasons = [finish]
            r.m_status = GenerationStatus.IGNORED if s.out_of_memory else GenerationStatus.FINISHED
            results.append(r)
        perf.raw_metrics.generate_durations = [(time.perf_counter() - start) * 1e6]
        perf.evaluate_statistics(start)
        for r, p in zip(results, ids, strict=True):
            r.perf_metrics = copy.copy(perf)
            r.perf_metrics.num_input_tokens = len(p)
            r.extended_perf_metrics = r.perf_metrics
        return results
