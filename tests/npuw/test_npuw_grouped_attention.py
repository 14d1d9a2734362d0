"""Grouped-query attention in the generate variants (NPUW_LLM_GENERATE_GROUPED_ATTENTION).

The rewrite must compute what the SDPA computed (checked on the real CPU plugin), remove the
per-layer KV head broadcast and K transpose (checked in the CPU plugin's runtime graph), leave
multi-token and causal attention alone, and default to YES only when the device is CPU.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest

from ov_npu_emu.errors import ConfigError
from ov_npu_emu.modelbuilder import make_model_folder
from ov_npu_emu_npuw.attention_rewrites import group_attention
from ov_npu_emu_npuw.transform import (
    make_generate_model,
    make_prefill_model,
    to_stateless,
)
from tests.npuw._oracle import decode_step

F32_1T = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 1}


def _types(model: ov.Model) -> Counter:
    return Counter(op.get_type_name() for op in model.get_ordered_ops())


@pytest.fixture(scope="module", params=["stories260K", "small", "mha"])
def stateless(request, tmp_path_factory):
    """(stateless model, KV layout) for a GQA model from outside, a builder GQA and an MHA model."""
    if request.param == "stories260K":
        model = request.getfixturevalue("stories_model")
    else:
        over = {"num_key_value_heads": 4} if request.param == "mha" else {}
        preset = "tiny" if request.param == "mha" else "small"
        folder = make_model_folder(tmp_path_factory.mktemp(request.param), preset=preset, **over)
        model = ov.Core().read_model(Path(folder) / "openvino_model.xml")
    return to_stateless(model)


@pytest.mark.parametrize("kv_type", [ov.Type.f16, ov.Type.f32])
def test_grouped_generate_computes_what_sdpa_computes(stateless, kv_type):
    sl, kv = stateless
    plain = make_generate_model(sl, kv, 256, kv_type, shared_head=True)
    grouped = make_generate_model(sl, kv, 256, kv_type, shared_head=True, grouped_attention=True)
    layers = len(kv.past_names) // 2
    assert _types(plain)["ScaledDotProductAttention"] == layers
    assert _types(grouped)["ScaledDotProductAttention"] == 0
    assert _types(grouped)["Softmax"] == layers
    for stored in (0, 37, 255):
        a, cm_plain = decode_step(plain, stored)
        b, cm_grouped = decode_step(grouped, stored)
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5 * float(np.abs(a).max()))
    # What the CPU plugin runs: no KV head broadcast or K transpose left per layer.
    rt_plain = Counter(
        op.get_rt_info()["layerType"].astype(str)
        for op in cm_plain.get_runtime_model().get_ordered_ops()
    )
    rt_grouped = Counter(
        op.get_rt_info()["layerType"].astype(str)
        for op in cm_grouped.get_runtime_model().get_ordered_ops()
    )
    assert rt_grouped["Broadcast"] == 0
    assert rt_grouped["Transpose"] == 0
    assert sum(rt_grouped.values()) < sum(rt_plain.values())


def test_multi_token_attention_is_left_alone(stateless):
    sl, kv = stateless
    prefill = make_prefill_model(sl, kv, 128, 64, ov.Type.f16, shared_head=True)
    before = _types(prefill)["ScaledDotProductAttention"]
    assert before and group_attention(prefill) == 0
    assert _types(prefill)["ScaledDotProductAttention"] == before


def _one_sdpa(causal: bool, mask_shape: list[int] | None) -> ov.Model:
    q = ops.parameter([1, 4, 1, 8], ov.Type.f32, name="q")
    k = ops.parameter([1, 4, 16, 8], ov.Type.f32, name="k")
    v = ops.parameter([1, 4, 16, 8], ov.Type.f32, name="v")
    params = [q, k, v]
    args = [q, k, v]
    if mask_shape is not None:
        m = ops.parameter(mask_shape, ov.Type.f32, name="m")
        params.append(m)
        args.append(m)
    sdpa = ops.scaled_dot_product_attention(*args, causal=causal)
    return ov.Model([ops.result(sdpa)], params, "one_sdpa")


@pytest.mark.parametrize(
    "causal, mask_shape, rewritten",
    [
        (False, None, 1),
        (False, [1, 1, 1, 16], 1),
        (True, None, 0),  # causal: the triangle is defined on the full query length
        (False, [1, 4, 1, 16], 0),  # per-head mask: would not line up with grouped rows
    ],
)
def test_which_attention_is_rewritten(causal, mask_shape, rewritten):
    model = _one_sdpa(causal, mask_shape)
    rng = np.random.default_rng(1)
    feeds = {
        p.get_friendly_name(): rng.standard_normal(list(p.get_output_shape(0))).astype(np.float32)
        for p in model.get_parameters()
    }
    want = ov.Core().compile_model(model, "CPU", F32_1T)(feeds)[0]
    assert group_attention(model) == rewritten
    got = ov.Core().compile_model(model, "CPU", F32_1T)(feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "device, value, effective",
    [("CPU", None, True), ("NPU", None, False), ("CPU", "NO", False), ("NPU", "YES", True)],
)
def test_default_follows_the_device_and_reads_back(
    emu_core, stories_model, device, value, effective
):
    cfg = {
        "NPU_USE_NPUW": "YES",
        "NPUW_LLM": "YES",
        "NPUW_DEVICES": device,
        "NPUW_LLM_MAX_PROMPT_LEN": 64,
        "NPUW_LLM_MIN_RESPONSE_LEN": 64,
        "NPUW_LLM_GENERATE_PYRAMID": "NO",
    }
    if value is not None:
        cfg["NPUW_LLM_GENERATE_GROUPED_ATTENTION"] = value
    cm = emu_core.compile_model(stories_model, "NPU", cfg)
    assert cm.get_property("NPUW_LLM_GENERATE_GROUPED_ATTENTION") is effective


def test_bad_value_is_a_config_error(emu_core, stories_model):
    with pytest.raises(ConfigError, match="NPUW_LLM_GENERATE_GROUPED_ATTENTION=.*expected YES or NO"):
        emu_core.compile_model(
            stories_model,
            "NPU",
            {
                "NPU_USE_NPUW": "YES",
                "NPUW_LLM": "YES",
                "NPUW_DEVICES": "CPU",
                "NPUW_LLM_GENERATE_GROUPED_ATTENTION": "maybe",
            },
        )


def test_transposed_v_is_read_in_place(stateless):
    """With NPUW_LLM_OPTIMIZE_V_TENSORS the grouped form reads the stored [B,H,D,S] V directly."""
    sl, kv = stateless
    kv_t = kv.with_v_transposed(True)
    plain = make_generate_model(sl, kv_t, 128, ov.Type.f16, shared_head=True)
    grouped = make_generate_model(
        sl, kv_t, 128, ov.Type.f16, shared_head=True, grouped_attention=True
    )

    def transposes_after_past_v(model: ov.Model) -> int:
        count = 0
        for param in model.get_parameters():
            if not param.get_friendly_name().endswith(".value"):
                continue
            frontier = [t.get_node() for t in param.output(0).get_target_inputs()]
            while frontier:
                node = frontier.pop()
                if node.get_type_name() == "Transpose":
                    count += 1
                elif node.get_type_name() == "Convert":
                    frontier += [t.get_node() for t in node.output(0).get_target_inputs()]
        return count

    layers = len(kv.past_names) // 2
    assert transposes_after_past_v(plain) == layers  # _transpose_v turns the past back
    assert transposes_after_past_v(grouped) == 0
    for stored in (0, 100):
        a, _ = decode_step(plain, stored)
        b, _ = decode_step(grouped, stored)
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5 * float(np.abs(a).max()))
