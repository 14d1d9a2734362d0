"""Beam search and parallel sampling (num_return_sequences > 1) for VLMPipeline on CPU (issue 31).

The prompt's embeddings (with the family's position ids and extra inputs) are prefilled once on one
KV row; then every step feeds one token per running sequence, embedded by the text embeddings model,
with the family's decode-step position ids and extra inputs repeated per row and ``beam_idx`` picking
each row's parent in the KV state.  Beam search itself is genai_shim's (genai_shim/stateful_beam.py
over beam_search.py's GroupBeamSearcher, the LLMPipeline's); parallel sampling draws each sequence's
token in turn from the one seeded Sampler, as LLMPipeline's stateful path.  All the beams of a step
have the same length, so they share the step's position (M-RoPE's rope delta included).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from genai_shim.decoding import RunningSequence
from genai_shim.generation_config import GenerationConfig
from genai_shim.perf_metrics import PerfMetrics, record_infer_call
from genai_shim.results import EncodedResults
from genai_shim.sampling import Sampler
from genai_shim.stateful_beam import run_beam_search

__all__ = ["StepFeeder", "beam_search", "make_infer", "parallel_sample"]

#: (inputs_embeds, attention_mask, position_ids, extras, beam_idx, perf) -> logits
Infer = Callable[[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray], np.ndarray, PerfMetrics], np.ndarray]


def make_infer(request: Any) -> Infer:
    """One language-model call on ``request`` with the rows' ``beam_idx``, its metrics recorded."""

    def infer(embeds: np.ndarray, mask: np.ndarray, pos: np.ndarray, extras: dict[str, np.ndarray],
              beam: np.ndarray, perf: PerfMetrics) -> np.ndarray:
        t0 = time.perf_counter()
        out = request.infer({"inputs_embeds": embeds, "attention_mask": mask, "position_ids": pos,
                             "beam_idx": np.ascontiguousarray(beam, np.int32), **extras}, share_outputs=True)
        record_infer_call(perf.raw_metrics, t0, time.perf_counter(), int(embeds.shape[0]))
        return np.asarray(out["logits"])

    return infer


class StepFeeder:
    """A decode step's language-model inputs for ``rows`` sequences of one token each."""

    def __init__(self, embedder: Any, delta: int) -> None:
        self._emb, self._delta = embedder, delta
        self._extras = embedder.step_lm_inputs()

    def position_ids(self, length: int, rows: int) -> np.ndarray:
        """The step's positions for a mask of ``length``, one per row: [3, rows, 1] for M-RoPE,
        else [rows, 1]."""
        one = self._emb.step_position_ids(length, self._delta)
        return np.ascontiguousarray(np.repeat(one, rows, axis=one.ndim - 2))

    def extras(self, rows: int) -> dict[str, np.ndarray]:
        """The step's extra inputs (Gemma 3's token_type_ids, Qwen3-VL's DeepStack ones): zeros per
        token fed, ``rows`` of them: [batch, 1] ones (token types, visual position masks) on the
        batch axis, the DeepStack embeddings [layers, tokens, hidden] on their token axis."""
        return {k: np.ascontiguousarray(np.repeat(v, rows, axis=0 if v.ndim == 2 else 1))
                for k, v in self._extras.items()}

    def embeds(self, tokens: np.ndarray) -> np.ndarray:
        """[rows, 1, hidden] for the tokens [rows, 1]."""
        return np.ascontiguousarray(self._emb.token_embeddings(tokens))


def beam_search(prompt: list[int], logits: np.ndarray, config: GenerationConfig, perf: PerfMetrics, *,
                feeder: StepFeeder, infer: Infer, tokenizer: Any, stop_window: int,
                stop_strings: list[str]) -> EncodedResults:
    """Group beam search after the prefill (``logits`` [1, L, vocab]): the best
    ``num_return_sequences`` beams with their scores (genai_shim/stateful_beam.py)."""
    ids = np.asarray([prompt], np.int64)
    mask = np.ones_like(ids)

    def step(tokens: np.ndarray, step_mask: np.ndarray, _pos: np.ndarray, beam: np.ndarray,
             perf_: PerfMetrics) -> np.ndarray:
        rows = int(tokens.shape[0])
        return infer(feeder.embeds(tokens), step_mask, feeder.position_ids(step_mask.shape[1], rows),
                     feeder.extras(rows), beam, perf_)

    return run_beam_search(ids, mask, logits, config, perf, infer=step, paged=True,
                           max_new_tokens=lambda n, _w: config.get_max_new_tokens(n), tokenizer=tokenizer,
                           stop_window=stop_window, stop_strings=stop_strings)


def parallel_sample(prompt: list[int], logits: np.ndarray, config: GenerationConfig, perf: PerfMetrics, *,
                    sampler: Sampler, feeder: StepFeeder, infer: Infer, finish: Callable[[RunningSequence], None]
                    ) -> list[RunningSequence]:
    """``num_return_sequences`` multinomial sequences sharing the prompt's KV row: each step samples
    every running sequence in turn from ``sampler``; finished ones leave the KV (beam_idx)."""
    n = int(config.num_return_sequences)
    seqs = [RunningSequence(list(prompt), config, config.get_max_new_tokens(len(prompt))) for _ in range(n)]
    active = list(range(n))
    last = np.repeat(logits[:, -1, :], n, axis=0)
    row_of = dict.fromkeys(active, 0)  # sequence -> its row of the KV state
    length = len(prompt)
    while True:
        for row, b in enumerate(active):
            s = seqs[b]
            token, logp = sampler.sample(s.processor, last[row])
            s.tokens.append(token)
            s.processor.register(token)
            s.logps.append(logp)
            finish(s)
        still = [b for b in active if seqs[b].finish is None]
        if not still:
            # the real's continuous-batching results: by cumulative log-probability, best first
            return sorted(seqs, key=lambda q: -float(sum(q.logps[: len(q.tokens)])))
        beam = np.array([row_of[b] for b in still], np.int32)
        length += 1
        rows = len(still)
        tokens = np.array([[seqs[b].tokens[-1]] for b in still], np.int64)
        last = infer(feeder.embeds(tokens), np.ones((rows, length), np.int64), feeder.position_ids(length, rows),
                     feeder.extras(rows), beam, perf)[:, -1, :]
        active = still
        row_of = {b: i for i, b in enumerate(still)}
