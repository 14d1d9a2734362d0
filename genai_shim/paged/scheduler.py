"""Continuous-batching scheduler (the rules of openvino.genai's Scheduler, written anew):
dynamic split-fuse (decode steps first, then prompt chunks in the remaining token budget of
``max_num_batched_tokens``) or vLLM-style whole prompts, preemption by recompute of the
lowest-priority (latest) request when KV blocks run out, and on-demand cache growth when the
cache size is not fixed.  The sequences of one request (beam search, parallel sampling) decode
together or not at all: they are scheduled, and preempted, as one unit, and a shared block they
write is copied first (copy-on-write)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from genai_shim.paged.block_manager import BlockManager
from ov_npu_emu.errors import ConfigError

__all__ = ["Request", "ScheduledChunk", "Scheduler", "SchedulerConfig"]


class Request:
    """One sequence (its id doubles as the block-table key).  Sequences of one request with
    several (beams, parallel samples) share a ``group`` key and are scheduled as one unit."""

    WAITING, RUNNING, FINISHED = 0, 1, 2

    def __init__(self, seq_id: int, prompt: list[int], group: object = None) -> None:
        self.seq_id = seq_id
        self.prompt = prompt
        self.generated: list[int] = []
        self.processed = 0  # tokens whose K/V are in the cache
        self.state = Request.WAITING
        self.preemptions = 0
        self.group = group
        #: a VLM request's prompt embeddings, positions and extra inputs (None: token ids only)
        self.vision: Any = None

    @property
    def target(self) -> int:
        """Tokens a prompt-phase chunk may feed: all of them, except that a member of a group
        recomputing after preemption stops before its pending token, which its group samples
        from in a common decode step."""
        n = len(self.prompt) + len(self.generated)
        return n - 1 if self.group is not None and self.generated else n

    @property
    def num_tokens(self) -> int:
        return len(self.prompt) + len(self.generated)

    def token_slice(self, start: int, n: int) -> list[int]:
        p = len(self.prompt)
        out = self.prompt[start : start + n] if start < p else []
        if start + n > p:
            out = out + self.generated[max(start - p, 0) : start + n - p]
        return out

    def cache_keys(self) -> list[Any]:
        """What the prefix cache keys this sequence's blocks on: its tokens, except that a VLM
        prompt's own keys tell the images apart (equal pad ids, other pictures)."""
        keys = getattr(self.vision, "cache_keys", None)
        return (keys if keys is not None else self.prompt) + self.generated

    @property
    def in_generate_phase(self) -> bool:
        # every prompt token is cached and exactly the last sampled token is pending
        return self.processed >= len(self.prompt) and self.processed == self.num_tokens - 1


@dataclass
class ScheduledChunk:
    request: Request
    past: int
    count: int

    @property
    def samples(self) -> bool:
        return self.past + self.count == self.request.num_tokens


