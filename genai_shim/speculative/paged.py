"""Speculative decoding on the continuous-batching backend: openvino.genai's
``SpeculativeDecodingImpl`` (FastDraft), which its ``LLMPipeline`` runs whenever a draft model is
given and neither model is on NPU.  Facts read from openvino.genai's
``src/cpp/src/speculative_decoding/continuous_batching/`` and ``sampling/sampler.cpp``; code
written anew over our paged model and block manager.

Two paged pipelines step in turn.  Every request lives in both, as the real's sequence groups do,
with a processed-token count ``P``, a high-water mark ``M`` (``max_content_len``), a number of
tokens to validate ``V`` and a pause flag:

* the **draft** runs ``multistep``: model steps until every request paused — after
  ``num_assistant_tokens`` steps, when the draft's confidence in its token falls below
  ``assistant_confidence_threshold`` (with ``logprobs == 0`` the greedy log-probability is 0, so
  the real pauses after one candidate), one token before ``max_new_tokens``, at a stop token;
* its tokens are copied into the **main** request (``update_request``), which schedules the last
  token plus the candidates in one chunk and validates them position by position with its own
  logit processor: the longest matching prefix plus the main model's own token are kept, the
  rest is removed and ``P`` rolls back (the blocks past it are released);
* the main model's tokens are copied back into the draft request, which drops its rejected
  candidates the same way.

The counters follow the real's bookkeeping exactly, quirks included: a draft step that schedules
nothing still records the draft's previous batch size (the real reads a stale ``m_batch_size``,
also across ``generate()`` calls), and the candidates of a step in which the main request
finished are not counted in ``num_draft_tokens`` / ``num_accepted_tokens`` (with no counted
candidate at all, the accepted count falls back to ``sum(batch - 1)`` over the steps).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from genai_shim.decoding import STREAMER_FINISH, RunningSequence, encoded_results, stream_chunk
from genai_shim.generation_config import SIZE_MAX, GenerationConfig
from genai_shim.model_folder import MODEL_XML
from genai_shim.paged.block_manager import BlockManager
from genai_shim.paged.paged_model import PagedModel
from genai_shim.perf_metrics import RawPerfMetrics, SDPerModelsPerfMetrics
from genai_shim.results import EncodedResults, GenerationFinishReason
from genai_shim.sampling import LogitProcessor, Sampler
from genai_shim.speculative.draft import DEFAULT_NUM_ASSISTANT_TOKENS, tokenizers_equal
from genai_shim.stop_strings import match_stop_string, stop_window
from genai_shim.streamers import StreamingStatus, make_streamer
from genai_shim.tokenizer import Tokenizer
from ov_npu_emu.errors import ConfigError, KVCacheFullError, UserInputError

__all__ = ["CBSpeculativeDecoder", "uses_continuous_batching"]

#: the dynamic cache's first size (it doubles on demand, as our ContinuousBatchingPipeline's)
_FIRST_BLOCKS = 8


def uses_continuous_batching(main_device: str, draft_device: str, backend: str | None) -> bool:
    """The real ``LLMPipeline``'s routing (``llm/pipeline.cpp``): a draft model selects the
    stateful speculative pipeline when either model is on NPU, else the continuous-batching
    one; the SDPA backend without NPU is refused with the real's message."""
    npu = main_device.split(".")[0] == "NPU" or (draft_device or main_device).split(".")[0] == "NPU"
    if npu:
        return False
    if backend == "SDPA":
        raise ConfigError(
            "Speculative decoding with the SDPA attention backend on non-NPU devices is only "
            "supported for Gemma4 MTP model pairs. For other model pairs use the Paged Attention "
            'backend (ATTENTION_BACKEND="PA") or run on NPU.',
            key="ATTENTION_BACKEND",
        )
    return True


