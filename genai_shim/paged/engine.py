"""The continuous-batching engine (openvino.genai's ContinuousBatchingImpl): requests scheduled
by our Scheduler over a paged KV cache (BlockManager), run by OpenVINO's paged-attention model on
the device plugin; the plain implementation behind ContinuousBatchingPipeline and LLMPipeline's
paged default."""

from __future__ import annotations

import collections
import copy
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from genai_shim.generation_config import SIZE_MAX, GenerationConfig, check_supported
from genai_shim.lora_controller import AdapterController, resolve_adapters
from genai_shim.model_folder import MODEL_XML
from genai_shim.paged.block_manager import BlockManager
from genai_shim.paged.forks import BeamGroup, fork_request
from genai_shim.paged.paged_model import PagedModel
from genai_shim.paged.scheduler import Request, ScheduledChunk, Scheduler
from genai_shim.perf_metrics import PerfMetrics, RawPerfMetrics
from genai_shim.results import (
    EncodedGenerationResult,
    GenerationFinishReason,
    GenerationOutput,
    GenerationResult,
    GenerationStatus,
    PipelineMetrics,
)
from genai_shim.sampling import LogitProcessor, Sampler
from genai_shim.stop_strings import match_stop_string, stop_window
from genai_shim.streamers import EchoStreamer, StreamingStatus, call_write, make_streamer
from genai_shim.structured_output import add_structured_output_times, check_structured_output, make_constraint
from genai_shim.tokenizer import Tokenizer
from ov_npu_emu.errors import ConfigError, UserInputError

logger = logging.getLogger(__name__)
#: tokens a dynamic cache grows by when a block is short (the real's m_cache_growth_num_tokens)
_GROWTH_TOKENS = 256
__all__ = ["GenerationHandle", "PagedEngine", "RequestState"]


class RequestState:
    """Per-request generation state around a scheduler Request."""

    def __init__(
        self, req: Request, config: GenerationConfig, max_new: int, stops: list[str], window: int,
        constraint: Any = None,
    ) -> None:
        self.req = req
        self.config = config
        self.max_new = max_new
        self.stops = stops
        self.window = window
        self.processor = LogitProcessor(config, req.prompt, constraint)
        self.sampler = Sampler(config.rng_seed)
        self.logps: list[float] = []
        self.finish = GenerationFinishReason.NONE
        self.status = GenerationStatus.RUNNING
        self.read_pos = 0
        self.outputs_read = False  # several sequences: the one push at the end was read
        self.request_id = 0
        # several sequences per request: a BeamGroup (beam search), or the members of parallel
        # sampling (num_return_sequences > 1), each a RequestState of its own sharing this sampler
        self.beams: BeamGroup | None = None
        self.members: list[RequestState] | None = None

    def sequences(self) -> list[RequestState]:
        """The states that sample one sequence each (this one, or its parallel samples)."""
        return self.members if self.members is not None else [self]

    def outputs(self) -> list[tuple[list[int], list[float], float, GenerationFinishReason]]:
        """(tokens, their log-probabilities, score, finish reason) per returned sequence."""
        if self.max_new == 0:  # nothing generated (the real scores an empty beam NaN)
            return [([], [], float("nan") if self.beams is not None else 0.0, GenerationFinishReason.NONE)]
        if self.beams is not None:
            return [(t, [], score, f) for t, score, f in self.beams.results()]
        # parallel samples best cumulative log-probability first, as the real orders them
        outs = [(m.req.generated, m.logps, float(sum(m.logps)), m.finish) for m in self.sequences()]
        return sorted(outs, key=lambda o: o[2], reverse=True)


