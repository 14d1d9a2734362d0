"""Token-proportional prefill (NPUW_LLM_PREFILL_LADDER): results identical to the full static prefill.

With the real defaults (MAX_PROMPT_LEN 1024) a short prompt runs, on NPUW_DEVICES=CPU, on the
smallest static prefill rung (64, 128, …) that holds it; on the emulated NPU the one static
prefill runs with the device skipping the padded rows.  Either way the greedy ids and the KV
contents after the prefill must be bit-for-bit those of the unoptimised path (the key set to NO),
and the ids those of the real NPUW on CPU.
"""

from __future__ import annotations

import numpy as np
import openvino as ov
import pytest

from ov_npu_emu.errors import ConfigError
from ov_npu_emu_npuw.config import ladder_sizes, parse_config
from tests.npuw._oracle import F32_SUB, greedy, real_npuw_config

# "Once upon a time, there was a little girl named Lily." (stories260K tokenizer)
SHORT = [1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426]
BASE = {
    "NPU_USE_NPUW": "YES",
    "NPUW_LLM": "YES",
    "KV_CACHE_PRECISION": "f32",
    **F32_SUB,
}
_COMPILED: dict[tuple, object] = {}


def _compiled(emu_core, llm, device: str, ladder: str, **extra):
    key = (llm[0], device, ladder, tuple(sorted(extra.items())))
    if key not in _COMPILED:
        cfg = {**BASE, "NPUW_DEVICES": device, "NPUW_LLM_PREFILL_LADDER": ladder, **extra}
        _COMPILED[key] = emu_core.compile_model(llm[1], "NPU", cfg)
    return _COMPILED[key]


def _prefill_state(cm, prompt: list[int]) -> tuple[list[int], list[np.ndarray], int]:
    """(greedy ids, KV rows of the prompt + first generated token, prefill size it ran at)."""
    req = cm.create_infer_request()
    ids, err = greedy(req, prompt, 6)
    assert err is None
    impl = req.impl
    size = impl.prefill_size
    greedy(req, prompt, 2)  # prefill + one step: the prefill KV is in the buffer (copy_kvcache)
    slots = impl.variant - 1
    kv = [impl.kv.seq(i, slots)[:, :, : len(prompt) + 1].copy() for i in range(len(impl.kv))]
    return ids, kv, size


def _assert_same(a, b) -> None:
    assert a[0] == b[0]
    assert len(a[1]) == len(b[1])
    for x, y in zip(a[1], b[1]):
        assert x.dtype == y.dtype and np.array_equal(x, y)  # bit for bit, not allclose


def test_cpu_ladder_is_exact_and_matches_real(llm_quick, emu_core):
    """stories260K and a builder model: rung 64 instead of 1024, same ids and KV; real NPUW agrees."""
    prompt = SHORT if llm_quick[0] == "stories260K" else [1, *range(40, 60)]
    on = _prefill_state(_compiled(emu_core, llm_quick, "CPU", "YES"), prompt)
    off = _prefill_state(_compiled(emu_core, llm_quick, "CPU", "NO"), prompt)
    assert (on[2], off[2]) == (64, 1024)
    _assert_same(on, off)
    real = ov.Core().compile_model(
        llm_quick[1], "NPU", real_npuw_config(1024, 128)
    ).create_infer_request()
    assert greedy(real, prompt, 6)[0] == on[0]


def test_cpu_ladder_picks_the_smallest_rung(llm_quick, emu_core):
    if llm_quick[0] != "stories260K":
        pytest.skip("one model is enough for the rung choice")
    cm = _compiled(emu_core, llm_quick, "CPU", "YES")
    long = ([1] + SHORT[1:] * 10)[:100]  # 100 tokens: rung 128
    on = _prefill_state(cm, long)
    assert on[2] == 128
    _assert_same(on, _prefill_state(_compiled(emu_core, llm_quick, "CPU", "NO"), long))
    assert sorted(cm.impl.subs.prefill_ladder) == [64, 128]  # compiled on first use only


def test_ladder_config():
    cfg = parse_config({})
    assert cfg.prefill_ladder and cfg.ladder == (64, 128, 256, 512) == ladder_sizes(1024)
    assert cfg.properties()["NPUW_LLM_PREFILL_LADDER"] is True
    assert parse_config({"NPUW_LLM_PREFILL_LADDER": "NO"}).ladder == ()
    assert parse_config({"NPUW_LLM_MAX_PROMPT_LEN": 64}).ladder == ()
    # chunked prefill has its own small models: no ladder
    assert parse_config({"NPUW_LLM_PREFILL_CHUNK_SIZE": 64}).ladder == ()
    with pytest.raises(ConfigError, match="NPUW_LLM_PREFILL_LADDER"):
        parse_config({"NPUW_LLM_PREFILL_LADDER": "maybe"})
