"""The numpy reference against the OpenVINO CPU plugin (exact f32) on builder models."""

from __future__ import annotations

import numpy as np
import openvino as ov
import pytest

from ov_npu_emu.modelbuilder import LlamaReference, build_model, get_preset, init_weights
from ov_npu_emu.testing import CPU_EXACT_CONFIG, run_stateful_greedy

# Measured max |logit diff| is ~1e-6..3e-6 (f32 CPU vs float64 reference; logit std 0.3..1).
ATOL = 5e-5
PROMPT = [1, 82, 113, 102, 104, 346, 262, 342]
STEPS = 40

# id: (dtype, seed, overrides of the tiny preset)
VARIANTS = {
    "tiny-f32": ("f32", 0, {}),
    "tiny-bias-untied": ("f32", 0, {"attention_bias": True, "tie_word_embeddings": False}),
    "tiny-f16": ("f16", 0, {}),
    "tiny-int8": ("int8", 0, {}),
    "tiny-mha-qwen2": (
        "f32",
        1,
        {"num_key_value_heads": 4, "model_type": "qwen2", "attention_bias": True},
    ),
    "tiny-3layers-gqa4-int8": ("int8", 2, {"num_hidden_layers": 3, "num_key_value_heads": 1}),
    # int4 sym: gs 16 divides every width; gs 32 leaves down_proj (K=176) channel-wise; -1 is
    # channel-wise everywhere; gs 128 needs widths of 128+ (embeddings/lm_head stay int8)
    "tiny-int4-gs16": ("int4:16", 0, {}),
    "tiny-int4-gs32": ("int4:32", 1, {}),
    "tiny-int4-cw-untied": ("int4:-1", 0, {"tie_word_embeddings": False}),
    "tiny-int4-gs128": (
        "int4:128",
        0,
        {"hidden_size": 128, "intermediate_size": 256, "head_dim": 32},
    ),
}


@pytest.fixture(scope="module")
def ov_core() -> ov.Core:
    return ov.Core()


@pytest.mark.parametrize("variant", list(VARIANTS), ids=list(VARIANTS))
def test_reference_matches_cpu_token_by_token(variant, ov_core):
    dtype, seed, overrides = VARIANTS[variant]
    dtype, _, gs = dtype.partition(":")
    weights = init_weights(get_preset("tiny", **overrides), seed, dtype, int(gs or 128))
    compiled = ov_core.compile_model(build_model(weights), "CPU", CPU_EXACT_CONFIG)
    tokens, cpu_logits = run_stateful_greedy(compiled, PROMPT, STEPS)

    ref = LlamaReference(weights)
    expected = ref.greedy_generate(PROMPT, STEPS)
    assert tokens == expected
    # Random weights must not collapse to a constant token (the init scales are for that).
    assert len(set(expected)) >= 5

    # Same calls on the reference: prefill, then one token at a time.
    logits, kv = ref.forward(np.array([PROMPT]))
    np.testing.assert_allclose(cpu_logits[0], logits, atol=ATOL, rtol=0)
    length = len(PROMPT)
    for step, token in enumerate(tokens):
        logits, kv = ref.forward(
            np.array([[token]]), np.array([[length]]), np.ones((1, length + 1), np.int64), kv
        )
        np.testing.assert_allclose(
            cpu_logits[step + 1], logits, atol=ATOL, rtol=0, err_msg=f"step {step}"
        )
        length += 1


@pytest.fixture(scope="module")
def tiny(ov_core):
    weights = init_weights(get_preset("tiny"), 3, "f32")
    return LlamaReference(weights), ov_core.compile_model(
        build_model(weights), "CPU", CPU_EXACT_CONFIG
    )


def _infer(req, ids, mask, pos, beam=None):
    ids = np.asarray(ids, np.int64)
    beam = np.arange(ids.shape[0], dtype=np.int32) if beam is None else np.asarray(beam, np.int32)
    return np.array(
        req.infer(
            {
                "input_ids": ids,
                "attention_mask": np.asarray(mask, np.int64),
                "position_ids": np.asarray(pos, np.int64),
                "beam_idx": beam,
            }
        )["logits"]
    )


def test_left_padded_prefill_equals_unpadded(tiny):
    """NPUW's static prefill right-aligns the prompt: zeros on the left in ids, mask, positions."""
    ref, compiled = tiny
    prompt = PROMPT[:5]
    pad = 11
    ids = [[0] * pad + prompt]
    mask = [[0] * pad + [1] * len(prompt)]
    pos = [[0] * pad + list(range(len(prompt)))]
    req = compiled.create_infer_request()
    padded = _infer(req, ids, mask, pos)
    compact, _ = ref.forward(np.array([prompt]))
    np.testing.assert_allclose(padded[:, pad:], compact, atol=ATOL, rtol=0)
    ref_padded, _ = ref.forward(np.array(ids), np.array(pos), np.array(mask))
    np.testing.assert_allclose(ref_padded[:, pad:], compact, atol=1e-9, rtol=0)
    assert np.all(np.isfinite(padded)), "fully masked padding rows must not produce NaN"

    # Next token after the padded prefill: the 11 padded KV slots stay masked.
    nxt = int(np.argmax(compact[0, -1]))
    step = _infer(req, [[nxt]], [mask[0] + [1]], [[len(prompt)]])
    expected, _ = ref.forward(np.array([prompt + [nxt]]))
    np.testing.assert_allclose(step[0, -1], expected[0, -1], atol=ATOL, rtol=0)


def test_generate_layout_with_empty_past_slots(tiny):
    """NPUW generate: past [K-1] slots left-aligned, unused tail masked, new token last."""
    ref, compiled = tiny
    history = PROMPT[:6]
    _, kv = ref.forward(np.array([history]))
    slots = 15  # K - 1
    rng = np.random.default_rng(0)
    req = compiled.create_infer_request()
    for state in req.query_state():
        layer, kind = int(state.name.split(".")[1]), 0 if state.name.endswith("key") else 1
        buf = rng.standard_normal(
            (1,) + kv[layer][kind].shape[1:2] + (slots,) + kv[layer][kind].shape[3:]
        )
        buf[:, :, : len(history)] = kv[layer][kind]  # unused tail holds garbage, as after a switch
        state.state = ov.Tensor(buf.astype(np.float32))
    token = 77
    mask = [[1] * len(history) + [0] * (slots - len(history)) + [1]]
    got = _infer(req, [[token]], mask, [[len(history)]])
    expected, _ = ref.forward(np.array([history + [token]]))
    np.testing.assert_allclose(got[0, -1], expected[0, -1], atol=ATOL, rtol=0)


def test_beam_idx_reorders_the_cache(tiny):
    """Gather(beam_idx) on the past: batch rows swap their histories."""
    ref, compiled = tiny
    a, b = PROMPT[:4], PROMPT[4:8]
    req = compiled.create_infer_request()
    _infer(req, [a, b], np.ones((2, 4)), [list(range(4))] * 2)
    got = _infer(req, [[9], [9]], np.ones((2, 5)), [[4], [4]], beam=[1, 0])
    exp_b, _ = ref.forward(np.array([b + [9]]))
    exp_a, _ = ref.forward(np.array([a + [9]]))
    np.testing.assert_allclose(got[0, -1], exp_b[0, -1], atol=ATOL, rtol=0)
    np.testing.assert_allclose(got[1, -1], exp_a[0, -1], atol=ATOL, rtol=0)
