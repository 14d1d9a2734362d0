"""NPUW_LLM_ENABLE_PREFIX_CACHING: cached prompt blocks are restored, the ids do not change."""

from __future__ import annotations

import numpy as np
import openvino as ov
import pytest

from ov_npu_emu.errors import ConfigError
from ov_npu_emu_npuw.config import parse_config
from ov_npu_emu_npuw.prefix_cache import PrefixCache
from tests.npuw._oracle import greedy, real_npuw_config

_RNG = np.random.default_rng(7)
BASE = [1] + _RNG.integers(3, 512, size=120).tolist()
SHARED = BASE[:90] + _RNG.integers(3, 512, size=25).tolist()  # same first 90 tokens


def _rows(value: float, n: int = 4):
    return lambda a, b: [np.full((1, 2, b - a, 3), value + a, np.float32)]


def test_cache_matches_whole_blocks_of_the_same_prefix_only():
    cache = PrefixCache(block_size=4, max_blocks=16)
    tokens = list(range(10, 30))
    assert cache.store(tokens, 18, _rows(0.0)) == 4  # blocks of 4 inside the first 18 tokens
    assert [b.tokens for b in cache.match(tokens, 20)] == [
        tuple(tokens[i : i + 4]) for i in (0, 4, 8, 12)
    ]
    assert cache.hit_tokens == 16
    assert len(cache.match(tokens, 11)) == 2  # limit: at most 11 tokens restored
    other = tokens[:6] + [99] + tokens[7:]  # differs inside block 1: only block 0 matches
    assert len(cache.match(other, 20)) == 1
    assert cache.match([5] + tokens[1:], 20) == []
    np.testing.assert_array_equal(cache.match(tokens, 8)[1].kv[0], np.full((1, 2, 4, 3), 4.0))


def test_lru_evicts_leaves_first():
    cache = PrefixCache(block_size=2, max_blocks=3)
    a = [1, 2, 3, 4, 5, 6]
    cache.store(a, 6, _rows(0.0))  # chain a0 → a1 → a2 (full)
    b = [7, 8]
    cache.store(b, 2, _rows(1.0))  # needs room: the leaf a2 goes, not a0 or a1
    assert len(cache) == 3 and cache.evicted == 1
    assert len(cache.match(a, 6)) == 2 and len(cache.match(b, 2)) == 1


def test_config_rules():
    on = {"NPUW_LLM_ENABLE_PREFIX_CACHING": "YES", "NPUW_LLM_MAX_PROMPT_LEN": 256}
    cfg = parse_config({**on, "NPUW_LLM_PREFILL_CHUNK_SIZE": 64})
    assert cfg.prefix_block == 64  # 256 does not divide the chunk: the chunk size (real rule)
    cfg = parse_config(
        {**on, "NPUW_LLM_PREFILL_CHUNK_SIZE": 64, "NPUW_LLM_PREFIX_CACHING_BLOCK_SIZE": 16}
    )
    assert cfg.prefix_block == 16 and cfg.properties()["NPUW_LLM_ENABLE_PREFIX_CACHING"] is True
    assert parse_config({"NPUW_LLM_PREFILL_CHUNK_SIZE": 64}).prefix_block == 0
    with pytest.raises(ConfigError, match="chunked prefill only"):
        parse_config({**on, "NPUW_LLM_PREFILL_HINT": "STATIC"})
    with pytest.raises(ConfigError, match="NPUW_LLM_PREFIX_CACHING_MAX_NUM_BLOCKS"):
        parse_config(
            {**on, "NPUW_LLM_PREFILL_CHUNK_SIZE": 64, "NPUW_LLM_PREFIX_CACHING_MAX_NUM_BLOCKS": 0}
        )


def _cfg(device: str, caching: str) -> dict:
    return real_npuw_config(
        256,
        64,
        NPUW_DEVICES=device,
        NPUW_LLM_PREFILL_CHUNK_SIZE=32,
        NPUW_LLM_ENABLE_PREFIX_CACHING=caching,
        NPUW_LLM_PREFIX_CACHING_BLOCK_SIZE=16,
    )


