"""NPUW_DEVICES=CPU at default properties: the sub-models get the CPU plugin's own defaults.

The real NPUW hands its sub-models only the properties the caller gave (plus its own NPUW_*
sub-config), so with no precision key the CPU sub-models run the CPU plugin's default
INFERENCE_PRECISION_HINT (bf16 on a host with AMX / AVX512-BF16, f32 elsewhere).  The emulated
NPU device's own defaults (f32 hints, PERF_COUNT, ...) must not leak into them.
"""

from __future__ import annotations

import openvino as ov
import pytest

from ._oracle import greedy, real_npuw_config

CFG = {
    "NPU_USE_NPUW": "YES",
    "NPUW_LLM": "YES",
    "NPUW_DEVICES": "CPU",
    "NPUW_ONLINE_PIPELINE": "NONE",
    "NPUW_LLM_MAX_PROMPT_LEN": 32,
    "NPUW_LLM_MIN_RESPONSE_LEN": 32,
}
F32 = str(ov.Type.f32)
PROMPT = [1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426]


def _sub_precisions(compiled) -> dict[str, str]:
    return {role: str(sub.get_property("INFERENCE_PRECISION_HINT")) for role, sub in compiled.impl.roles().items()}


def test_sub_models_run_the_cpu_plugins_default_precision(emu_core, stories_model):
    cpu_default = str(ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT"))
    precisions = _sub_precisions(emu_core.compile_model(stories_model, "NPU", CFG))
    assert precisions and set(precisions.values()) == {cpu_default}, precisions


@pytest.mark.parametrize("where", ["top", "++prefill"])
def test_a_given_precision_key_still_reaches_the_sub_models(emu_core, stories_model, where):
    cfg = dict(CFG)
    if where == "top":
        cfg["INFERENCE_PRECISION_HINT"] = "f32"
        want = {F32}
    else:
        cfg["++NPUW_LLM_PREFILL_CONFIG"] = {"INFERENCE_PRECISION_HINT": "f32"}
        want = {F32, str(ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT"))}
    precisions = _sub_precisions(emu_core.compile_model(stories_model, "NPU", cfg))
    assert precisions["prefill"] == F32
    assert set(precisions.values()) == want, precisions


def test_default_tokens_equal_the_real_npuw_at_defaults(emu_core, stories_model):
    """The real NPUW on CPU with no precision key, side by side (same ONLINE_PIPELINE=NONE)."""
    real_cfg = {k: v for k, v in real_npuw_config(32, 32).items() if not k.startswith("++")}
    real_cfg.pop("NPUW_LLM_SHARED_HEAD")
    real = ov.Core().compile_model(stories_model, "NPU", real_cfg).create_infer_request()
    want, err = greedy(real, PROMPT, 24)
    assert err is None, err
    ours = emu_core.compile_model(stories_model, "NPU", CFG).create_infer_request()
    got, err = greedy(ours, PROMPT, 24)
    assert err is None, err
    assert got == want


def _sub_dq(compiled) -> dict[str, int]:
    roles = compiled.impl.roles().items()
    return {role: int(sub.get_property("DYNAMIC_QUANTIZATION_GROUP_SIZE")) for role, sub in roles}


def test_cpu_sub_models_do_not_quantize_activations_unless_asked(emu_core, stories_model):
    """The real NPUW unpacks compressed weights to f16 closures on the host (NPUW_DCOFF_*), so
    the CPU plugin's dynamic quantization never runs under it; ours turns it off by default."""
    assert int(ov.Core().get_property("CPU", "DYNAMIC_QUANTIZATION_GROUP_SIZE")) != 0, "CPU default changed"
    assert set(_sub_dq(emu_core.compile_model(stories_model, "NPU", CFG)).values()) == {0}
    given = emu_core.compile_model(stories_model, "NPU", {**CFG, "DYNAMIC_QUANTIZATION_GROUP_SIZE": 64})
    assert set(_sub_dq(given).values()) == {64}
    head = emu_core.compile_model(stories_model, "NPU", {**CFG, "NPUW_LLM_SHARED_HEAD_CONFIG": {}})
    assert _sub_dq(head)["lm_head"] == 0
