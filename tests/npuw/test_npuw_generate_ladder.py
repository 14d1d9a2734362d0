"""Generate ladder (NPUW_LLM_GENERATE_LADDER): small KV variants first, same tokens.

With the default variants (the pyramid: one variant of MAX_PROMPT + MIN_RESPONSE slots) a short
conversation on NPUW_DEVICES=CPU starts on the smallest extra variant of 64·2^k slots that holds
its prompt, compiled on first use, and migrates up as it grows.  The greedy ids must be those of
the single-variant run (the key set to NO) and of the f32 CPU stateful model.
"""

from __future__ import annotations

import dataclasses

import pytest

from ov_npu_emu.errors import ConfigError
from ov_npu_emu_npuw import compiled_model
from ov_npu_emu_npuw.config import generate_rung_sizes, parse_config
from ov_npu_emu_npuw.transform import to_stateless
from tests.npuw._oracle import F32_SUB, greedy

# "Once upon a time, there was a little girl named Lily." (stories260K tokenizer)
SHORT = [1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426]
# total KV 128 + 64 = 192: one default variant kv192, rungs 64 / 128 below it
BASE = {
    "NPU_USE_NPUW": "YES",
    "NPUW_LLM": "YES",
    "NPUW_DEVICES": "CPU",
    "NPUW_LLM_MAX_PROMPT_LEN": 128,
    "NPUW_LLM_MIN_RESPONSE_LEN": 64,
    "KV_CACHE_PRECISION": "f32",
    **F32_SUB,
}


def test_rung_sizes():
    assert generate_rung_sizes(1152, 1) == (64, 128, 256, 512, 1024)
    assert generate_rung_sizes(64, 1) == ()
    # each rung leaves room for a prompt and one call of M tokens
    assert generate_rung_sizes(320, 40) == (128, 256)


def test_climbs_the_ladder_with_the_same_ids(stories_model, cpu_request, emu_core):
    cm = emu_core.compile_model(stories_model, "NPU", BASE)
    impl = cm.impl
    assert impl.generate_sizes == (64, 128, 192)
    assert cm.get_property("NPUW_LLM_GENERATE_LADDER") is True
    assert impl.subs.generate_ladder == {}  # nothing compiled before a conversation needs it
    req = cm.create_infer_request()
    short, err = greedy(req, SHORT, 20)
    assert err is None and (req.impl.variant, req.impl.switches) == (64, 0)
    assert sorted(impl.subs.generate_ladder) == [64]
    # 16 + 130 tokens: kv64 → kv128 → kv192 (the configured variant), each move migrating the
    # stored tokens
    ours, err = greedy(req, SHORT, 130)
    assert err is None and (req.impl.variant, req.impl.switches) == (192, 2)
    assert sorted(impl.subs.generate_ladder) == [64, 128]
    assert cm.get_property("NPUW_EMU_GENERATE_DEFAULT_CONFIG")["kv64"] == {"INFERENCE_NUM_THREADS": 1}

    off = emu_core.compile_model(stories_model, "NPU", {**BASE, "NPUW_LLM_GENERATE_LADDER": "NO"})
    assert off.impl.generate_sizes == (192,) and off.get_property("NPUW_LLM_GENERATE_LADDER") is False
    off_req = off.create_infer_request()
    single, err = greedy(off_req, SHORT, 130)
    assert err is None and (off_req.impl.variant, off_req.impl.switches) == (192, 0)
    assert ours == single == greedy(cpu_request, SHORT, 130)[0]
    assert short == ours[:20]
    # a new conversation starts at the bottom again
    greedy(req, SHORT, 5)
    assert (req.impl.variant, req.impl.switches) == (64, 0)


def test_explicit_variants_keep_their_choice_unless_asked(stories_model, emu_core):
    assert parse_config({**BASE}).generate_ladder is None  # decided at compile
    assert parse_config({**BASE, "NPUW_LLM_GENERATE_VARIANTS": "160"}).generate_ladder is False
    cm = emu_core.compile_model(stories_model, "NPU", {**BASE, "NPUW_LLM_GENERATE_VARIANTS": "160"})
    assert cm.impl.generate_sizes == (160, 192)
    cm = emu_core.compile_model(
        stories_model,
        "NPU",
        {**BASE, "NPUW_LLM_GENERATE_VARIANTS": "160", "NPUW_LLM_GENERATE_LADDER": "YES"},
    )
    assert cm.impl.generate_sizes == (64, 128, 160, 192)
    with pytest.raises(ConfigError) as e:
        parse_config({**BASE, "NPUW_LLM_GENERATE_LADDER": "MAYBE"})
    assert e.value.key == "NPUW_LLM_GENERATE_LADDER"


def test_default_follows_device_and_kv_share(stories_model, monkeypatch):
    stateless, kv = to_stateless(stories_model.clone())
    cfg = parse_config(BASE)
    assert compiled_model.generate_ladder_on(cfg, "CPU", stateless, kv)
    assert compiled_model.generate_ladder_on(cfg, "NPU", stateless, kv)  # emulated NPU too
    assert not compiled_model.generate_ladder_on(cfg, "GPU", stateless, kv)
    # weight-bound steps (KV window small next to the weights) keep one variant
    monkeypatch.setattr(compiled_model, "GENERATE_LADDER_MIN_KV_SHARE", 1e6)
    assert not compiled_model.generate_ladder_on(cfg, "CPU", stateless, kv)
    assert not compiled_model.generate_ladder_on(cfg, "NPU", stateless, kv)
    forced = dataclasses.replace(cfg, generate_ladder=True)
    assert compiled_model.generate_ladder_on(forced, "GPU", stateless, kv)


def test_imported_artefact_runs_on_its_variants(stories_model, cpu_request, emu_core):
    cm = emu_core.compile_model(stories_model, "NPU", BASE)
    blob = cm.export_model()
    back = emu_core.import_model(blob, "NPU", {})
    assert back.impl.generate_sizes == (192,)
    assert back.get_property("NPUW_LLM_GENERATE_LADDER") is False
    ids, err = greedy(back.create_infer_request(), SHORT, 30)
    assert err is None and ids == greedy(cpu_request, SHORT, 30)[0]

