"""Requests with several sequences in the paged backend: beam search and parallel sampling
(``num_return_sequences`` > 1).  Their sequences fork from the prompt's sequence and share its
KV blocks (BlockManager.fork); a shared block is copied before it is written (copy-on-write,
done by the scheduler) and returns to the free list when its last holder is freed.

Beam selection is genai_shim's GroupBeamSearcher (genai_shim/beam_search.py, the real's rules),
the same code the stateful pipeline runs; this module only keeps one scheduler Request per
running beam in step with it."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from genai_shim.beam_search import BeamSequence, GroupBeamSearcher, SequenceGroup, StopStringMatcher
from genai_shim.generation_config import GenerationConfig
from genai_shim.paged.block_manager import BlockManager
from genai_shim.paged.scheduler import Request
from genai_shim.results import GenerationFinishReason
from ov_npu_emu.errors import ExecutionError

__all__ = ["BeamGroup", "fork_request"]


def fork_request(blocks: BlockManager, parent: Request, seq_id: int) -> Request:
    """A new running sequence that shares ``parent``'s prompt, KV blocks and cached tokens
    (its generated tokens are set by the caller)."""
    child = Request(seq_id, parent.prompt, parent.group)
    child.vision = parent.vision
    blocks.fork(parent.seq_id, seq_id)
    child.processed = parent.processed
    child.state = Request.RUNNING
    return child


class _RecordingGroup(SequenceGroup):
    """A SequenceGroup that remembers which sequence each fork came from."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.forks: list[tuple[int, BeamSequence]] = []

    def fork(self, seq: BeamSequence) -> BeamSequence:
        new = super().fork(seq)
        self.forks.append((seq.id, new))
        return new


class BeamGroup:
    """One beam-search request: a Request per running beam, kept in step with the searcher.

    ``requests`` are the running beams' Requests in the searcher's row order; a Request's
    ``generated`` list *is* its beam's token list, so the scheduler sees every beam's tokens."""

    def __init__(
        self,
        first: Request,
        config: GenerationConfig,
        max_new_tokens: int,
        blocks: BlockManager,
        new_seq_id: Callable[[], int],
        stop_strings: StopStringMatcher | None = None,
    ) -> None:
        self.blocks = blocks
        self._new_seq_id = new_seq_id
        first.group = self
        self.group = _RecordingGroup(first.seq_id, list(first.prompt), config, max_new_tokens)
        self.searcher = GroupBeamSearcher(self.group, stop_strings)
        seq0 = self.group.seqs[0]
        first.generated = seq0.tokens
        self._req_of: dict[int, Request] = {seq0.id: first}
        self.requests: list[Request] = [first]

    @property
    def done(self) -> bool:
        return not self.requests

    def step(self, rows: dict[int, np.ndarray]) -> None:
        """Select the next tokens from the logits of every running beam (``rows`` by the
        Request's sequence id), then fork, extend and free the beams' Requests to match."""
        running = self.group.running()
        try:
            logits = np.stack([rows[self._req_of[s.id].seq_id] for s in running])
        except KeyError as e:  # the scheduler runs a group's beams together or not at all
            raise ExecutionError(f"beam {e} of a beam-search request has no logits this step") from e
        self.searcher.step(logits)
        self._sync()

    def _sync(self) -> None:
        # forks first: their parents' blocks are still held even if the parent was dropped
        for parent_id, seq in self.group.forks:
            if seq.running:
                child = fork_request(self.blocks, self._req_of[parent_id], self._new_seq_id())
                child.generated = seq.tokens
                self._req_of[seq.id] = child
        self.group.forks.clear()
        alive = {s.id for s in self.group.running()}
        for sid in [sid for sid in self._req_of if sid not in alive]:
            req = self._req_of.pop(sid)
            req.state = Request.FINISHED
            self.blocks.free(req.seq_id)
        self.requests = [self._req_of[s.id] for s in self.group.running()]
        for req in self.requests:
            # a stop string cut from a parent beam: its next token overwrites the cut ones
            req.processed = min(req.processed, req.num_tokens - 1)

    def cancel(self) -> None:
        for req in self._req_of.values():
            req.state = Request.FINISHED
            self.blocks.free(req.seq_id)
        self._req_of.clear()
        self.requests = []

    def results(self) -> list[tuple[list[int], float, GenerationFinishReason]]:
        """(tokens, beam score, finish reason) of the best beams, best first."""
        lp = float(self.group.config.length_penalty)
        return [(list(s.tokens), float(s.beam_score(lp)), s.finish) for s in self.group.results()]