@dataclass
class Scheduler:
    blocks: BlockManager
    max_num_batched_tokens: int = 256
    max_num_seqs: int = 256
    dynamic_split_fuse: bool = True
    grow_cache: Any = None  # callable(min_blocks) -> bool, for a cache sized on demand
    copy_blocks: Any = None  # callable([(src, dst), ...]): copy KV blocks (copy-on-write)
    preemptions: int = 0
    log: list[str] = field(default_factory=list)

    def _ensure(self, req: Request, tokens: int) -> bool:
        need = self.blocks.required_blocks(req.seq_id, tokens)
        while need > self.blocks.num_free_blocks:
            if self.grow_cache is None or not self.grow_cache(need - self.blocks.num_free_blocks):
                return False
        return True

    def _restore(self, req: Request) -> None:
        """Prefix caching: a request without blocks starts after its cached full blocks."""
        if self.blocks.prefix_caching and req.processed == 0 and req.seq_id not in self.blocks.tables:
            keys = req.cache_keys()
            req.processed = self.blocks.restore_prefix(req.seq_id, keys, len(keys) - 1)

    def _preempt(self, req: Request) -> None:
        """Preemption by recompute: drop all blocks; the request re-feeds prompt + generated."""
        self.blocks.free(req.seq_id)
        req.processed = 0
        req.state = Request.WAITING
        req.preemptions += 1
        self.preemptions += 1

    def schedule(self, requests: list[Request]) -> list[ScheduledChunk]:
        """Requests in priority order (earliest first); returns this step's chunks."""
        chunks: list[ScheduledChunk] = []
        budget = self.max_num_batched_tokens
        active = [r for r in requests if r.state != Request.FINISHED]
        # copy-on-write copies of this step; only units scheduled earlier in the step make them
        # and a victim is always a later unit, so no copy targets a block freed meanwhile
        self._copies: list[tuple[int, int]] = []
        try:
            if self.dynamic_split_fuse:
                budget = self._generate_phase(active, chunks, budget)
                self._prompt_phase_split(active, chunks, budget)
            else:
                budget = self._prompt_phase_vllm(active, chunks, budget)
                if not chunks:
                    self._generate_phase(active, chunks, budget)
        finally:
            if self._copies:  # even if a check failed later: the tables already name the copies
                self.copy_blocks(self._copies)
        return chunks

    @staticmethod
    def _units(active: list[Request]) -> list[list[Request]]:
        """Requests cut into scheduling units: a single sequence, or all of one group's."""
        units: list[list[Request]] = []
        where: dict[int, list[Request]] = {}
        for r in active:
            if r.group is None:
                units.append([r])
            elif id(r.group) in where:
                where[id(r.group)].append(r)
            else:
                where[id(r.group)] = unit = [r]
                units.append(unit)
        return units

    def _holds_blocks(self, unit: list[Request]) -> bool:
        return any(r.processed > 0 or r.seq_id in self.blocks.tables for r in unit)

    def _generate_phase(self, active: list[Request], chunks: list[ScheduledChunk], budget: int) -> int:
        bs = self.blocks.block_size
        tables = self.blocks.tables
        status = self.blocks.status
        # single-sequence requests go through the per-request fast path (the common case); from
        # the first group on (or a request needing blocks) the unit path takes over
        shared = bool(self.blocks.shared_blocks)
        for i, req in enumerate(active):
            if budget <= 0:
                break
            if req.group is not None:
                return self._generate_units(self._units(active[i:]), 0, chunks, budget)
            if req.state != Request.RUNNING:
                continue
            nt = len(req.prompt) + len(req.generated)
            if req.processed != nt - 1 or req.processed < len(req.prompt):
                continue  # not in the generate phase
            table = tables.get(req.seq_id)
            if table is not None and len(table) * bs >= nt:
                # the pending token fits the last block, which is the sequence's own unless some
                # block is shared (a forged entry is left to check_batch)
                b = table[req.processed // bs]
                if not shared or (0 <= b < len(status) and status[b] == 1):
                    chunks.append(ScheduledChunk(req, req.processed, 1))
                    budget -= 1
                    continue
            return self._generate_units(self._units(active[i:]), 0, chunks, budget)
        return budget

    def _generate_units(
        self, units: list[list[Request]], start: int, chunks: list[ScheduledChunk], budget: int
    ) -> int:
        """Decode steps for ``units[start:]``, each unit (a request's sequences) all or none."""
        bs = self.blocks.block_size
        tables = self.blocks.tables
        status = self.blocks.status
        for i in range(start, len(units)):
            unit = units[i]
            if budget <= 0:
                break
            if any(
                r.state != Request.RUNNING or r.processed != r.num_tokens - 1 or r.processed < len(r.prompt)
                for r in unit
            ):
                continue  # not (all) in the generate phase
            if len(unit) > budget:
                break
            if len(unit) == 1:
                req = unit[0]
                table = tables.get(req.seq_id)
                nt = req.num_tokens
                # (a forged or shared entry takes the slow path; check_batch judges it)
                own = table is not None and len(table) * bs >= nt
                if own and 0 <= (b := table[req.processed // bs]) < len(status) and status[b] == 1:
                    # fast path: the pending token fits the sequence's own last block
                    chunks.append(ScheduledChunk(req, req.processed, 1))
                    budget -= 1
                    continue
            later = units[i + 1 :]
            held = sum(len(tables.get(r.seq_id, ())) for v in later for r in v)
            if self._unit_need(unit) > self.blocks.num_free_blocks + held and self.grow_cache is None:
                continue  # preempting every later unit would not make room: preempt none
            while not self._ensure_unit(unit):
                # victim: the latest unit holding blocks, never one of higher priority
                victim = next((v for v in reversed(units[i + 1 :]) if self._holds_blocks(v)), None)
                if victim is None:
                    break
                for v in victim:
                    self._preempt(v)
                chunks[:] = [c for c in chunks if c.request not in victim]
            if not self._ensure_unit(unit):
                continue
            for req in unit:
                self.blocks.allocate(req.seq_id, req.num_tokens)
                # copy-on-write: the KV is copied once per step (see schedule)
                self._copies.extend(self.blocks.make_writable(req.seq_id, req.processed))
                chunks.append(ScheduledChunk(req, req.processed, 1))
                budget -= 1
        return budget

    def _unit_need(self, unit: list[Request]) -> int:
        blocks = self.blocks
        need = sum(blocks.required_blocks(r.seq_id, r.num_tokens) for r in unit)
        return need + blocks.copies_needed([(r.seq_id, r.processed) for r in unit])

    def _ensure_unit(self, unit: list[Request]) -> bool:
        """Room for one more token in every sequence of ``unit``, copies of shared blocks
        included (growing a cache sized on demand)."""
        need = self._unit_need(unit)
        while need > self.blocks.num_free_blocks:
            if self.grow_cache is None or not self.grow_cache(need - self.blocks.num_free_blocks):
                return False
        return True

    def _prompt_phase_split(self, active: list[Request], chunks: list[ScheduledChunk], budget: int) -> None:
        scheduled = {id(c.request) for c in chunks}
        for req in active:
            if budget <= 0:
                break
            if id(req) in scheduled:
                continue
            if req.state == Request.RUNNING and req.in_generate_phase:
                continue
            self._restore(req)
            n = min(budget, req.target - req.processed)
            # shrink the chunk to what the cache can hold (after trying to grow it)
            self._ensure(req, req.processed + n)
            have = len(self.blocks.tables.get(req.seq_id, ())) + self.blocks.num_free_blocks
            n = min(n, have * self.blocks.block_size - req.processed)
            if n <= 0:
                continue
            self.blocks.allocate(req.seq_id, req.processed + n)
            req.state = Request.RUNNING
            chunks.append(ScheduledChunk(req, req.processed, n))
            budget -= n

    def _prompt_phase_vllm(self, active: list[Request], chunks: list[ScheduledChunk], budget: int) -> int:
        running = sum(1 for r in active if r.state == Request.RUNNING)
        for req in active:
            if req.state != Request.WAITING:
                continue
            self._restore(req)
            n = req.target - req.processed
            if n <= 0:
                continue
            if n > budget or running >= self.max_num_seqs:
                break
            if not self._ensure(req, req.target):
                break
            self.blocks.allocate(req.seq_id, req.target)
            req.state = Request.RUNNING
            chunks.append(ScheduledChunk(req, req.processed, n))
            budget -= n
            running += 1
        return budget


class SchedulerConfig:
    """openvino_genai.SchedulerConfig: the real fields with the real defaults (2026.4.1)."""

    def __init__(self, **kwargs: Any) -> None:
        self.max_num_batched_tokens = 256
        self.num_kv_blocks = 0
        self.cache_size = 0
        self.dynamic_split_fuse = True
        self.max_num_seqs = 256
        self.enable_prefix_caching = False
        self.use_cache_eviction = False
        self.use_sparse_attention = False
        self.num_linear_attention_blocks = 0
        self.cache_interval_multiplier = None
        self.cache_eviction_config = None
        self.sparse_attention_config = None
        for k, v in kwargs.items():
            if not hasattr(self, k):  # the real's constructor takes only its fields
                raise ConfigError(f"SchedulerConfig has no field {k!r}", key=k)
            setattr(self, k, v)

    def to_string(self) -> str:
        return (
            f"SchedulerConfig {{ max_num_batched_tokens: {self.max_num_batched_tokens}, "
            f"num_kv_blocks: {self.num_kv_blocks}, cache_size: {self.cache_size}, "
            f"dynamic_split_fuse: {self.dynamic_split_fuse}, max_num_seqs: {self.max_num_seqs}, "
            f"enable_prefix_caching: {self.enable_prefix_caching} }}"
        )

    def __repr__(self) -> str:
        return self.to_string()
