"""Group beam search for the stateful pipeline, with openvino.genai's selection and stop rules."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from genai_shim.generation_config import SIZE_MAX, GenerationConfig, StopCriteria
from genai_shim.results import GenerationFinishReason
from ov_npu_emu.errors import UserInputError

__all__ = ["BeamSequence", "GroupBeamSearcher", "SequenceGroup", "StopStringMatcher"]

logger = logging.getLogger(__name__)

F32 = np.float32

#: ``(generated ids) -> number of trailing ids to drop`` when a stop string matched, else None
StopStringMatcher = Callable[[list[int]], "int | None"]


def _div_pow(value: np.float32, length: float, penalty: np.float32) -> np.float32:
    """``value / length ** penalty`` in float32 as the real one computes it; 0/0 gives NaN (which
    never satisfies a stop criterion) instead of a Python exception."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return F32(F32(value) / np.power(F32(length), F32(penalty)))


class BeamSequence:
    """One sequence of a request: generated ids, their log-probabilities and its status."""

    __slots__ = ("id", "tokens", "log_probs", "cum_log_prob", "running", "finish")

    def __init__(self, seq_id: int) -> None:
        self.id = seq_id
        self.tokens: list[int] = []
        self.log_probs: list[np.float32] = []
        self.cum_log_prob = F32(0.0)
        self.running = True
        self.finish = GenerationFinishReason.NONE

    def append(self, token: int, log_prob: np.float32) -> None:
        self.cum_log_prob = F32(self.cum_log_prob + log_prob)
        self.log_probs.append(log_prob)
        self.tokens.append(int(token))

    def remove_last(self, n: int) -> None:
        if n > len(self.tokens):
            # A stop string matched a beam's candidate token: the real beam search cuts the match
            # from the parent sequence, which is one token shorter, and fails this check.
            raise UserInputError(
                "Cannot remove more tokens than has been generated: a stop string matched at the "
                "start of a beam (openvino_genai fails the same way); with beam search set "
                "include_stop_str_in_output=True or use stop_token_ids"
            )
        for _ in range(n):
            self.cum_log_prob = F32(self.cum_log_prob - self.log_probs.pop())
            self.tokens.pop()

    def beam_score(self, length_penalty: float) -> np.float32:
        """Cumulative log-probability / generated length ** length_penalty."""
        return _div_pow(self.cum_log_prob, float(len(self.tokens)), F32(length_penalty))


class SequenceGroup:
    """The sequences of one prompt, in creation order (that order is the KV row order)."""

    def __init__(
        self, request_id: int, prompt: list[int], config: GenerationConfig, max_new_tokens: int
    ) -> None:
        self.request_id = request_id
        self.prompt = prompt
        self.config = config
        self.max_new_tokens = max_new_tokens
        self.seqs: list[BeamSequence] = [BeamSequence(0)]
        self._next_id = 1

    def fork(self, seq: BeamSequence) -> BeamSequence:
        new = BeamSequence(self._next_id)
        self._next_id += 1
        new.tokens, new.log_probs = list(seq.tokens), list(seq.log_probs)
        new.cum_log_prob, new.running, new.finish = seq.cum_log_prob, seq.running, seq.finish
        self.seqs.append(new)
        return new

    def remove(self, seq_id: int) -> None:
        kept = [s for s in self.seqs if s.id != seq_id]
        if len(kept) == len(self.seqs):
            # Happens when a beam group finishes at the very first step (its beams still share
            # the prompt's sequence); the real pipeline fails with the same check.
            raise UserInputError(
                "Failed to remove sequence with specified ID: a beam group finished at the first "
                "step (openvino_genai fails the same way); use fewer stop tokens, a larger "
                "num_beams / num_beam_groups ratio or stop_criteria other than EARLY"
            )
        self.seqs = kept

    def running(self) -> list[BeamSequence]:
        return [s for s in self.seqs if s.running]

    def num_running(self) -> int:
        return sum(1 for s in self.seqs if s.running)

    def results(self) -> list[BeamSequence]:
        """Finished sequences, best beam score first, at most num_return_sequences."""
        lp = float(self.config.length_penalty)
        done = sorted(self.seqs, key=lambda s: -float(s.beam_score(lp)))
        return done[: int(self.config.num_return_sequences)]


