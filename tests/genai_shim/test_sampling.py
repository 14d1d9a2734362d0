"""Logit transforms and token selection on crafted logits (the real transforms' rules)."""

from __future__ import annotations

import numpy as np
import pytest

from genai_shim import GenerationConfig
from genai_shim.sampling import LogitProcessor, Sampler


def _proc(prompt=(), **kw):
    cfg = GenerationConfig(max_new_tokens=10, **kw)
    cfg.set_eos_token_id(0)
    return LogitProcessor(cfg, prompt)


def test_repetition_penalty_is_sign_aware_and_counts_prompt_once():
    p = _proc(prompt=[1, 2], repetition_penalty=2.0)
    p.register(2)
    p.register(3)
    out = p.apply_penalties(np.array([1.0, 4.0, -4.0, 3.0, 5.0], dtype=np.float32))
    assert out.tolist() == [1.0, 2.0, -8.0, 1.5, 5.0]


def test_presence_and_frequency_penalties():
    p = _proc(presence_penalty=0.5, frequency_penalty=0.25)
    for t in (1, 1, 2):
        p.register(t)
    out = p.apply_penalties(np.array([0.0, 2.0, -2.0], dtype=np.float32))
    # presence: 2 -> 1.5, -2 -> -1.5; frequency (count 2 / 1): 1.5 -> 1.0, -1.5 -> -1.25
    assert out.tolist() == [0.0, 1.0, -1.25]


def test_min_new_tokens_sets_stop_logits_to_zero():
    p = _proc(min_new_tokens=2, stop_token_ids={3})
    logits = np.array([5.0, -1.0, -2.0, 7.0], dtype=np.float32)
    assert p.apply_penalties(logits.copy()).tolist() == [0.0, -1.0, -2.0, 0.0]
    p.register(1)
    p.register(1)
    assert p.apply_penalties(logits.copy()).tolist() == logits.tolist()


def test_greedy_picks_first_maximum():
    s = Sampler()
    assert s.sample(_proc(), np.array([1.0, 3.0, 3.0, 2.0], dtype=np.float32)) == (1, 0.0)


def test_top_k_top_p_min_p_candidates():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05], dtype=np.float64)).astype(np.float32)
    ids, probs = _proc(do_sample=True, top_k=2).probabilities(logits)
    assert sorted(ids.tolist()) == [0, 1]
    assert probs.sum() == pytest.approx(1.0)
    ids, _ = _proc(do_sample=True, top_p=0.7).probabilities(logits)
    assert ids.tolist() == [0, 1]  # 0.5 ≤ 0.7 < 0.8: the token crossing top_p is kept
    ids, _ = _proc(do_sample=True, min_p=0.5).probabilities(logits)
    assert sorted(ids.tolist()) == [0, 1]  # keeps p ≥ 0.5 · max
    ids, probs = _proc(do_sample=True, temperature=0.5).probabilities(logits)
    assert probs[0] == pytest.approx(0.25 / (0.25 + 0.09 + 0.0225 + 0.0025), rel=1e-5)


def test_multinomial_frequencies_follow_probabilities():
    logits = np.log(np.array([0.6, 0.3, 0.1])).astype(np.float32)
    s = Sampler(seed=7)
    counts = (
        np.bincount([s.sample(_proc(do_sample=True), logits)[0] for _ in range(4000)], minlength=3)
        / 4000
    )
    np.testing.assert_allclose(counts, [0.6, 0.3, 0.1], atol=0.03)


def test_seed_reproducibility():
    logits = np.zeros(50, dtype=np.float32)
    a, b = Sampler(seed=3), Sampler(seed=3)
    assert [a.sample(_proc(do_sample=True), logits)[0] for _ in range(20)] == [
        b.sample(_proc(do_sample=True), logits)[0] for _ in range(20)
    ]
    a.set_seed(4)
    c = Sampler(seed=3)
    assert [a.sample(_proc(do_sample=True), logits)[0] for _ in range(20)] != [
        c.sample(_proc(do_sample=True), logits)[0] for _ in range(20)
    ]