class GenerationHandle:
    """Handle of one request added with ``add_request``."""

    def __init__(self, state: RequestState, pipe: PagedEngine) -> None:
        self._s = state
        self._pipe = pipe

    def get_status(self) -> GenerationStatus:
        return self._s.status

    def _settled(self) -> int:
        """Generated tokens a handle may read: while the request runs, not the last ones a stop
        string may still take back (the real's stream window)."""
        s = self._s
        n = len(s.req.generated)
        if s.status == GenerationStatus.RUNNING and s.window:
            n = max(n - s.window, min(s.read_pos, n))
        return n

    def can_read(self) -> bool:
        s = self._s
        if s.members is not None or s.beams is not None:
            # several sequences stream nothing: the real pushes them all once, when they finished
            return s.status != GenerationStatus.RUNNING and not s.outputs_read
        return self._settled() > s.read_pos

    def _output(self, start: int) -> GenerationOutput:
        s = self._s
        end = self._settled()
        out = GenerationOutput()
        out.generated_ids = list(s.req.generated[start:end])
        out.generated_log_probs = list(s.logps[start:end])
        out.score = float(sum(s.logps))
        out.finish_reason = s.finish
        return out

    def read(self) -> dict[int, GenerationOutput]:
        """New tokens since the last read, keyed by sequence id (0; one per parallel sample)."""
        s = self._s
        if s.members is None and s.beams is None:
            out = self._output(s.read_pos)
            s.read_pos = self._settled()
            return {0: out}
        return dict(enumerate(self.read_all()))

    def read_all(self) -> list[GenerationOutput]:
        """What ``read`` has not returned yet ([] when everything was read, as the real's
        read_all gathers the outputs still in the stream); several sequences: all of them."""
        s = self._s
        if s.members is None and s.beams is None:
            if s.read_pos >= self._settled() and s.read_pos > 0:
                return []
            out = self._output(s.read_pos)
            s.read_pos = self._settled()
            return [out]
        if s.outputs_read:
            return []
        s.read_pos = len(s.req.generated)
        s.outputs_read = s.status != GenerationStatus.RUNNING
        outs = []
        for tokens, logps, score, finish in s.outputs():
            out = GenerationOutput()
            out.generated_ids, out.generated_log_probs = list(tokens), list(logps)
            out.score, out.finish_reason = score, finish
            outs.append(out)
        return outs

    def stop(self) -> None:
        self._pipe.finish_by_handle(self._s, GenerationStatus.STOP, keep=True)

    def cancel(self) -> None:
        self._pipe.finish_by_handle(self._s, GenerationStatus.CANCEL, keep=False)

    def get_perf_metrics(self) -> PerfMetrics:
        return PerfMetrics()

    def __del__(self) -> None:
        # as the real's handle: a request whose handle is gone is dropped (it stops running and
        # frees its blocks; nobody can read it any more)
        try:
            if self._s.status == GenerationStatus.RUNNING:
                self._pipe.finish_by_handle(self._s, GenerationStatus.STOP, keep=False)
        except Exception:  # noqa: BLE001, S110 - never raise from a finalizer (interpreter exit)
            pass



