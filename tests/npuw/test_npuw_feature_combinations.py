"""The NPUW switches compose: the combinations give the CPU model's logits.

Switches: V layout, shared head, tokens per call, prefix cache, grouped attention, PYRAMID prefill.

One scenario per combination — a prompt, decode calls with rollback, a variant switch, then a
second prompt sharing a prefix — checked call by call against the f32 CPU stateful model.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tests.npuw._oracle import call, real_npuw_config

_RNG = np.random.default_rng(11)
FIRST = [1] + _RNG.integers(3, 512, size=29).tolist()  # 30 + MIN_RESPONSE 64 → kv96
SECOND = FIRST[:20] + _RNG.integers(3, 512, size=10).tolist()  # one 16-token block shared

# An orthogonal array: 8 runs in which every pair of the 6 switches takes all 4 value pairs
# (the full product of the first five, 32 runs, passed as well but costs a minute of CI).
COMBOS = [
    {"v_t": a, "head": b, "m": 8 if c else 1, "prefix": a ^ b, "grouped": a ^ c, "pyramid": b ^ c}
    for a, b, c in itertools.product((False, True), repeat=3)
]


def _check(cpu, seq: list[int], got: np.ndarray, n: int) -> None:
    cpu.reset_state()
    want = call(cpu, seq, 0)[0, -n:]
    np.testing.assert_allclose(got[0, -n:], want, atol=1e-3 * float(np.abs(want).max()))


def _config(**switches) -> dict:
    """64 + 64 tokens, 16-token chunks, variants 96 and 128, f32 KV (exact), plus ``switches``."""
    return real_npuw_config(
        64,
        64,
        NPUW_LLM_PREFILL_CHUNK_SIZE=16,
        NPUW_LLM_GENERATE_VARIANTS="96",
        KV_CACHE_PRECISION="f32",
        **switches,
    )


@pytest.mark.parametrize(
    "combo", COMBOS, ids=lambda c: "-".join(f"{k}{int(v)}" for k, v in c.items())
)
def test_switches_compose(combo, stories_model, cpu_request, emu_core):
    cfg = _config(
        NPUW_LLM_OPTIMIZE_V_TENSORS=combo["v_t"],
        NPUW_LLM_SHARED_HEAD=combo["head"],
        NPUW_LLM_MAX_GENERATION_TOKEN_LEN=combo["m"],
        NPUW_LLM_ENABLE_PREFIX_CACHING=combo["prefix"],
        NPUW_LLM_PREFIX_CACHING_BLOCK_SIZE=16,
        NPUW_LLM_GENERATE_GROUPED_ATTENTION=combo["grouped"],
        NPUW_LLM_PREFILL_ATTENTION_HINT="PYRAMID" if combo["pyramid"] else "STATIC",
    )
    req = emu_core.compile_model(stories_model, "NPU", cfg).create_infer_request()
    rng = np.random.default_rng(5)
    for prompt in (FIRST, SECOND):
        req.reset_state()
        seq = list(prompt)
        _check(cpu_request, seq, call(req, seq, 0), 1)
        while len(seq) < 100:  # past kv96 → a switch to kv128
            n = int(rng.integers(1, combo["m"] + 1))
            cand = rng.integers(3, 512, size=n).tolist()
            _check(cpu_request, seq + cand, call(req, cand, len(seq)), n)
            seq += cand[: int(rng.integers(1, n + 1))]
        assert req.impl.switches == 1
    if combo["prefix"]:
        assert req.impl.restored_tokens == 16


def test_switches_survive_export_import(stories_model, cpu_request, emu_core):
    cfg = _config(
        NPUW_LLM_MAX_GENERATION_TOKEN_LEN=8,
        NPUW_LLM_ENABLE_PREFIX_CACHING="YES",
        NPUW_LLM_PREFIX_CACHING_BLOCK_SIZE=16,
        NPUW_LLM_PREFILL_ATTENTION_HINT="PYRAMID",
    )
    back = emu_core.import_model(
        emu_core.compile_model(stories_model, "NPU", cfg).export_model(), "NPU"
    )
    for key, want in (
        ("NPUW_LLM_MAX_GENERATION_TOKEN_LEN", 8),
        ("NPUW_LLM_ENABLE_PREFIX_CACHING", True),
        ("NPUW_LLM_PREFILL_ATTENTION_HINT", "PYRAMID"),
        ("NPUW_LLM_GENERATE_GROUPED_ATTENTION", True),
        ("NPUW_LLM_CACHE_ROPE", True),
    ):
        assert back.get_property(key) == want, key
    req = back.create_infer_request()
    for prompt in (FIRST, SECOND):
        req.reset_state()
        _check(cpu_request, prompt, call(req, prompt, 0), 1)
        cand = [5, 6, 7]
        _check(cpu_request, prompt + cand, call(req, cand, len(prompt)), 3)
    assert req.impl.restored_tokens == 16