@pytest.fixture(scope="module")
def real_ids(stories_model):
    """The real NPUW with its own prefix cache on, same three prompts in a row."""
    req = ov.Core().compile_model(stories_model, "NPU", _cfg("CPU", "YES")).create_infer_request()
    return [greedy(req, p, 40)[0] for p in (BASE, SHARED, BASE)]


@pytest.mark.parametrize("device", ["CPU", "NPU"])
def test_restored_prefix_gives_the_same_ids(
    device, stories_model, cpu_request, npuw_compiled, real_ids
):
    cfg = {**_cfg(device, "YES"), "KV_CACHE_PRECISION": "f32"}
    req = npuw_compiled(stories_model, cfg).create_infer_request()
    impl = req.impl
    got, calls, restored = [], [], []
    for prompt in (BASE, SHARED, BASE):
        got.append(greedy(req, prompt, 40)[0])
        calls.append(impl.prefill_calls)
        restored.append(impl.restored_tokens)
    # 121 tokens: 4 chunks of 32; then 90 shared tokens → 5 blocks of 16 restored, 35 left = 2
    # chunks; the same prompt again: 7 blocks (112 tokens, the last token is always computed)
    assert calls == [4, 2, 1] and restored == [0, 80, 112]
    assert got == [greedy(cpu_request, p, 40)[0] for p in (BASE, SHARED, BASE)]
    assert got == real_ids


def test_padded_prompt_bypasses_the_cache(stories_model, npuw_compiled):
    req = npuw_compiled(stories_model, _cfg("CPU", "YES")).create_infer_request()
    greedy(req, BASE, 2)
    L = len(BASE)
    mask = np.ones((1, L), np.int64)
    mask[0, 0] = 0  # left padding: its KV differs from the unpadded prompt's
    req.reset_state()
    req.infer(
        {
            "input_ids": np.array([BASE], np.int64),
            "attention_mask": mask,
            "position_ids": np.arange(L, dtype=np.int64)[None],
            "beam_idx": np.zeros(1, np.int32),
        }
    )
    assert req.impl.restored_tokens == 0 and req.impl.prefill_calls == 4


def test_whole_prompt_hit_still_computes_its_logits(stories_model, cpu_request, npuw_compiled):
    """A prompt made of whole cached blocks: the last block is recomputed for fresh logits.

    (The real NPUW 2026.4.1 skips computing on such a hit and returns the previous prompt's
    logits — docs/npuw.md, real NPUW bugs.)
    """
    x = BASE[:112]  # 7 blocks of 16
    y = SHARED[:112]
    req = npuw_compiled(stories_model, _cfg("CPU", "YES")).create_infer_request()
    want = {id(p): greedy(cpu_request, p, 1)[0] for p in (x, y)}
    assert want[id(x)] != want[id(y)]  # else stale logits would go unnoticed
    for prompt in (x, y, x, y):
        assert greedy(req, prompt, 1)[0] == want[id(prompt)]
    assert req.impl.restored_tokens == 96 and req.impl.prefill_calls == 1


@pytest.mark.parametrize("device", ["CPU", "NPU"])
def test_generated_tokens_are_cached_for_the_next_turn(
    device, stories_model, cpu_request, npuw_compiled
):
    """A chat re-sends prompt + answer: the answer's KV (written by generate steps) is restored
    too.  (The real NPUW caches only prefill-computed blocks: it would restore 16 here.)"""
    cfg = {**_cfg(device, "YES"), "KV_CACHE_PRECISION": "f32"}
    req = npuw_compiled(stories_model, cfg).create_infer_request()
    first = BASE[:30]
    answer = greedy(req, first, 40)[0]  # feeds the prompt and 39 generated tokens
    follow_up = first + answer[:39] + SHARED[100:110]
    ids = greedy(req, follow_up, 20)[0]
    assert req.impl.restored_tokens == 64  # 69 cached tokens → 4 whole blocks of 16
    assert ids == greedy(cpu_request, follow_up, 20)[0]
    # a rollback drops the rejected tokens from what is cached
    req.reset_state()
    greedy(req, first, 3)
    req.infer(
        {
            "input_ids": np.array([[7]], np.int64),
            "attention_mask": np.ones((1, 31), np.int64),
            "position_ids": np.array([[30]], np.int64),  # rewinds the two generated tokens
            "beam_idx": np.zeros(1, np.int32),
        }
    )
    assert req.impl._conv == first + [7]
