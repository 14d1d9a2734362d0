"""genai_shim's per-step shortcuts give what the general code paths give."""

from __future__ import annotations

import numpy as np
import pytest

from genai_shim.decoding import OneRow
from genai_shim.generation_config import GenerationConfig
from genai_shim.sampling import LogitProcessor, Sampler


def test_one_row_buffers_match_concatenate_and_sum():
    mask = np.array([[0, 0, 1, 1, 1]], np.int64)  # left padding: positions count real tokens only
    one = OneRow(mask)
    ref = mask.copy()
    for _ in range(150):  # past the initial buffer size, so it has to grow
        ref = np.concatenate([ref, np.ones((1, 1), np.int64)], axis=1)
        got_mask, got_pos = one.step()
        np.testing.assert_array_equal(got_mask, ref)
        assert got_pos.shape == (1, 1) and got_pos.dtype == np.int64
        assert int(got_pos[0, 0]) == int(ref.sum()) - 1


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_plain_greedy_skips_the_copy_but_picks_the_same_token(dtype):
    rng = np.random.default_rng(0)
    cfg = GenerationConfig()
    cfg.max_new_tokens = 4
    proc = LogitProcessor(cfg, [1, 2, 3])
    assert not proc.needs_penalties()
    sampler = Sampler()
    for _ in range(20):
        logits = rng.standard_normal(257).astype(dtype)
        logits[rng.integers(0, 257)] = logits.max()  # a tie: the first maximum wins
        before = logits.copy()
        token, logp = sampler.sample(proc, logits)
        assert token == int(np.argmax(logits.astype(np.float32))) and logp == 0.0
        np.testing.assert_array_equal(logits, before)  # the caller's row is untouched


@pytest.mark.parametrize(
    "setting",
    [
        {"repetition_penalty": 2.0},
        {"presence_penalty": 1.0},
        {"frequency_penalty": 1.0},
        {"min_new_tokens": 3, "eos_token_id": 5},
    ],
    ids=lambda d: next(iter(d)),
)
def test_configured_penalties_still_apply(setting):
    cfg = GenerationConfig()
    cfg.max_new_tokens = 8
    for k, v in setting.items():
        if k == "eos_token_id":
            cfg.set_eos_token_id(v)
        else:
            setattr(cfg, k, v)
    proc = LogitProcessor(cfg, [7])
    proc.register(7)
    assert proc.needs_penalties()
    logits = np.full(16, -1.0, np.float32)
    if "min_new_tokens" in setting:
        logits[7] = -0.2  # all negative: the suppressed EOS is set to 0.0 and wins
    else:
        logits[7] = 3.0  # the repeated token leads by less than every penalty above removes
        logits[9] = 2.5
    token, _ = Sampler().sample(proc, logits)
    want = int(np.argmax(proc.apply_penalties(logits.copy())))
    assert token == want and token != 7