@dataclass
class SpecRequest:
    """One request on one model (the real's SequenceGroup with its one sequence)."""

    rid: int
    seq_id: int
    prompt: list[int]
    config: GenerationConfig
    max_new: int
    processor: LogitProcessor
    tokens: list[int] = field(default_factory=list)
    logps: list[float] = field(default_factory=list)
    processed: int = 0  # P: tokens whose K/V are in the cache
    max_content: int = 0  # M: the most tokens ever processed (since the last rollback)
    validate: int = 0  # V: trailing tokens the next step validates (main) or only feeds (draft)
    paused: bool = False
    finish: GenerationFinishReason | None = None
    stops: tuple[int, list[str], Any] | None = None  # (window, stop strings, tokenizer)
    #: the request's own random stream (the real's per-request engine seeded with rng_seed)
    sampler: Sampler = field(default_factory=Sampler)
    #: the real's cumulative log-probability: what tokens had when appended, less what removed
    #: ones had when removed (a candidate's log-probability rewritten by its check stays out)
    score: float = 0.0
    #: ended because the fixed KV cache could hold nothing more (status IGNORED)
    ignored: bool = False
    #: a VLM request's prompt embeddings, positions and extra inputs (None: token ids only)
    vision: Any = None

    def append(self, tokens: list[int], logps: list[float]) -> None:
        self.tokens.extend(tokens)
        self.logps.extend(logps)
        self.score += float(sum(logps))

    def truncate(self, keep: int) -> None:
        """Keep the first ``keep`` generated tokens."""
        self.score -= float(sum(self.logps[keep:]))
        del self.tokens[keep:], self.logps[keep:]

    def can_generate(self) -> bool:
        return self.max_content + self.validate >= len(self.prompt) and not self.paused

    def available(self) -> int:
        """Tokens the scheduler may feed (``get_num_available_tokens_for_batching``)."""
        return max(max(len(self.prompt), self.max_content) - self.processed, 1) + self.validate

    def generated_so_far(self) -> int:
        p = self.processed
        return p - len(self.prompt) + 1 if p >= len(self.prompt) else 0


def _ratio_test(r: SpecRequest, off: int, logp: float) -> bool:
    """The real's speculative-sampling check of the candidate ``off`` tokens from the end: the
    draft's probability of it over the main model's probability of the token the main model
    drew, against a uniform draw of 0, 0.01, ..., 1 from the request's stream."""
    p = math.exp(r.logps[len(r.logps) - off])
    q = math.exp(logp)
    u = int(r.sampler.rng.integers(0, 101)) / 100.0
    return u <= (p / q if q > 0 else math.inf)


def _check_candidate(r: SpecRequest, off: int, token: int, logp: float, ratio_test: bool) -> str:
    """The check of the candidate ``off`` tokens from the end against the main model's draw
    ``token``: "accepted" (its log-probability becomes the main model's), "rejected" (it and
    what follows are dropped) or, under speculative sampling, "redraw" (the next position's
    draw replaces it)."""
    at = len(r.tokens) - off
    if ratio_test and len(r.tokens) != r.validate:
        accepted = _ratio_test(r, off, logp)
    else:  # by id (the main model's first tokens are its own, as the real)
        accepted = r.tokens[at] == token
    if accepted:
        r.logps[at] = logp
        return "accepted"
    if ratio_test:
        return "redraw"
    r.truncate(at)
    return "rejected"


def _resampled_logp(r: SpecRequest, drop: int, logp: float) -> float:
    """Drop the last ``drop`` tokens (the failed candidate first) and return the replacing
    token's log-probability as the real rescales it (``get_p_prime``: the difference of the two
    probabilities over the log of the kept tokens' summed probabilities; kept as the real
    computes it, a division by a log of 1 included)."""
    q = math.exp(r.logps[len(r.logps) - drop])
    r.truncate(len(r.tokens) - drop)
    total = sum(math.exp(lp) for lp in r.logps)
    if total == 0.0:
        return logp
    diff = max(0.0, math.exp(logp) - q)
    denom = math.log(total)
    if denom == 0.0:
        p_prime = math.inf if diff > 0 else math.nan
    else:
        p_prime = diff / denom
    if p_prime > 0:  # (nan compares False)
        prob = math.exp(logp) / p_prime
        return math.log(prob) if prob > 0 else -math.inf
    return logp


