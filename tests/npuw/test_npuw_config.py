"""Config keys, alignment, validation errors and variant selection (seed 000's examples)."""

from __future__ import annotations

import pytest

from ov_npu_emu.errors import ConfigError
from ov_npu_emu_npuw.config import (
    LLM_NPU_COMPILER_DEFAULTS,
    is_npuw_llm_config,
    parse_config,
    pyramid_sizes,
    select_variant,
)

#: what a default (not replaced) LLM sub-config carries, as the real NPUW's baseline config
HP = LLM_NPU_COMPILER_DEFAULTS

SEED_VARIANTS = [256, 512, 1024, 1152]


@pytest.mark.parametrize(
    "prompt, expected", [(20, 256), (400, 1024), (1000, 1152), (0, 256), (1024, 1152)]
)
def test_select_variant_seed_examples(prompt, expected):
    # 20 + 128 = 148 → 256; 400 + 128 = 528 → 1024; 1000 + 128 = 1128 → 1152
    assert select_variant(SEED_VARIANTS, prompt, 128) == expected


def test_explicit_variants_key_builds_the_seed_variants():
    cfg = parse_config({"NPUW_LLM_GENERATE_VARIANTS": "256,512,1024"})
    assert cfg.variants == (256, 512, 1024, 1152)  # the total is always the last variant
    assert parse_config({"NPUW_LLM_GENERATE_VARIANTS": [1152, 256]}).variants == (256, 1152)


def test_pyramid_like_the_real_one():
    assert pyramid_sizes(8192, 128) == [1152, 2176, 4224, 8320]
    assert parse_config({}).variants == (1152,)
    assert parse_config({"NPUW_LLM_MAX_PROMPT_LEN": 4096}).variants == (1152, 2176, 4224)
    assert parse_config(
        {"NPUW_LLM_MAX_PROMPT_LEN": 4096, "NPUW_LLM_GENERATE_PYRAMID": "NO"}
    ).variants == (4224,)


def test_defaults_and_alignment():
    cfg = parse_config({})
    assert (cfg.max_prompt_len, cfg.min_response_len, cfg.chunk_size, cfg.kv_precision) == (
        1024,
        128,
        0,
        "f16",
    )
    cfg = parse_config({"NPUW_LLM_MAX_PROMPT_LEN": "100", "NPUW_LLM_MIN_RESPONSE_LEN": 10})
    assert (cfg.max_prompt_len, cfg.min_response_len, cfg.total_size) == (128, 64, 192)
    cfg = parse_config({"NPUW_LLM_MAX_PROMPT_LEN": 300, "NPUW_LLM_PREFILL_CHUNK_SIZE": 256})
    assert (cfg.max_prompt_len, cfg.chunk_size) == (512, 256)  # aligned to 64, then to the chunk
    assert parse_config({"NPUW_LLM_PREFILL_CHUNK_SIZE": 0}).chunk_size == 0
    assert (
        parse_config(
            {"NPUW_LLM_PREFILL_CHUNK_SIZE": 64, "NPUW_LLM_PREFILL_HINT": "STATIC"}
        ).chunk_size
        == 0
    )


def test_subconfigs_replace_or_merge():
    cfg = parse_config(
        {
            "INFERENCE_PRECISION_HINT": "f32",
            "++NPUW_LLM_GENERATE_CONFIG": {"A": 1},
            "NPUW_LLM_PREFILL_CONFIG": {"B": 2},
        }
    )
    assert cfg.generate_config == {**HP, "INFERENCE_PRECISION_HINT": "f32", "A": 1}
    assert cfg.prefill_config == {"B": 2}


def test_emulator_device_keys_reach_the_sub_models():
    """NPU_EMU_* keys given at the top level are device keys of ours: every sub-config gets
    them (an explicit NPUW_LLM_*_CONFIG still replaces the defaults); the NPU plugin's own keys
    and NPUW's do not flow down."""
    cfg = parse_config({"NPU_EMU_WEIGHTS_CACHE": "NO", "NPU_USE_NPUW": "YES", "NPU_TURBO": "YES",
                        "NPUW_LLM_MAX_PROMPT_LEN": 256, "NPUW_LLM_SHARED_HEAD_CONFIG": {"C": 3}})
    assert cfg.prefill_config == cfg.generate_config == {**HP, "NPU_EMU_WEIGHTS_CACHE": "NO"}
    assert cfg.head_config == {"C": 3}