class PagedEngine:
    """The plain continuous-batching implementation; ``load_time`` is set by its owner."""

    def __init__(
        self, core: Any, folder: Path, device: str, props: dict[str, Any], tokenizer: Tokenizer,
        config: GenerationConfig, scheduler_config: Any, adapters: Any,
    ) -> None:
        self._device = device
        self._tokenizer = tokenizer
        self._config = config
        self._sc = scheduler_config
        self.load_time = 0.0
        model = self._read_model(core, folder)
        # the real's initialize_pipeline: LoRA variables go in before compiling
        self._lora = AdapterController(model, adapters, self._device) if adapters is not None else None
        if adapters is not None:
            self._config.adapters = adapters
        self._model = PagedModel(core, model, self._device, props)
        num_blocks = int(getattr(scheduler_config, "num_kv_blocks", 0) or 0)
        cache_gb = float(getattr(scheduler_config, "cache_size", 0) or 0)
        if num_blocks == 0 and cache_gb > 0:
            num_blocks = int(cache_gb * (1 << 30)) // self._model.block_bytes
        self._dynamic = num_blocks == 0
        self._prefix_caching = bool(getattr(scheduler_config, "enable_prefix_caching", False))
        self._model.allocate(max(num_blocks, 1) if not self._dynamic else 8)
        self._blocks = BlockManager(
            0 if self._dynamic else self._model.num_blocks,  # dynamic: sized at the first step
            self._model.block_size,
            prefix_caching=self._prefix_caching,
        )
        self._scheduler = Scheduler(
            self._blocks,
            max_num_batched_tokens=int(scheduler_config.max_num_batched_tokens),
            max_num_seqs=int(scheduler_config.max_num_seqs),
            dynamic_split_fuse=bool(scheduler_config.dynamic_split_fuse),
            grow_cache=self._grow if self._dynamic else None,
            copy_blocks=self._model.copy_blocks,
        )
        self._states: list[RequestState] = []
        self._next_seq = 0
        self._metrics = PipelineMetrics()
        #: cache usage (%) of the last steps, at most the real's window (AVG_CACHE_USAGE_WINDOW_SIZE_IN_STEPS)
        self._usages: collections.deque[float] = collections.deque(maxlen=1000)
        self._last_batch = 0
        #: requests their handles stopped since the last step (see finish_by_handle)
        self._handle_finished: list[RequestState] = []

    #: whether requests carry images (the VLM engine, genai_shim/vlm/continuous_batching.py)
    takes_vision = False

    def _read_model(self, core: Any, folder: Path) -> Any:
        """The stateful model the paged one is made from (a VLM engine reads its language model)."""
        return core.read_model(folder / MODEL_XML)

    def _model_rows(self, chunks: list[ScheduledChunk]) -> dict[str, np.ndarray] | None:
        """The model's embedding inputs for ``chunks`` (None: it takes token ids)."""
        return None

    def _grow(self, more: int) -> bool:
        """Dynamic cache, a block short: 256 tokens more (the real's _try_increase_cache on CPU;
        the scheduler asks again while it is still short)."""
        self._set_blocks(self._blocks.num_blocks + -(-_GROWTH_TOKENS // self._blocks.block_size))
        return True

    def _set_blocks(self, n: int) -> None:
        """The dynamic cache's block count (the tensors grow at least twofold, and never shrink:
        the count is what the real's block manager holds, and what cache usage is measured on)."""
        if n > self._model.num_blocks:
            self._model.allocate(max(n, 2 * self._model.num_blocks))
        self._blocks.grow(n)

    def _reserve(self, running: list[RequestState], finished_by_handles: list[RequestState]) -> None:
        """The real's dynamic sizing before a schedule: a cache without blocks takes, for every
        request (those handles stopped since the last step too), min(2 x prompt, prompt +
        max_new_tokens) tokens per sequence (beams, or parallel samples, each); while a request
        is still in its prompt the running ones' total is kept."""
        first = self._blocks.num_blocks == 0
        if not first and not any(s.req.processed < len(s.req.prompt) for s in running):
            return
        bs = self._blocks.block_size
        need = 0
        for s in running + (finished_by_handles if first else []):
            n = len(s.req.prompt)
            c = s.config
            seqs = c.num_beams if c.is_beam_search() else (c.num_return_sequences if c.do_sample else 1)
            need += -(-min(2 * n, n + s.max_new) // bs) * int(seqs)
        if need > self._blocks.num_blocks:
            self._set_blocks(need)

    def _release_cache(self) -> None:
        """After generate(), a dynamic cache without prefix caching goes back to no blocks (the
        real clears it)."""
        if self._dynamic and not self._prefix_caching and not self._blocks.tables:
            self._blocks.clear()

    # -- public API ------------------------------------------------------------------------
    @property
    def compiled(self) -> Any:
        """The compiled paged-attention model."""
        return self._model.compiled

    def get_tokenizer(self) -> Tokenizer:
        return self._tokenizer

    def get_config(self) -> GenerationConfig:
        return self._config.copy()

    def get_metrics(self) -> PipelineMetrics:
        return self._metrics

    def has_non_finished_requests(self) -> bool:
        return any(s.status == GenerationStatus.RUNNING for s in self._states)

    def add_request(self, request_id: int, prompt: Any, generation_config: GenerationConfig) -> GenerationHandle:
        return GenerationHandle(self._add(request_id, prompt, generation_config), self)

    def _add(self, request_id: int, prompt: Any, generation_config: GenerationConfig) -> RequestState:
        """add_request's request, without a handle (generate() reads its requests itself)."""
        if isinstance(prompt, str):
            ids = self._tokenizer.encode(prompt, add_special_tokens=True).input_ids.data
        elif isinstance(prompt, (ov.Tensor, np.ndarray)):
            ids = np.asarray(prompt.data if isinstance(prompt, ov.Tensor) else prompt)
        else:
            raise UserInputError(
                f"add_request takes a prompt str or an openvino.Tensor of ids, got {type(prompt).__name__}"
            )
        ids = np.asarray(ids, dtype=np.int64)
        if ids.ndim == 2:
            if ids.shape[0] != 1:
                raise UserInputError("Use multiple tensors to pass a batch.")
            ids = ids[0]
        state = self.new_state(list(map(int, ids)), generation_config)
        state.request_id = int(request_id)
        self._states.append(state)
        return state

    def new_state(self, prompt: list[int], generation_config: GenerationConfig) -> RequestState:
        if not isinstance(generation_config, GenerationConfig):
            raise UserInputError(
                f"generation_config must be a GenerationConfig, got {type(generation_config).__name__}"
            )
        config = generation_config.copy()
        if not config.stop_token_ids:
            config.stop_token_ids = set(self._config.stop_token_ids)
        if config.eos_token_id == -1:
            config.set_eos_token_id(self._config.eos_token_id)
        config.validate()
        # fields this pipeline would otherwise drop (parsers, tree search, VLM-only, ...)
        check_supported(config, assisted=False, folder_defaults=self._config, lora=self._lora is not None,
                        vision=self.takes_vision)
        if config.max_length <= len(prompt) and config.max_length != SIZE_MAX:
            raise UserInputError("'max_length' must be greater than the number of prompt tokens")
        window, stops = stop_window(self._tokenizer, config)
        constraint = None
        if config.structured_output_config is not None:  # the grammar mask, as on the stateful path
            check_structured_output(config)
            constraint = make_constraint(self._tokenizer, config)
        req = Request(self._new_seq_id(), prompt)
        state = RequestState(req, config, config.get_max_new_tokens(len(prompt)), stops, window, constraint)
        if config.is_beam_search():
            matcher = None
            if stops:
                def matcher(tokens: list[int]) -> int | None:
                    if len(tokens) < window:
                        return None
                    return match_stop_string(self._tokenizer, tokens, window, stops,
                                             config.include_stop_str_in_output)
            state.beams = BeamGroup(req, config, state.max_new, self._blocks, self._new_seq_id, matcher)
        elif config.num_return_sequences > 1:
            req.group = state
            state.members = [copy.copy(state)]  # member 0: the prompt's sequence
        if state.max_new == 0:  # echo with max_new_tokens=0: finished before any model call
            state.status = GenerationStatus.FINISHED
            req.state = Request.FINISHED
        return state

    def add_states(self, states: list[RequestState]) -> None:
        """Run ``states`` (made by :meth:`new_state`) from the next step on."""
        self._states.extend(states)

    def finish_by_handle(self, s: RequestState, status: GenerationStatus, keep: bool) -> None:
        """A handle's stop() / cancel() (its destructor stops, as the real's): the request ends
        now; until the next step it still counts where the real's first schedule sizes a
        dynamic cache (the real frees such requests after that step's schedule)."""
        if s.status == GenerationStatus.RUNNING:
            self._handle_finished.append(s)
        self.finish(s, status, keep)

    def drop_states(self, states: list[RequestState]) -> None:
        """Forget ``states`` (finish them first)."""
        self._states = [st for st in self._states if st not in states]

    @property
    def last_batch(self) -> int:
        """Tokens sampled by the last step (0: nothing generated)."""
        return self._last_batch

    def _new_seq_id(self) -> int:
        self._next_seq += 1
        return self._next_seq - 1

    def apply_adapters(self, configs: list[GenerationConfig]) -> None:
        """The real's set_adapters: one adapter config for all requests of a generate() call."""
        first = configs[0].adapters if configs else None
        if any(c.adapters != first for c in configs[1:]):
            raise UserInputError("LoRA adapters value must be the same for all requests")
        if self._lora is not None:
            self._lora.apply(self._model.request, resolve_adapters(first))
        elif first:  # the real would decode without them; never silently here
            raise ConfigError(
                "GenerationConfig.adapters is set but this pipeline was created without the adapters "
                "property (adapters=AdapterConfig(...)), which registers the layers LoRA adapts",
                key="adapters",
            )

    def finish(self, s: RequestState, status: GenerationStatus, keep: bool) -> None:
        if s.status != GenerationStatus.RUNNING:
            return
        s.status = status
        s.req.state = Request.FINISHED
        self._blocks.free(s.req.seq_id)
        if s.beams is not None:
            s.beams.cancel()
        for m in s.members or ():
            if m.status == GenerationStatus.RUNNING:
                self.finish(m, status, keep)

    def _sample_forks(self, s: RequestState, logits: np.ndarray) -> list[RequestState]:
        """Parallel sampling, first token: the prompt's sequence forks ``num_return_sequences``
        - 1 more, each drawing its first token from the same logits (the real's order)."""
        assert s.members is not None
        first = s.members[0]
        new = []
        for _ in range(int(s.config.num_return_sequences) - 1):
            m = copy.copy(first)
            m.req = fork_request(self._blocks, first.req, self._new_seq_id())
            constraint = None
            if s.config.structured_output_config is not None:  # a fresh grammar state per fork
                constraint = make_constraint(self._tokenizer, s.config)
            m.processor = LogitProcessor(s.config, first.req.prompt, constraint)
            m.logps = []
            token, logp = m.sampler.sample(m.processor, logits)
            m.processor.register(token)
            m.req.generated.append(token)
            m.logps.append(logp)
            new.append(m)
        s.members.extend(new)
        return new

    def step(self) -> None:
        """Schedule, run one model call over every scheduled chunk, sample, retire finished."""
        running = [s for s in self._states if s.status == GenerationStatus.RUNNING]
        finished_by_handles, self._handle_finished = self._handle_finished, []
        if not running:
            return
        by_req, reqs = self._sequences_to_schedule(running)
        if self._dynamic:
            self._reserve(running, finished_by_handles)
        chunks = self._scheduler.schedule(reqs)
        if not chunks:
            self._end_ignored(running)
            return
        # the real's cache usage: measured once the step's blocks are allocated, before the
        # requests that finish in it free theirs
        used = self._blocks.num_used_blocks / max(self._blocks.num_blocks, 1) * 100.0
        entries = self._model_entries(chunks)
        t0 = time.perf_counter()
        logits = self._model.forward(entries, self._model_rows(chunks))
        self._metrics.inference_duration = (time.perf_counter() - t0) * 1e6
        self._mark_processed(chunks)
        sampled = self._sample_chunks(chunks, by_req, logits)
        self._finish_parallel_groups(running)
        self._last_batch = sampled
        self._update_metrics(running, chunks, used)

    def _sequences_to_schedule(
        self, running: list[RequestState]
    ) -> tuple[dict[int, RequestState], list[Request]]:
        """The sequences to schedule, each with the state that samples it (a beam group's
        beams all map to the request's state)."""
        by_req: dict[int, RequestState] = {}
        reqs: list[Request] = []
        for s in running:
            if s.beams is not None:
                seq_reqs = s.beams.requests
                for r in seq_reqs:
                    by_req[id(r)] = s
            else:
                seq_reqs = []
                for m in s.sequences():
                    if m.status == GenerationStatus.RUNNING:
                        by_req[id(m.req)] = m
                        seq_reqs.append(m.req)
            reqs.extend(seq_reqs)
        return by_req, reqs

    def _end_ignored(self, running: list[RequestState]) -> None:
        """As the real: when nothing fits the KV cache, every running request ends IGNORED
        with what it has generated, and its blocks are free for the next call."""
        logger.warning(
            "the KV cache is full (%d blocks of %d tokens): %d request(s) end IGNORED with what they "
            "generated; raise SchedulerConfig.num_kv_blocks / cache_size for longer outputs",
            self._blocks.num_blocks, self._blocks.block_size, len(running),
        )
        for s in running:
            self.finish(s, GenerationStatus.IGNORED, keep=True)
        self._last_batch = 0

    def _model_entries(self, chunks: list[ScheduledChunk]) -> list[tuple[list[int], int, Any, bool]]:
        """(tokens, past, block table, samples) per scheduled chunk, for the model call."""
        tables = self._blocks.check_batch([(c.request.seq_id, c.past + c.count, c.past) for c in chunks])
        entries = []
        for c, table in zip(chunks, tables, strict=False):
            if c.count == 1 and c.past >= len(c.request.prompt):
                toks = [c.request.generated[c.past - len(c.request.prompt)]]
            else:
                toks = c.request.token_slice(c.past, c.count)
            entries.append((toks, c.past, table, c.samples))
        return entries

    def _mark_processed(self, chunks: list[ScheduledChunk]) -> None:
        """Advance each chunk's request; full blocks go into the prefix cache."""
        bs = self._blocks.block_size
        for c in chunks:
            c.request.processed = c.past + c.count
            if self._blocks.prefix_caching and c.past // bs != c.request.processed // bs:
                r = c.request
                self._blocks.register(r.seq_id, r.cache_keys(), r.processed)

    def _sample_chunks(self, chunks: list[ScheduledChunk], by_req: dict[int, RequestState], logits: np.ndarray) -> int:
        """Sample the next token of every chunk that samples, then step the beam groups;
        returns the tokens generated, as the real counts them."""
        row = 0
        sampled = 0
        greedy_rows: np.ndarray | None = None
        beam_rows: dict[int, tuple[RequestState, dict[int, np.ndarray]]] = {}
        for c in chunks:
            if not c.samples:
                continue
            s = by_req[id(c.request)]
            if s.beams is not None:  # the group selects once all its beams' rows are known
                beam_rows.setdefault(id(s), (s, {}))[1][c.request.seq_id] = logits[row]
                row += 1
                continue
            cfg = s.config
            greedy: int | None = None
            if not cfg.do_sample and cfg.logprobs == 0 and not s.processor.needs_penalties():
                # plain greedy (the Sampler's first branch), one argmax over all rows per step
                if greedy_rows is None:
                    greedy_rows = logits.argmax(axis=1)
                greedy = int(greedy_rows[row])
            self._sample_sequence(s, c.request, logits[row], greedy)
            row += 1
            sampled += 1  # forks made now count from the next step (as the real counts)
        for s, rows in beam_rows.values():
            s.beams.step(rows)
            sampled += 1  # the real counts one generated token per beam-search request and step
            if s.beams.done:
                s.status = GenerationStatus.FINISHED
                s.finish = GenerationFinishReason.NONE
        return sampled

    def _sample_sequence(self, s: RequestState, req: Request, row_logits: np.ndarray, greedy: int | None) -> None:
        """One sequence's next token (``greedy`` when the plain argmax applies), parallel
        sampling's forks at the first token, then the stop checks."""
        if greedy is not None:
            token, logp = greedy, 0.0
        else:
            token, logp = s.sampler.sample(s.processor, row_logits)
        forks: list[RequestState] = []
        if s.req.group is not None and not s.req.generated and len(s.req.group.members) == 1:
            forks = self._sample_forks(s.req.group, row_logits)
        s.processor.register(token)
        req.generated.append(token)
        s.logps.append(logp)
        for m in [s, *forks]:
            self._check_finish(m)

    def _finish_parallel_groups(self, running: list[RequestState]) -> None:
        for s in running:
            if s.members is not None and s.status == GenerationStatus.RUNNING and all(
                m.status != GenerationStatus.RUNNING for m in s.members
            ):
                s.status = GenerationStatus.FINISHED

    def reset_cache_usage(self) -> None:
        """max / avg cache usage start over (the real's generate() does it first)."""
        self._usages.clear()
        self._metrics.max_cache_usage = self._metrics.avg_cache_usage = 0.0

    def _update_metrics(self, running: list[RequestState], chunks: list[ScheduledChunk], used: float) -> None:
        m = self._metrics
        m.requests = len(running)
        m.scheduled_requests = len(chunks)
        m.cache_usage = used
        m.max_cache_usage = max(m.max_cache_usage, used)
        self._usages.append(used)
        m.avg_cache_usage = sum(self._usages) / len(self._usages)
        m.cache_size_in_bytes = m.kv_cache_size_in_bytes = self._blocks.num_blocks * self._model.block_bytes
        m.preemptions = self._scheduler.preemptions
        m.prefix_cache_hits = self._blocks.cache_hits

    def _check_finish(self, s: RequestState) -> None:
        toks = s.req.generated
        token = toks[-1]
        c = s.config
        if not c.ignore_eos and token in c.stop_token_ids:
            s.finish = GenerationFinishReason.STOP
        elif s.stops and len(toks) >= s.window and (removed := self._match_stop(s)) is not None:
            if removed:
                del toks[len(toks) - removed :]
                del s.logps[len(s.logps) - removed :]
            s.finish = GenerationFinishReason.STOP
        elif len(toks) >= s.max_new:
            s.finish = GenerationFinishReason.LENGTH
        else:
            return
        self.finish(s, GenerationStatus.FINISHED, keep=True)

    def _match_stop(self, s: RequestState) -> int | None:
        """Trailing tokens to drop when a stop string matched (as genai_shim's LLMPipeline)."""
        return match_stop_string(self._tokenizer, s.req.generated, s.window, s.stops,
                                 s.config.include_stop_str_in_output)

    def _begin_generate(self) -> float:
        """generate()'s start: its time, after the real's check that no request is running and a
        fresh cache-usage window."""
        start = time.perf_counter()
        if self.has_non_finished_requests():
            raise UserInputError(
                "Generate cannot be called while ContinuousBatchingPipeline is already in running "
                "state. Use ContinuousBatchingPipeline::add_request"
            )
        self.reset_cache_usage()
        return start

    def generate(self, prompts: Any, generation_config: Any = None, streamer: Any = None) -> list[GenerationResult]:
        start = self._begin_generate()
        prompts, configs = self._prompts_and_configs(prompts, generation_config)
        self.apply_adapters(configs)
        encoded = bool(prompts) and not isinstance(prompts[0], str)
        stream = make_streamer(streamer, self._tokenizer)
        if stream is not None and not (
            len(prompts) == 1 and configs[0].num_return_sequences == 1 and configs[0].num_beams == 1
        ):
            raise UserInputError(
                "Currently streaming is possible only with batch size=1 and only for greedy or multinomial decoding"
            )
        t_tok = time.perf_counter()
        states = self._add_generate_requests(prompts, configs)
        tok_us = (time.perf_counter() - t_tok) * 1e6
        if stream is not None and states[0].config.echo:  # the prompt comes with the first token
            stream = EchoStreamer(stream, states[0].req.prompt)
        perf = PerfMetrics()
        perf.load_time = self.load_time
        raw = perf.raw_metrics
        raw.m_inference_durations = [0.0]
        raw.tokenization_durations.append(tok_us)
        self._run_to_end(states, stream, raw)
        self._states = [s for s in self._states if s not in states]
        self._release_cache()
        results = [self._generate_result(i, s, encoded, raw) for i, s in enumerate(states)]
        # one evaluation of the shared series; each result carries its own prompt length
        raw.generate_durations = [(time.perf_counter() - start) * 1e6]
        pm = PerfMetrics()
        pm.load_time = perf.load_time
        pm.raw_metrics = raw
        add_structured_output_times(pm, self._tokenizer)
        pm.evaluate_statistics(start)
        for r, s in zip(results, states, strict=False):
            r.perf_metrics = copy.copy(pm)
            r.perf_metrics.num_input_tokens = len(s.req.prompt)
        return results

    def _prompts_and_configs(self, prompts: Any, generation_config: Any) -> tuple[list[Any], list[Any]]:
        """generate()'s prompts as a list, with one generation config each."""
        single = isinstance(prompts, (str, ov.Tensor))
        if single:
            prompts = [prompts]
            if isinstance(generation_config, GenerationConfig):
                generation_config = [generation_config]
        prompts = list(prompts)
        configs = list(generation_config) if generation_config is not None else [self._config] * len(prompts)
        if len(configs) != len(prompts):
            raise UserInputError(
                f"generate() got {len(prompts)} prompts and {len(configs)} generation configs; "
                "pass one config per prompt"
            )
        return prompts, configs

    def _add_generate_requests(self, prompts: list[Any], configs: list[Any]) -> list[RequestState]:
        """Add a request per prompt (request ids 0, 1, ...); none stays added if one fails."""
        states: list[RequestState] = []
        try:
            for i, (p, c) in enumerate(zip(prompts, configs, strict=False)):
                if isinstance(p, str) and c.apply_chat_template and self._tokenizer.chat_template:
                    p = self._templated_prompt(p)
                self._add(i, p, c)
                states.append(self._states[-1])
        except Exception:
            self._states = [s for s in self._states if s not in states]
            raise
        return states

    def _templated_prompt(self, prompt: str) -> ov.Tensor:
        """The real generate(prompts) templates each prompt as one user message (add_request
        with a str does not)."""
        templated = self._tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True
        )
        return ov.Tensor(np.asarray(self._tokenizer.encode(templated, add_special_tokens=False).input_ids.data))

    def _run_to_end(self, states: list[RequestState], stream: Any, raw: RawPerfMetrics) -> None:
        """Step until every request finished, timing each step and streaming the first
        request; on an error every request of this call is cancelled and dropped."""
        streamed = 0
        try:
            while self.has_non_finished_requests():
                t0 = time.perf_counter()
                self.step()
                t1 = time.perf_counter()
                raw.m_inference_durations[0] += self._metrics.inference_duration
                if self._last_batch > 0:
                    raw.m_token_infer_durations.append((t1 - t0) * 1e6)
                    raw.m_new_token_times.append(t1)
                    raw.m_batch_sizes.append(self._last_batch)
                if stream is not None:
                    streamed = self._stream_tokens(states[0], stream, streamed)
        except Exception:
            for s in states:
                self.finish(s, GenerationStatus.CANCEL, keep=False)
            self._states = [s for s in self._states if s not in states]
            raise
        finally:
            if stream is not None:
                stream.end()

    def _stream_tokens(self, s: RequestState, stream: Any, streamed: int) -> int:
        """Write the tokens no stop string can still take back; returns how many are written.
        The streamer's STOP / CANCEL finishes the request."""
        limit = (
            len(s.req.generated)
            if s.status != GenerationStatus.RUNNING
            else max(len(s.req.generated) - s.window, 0)
        )
        while streamed < limit:
            st = call_write(stream, s.req.generated[streamed])
            streamed += 1
            if st == StreamingStatus.STOP:
                self.finish(s, GenerationStatus.STOP, keep=True)
                break
            if st == StreamingStatus.CANCEL:
                self.finish(s, GenerationStatus.CANCEL, keep=False)
                break
        return streamed

    def _generate_result(self, i: int, s: RequestState, encoded: bool, raw: RawPerfMetrics) -> GenerationResult:
        """Request ``i``'s result: ids or decoded texts (decoding timed into ``raw``)."""
        r: GenerationResult = EncodedGenerationResult() if encoded else GenerationResult()
        r.m_request_id = i
        outs = s.outputs()
        texts: list[Any] = []
        for ids, _, _, _ in outs:
            ids = list(ids)
            if s.config.echo:
                ids = list(s.req.prompt) + ids
            if encoded:
                texts.append(ids)
            else:
                t_d = time.perf_counter()
                texts.append(self._tokenizer.decode(ids))
                raw.detokenization_durations.append((time.perf_counter() - t_d) * 1e6)
        r.m_generation_ids = texts
        r.m_scores = [o[2] for o in outs]
        r.m_finish_reasons = [o[3] for o in outs]
        r.m_status = s.status
        return r
