"""Logit processing and token selection with openvino.genai's transforms and their order."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from typing import Any

import numpy as np

from genai_shim.generation_config import SIZE_MAX, GenerationConfig

__all__ = ["LogitProcessor", "Sampler", "raw_logprob"]

logger = logging.getLogger(__name__)


class LogitProcessor:
    """Per-request logit transforms, applied in the real order:

    EOS suppression (min_new_tokens) → structured-output grammar mask → repetition → presence →
    frequency penalty, then for
    multinomial: top_k → temperature softmax → min_p → top_p.
    """

    def __init__(self, config: GenerationConfig, prompt_ids: Iterable[int], constraint: Any = None) -> None:
        self.config = config
        self.prompt_ids = {int(t) for t in prompt_ids}
        self.generated: Counter[int] = Counter()
        self.num_generated = 0
        #: structured output (genai_shim.structured_output.GrammarConstraint) or None
        self.constraint = constraint

    def needs_penalties(self) -> bool:
        """Whether :meth:`apply_penalties` would change anything for the next token."""
        c = self.config
        return (
            self.constraint is not None
            or (c.min_new_tokens > 0 and self.num_generated < c.min_new_tokens)
            or c.repetition_penalty != 1.0
            or c.presence_penalty != 0.0
            or c.frequency_penalty != 0.0
        )

    def register(self, token: int) -> None:
        self.generated[int(token)] += 1
        self.num_generated += 1
        if self.constraint is not None:
            self.constraint.accept(token)

    def apply_penalties(self, logits: np.ndarray) -> np.ndarray:
        """In-place on a float32 vector; returns it."""
        c = self.config
        if c.min_new_tokens > 0 and self.num_generated < c.min_new_tokens:
            # The real EOSPenaltyTransform writes 0.0 (not -inf): a stop token can still win
            # when every other logit is negative.
            for t in c.stop_token_ids:
                if 0 <= t < logits.size:
                    logits[t] = 0.0
        if self.constraint is not None:
            # the real's grammar transform sits here: after the EOS penalty, before the others
            self.constraint.mask(logits)
        if c.repetition_penalty != 1.0:
            p = float(c.repetition_penalty)
            for t in self.prompt_ids | set(self.generated):
                logits[t] = logits[t] / p if logits[t] >= 0 else logits[t] * p
        if c.presence_penalty != 0.0:
            p = float(c.presence_penalty)
            for t in self.generated:
                logits[t] = logits[t] - p if logits[t] >= 0 else logits[t] + p
        if c.frequency_penalty != 0.0:
            p = float(c.frequency_penalty)
            for t, n in self.generated.items():
                logits[t] = logits[t] - p * n if logits[t] >= 0 else logits[t] + p * n
        return logits

    def probabilities(self, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Multinomial candidates: (token ids, probabilities summing to 1)."""
        c = self.config
        ids = np.arange(logits.size)
        vals = logits.astype(np.float64)
        if not np.isfinite(vals.max()):
            # A grammar that allows no token of this vocabulary masks every logit to -inf (the
            # real then draws from NaNs); take the first token, as greedy's argmax does.
            return ids[:1], np.ones(1)
        if 0 < c.top_k < SIZE_MAX and c.top_k < logits.size:
            keep = np.argpartition(-vals, int(c.top_k) - 1)[: int(c.top_k)]
            ids, vals = ids[keep], vals[keep]
        probs = np.exp((vals - vals.max()) / float(c.temperature))
        probs /= probs.sum()
        if c.min_p > 0.0:
            keep = probs >= float(c.min_p) * probs.max()
            ids, probs = ids[keep], probs[keep]
        if c.top_p != 1.0:
            order = np.argsort(-probs, kind="stable")
            ids, probs = ids[order], probs[order]
            csum = np.cumsum(probs)
            # keep tokens up to and including the one that pushes the mass over top_p
            n = int(np.searchsorted(csum, float(c.top_p), side="right")) + 1
            ids, probs = ids[:n], probs[:n]
        return ids, probs / probs.sum()


class Sampler:
    """Greedy (first maximal logit) or seeded multinomial selection.

    The random stream is numpy's PCG64 seeded with ``rng_seed`` at every generate() call, so
    the same seed gives the same text across runs; it differs from the real pipeline's
    std::mt19937 stream.
    """

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(int(seed))

    def set_seed(self, seed: int) -> None:
        self.rng = np.random.default_rng(int(seed))

    def sample(self, processor: LogitProcessor, logits: np.ndarray) -> tuple[int, float]:
        """Return (token, log-probability used for the score).

        With ``logprobs > 0`` the log-probability is that of the token under the model's raw
        distribution (log-softmax of the logits before penalties, temperature, top-k/p), for
        greedy and multinomial alike; otherwise greedy scores 0 and multinomial the
        log-probability under the filtered distribution it drew from (both measured on
        openvino_genai 2026.4.1).
        """
        token, logp = self._select(processor, logits)
        if processor.config.logprobs > 0:
            logp = raw_logprob(logits, token)
        return token, logp

    def _select(self, processor: LogitProcessor, logits: np.ndarray) -> tuple[int, float]:
        if not processor.config.do_sample and not processor.needs_penalties():
            # Plain greedy: argmax of the row as is (no copy; f16→f32 keeps order and ties).
            return int(np.argmax(logits)), 0.0
        vec = processor.apply_penalties(np.array(logits, dtype=np.float32, copy=True))
        if not processor.config.do_sample:
            return int(np.argmax(vec)), 0.0
        ids, probs = processor.probabilities(vec)
        k = int(self.rng.choice(len(ids), p=probs))
        return int(ids[k]), float(np.log(probs[k]))


def raw_logprob(logits: np.ndarray, token: int) -> float:
    """log_softmax(logits)[token] of one row of raw logits."""
    row = np.asarray(logits, dtype=np.float64)
    top = row.max()
    return float(row[token] - top - np.log(np.exp(row - top).sum()))