@pytest.mark.parametrize(
    "config, match",
    [
        (
            {"NPUW_LLM_PREFILL_CHUNK_SIZE": 48},
            r"chunk size \(48\) is not power of 2. Please adjust NPUW_LLM_PREFILL_CHUNK_SIZE",
        ),
        ({"NPUW_LLM_MAX_PROMPT_LEN": -1}, "NPUW_LLM_MAX_PROMPT_LEN must be a positive integer"),
        (
            {"NPUW_LLM_MIN_RESPONSE_LEN": "1"} | {"NPUW_LLM_MAX_PROMPT_LEN": "abc"},
            "must be an integer",
        ),
        ({"NPUW_LLM_MAX_PROMPT_LEN": 1.5}, "must be an integer"),
        ({"NPUW_LLM_MIN_RESPONSE_LEN": 0}, "positive integer"),
        (
            {"NPUW_LLM_GENERATE_HINT": "BEST_PERF", "NPUW_LLM_GENERATE_CONFIG": {}},
            "GENERATE_HINT only works with default generate config!",
        ),
        ({"NPUW_LLM_GENERATE_HINT": "FASTEST"}, "FAST_COMPILE or BEST_PERF"),
        ({"NPUW_LLM_PREFILL_HINT": "MAYBE"}, "DYNAMIC or STATIC"),
        ({"NPUW_LLM_MAX_PROMT_LEN": 64}, "did you mean NPUW_LLM_MAX_PROMPT_LEN"),
        ({"NPUW_LLM_GENERATE_VARIANTS": "256,4096"}, "exceeds the total KV size 1152"),
        ({"NPUW_LLM_PREFILL_CONFIG": "f32"}, "must be a dict"),
        ({"KV_CACHE_PRECISION": "i8"}, "use f16, f32, u8 or u4"),
        ({"KV_CACHE_PRECISION": "u8", "NPUW_EMU_KV_GROUP_SIZE": "x"}, "NPUW_EMU_KV_GROUP_SIZE must be an integer"),
        ({"NPUW_LLM_MAX_GENERATION_TOKEN_LEN": 130}, "exceeds NPUW_LLM_MIN_RESPONSE_LEN 128"),
        (
            {"NPUW_LLM_MAX_GENERATION_TOKEN_LEN": 5, "NPUW_LLM_PREFILL_CHUNK_SIZE": 4},
            "smaller than NPUW_LLM_MAX_GENERATION_TOKEN_LEN 8",
        ),
        ({"NPUW_LLM_GENERATE_PYRAMID": "maybe"}, "YES or NO"),
    ],
)
def test_bad_configs_raise_typed_errors(config, match):
    with pytest.raises(ConfigError, match=match):
        parse_config(config)


def test_claim_rule():
    on = {"NPU_USE_NPUW": "YES", "NPUW_LLM": "YES"}
    assert is_npuw_llm_config("NPU", on)
    assert is_npuw_llm_config("NPU", {"NPU_USE_NPUW": True, "NPUW_LLM": "true"})
    assert not is_npuw_llm_config("CPU", on)
    assert not is_npuw_llm_config("NPU", {"NPU_USE_NPUW": "YES"})
    assert not is_npuw_llm_config("NPU", {})


