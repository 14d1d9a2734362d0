"""The paged-attention backend of ``LLMPipeline(..., "CPU")``: openvino.genai runs its CPU
LLMPipeline as a continuous-batching pipeline unless ``ATTENTION_BACKEND="SDPA"``; genai_shim
does the same, for every call (greedy, multinomial with several samples per prompt, beam search,
chat, ``echo``), as the real's ContinuousBatchingAdapter."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from genai_shim.continuous_batching.impl import make_core, make_impl
from genai_shim.decoding import STREAMER_FINISH, stream_tokens
from genai_shim.generation_config import SIZE_MAX, GenerationConfig
from genai_shim.llm.base import DecodeCall, LLMPipelineImplBase
from genai_shim.paged.engine import PagedEngine
from genai_shim.paged.scheduler import SchedulerConfig
from genai_shim.perf_metrics import PerfMetrics
from genai_shim.results import EncodedResults, GenerationStatus, echo_prompts
from genai_shim.streamers import EchoStreamer, StreamerBase, StreamingStatus
from genai_shim.tokenizer import Tokenizer

__all__ = ["PagedBackend", "PagedLLM"]


class PagedBackend:
    """A continuous-batching engine owned by an LLMPipeline, built on first use."""

    def __init__(
        self,
        folder: Path,
        tokenizer: Any,
        device: str,
        props: dict[str, Any],
        scheduler_config: Any = None,
    ) -> None:
        if scheduler_config is None:
            # the real's get_latency_oriented_scheduler_config(): no limit on the tokens of one
            # model call (whole prompts, never chunked) and prefix caching on
            scheduler_config = SchedulerConfig()
            scheduler_config.max_num_batched_tokens = SIZE_MAX
            scheduler_config.enable_prefix_caching = True
        self._args = (folder, tokenizer, device, dict(props), scheduler_config)
        self._engine: PagedEngine | None = None

    @property
    def engine(self) -> PagedEngine:
        if self._engine is None:
            folder, tokenizer, device, props, sc = self._args
            engine = make_impl(make_core, folder, tokenizer, sc, device, dict(props))
            assert isinstance(engine, PagedEngine)  # no draft_model here
            self._engine = engine
        return self._engine

    def run(
        self,
        seqs: list[Any],
        config: GenerationConfig,
        sampler: Any,
        stream: StreamerBase | None,
        perf: PerfMetrics,
        stop_window: int,
    ) -> tuple[bool, bool]:
        """Generate for every RunningSequence of ``seqs`` (their prompts are set), filling their
        tokens, log-probabilities and finish reasons; returns (whether the streamer stopped,
        whether it cancelled).  Streaming follows the stateful path's rules (decoding.py)."""
        eng = self.engine
        eng.apply_adapters([config])
        # parallel sampling: ``seqs`` holds n consecutive sequences per prompt, one request
        # (one state whose members fork from the prompt's sequence) serves all n
        n = int(config.num_return_sequences) if config.is_multinomial() else 1
        states = [eng.new_state(list(s.prompt), config) for s in seqs[::n]]
        for s, st in zip(seqs[::n], states, strict=False):
            st.max_new = s.max_new
            st.sampler = sampler  # one seeded stream per generate() call, as the SDPA path
            for m in st.members or ():
                m.max_new, m.sampler = st.max_new, st.sampler
        eng.add_states(states)
        raw = perf.raw_metrics
        stream_stopped = cancelled = False
        try:
            while eng.has_non_finished_requests():
                eng.step()
                t1 = time.perf_counter()
                raw.m_inference_durations[0] += eng.get_metrics().inference_duration
                if eng.last_batch > 0:
                    raw.m_token_infer_durations.append(eng.get_metrics().inference_duration)
                    raw.m_new_token_times.append(t1)
                    raw.m_batch_sizes.append(eng.last_batch)
                if stream is not None and not stream_stopped:
                    s0, st0 = seqs[0], states[0]
                    s0.tokens = st0.req.generated
                    if st0.status != GenerationStatus.RUNNING:
                        s0.finish = st0.finish
                    status = stream_tokens(stream, s0, stop_window)
                    stream_stopped = status != StreamingStatus.RUNNING
                    if stream_stopped and st0.status == GenerationStatus.RUNNING:
                        s0.finish = STREAMER_FINISH[status]
                        cancelled = status == StreamingStatus.CANCEL
                        eng.finish(st0, GenerationStatus.STOP, keep=True)
                        st0.finish = s0.finish
        finally:
            for st in states:
                eng.finish(st, GenerationStatus.CANCEL, keep=False)
            eng.drop_states(states)
        outs = [o for st in states for o in st.outputs()]
        for s, (tokens, logps, _, finish) in zip(seqs, outs, strict=False):
            s.tokens = list(tokens)
            s.logps = list(logps)
            if s.finish is None:
                s.finish = finish
        return stream_stopped, cancelled

    def beam_search(self, seqs: list[Any], config: GenerationConfig, perf: PerfMetrics) -> Any:
        """Beam search for every prompt of ``seqs``: the best ``num_return_sequences`` beams
        per prompt, prompt after prompt, as EncodedResults."""
        eng = self.engine
        eng.apply_adapters([config])
        states = [eng.new_state(list(s.prompt), config) for s in seqs]
        for s, st in zip(seqs, states, strict=False):
            if s.max_new != st.max_new:
                st.max_new = st.beams.group.max_new_tokens = s.max_new
        eng.add_states(states)
        raw = perf.raw_metrics
        try:
            while eng.has_non_finished_requests():
                eng.step()
                raw.m_inference_durations[0] += eng.get_metrics().inference_duration
                if eng.last_batch > 0:
                    raw.m_token_infer_durations.append(eng.get_metrics().inference_duration)
                    raw.m_new_token_times.append(time.perf_counter())
                    raw.m_batch_sizes.append(eng.last_batch)
        finally:
            for st in states:
                eng.finish(st, GenerationStatus.CANCEL, keep=False)
            eng.drop_states(states)
        res = EncodedResults()
        for st in states:
            for tokens, _, score, finish in st.outputs():
                res.tokens.append(tokens)
                res.scores.append(score)
                res.finish_reasons.append(finish)
        res.perf_metrics = perf
        return res


