"""NPUW_LLM_MAX_GENERATION_TOKEN_LEN > 1: several tokens per generate call, as speculative
decoding drives it (candidate tokens, rollback through position_ids)."""

from __future__ import annotations

import numpy as np
import openvino as ov
import pytest

from ov_npu_emu.errors import KVCacheFullError, UserInputError
from tests.npuw._oracle import call, real_npuw_config

PROMPT = [1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426]


def _cfg(device: str) -> dict:
    return real_npuw_config(
        128,
        64,
        NPUW_DEVICES=device,
        NPUW_LLM_MAX_GENERATION_TOKEN_LEN=5,  # aligned to 8, like the real
        NPUW_LLM_PREFILL_CHUNK_SIZE=32,
        NPUW_LLM_GENERATE_VARIANTS="128",
    )


def _reference(cpu, seq: list[int], n: int) -> np.ndarray:
    """Logits of the last ``n`` tokens of ``seq`` from the stateful CPU model in one call."""
    cpu.reset_state()
    return call(cpu, seq, 0)[0, -n:]


def _speculate(req, cpu, rng) -> tuple[list[tuple[int, ...]], int]:
    """Prefill, then calls of 1..8 candidates where a random number are kept (the rest rolled
    back), until 150 tokens: crosses kv128 → kv192.  Checks every call's valid rows against the
    CPU model; returns the logits shapes seen and the greedy ids agreement count."""
    req.reset_state()
    seq = list(PROMPT)
    call(req, seq, 0)
    shapes, agree = [], 0
    while len(seq) < 150:
        n = int(rng.integers(1, 9))
        cand = rng.integers(3, 512, size=n).tolist()
        logits = call(req, cand, len(seq))
        shapes.append(logits.shape)
        want = _reference(cpu, seq + cand, n)
        got = logits[0, -n:]
        np.testing.assert_allclose(got, want, atol=2e-3 * float(np.abs(want).max()))
        agree += int((got.argmax(-1) == want.argmax(-1)).all())
        seq += cand[: int(rng.integers(1, n + 1))]  # accepted; the next call rewinds the rest
    return shapes, agree


@pytest.mark.parametrize("device", ["CPU", "NPU"])
def test_candidates_and_rollback_match_the_cpu_model(device, stories_model, cpu_request, emu_core):
    cfg = {**_cfg(device), "KV_CACHE_PRECISION": "f32"}
    cm = emu_core.compile_model(stories_model, "NPU", cfg)
    assert cm.get_property("NPUW_LLM_MAX_GENERATION_TOKEN_LEN") == 8
    req = cm.create_infer_request()
    shapes, agree = _speculate(req, cpu_request, np.random.default_rng(3))
    assert set(shapes) == {(1, 8, 512)}  # like the real: all M rows, the valid ones last
    assert agree == len(shapes)
    assert req.impl.switches == 1 and req.impl.variant == 192


def test_shapes_and_errors_like_the_real(stories_model, emu_core):
    real_cfg = {k: v for k, v in _cfg("CPU").items() if k != "NPUW_LLM_GENERATE_VARIANTS"}
    real = ov.Core().compile_model(stories_model, "NPU", real_cfg).create_infer_request()
    ours = emu_core.compile_model(stories_model, "NPU", _cfg("CPU")).create_infer_request()
    for req in (real, ours):
        req.reset_state()
        call(req, PROMPT, 0)
        assert call(req, [5, 6, 7], len(PROMPT)).shape == (1, 8, 512)
    with pytest.raises(UserInputError) as err:
        call(ours, list(range(3, 12)), len(PROMPT) + 3)
    with pytest.raises(RuntimeError) as real_err:
        call(real, list(range(3, 12)), len(PROMPT) + 3)
    text = 'Input prompt length is greater than output "NPUW_LLM_MAX_GENERATION_TOKEN_LEN": 8.\nPlease adjust it.'
    assert str(err.value) == text and text in str(real_err.value)


def test_kv_full_with_several_tokens(stories_model, emu_core):
    """One variant of 192: its past holds 192 − 8 = 184 tokens, whatever the call length."""
    cfg = {**_cfg("CPU"), "NPUW_LLM_GENERATE_VARIANTS": ""}
    req = emu_core.compile_model(stories_model, "NPU", cfg).create_infer_request()
    req.reset_state()
    call(req, PROMPT, 0)
    stored = len(PROMPT)
    while stored < 184:
        call(req, list(range(3, 11)), stored)
        stored += 8
    assert req.impl.num_stored_tokens == 184
    with pytest.raises(
        KVCacheFullError, match="KV-Cache is full: num_stored_tokens=184 capacity=184"
    ):
        call(req, [5], stored)
