"""NPUW_LLM_PREFILL_ATTENTION_HINT=PYRAMID: chunks run on prefill models with a shorter past."""

from __future__ import annotations

import numpy as np
import pytest

from ov_npu_emu.errors import ConfigError
from ov_npu_emu_npuw.config import parse_config
from tests.npuw._oracle import greedy, real_npuw_config

_RNG = np.random.default_rng(4)
LONG = [1] + _RNG.integers(3, 512, size=249).tolist()


def test_config():
    base = {"NPUW_LLM_MAX_PROMPT_LEN": 256, "NPUW_LLM_PREFILL_CHUNK_SIZE": 32}
    cfg = parse_config({**base, "NPUW_LLM_PREFILL_ATTENTION_HINT": "PYRAMID"})
    assert cfg.prefill_pyramid == (64, 128)
    assert cfg.properties()["NPUW_LLM_PREFILL_ATTENTION_HINT"] == "PYRAMID"
    assert parse_config(base).prefill_pyramid == ()  # STATIC, the real default
    static = {
        **base,
        "NPUW_LLM_PREFILL_HINT": "STATIC",
        "NPUW_LLM_PREFILL_ATTENTION_HINT": "PYRAMID",
    }
    assert parse_config(static).prefill_pyramid == ()  # applies with chunking only (real rule)
    with pytest.raises(ConfigError, match="STATIC, DYNAMIC, PYRAMID or HFA"):
        parse_config({**base, "NPUW_LLM_PREFILL_ATTENTION_HINT": "FAST"})


def _cfg(device: str) -> dict:
    return real_npuw_config(
        256,
        64,
        NPUW_DEVICES=device,
        NPUW_LLM_PREFILL_CHUNK_SIZE=32,
        NPUW_LLM_PREFILL_ATTENTION_HINT="PYRAMID",
        KV_CACHE_PRECISION="f32",
    )


@pytest.mark.parametrize("device", ["CPU", "NPU"])
def test_ids_match_the_cpu_model(device, stories_model, cpu_request, npuw_compiled):
    cm = npuw_compiled(stories_model, _cfg(device))
    assert sorted(cm.impl.subs.prefill_pyramid) == [64, 128]
    req = cm.create_infer_request()
    impl = req.impl
    for n, last_model in ((20, 64), (70, 128), (150, 256), (250, 256)):
        prompt = LONG[:n]
        assert greedy(req, prompt, 24)[0] == greedy(cpu_request, prompt, 24)[0], n
        assert impl._pf_slots == last_model - 32 and impl.prefill_calls == -(-n // 32)
    # every pyramid model's past is a view of the one KV buffer
    for sub_req in impl._pf_reqs:
        past = sub_req.get_tensor("past_key_values.0.key").data
        assert np.shares_memory(past, impl.kv.flat[0])


def test_export_import_keeps_the_pyramid(stories_model, cpu_request, emu_core, npuw_compiled):
    cm = npuw_compiled(stories_model, _cfg("CPU"))
    back = emu_core.import_model(cm.export_model(), "NPU")
    assert sorted(back.impl.subs.prefill_pyramid) == [64, 128]
    prompt = LONG[:100]
    assert greedy(back.create_infer_request(), prompt, 16)[0] == greedy(cpu_request, prompt, 16)[0]