def test_emulator_device_keys_reach_the_compiled_sub_models():
    """Through compile_model: a top-level NPU_EMU_HOST_FUSION=NO is the prefill's, every generate
    variant's and the LM head's (it used to be dropped silently), a misspelt one is refused with
    the NPU device's suggestion on either NPUW_DEVICES, and NPUW_DEVICES=CPU keeps the key its
    device knows."""
    from ov_npu_emu.api import Core
    from ov_npu_emu.models import find_model

    core = Core()
    model = core.read_model(str(find_model("stories260K") / "openvino_model.xml"))
    base = {"NPU_USE_NPUW": "YES", "NPUW_LLM": "YES", "NPUW_LLM_MAX_PROMPT_LEN": 128,
            "NPUW_LLM_MIN_RESPONSE_LEN": 64, "NPUW_DEVICES": "NPU"}
    subs = core.compile_model(model, "NPU", {**base, "NPU_EMU_HOST_FUSION": "NO"}).impl.subs
    for sub in (subs.prefill, *subs.generate.values(), subs.lm_head):
        assert sub.get_property("NPU_EMU_HOST_FUSION") == "NO"
    for devices in ("NPU", "CPU"):  # the CPU device would skip an unknown NPU_EMU_* key
        with pytest.raises(ConfigError, match="did you mean NPU_EMU_HOST_FUSION"):
            core.compile_model(model, "NPU", {**base, "NPUW_DEVICES": devices, "NPU_EMU_HOST_FUSON": "NO"})
    cpu = core.compile_model(model, "NPU", {**base, "NPUW_DEVICES": "CPU", "NPU_EMU_HOST_FUSION": "NO",
                                            "NPU_EMU_WEIGHTS_BANK": "NO", "CPU_EMU_WEIGHTS_BANK": "NO"}).impl
    # both flow down; the CPU device reads its own CPU_EMU_* key only
    assert cpu.cfg.generate_config["NPU_EMU_WEIGHTS_BANK"] == "NO"
    assert cpu.cfg.generate_config["CPU_EMU_WEIGHTS_BANK"] == "NO"
    # the NPU device's defaults are not the caller's: NPUW's own prefill choice stays, and a
    # value set on the device (core.set_property) counts as given
    plain = core.compile_model(model, "NPU", base).impl
    assert not any(k.startswith("NPU_EMU_") for k in plain.cfg.generate_config)
    assert plain.subs.prefill.get_property("NPU_EMU_SKIP_PADDED_ROWS") == "YES"
    core.set_property("NPU", {"NPU_EMU_HOST_FUSION": "NO"})
    assert core.compile_model(model, "NPU", base).impl.subs.lm_head.get_property("NPU_EMU_HOST_FUSION") == "NO"


def _plain_model() -> object:
    import numpy as np
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter([1, 4], np.float32, name="x")
    return ov.Model([ops.relu(x)], [x], "plain")


@pytest.mark.parametrize("key", ["NPUW_FOO", "NPUW_LLM_MAX_PROMPT_LEN", "NPUW_WHISPER", "NPUW_WHISPER_EOS_TOKEN"])
def test_unknown_npuw_key_on_a_plain_model_is_refused_as_the_real(key: str) -> None:
    """NPU_USE_NPUW=YES without NPUW_LLM=YES: the real refuses an NPUW_* key its plain path does not
    take ("Option '...' is not supported for current configuration"); ours used to ignore it."""
    import openvino as ov

    from ov_npu_emu import Core

    config = {"NPU_USE_NPUW": "YES", "NPUW_DEVICES": "CPU", key: "1"}
    with pytest.raises(RuntimeError, match=f"Option '{key}' is not supported for current configuration"):
        ov.Core().compile_model(_plain_model(), "NPU", config)
    with pytest.raises(ConfigError, match=f"Option '{key}' is not supported for current configuration") as err:
        Core().compile_model(_plain_model(), "NPU", config)
    assert err.value.key == key


def test_plain_npuw_keys_the_real_takes_pass() -> None:
    """What openvino.genai passes with a Whisper encoder or a VLM's vision model on NPU (the keys
    update_npu_config_whisper sets are fine on a plain model too)."""
    import openvino as ov

    from ov_npu_emu import Core

    config = {"NPU_USE_NPUW": "YES", "NPUW_DEVICES": "CPU", "NPUW_FOLD": "NO", "NPUW_ONLINE_PIPELINE": "NONE",
              "NPUW_FUNCALL_FOR_ALL": "NO", "NPUW_WEIGHTS_BANK": "shared"}
    ov.Core().compile_model(_plain_model(), "NPU", config)
    Core().compile_model(_plain_model(), "NPU", config)
