"""Continuous-batching scheduler (the rules of openvino.genai's Scheduler, written anew):
dynamic split-fuse (decode steps first, then prompt chunks in the remaining token budget of
``max_num_batched_tokens``) or vLLM-style whole prompts, preemption by recompute of the
lowest-priority (latest) request when KV blocks run out, and on-demand cache growth when the
cache size is not fixed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from genai_shim.continuous_batching.block_manager import BlockManager

__all__ = ["Request", "ScheduledChunk", "Scheduler"]


class Request:
    """One request with a single sequence (its id doubles as the block-table key)."""

    WAITING, RUNNING, FINISHED = 0, 1, 2

    def __init__(self, seq_id: int, prompt: list[int]) -> None:
        self.seq_id = seq_id
        self.prompt = prompt
        self.generated: list[int] = []
        self.processed = 0  # tokens whose K/V are in the cache
        self.state = Request.WAITING
        self.preemptions = 0

    @property
    def num_tokens(self) -> int:
        return len(self.prompt) + len(self.generated)

    def token_slice(self, start: int, n: int) -> list[int]:
        p = len(self.prompt)
        out = self.prompt[start : start + n] if start < p else []
        if start + n > p:
            out = out + self.generated[max(start - p, 0) : start + n - p]
        return out

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
            tokens = req.prompt + req.generated
            req.processed = self.blocks.restore_prefix(req.seq_id, tokens, len(tokens) - 1)

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
        if self.dynamic_split_fuse:
            budget = self._generate_phase(active, chunks, budget)
            self._prompt_phase_split(active, chunks, budget)
        else:
            budget = self._prompt_phase_vllm(active, chunks, budget)
            if not chunks:
                self._generate_phase(active, chunks, budget)
        return chunks

    def _generate_phase(self, active: list[Request], chunks: list[ScheduledChunk], budget: int) -> int:
        bs = self.blocks.block_size
        tables = self.blocks.tables
        for i, req in enumerate(active):
            if budget <= 0:
                break
            if req.state != Request.RUNNING:
                continue
            nt = len(req.prompt) + len(req.generated)
            if req.processed != nt - 1 or req.processed < len(req.prompt):
                continue  # not in the generate phase
            table = tables.get(req.seq_id)
            if table is not None and len(table) * bs >= nt:
                # fast path: the pending token fits the last block
                chunks.append(ScheduledChunk(req, req.processed, 1))
                budget -= 1
                continue
            while not self._ensure(req, req.num_tokens):
                # victim: the latest request holding blocks, never one of higher priority
                victim = next(
                    (v for v in reversed(active[i + 1 :]) if v.processed > 0 or v.seq_id in self.blocks.tables),
                    None,
                )
                if victim is None:
                    break
                self._preempt(victim)
                chunks[:] = [c for c in chunks if c.request is not victim]
            if not self._ensure(req, req.num_tokens):
                continue
            self.blocks.allocate(req.seq_id, req.num_tokens)
            chunks.append(ScheduledChunk(req, req.processed, 1))
            budget -= 1
        return budget

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
            n = min(budget, req.num_tokens - req.processed)
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
            n = req.num_tokens - req.processed
            if n > budget or running >= self.max_num_seqs:
                break
            if not self._ensure(req, req.num_tokens):
                break
            self.blocks.allocate(req.seq_id, req.num_tokens)
            req.state = Request.RUNNING
            chunks.append(ScheduledChunk(req, req.processed, n))
            budget -= n
            running += 1
        return budget