@dataclass
class _Beam:
    seq: BeamSequence
    row: int = 0  # the parent's row among the group's running sequences (its logits / KV row)
    log_prob: np.float32 = F32(0.0)
    token: int = -1
    score: np.float32 = F32(-np.inf)  # cumulative log-probability


def _greater(a: _Beam, b: _Beam) -> bool:
    return bool(a.score > b.score)


def _sift_up(heap: list[_Beam], hole: int, top: int, value: _Beam) -> None:
    parent = (hole - 1) // 2
    while hole > top and _greater(heap[parent], value):
        heap[hole] = heap[parent]
        hole = parent
        parent = (hole - 1) // 2
    heap[hole] = value


def _heap_push(heap: list[_Beam], value: _Beam) -> None:
    """std::push_heap with the real comparator (a min-heap on score), so that equal scores
    leave the heap in the same order as in the real pipeline."""
    heap.append(value)
    _sift_up(heap, len(heap) - 1, 0, value)


def _heap_pop(heap: list[_Beam]) -> _Beam:
    """std::pop_heap + pop_back: removes and returns the lowest-score beam."""
    n = len(heap) - 1
    if n > 0:
        value = heap[n]
        heap[n] = heap[0]
        hole, second = 0, 0
        while second < (n - 1) // 2:
            second = 2 * (second + 1)
            if _greater(heap[second], heap[second - 1]):
                second -= 1
            heap[hole] = heap[second]
            hole = second
        if n % 2 == 0 and second == (n - 2) // 2:
            second = 2 * (second + 1)
            heap[hole] = heap[second - 1]
            hole = second - 1
        _sift_up(heap, hole, 0, value)
    return heap.pop()


class _Group:
    """One beam group: its running beams and a heap of its best finished ones."""

    def __init__(self, base: BeamSequence, size: int) -> None:
        # Every beam starts as the prompt's sequence; only the first has a finite score, so the
        # first step does not pick the same token once per beam.
        self.ongoing = [_Beam(base) for _ in range(size)]
        self.ongoing[0].score = F32(0.0)
        self.heap: list[_Beam] = []
        self.done = False
        self.size = size

    def finish(self, beam: _Beam, config: GenerationConfig) -> int | None:
        """Add a finished beam; returns the id of the sequence pushed out of the heap, if any."""
        # Like HF, a stop token counts in the length (it is not appended yet at this point).
        length = len(beam.seq.tokens) + (1 if beam.token in config.stop_token_ids else 0)
        beam = replace(beam, score=_div_pow(beam.score, float(length), F32(config.length_penalty)))
        _heap_push(self.heap, beam)
        if len(self.heap) > self.size:
            return _heap_pop(self.heap).seq.id
        return None

    def check_done(self, config: GenerationConfig, max_new_tokens: int) -> None:
        if len(self.heap) < self.size:
            return
        best, worst = self.ongoing[0], self.heap[0].score
        cur_len = len(best.seq.tokens)
        penalty = F32(config.length_penalty)
        criteria = StopCriteria(int(config.stop_criteria))
        if criteria == StopCriteria.EARLY:
            self.done = True
        elif criteria == StopCriteria.HEURISTIC:
            self.done = bool(worst >= _div_pow(best.score, float(cur_len), penalty))
        else:  # NEVER: the best score a running beam could still reach
            length = max_new_tokens if penalty > 0.0 else cur_len
            self.done = bool(worst >= _div_pow(best.score, float(length), penalty))


def _log_softmax(row: np.ndarray) -> np.ndarray:
    """float32 log-softmax; the exp-sum is accumulated left to right like std::accumulate.
    exp and log are evaluated in float64 and rounded to float32: that is the correctly rounded
    result glibc's expf / logf give, where numpy's vectorised float32 exp may be an ulp off
    (which moved beam scores in the 6th decimal on gpt2-fp32)."""
    row = np.asarray(row, dtype=np.float32)
    shifted = row - row.max()
    exps = np.exp(shifted.astype(np.float64)).astype(np.float32)
    log_sum = np.float32(np.log(np.float64(np.add.accumulate(exps)[-1])))
    return shifted - log_sum