class PagedLLM(LLMPipelineImplBase):
    """openvino.genai's ContinuousBatchingAdapter: every call of the CPU LLMPipeline on the
    continuous-batching engine (greedy, parallel sampling, beam search, chat, ``echo``)."""

    def __init__(
        self, backend: PagedBackend, tokenizer: Tokenizer, config: GenerationConfig, *, lora: bool = False
    ) -> None:
        super().__init__(tokenizer, config, paged_rules=True, lora=lora)
        self._pa = backend

    @property
    def backend(self) -> PagedBackend:
        return self._pa

    def logits_model(self) -> Any:
        return self._pa.engine.compiled

    def decode(self, call: DecodeCall) -> EncodedResults:
        seqs, config, stream = call.seqs, call.config, call.stream
        if config.is_beam_search():
            res = self._pa.beam_search(seqs, config, call.perf)
            return echo_prompts(res, call.prompts) if config.echo else res
        if config.echo and stream is not None:
            # the real's first write carries the prompt with the first token (one list)
            stream = EchoStreamer(stream, seqs[0].prompt)
        stream_stopped, self.cancelled = self._pa.run(seqs, config, self._sampler, stream, call.perf, call.stop_window)
        if stream is not None:
            if not stream_stopped:
                stream_tokens(stream, seqs[0], 0)
            stream.end()
        res = self.encoded_results(seqs, call.perf, call.keep_kv, call.n)
        return echo_prompts(res, call.prompts) if config.echo else res