class PagedSide:
    """One paged pipeline of the pair (or prompt lookup's only one): its model, blocks,
    requests and raw counters.

    ``validation``: the side checks candidates (the main model), else it proposes them.
    ``split_prompts``: prompt chunks are cut to the token budget (dynamic split-fuse), as prompt
    lookup's pipeline does; the speculative pair refuses instead (see :meth:`step`).
    ``candidate_probabilities``: candidates carry the proposer's log-probabilities (a draft
    model's), so sampling validates them by the real's probability-ratio test; prompt lookup's
    copied candidates are checked by id."""

    def __init__(self, core: Any, folder: Path, device: str, props: dict[str, Any],
                 validation: bool, max_batched_tokens: int, scheduler_config: Any,
                 split_prompts: bool = False, candidate_probabilities: bool = True,
                 model_xml: str = MODEL_XML, rows_for: Any = None) -> None:
        self.model = PagedModel(core, core.read_model(folder / model_xml), device, props)
        #: a VLM language model's inputs for a step's (request, tokens) chunks (None: token ids)
        self.rows_for = rows_for
        # a fixed cache (num_kv_blocks, or cache_size in GB) or one that doubles on demand
        blocks = int(getattr(scheduler_config, "num_kv_blocks", 0) or 0)
        cache_gb = float(getattr(scheduler_config, "cache_size", 0) or 0)
        if blocks == 0 and cache_gb > 0:
            blocks = max(int(cache_gb * (1 << 30)) // self.model.block_bytes, 1)
        self.fixed = blocks > 0
        self.model.allocate(blocks or _FIRST_BLOCKS)
        self.blocks = BlockManager(self.model.num_blocks, self.model.block_size)
        self.validation = validation
        self.split_prompts = split_prompts
        self.candidate_probabilities = candidate_probabilities
        self.budget = max_batched_tokens
        self.requests: list[SpecRequest] = []
        self.last_batch = 0  # the real's m_batch_size: kept when a step schedules nothing
        self.last_infer_us = 0.0
        self.raw = RawPerfMetrics()

    # -- cache -----------------------------------------------------------------------------
    def _ensure(self, r: SpecRequest, tokens: int) -> bool:
        """Room for ``tokens`` of ``r`` (a cache sized on demand grows); False when a fixed
        cache has too few free blocks."""
        while (need := self.blocks.required_blocks(r.seq_id, tokens)) > self.blocks.num_free_blocks:
            if self.fixed:
                return False
            n = max(self.model.num_blocks * 2, self.model.num_blocks + need)
            self.model.allocate(n)
            self.blocks.grow(n)
        return True

    def _fit(self, r: SpecRequest, n: int, prompt_chunk: bool) -> int:
        """Tokens of ``r`` this step can hold in the cache, their blocks allocated: all ``n``, or
        a prompt chunk cut to the free blocks, or 0 (not scheduled: the request waits, as the
        real's does when it cannot append slots; genai_shim does not preempt another for it)."""
        if not self._ensure(r, r.processed + n):
            if not prompt_chunk:
                return 0
            bs = self.blocks.block_size
            have = len(self.blocks.tables.get(r.seq_id, ())) + self.blocks.num_free_blocks
            n = min(n, have * bs - r.processed)
            if n <= 0:
                return 0
        self.blocks.allocate(r.seq_id, r.processed + n)
        return n

    def _out_of_memory(self) -> None:
        """Nothing could be scheduled in a fixed cache: every request ends IGNORED with what it
        generated, its blocks freed (the real's set_out_of_memory)."""
        for r in self.requests:
            r.ignored = True
            self.release(r)
        self.requests = []

    def release(self, r: SpecRequest) -> None:
        self.blocks.free(r.seq_id)

    # -- one model step (ContinuousBatchingImpl::step with the sampler) -----------------------
    def _schedule(self) -> tuple[list[tuple[SpecRequest, int]], bool]:
        """This step's (request, tokens) chunks, their blocks allocated, and whether any
        request wanted to run."""
        chunks: list[tuple[SpecRequest, int]] = []
        # dynamic split-fuse: generate phase first, then the prompts
        left = self.budget
        wanted = False
        for phase in (True, False):
            for r in self.requests:
                if r.can_generate() == phase and not r.paused:
                    n = r.available()
                    split = not phase and self.split_prompts
                    if split:
                        n = min(n, left)  # a prompt chunk; the rest goes in later steps
                        if n <= 0:
                            continue
                    wanted = True
                    n = self._fit(r, n, split)
                    if n:
                        chunks.append((r, n))
                        left -= n
        total = sum(n for _, n in chunks)
        if total > self.budget:
            # The real would cut a chunk here and schedule the rest later; with a draft model that
            # path gives other (and, measured on 2026.4.1, garbled) answers, and cutting a chunk of
            # candidates makes the real append the main model's token after unchecked ones:
            # genai_shim refuses instead of answering differently.
            what = "prompts or candidates with a draft model" if not self.split_prompts else "candidates"
            raise ConfigError(
                f"decoding with candidates would schedule {total} tokens in one step, more than "
                f"SchedulerConfig.max_num_batched_tokens ({self.budget}); genai_shim does not split "
                f"{what}: raise max_num_batched_tokens (at least 1 + num_assistant_tokens per request)",
                key="scheduler_config",
            )
        return chunks, wanted

    def step(self) -> None:
        for r in self.requests:  # clean_empty_blocks: blocks past the processed tokens
            self.blocks.trim(r.seq_id, r.processed)
        chunks, wanted = self._schedule()
        if not chunks:
            if wanted:
                self._out_of_memory()
            return  # nothing scheduled: last_batch keeps its value (the real's stale counter)
        entries = []
        rows_wanted = []
        for r, n in chunks:
            seq = r.prompt + r.tokens
            if r.processed + n > len(seq):
                raise KVCacheFullError(f"request {r.rid}: scheduled past its tokens (internal error)")
            ctx = r.processed + n
            sample = ctx >= len(r.prompt) and ctx > r.max_content and r.max_new > 0
            want = min(r.validate + 1, n) if sample else 0
            rows_wanted.append(want)
            entries.append((seq[r.processed : ctx], r.processed, None, want))
        tables = self.blocks.check_batch([(r.seq_id, r.processed + n, r.processed) for r, n in chunks])
        entries = [(t, p, table, w) for (t, p, _, w), table in zip(entries, tables, strict=True)]
        t0 = time.perf_counter()
        logits = self.model.forward(entries, None if self.rows_for is None else self.rows_for(chunks))
        self.last_infer_us = (time.perf_counter() - t0) * 1e6
        row = 0
        generated = 0
        for (r, n), want in zip(chunks, rows_wanted, strict=True):
            rows = logits[row : row + want]
            row += want
            removed = 0
            if want:
                count, removed = self._sample(r, rows)
                generated += count
            r.processed += n  # finish_iteration
            r.max_content = max(r.max_content, r.processed)
            r.validate = 0
            if removed:  # rejected candidates: the KV cache rolls back to the kept tokens
                r.processed = r.max_content = len(r.prompt) + len(r.tokens) - 1
                r.processor.num_generated = r.processed  # the real's update_generated_len(P)
        self.last_batch = generated
        for r in [r for r in self.requests if r.finish is not None]:  # _free_non_running_requests
            self.release(r)
            self.requests.remove(r)

    def _sample(self, r: SpecRequest, rows: np.ndarray) -> tuple[int, int]:
        """The real's sample_from_sequence_group for greedy and multinomial decoding: returns
        (tokens counted as generated, most tokens removed)."""
        v = r.validate
        if v > len(rows) - 1:
            v = len(rows) - 1  # (the real's updated_validation_len case)
        count = removed = 0
        cfg = r.config
        # speculative sampling: candidates with the draft's probabilities pass a ratio test
        ratio_test = self.validation and cfg.do_sample and self.candidate_probabilities
        passed = True
        # the processor's generated length (min_new_tokens) holds for the whole step
        length = r.processor.num_generated
        for i in range(v + 1):
            if r.finish is not None:
                break
            count += 1
            off = v - i
            verified = len(r.tokens) - off
            if r.max_new - verified == 0:
                r.truncate(len(r.tokens) - off)
                removed = max(removed, off)
                break
            if not self.validation and off > 0:
                continue  # the draft only feeds the main model's tokens
            token, logp = r.sampler.sample(r.processor, rows[len(rows) - 1 - off])
            extend = off == 0
            if not passed:
                # the previous candidate failed the ratio test: it and what follows go, and the
                # token drawn here replaces it (the real's resampling, get_p_prime)
                logp = _resampled_logp(r, off + 1, logp)
                removed = max(removed, off + 1)
                extend = True
            elif self.validation and not extend:
                verdict = _check_candidate(r, off, token, logp, ratio_test)
                if verdict == "redraw":
                    passed = False  # resampled from the next position's logits
                    continue
                if verdict == "rejected":
                    removed = max(removed, off)
                    extend = True
                else:
                    token = r.tokens[verified]
            r.processor.register(token)
            r.processor.num_generated = length
            if extend:
                r.append([token], [logp])
            threshold = cfg.assistant_confidence_threshold
            if not self.validation and threshold > 0 and (math.exp(logp) < threshold or logp == 0):
                r.paused = True
            if not passed or (extend and off > 0):
                # a candidate failed: the main model's (or the redrawn) token ends the step,
                # with no stop check here, as the real
                break
            if token in cfg.stop_token_ids and not cfg.ignore_eos:
                # an accepted stop token: the candidates after it go
                trailing = max(off - 1, 0)
                r.truncate(len(r.tokens) - trailing)
                removed = max(removed, trailing)
                r.finish = GenerationFinishReason.STOP
        r.processor.num_generated = len(r.tokens)  # align_all_sequence_len
        if r.finish is None and r.tokens:
            self._try_finish(r, count)
        return count, removed

    def _try_finish(self, r: SpecRequest, new: int) -> None:
        cfg = r.config
        last = r.tokens[-1]
        if r.max_new <= len(r.tokens) or (last in cfg.stop_token_ids and not cfg.ignore_eos):
            if last in cfg.stop_token_ids and not cfg.ignore_eos:
                r.finish = GenerationFinishReason.STOP
            else:
                r.finish = GenerationFinishReason.LENGTH
            return
        stops = r.stops
        if stops:
            # a stop string may end inside the tokens this step added (several per step)
            window, strings, tokenizer = stops
            for end in range(max(len(r.tokens) - new + 1, 1), len(r.tokens) + 1):
                drop = match_stop_string(tokenizer, r.tokens[:end], window, strings,
                                         cfg.include_stop_str_in_output)
                if drop is not None:
                    cut = end - drop
                    r.truncate(cut)
                    r.finish = GenerationFinishReason.STOP
                    return

    # -- the speculative pair's bookkeeping ----------------------------------------------------
    def find(self, rid: int) -> SpecRequest | None:
        return next((r for r in self.requests if r.rid == rid), None)

    def update_request(self, rid: int, tokens: list[int], logps: list[float]) -> tuple[int, int]:
        """Copy the other model's tokens in (the real's update_request): returns (inserted,
        removed); rolls ``P`` back past removed tokens and pauses / resumes the draft."""
        r = self.find(rid)
        if r is None:
            return 0, 0
        before = r.generated_so_far()
        init = not r.tokens and not r.validate
        prefix = 0
        for a, b in zip(r.tokens, tokens, strict=False):
            if a != b:
                break
            prefix += 1
        removed = len(r.tokens) - prefix
        for t in r.tokens[prefix:]:
            if not self.validation:
                r.processor.generated[t] -= 1  # decrease_generated_token_occurance
        r.truncate(prefix)
        inserted = len(tokens) - prefix
        r.append(tokens[prefix:], logps[prefix:])
        if not self.validation:
            length = r.processor.num_generated
            for t in tokens[prefix:]:
                r.processor.register(t)
            # init_request registers without touching the length; later updates set it
            r.processor.num_generated = length if init else len(r.tokens)
        if before > 0 and removed > 0:
            r.processed = r.max_content = r.processed - removed + 1
        if inserted > 0 and removed == 0:
            r.validate = inserted
        if not self.validation:
            now = before - removed + inserted
            r.paused = now >= r.max_new - 1 or (now != 0 and inserted == 0)
        return inserted, removed

    def multistep(self) -> None:
        """Draft steps until no request can go on (ContinuousBatchingForSpeculativeDecodingImpl::
        multistep), recording each step that generated (or seemed to generate) tokens."""
        steps = 0
        while True:
            steps += 1
            t0 = time.perf_counter()
            self.step()
            if self.last_batch > 0:
                self.raw.m_durations.append((time.perf_counter() - t0) * 1e6)
                self.raw.m_inference_durations[0] += self.last_infer_us
                self.raw.m_batch_sizes.append(self.last_batch)
            go_on = False
            for r in self.requests:
                cfg = r.config
                p, plen = r.processed, len(r.prompt)
                if (
                    (p >= plen and p - plen + 1 >= r.max_new - 1)
                    or (cfg.assistant_confidence_threshold == 0 and cfg.num_assistant_tokens <= steps)
                    or r.max_new == 0
                    or p == plen
                    or (r.tokens and r.tokens[-1] in cfg.stop_token_ids)
                ):
                    r.paused = True
                go_on |= r.can_generate()
            if not go_on:
                return


class CBSpeculativeDecoder:
    """The real ``ContinuousBatchingPipeline::SpeculativeDecodingImpl`` behind an
    ``LLMPipeline``: the same interface as the stateful :class:`genai_shim.speculative.
    SpeculativeDecoder` (``prepare``, ``generate``, ``tokenizer``, ``cancelled``), plus batches."""

    batched = True

    def __init__(
        self,
        core: Any,
        main_folder: Path,
        main_device: str,
        main_props: dict[str, Any],
        draft: Any,
        tokenizer: Tokenizer,
        scheduler_config: Any = None,
    ) -> None:

        if not tokenizers_equal(tokenizer, Tokenizer(draft.models_path)):
            raise ConfigError(
                "Tokenizers for draft and main models are different! Speculative decoding needs "
                "a draft model exported with the main model's tokenizer (same special tokens).",
                key="draft_model",
            )
        budget = SIZE_MAX  # the real's latency-oriented scheduler config (LLMPipeline)
        if scheduler_config is not None:
            if not getattr(scheduler_config, "dynamic_split_fuse", True):
                raise ConfigError(
                    "genai_shim's speculative decoding schedules with dynamic_split_fuse only; "
                    "leave SchedulerConfig.dynamic_split_fuse True",
                    key="scheduler_config",
                )
            budget = int(scheduler_config.max_num_batched_tokens)
        self.tokenizer = tokenizer
        # a draft without device / properties takes the main model's (the real's rule)
        draft_props = dict(draft.properties) if draft.properties else dict(main_props)
        self.main = PagedSide(core, main_folder, main_device, main_props, True, budget, scheduler_config)
        self.draft = PagedSide(core, draft.models_path, draft.device or main_device, draft_props, False, budget,
                           scheduler_config)
        self.cancelled = False
        self._next_seq = 0
        self.stopped: set[int] = set()  # request ids their handles stopped (dropped at the next step)

    def prepare(self, config: GenerationConfig) -> None:
        """The real's prepare_request: 5 candidates unless a number or a threshold is set."""
        if config.assistant_confidence_threshold == 0 and config.num_assistant_tokens == 0:
            config.num_assistant_tokens = DEFAULT_NUM_ASSISTANT_TOKENS
        config.validate()
        if config.is_beam_search() or config.num_return_sequences != 1:
            raise UserInputError("Beam search and parallel sampling are not compatible with assistant generation")

    def add(self, rid: int, prompt: list[int], config: GenerationConfig) -> None:
        seq = self._next_seq
        self._next_seq += 2
        max_new = config.get_max_new_tokens(len(prompt))
        main = SpecRequest(rid, seq, prompt, config, max_new, LogitProcessor(config, prompt),
                           sampler=Sampler(config.rng_seed))
        window, strings = stop_window(self.tokenizer, config)
        if strings:
            main.stops = (window, strings, self.tokenizer)
        # the draft ignores EOS and stop strings; it starts paused until the main model's first token
        dcfg = config.copy()
        dcfg.ignore_eos = True
        dcfg.stop_strings = set()
        draft = SpecRequest(rid, seq + 1, prompt, dcfg, max_new, LogitProcessor(dcfg, prompt), paused=True,
                            sampler=Sampler(config.rng_seed))
        self.main.requests.append(main)
        self.draft.requests.append(draft)

    def step(self, perf: SDPerModelsPerfMetrics) -> None:
        """One speculative step (the real's SpeculativeDecodingImpl::step)."""
        t0 = time.perf_counter()
        self.draft.multistep()
        inserted: dict[int, int] = {}
        draft_ids = [r.rid for r in self.draft.requests]
        for r in list(self.draft.requests):
            inserted[r.rid] = self.main.update_request(r.rid, r.tokens, r.logps)[0]
        main_start = time.perf_counter()
        self.main.step()
        main_end = time.perf_counter()
        removed: dict[int, int] = {}
        still = {r.rid for r in self.main.requests}
        for r in self.main.requests:
            removed[r.rid] = self.draft.update_request(r.rid, r.tokens, r.logps)[1]
        for rid in draft_ids:
            if rid not in still:  # the main request finished: so does the draft's
                d = self.draft.find(rid)
                if d is not None:
                    self.draft.release(d)
                    self.draft.requests.remove(d)
            n = inserted.get(rid, 0)
            if n and rid in still:
                perf.num_draft_tokens += n
                perf.num_accepted_tokens += n - removed.get(rid, 0)
        batch = self.main.last_batch
        if batch > 0:
            raw, main_raw = perf.raw_metrics, perf.main_model_metrics.raw_metrics
            step_us = (time.perf_counter() - t0) * 1e6
            raw.m_token_infer_durations.append(step_us)
            raw.m_inference_durations[0] += step_us
            raw.m_new_token_times.append(main_end)
            raw.m_batch_sizes.append(batch)
            main_raw.m_durations.append((main_end - main_start) * 1e6)
            main_raw.m_inference_durations[0] += self.main.last_infer_us
            main_raw.m_batch_sizes.append(batch)

    def begin_session(self) -> None:
        """Metrics of the requests added with add_request until they all finish."""
        self._session = SDPerModelsPerfMetrics()
        self.draft.raw = self._session.draft_model_metrics.raw_metrics

    def session_metrics(self) -> SDPerModelsPerfMetrics:
        if getattr(self, "_session", None) is None:
            self.begin_session()
        return self._session

    def drop(self, rid: int) -> None:
        for side in (self.main, self.draft):
            r = side.find(rid)
            if r is not None:
                side.release(r)
                side.requests.remove(r)

    def generate(self, ids: np.ndarray, mask: np.ndarray, config: GenerationConfig, streamer: Any) -> EncodedResults:
        """LLMPipeline's call: one config for every row of ``ids`` (padding dropped by ``mask``)."""
        prompts = [ids[b][mask[b].astype(bool)].tolist() for b in range(ids.shape[0])]
        seqs, perf = self.run(prompts, [config] * len(prompts), streamer)
        res = encoded_results(seqs, perf)
        res.extended_perf_metrics = perf
        return res

    def run(
        self, prompts: list[list[int]], configs: list[GenerationConfig], streamer: Any
    ) -> tuple[list[RunningSequence], SDPerModelsPerfMetrics]:
        """Generate for every prompt with its (prepared) config; returns one RunningSequence per
        prompt (tokens, log-probabilities, finish reason) and the call's metrics."""
        for config in configs:
            if config.is_beam_search() or config.num_return_sequences != 1:
                raise UserInputError("Beam search and parallel sampling are not compatible with assistant generation")
        stream = make_streamer(streamer, self.tokenizer)
        if stream is not None and len(prompts) != 1:
            raise UserInputError("Streaming only supports batch size=1 with greedy/multinomial")
        self.cancelled = False
        perf = SDPerModelsPerfMetrics()
        self.draft.raw = perf.draft_model_metrics.raw_metrics
        for rid, (prompt, config) in enumerate(zip(prompts, configs, strict=True)):
            self.add(rid, prompt, config)
        mains = list(self.main.requests)
        seqs = [RunningSequence(p, c, m.max_new) for p, c, m in zip(prompts, configs, mains, strict=True)]
        window, _ = stop_window(self.tokenizer, configs[0])
        status = StreamingStatus.RUNNING
        try:
            while self.main.requests:
                self.step(perf)
                if stream is not None and status == StreamingStatus.RUNNING:
                    s0, m0 = seqs[0], mains[0]
                    s0.tokens, s0.finish = m0.tokens, m0.finish
                    status = stream_chunk(stream, s0, window)
                    if status != StreamingStatus.RUNNING and m0.finish is None:
                        m0.finish = STREAMER_FINISH[status]
                        self.cancelled = status == StreamingStatus.CANCEL
                        self.drop(m0.rid)
            if stream is not None:
                stream.end()
                stream.end()  # the real ends the streamer twice here (measured, both pipelines)
        finally:
            for rid in range(len(prompts)):  # after an error too: nothing stays scheduled
                self.drop(rid)
        for s, m, c in zip(seqs, mains, configs, strict=True):
            s.tokens = list(m.prompt) + m.tokens if c.echo else list(m.tokens)
            s.logps = ([0.0] * len(m.prompt) if c.echo else []) + m.logps
            s.score = m.score
            s.out_of_memory = m.ignored
            s.finish = m.finish
        perf.num_input_tokens = len(prompts[0])
        sizes = perf.raw_metrics.m_batch_sizes
        if perf.num_draft_tokens == 0 and sizes:
            # no counted candidate: the real falls back to the batch-size estimate
            perf.num_accepted_tokens = sum(b - 1 for b in sizes[1:])
        return seqs, perf