def _banned_ngram_tokens(text: list[int], n: int) -> list[int]:
    """Tokens that would repeat an n-gram: the successors of every earlier occurrence of the
    last n-1 tokens (n == 1 bans every token seen)."""
    k = n - 1
    if k == 0:
        return text
    tail = text[len(text) - k :]
    arr = np.asarray(text, dtype=np.int64)
    if arr.size <= k:
        return []
    windows = np.lib.stride_tricks.sliding_window_view(arr[:-1], k)
    hits = np.flatnonzero((windows == np.asarray(tail)).all(axis=1))
    return arr[hits + k].tolist()


def _top_tokens(lp: np.ndarray, k: int) -> np.ndarray:
    """The k highest log-probabilities, best first, equal values in token order: a stable
    argsort's first k, in O(vocab) (large vocabularies make the full sort the step's cost)."""
    if k >= lp.size:
        return np.argsort(-lp, kind="stable")
    kth = lp[np.argpartition(-lp, k - 1)[:k]].min()
    candidates = np.flatnonzero(lp >= kth)  # ascending ids: ties stay in token order
    return candidates[np.argsort(-lp[candidates], kind="stable")][:k]


class GroupBeamSearcher:
    """Diverse (grouped) beam search over one SequenceGroup; one call of
    :meth:`select_next_tokens` per model step with the logits of the group's running rows."""

    def __init__(
        self, group: SequenceGroup, stop_strings: StopStringMatcher | None = None, log_probs: bool = False
    ) -> None:
        """``log_probs``: the rows given to :meth:`step` are log-probabilities already (the real's
        LogitsType::LOG_PROBS, WhisperPipeline's), used as they are."""
        c = group.config
        self._rows_are_log_probs = log_probs
        self.group = group
        self.config = c
        self.group_size = int(c.num_beams) // int(c.num_beam_groups)
        n_groups = int(c.num_beam_groups)
        self.groups = [_Group(group.seqs[0], self.group_size) for _ in range(n_groups)]
        self._stop_strings = stop_strings

    def beam_rows(self) -> dict[int, int]:
        """Sequence id -> the row (among the previous step's running rows) it continues from."""
        return {b.seq.id: b.row for g in self.groups if not g.done for b in g.ongoing}

    def step(self, logits: np.ndarray) -> None:
        """Select the next tokens from ``logits`` [running rows, vocab], then end the search at
        max_new_tokens."""
        self.select_next_tokens(logits)
        running = self.group.running()
        if running and len(running[0].tokens) == self.group.max_new_tokens:
            self.finalize()

    def finalize(self) -> None:
        """Max length reached: every running beam competes for its group's finished slots."""
        for g in self.groups:
            if g.done:
                continue
            for beam in g.ongoing:
                pushed_out = g.finish(beam, self.config)
                if pushed_out is not None:
                    self.group.remove(pushed_out)
                beam.seq.running = False
                beam.seq.finish = GenerationFinishReason.LENGTH

    def _try_finish(self, g: _Group, cand: _Beam) -> None:
        parent_id = cand.seq.id
        pushed_out = g.finish(cand, self.config)
        if pushed_out == parent_id:
            return  # worse than every finished beam of the group
        if pushed_out is not None:
            self.group.remove(pushed_out)
        forked = self.group.fork(cand.seq)
        forked.running = False
        forked.finish = GenerationFinishReason.STOP
        for b in g.heap:
            if b.seq.id == parent_id:
                b.seq = forked
                break
        forked.append(cand.token, cand.log_prob)

    def select_next_tokens(self, logits: np.ndarray) -> None:
        children_of = self._assign_rows()
        children: list[list[_Beam]] = [[] for _ in self.groups]
        for gi, g in enumerate(self.groups):
            if g.done:
                continue
            candidates = self._candidates(gi, g, logits, children)
            self._pick_children(g, candidates, children[gi], children_of)
            self._close_if_done(g, children[gi])
        self._advance(children, children_of)

    def _assign_rows(self) -> dict[int, int]:
        """Point every ongoing beam at its row among the running sequences; returns the
        per-parent child counters, all 0."""
        running_ids = [s.id for s in self.group.running()]
        children_of: dict[int, int] = {}
        for g in self.groups:
            if g.done:
                continue
            for beam in g.ongoing:
                if beam.seq.id not in running_ids:
                    raise UserInputError(
                        "Internal error in beam search: should not be here (a beam group finished "
                        "at the first step; openvino_genai fails the same way); use fewer stop "
                        "tokens or stop_criteria other than EARLY"
                    )
                beam.row = running_ids.index(beam.seq.id)
                children_of[beam.seq.id] = 0
        return children_of

    def _beam_log_probs(
        self, gi: int, beam: _Beam, logits: np.ndarray, children: list[list[_Beam]]
    ) -> np.ndarray:
        """One beam's next-token log-probabilities after the diversity and n-gram penalties."""
        c = self.config
        ngram = int(c.no_repeat_ngram_size)
        diversity = F32(c.diversity_penalty)
        if self._rows_are_log_probs:
            lp = np.array(logits[beam.row], dtype=np.float32, copy=True)
        else:
            lp = _log_softmax(logits[beam.row])
        # Diversity: tokens already chosen by earlier groups in this step cost more.
        for prev in range(gi):
            for child in children[prev]:
                lp[child.token] = F32(lp[child.token] - diversity)
        text = self.group.prompt + beam.seq.tokens
        if ngram != SIZE_MAX and len(text) > 1 and len(text) >= ngram:
            banned = _banned_ngram_tokens(text, ngram)
            if banned:
                lp[banned] = -np.inf
        return lp

    def _candidates(
        self, gi: int, g: _Group, logits: np.ndarray, children: list[list[_Beam]]
    ) -> list[_Beam]:
        """2 * group_size best continuations of each of the group's beams, best score first."""
        gs = self.group_size
        candidates: list[_Beam] = []
        for beam in g.ongoing:
            lp = self._beam_log_probs(gi, beam, logits, children)
            for token in _top_tokens(lp, 2 * gs):
                log_prob = F32(lp[token])
                score = F32(beam.score + log_prob)
                # a plain constructor: dataclasses.replace cost more than the selection
                candidates.append(_Beam(beam.seq, beam.row, log_prob, int(token), score))
        if len(candidates) < 2 * gs:
            raise RuntimeError("No beams left to search")
        # 2 * group_size candidates so that each beam keeps at least one non-stop token.
        candidates.sort(key=lambda b: -float(b.score))
        return candidates

    def _stops(self, g: _Group, idx: int, cand: _Beam) -> bool:
        """Whether ``cand`` ends on a stop token or stop string; one in the top group_size
        finishes its beam, the others are dropped."""
        gs = self.group_size
        if cand.token in self.config.stop_token_ids:
            if idx < gs:  # a stop token outside the top group_size is dropped
                self._try_finish(g, cand)
            return True
        if self._stop_strings is not None:
            removed = self._stop_strings(cand.seq.tokens + [cand.token])
            if removed is not None:
                if idx < gs:
                    # As the real one does: the matched tail is cut from the parent
                    # (which does not hold the candidate token yet).
                    cand.seq.remove_last(removed)
                    self._try_finish(g, cand)
                return True
        return False

    def _pick_children(
        self,
        g: _Group,
        candidates: list[_Beam],
        picked: list[_Beam],
        children_of: dict[int, int],
    ) -> None:
        """Append to ``picked`` the best group_size candidates that do not stop."""
        for idx, cand in enumerate(candidates):
            if self._stops(g, idx, cand):
                continue
            children_of[cand.seq.id] += 1
            picked.append(cand)
            if len(picked) == self.group_size:
                break

    def _close_if_done(self, g: _Group, picked: list[_Beam]) -> None:
        """Check the group's stop criteria; a finished group drops its ongoing beams."""
        if len(g.heap) >= self.group_size:
            g.check_done(self.config, self.group.max_new_tokens)
        if not picked:
            g.done = True
        if g.done:
            for beam in g.ongoing:
                self.group.remove(beam.seq.id)
            g.ongoing = []

    def _advance(self, children: list[list[_Beam]], children_of: dict[int, int]) -> None:
        """Children become the new beams: a parent with several children is forked for all
        but its last child, which continues in the parent's own sequence (and KV row)."""
        for gi, g in enumerate(self.groups):
            if g.done:
                continue
            for child in children[gi]:
                parent_id = child.seq.id
                if children_of[parent_id] > 1:
                    child.seq = self.group.fork(child.seq)
                    child.seq.append(child.token, child.log_prob)
                    children_of[parent_id] -= 1
                elif children_of[parent_id] == 1:
                    child.seq.append(child.token, child.log_prob)
            for beam in g.ongoing:
                if children_of[beam.seq.id] == 0:
                    self.group.remove(beam.seq.id)
            g.ongoing = children[gi]
