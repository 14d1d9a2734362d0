"""Classification of attention masks evaluated on a contiguous prompt (position_masks.classify_mask)."""

from __future__ import annotations

import numpy as np
import pytest

from ov_npu_emu_npuw.position_masks import PositionMask, classify_mask

N = 12
FILL = np.float32(np.finfo(np.float16).min)
DIST = np.arange(N)[:, None] - np.arange(N)[None, :]  # pos(q) - pos(k)


def _additive(allowed, bias=0.0):
    return np.where(allowed, bias, FILL).astype(np.float32)[None, None]


def test_causal_is_left_as_it_is():
    assert classify_mask(_additive(DIST >= 0), N) is None
    assert classify_mask((DIST >= 0)[None, None], N) is None  # boolean form


def test_window_narrower_than_the_prompt_is_found():
    assert classify_mask(_additive((DIST >= 0) & (DIST < 5)), N) == PositionMask(window=5)
    assert classify_mask(((DIST >= 0) & (DIST < 3))[None, None], N) == PositionMask(window=3)


def test_window_as_wide_as_the_prompt_is_causal():
    assert classify_mask(_additive((DIST >= 0) & (DIST < N)), N) is None


def test_alibi_slopes_per_head_with_any_row_offset():
    slopes = np.array([0.5, 0.25, 0.125])
    # MPT's form: slope * (k - (N-1)) — a per-row constant away from slope * (k - q)
    bias = -slopes[:, None, None] * (N - 1 - np.arange(N))[None, None, :]
    mask = np.where(DIST >= 0, bias, FILL).astype(np.float32)[None]
    spec = classify_mask(mask, N)
    assert spec is not None and spec.window == 0
    assert np.allclose(spec.slopes, slopes)


@pytest.mark.parametrize(
    "mask",
    [
        _additive(DIST <= 0),  # anti-causal
        _additive(np.ones((N, N), bool) & (np.abs(DIST) < 3)),  # bidirectional band
        _additive(DIST >= 0, bias=np.sin(DIST)),  # a bias that is not linear in the distance
    ],
    ids=["anti_causal", "bidirectional", "nonlinear_bias"],
)
def test_other_masks_are_rejected(mask):
    with pytest.raises(ValueError):
        classify_mask(mask, N)


def test_unknown_reader_of_the_past_is_a_compile_error_naming_it():
    """A past KV input read by something NPUW cannot resolve in the no-past prefill: typed error."""
    import openvino as ov
    from openvino import opset13 as ops

    from ov_npu_emu.errors import CompileError
    from ov_npu_emu_npuw.model_io import find_param
    from ov_npu_emu_npuw.transform import make_prefill_model, to_stateless
    from tools.conformance import FIXTURES

    model = ov.Core().read_model(FIXTURES / "llama-fp32" / "openvino_model.xml")
    stateless, kv = to_stateless(model)
    past = find_param(stateless, kv.past_names[0])
    odd = ops.reduce_sum(past, np.array([2]), True)
    odd.set_friendly_name("odd_reader")
    stateless.add_results([ops.result(odd)])
    with pytest.raises(CompileError, match="ReduceSum 'odd_reader' reads it"):
        make_prefill_model(stateless, kv, 32, 0, ov.Type.f32)



@pytest.mark.parametrize("base", [1, 0], ids=["1-based", "0-based"])
def test_gemma3_vlm_window_in_generate_steps(emu_core, base):
    """Gemma 3's VLM language model (``inputs_embeds``, ``token_type_ids``, 1-based positions) in
    NPUW: its sliding window is found (the probe synthesises the embeddings and token types; its
    mask blocks with -inf *and* float's lowest) and rewritten on positions in the generate
    variants, counting a history slot's position from the call's own positions, so a generate
    step keeps exactly the W last tokens as the CPU model's window does. Before: the window stayed
    on KV slots (a 640-slot variant hid the first 128 history tokens whatever their distance), and
    the rewrite took slot j for position j (one token early with 1-based positions). Its
    512-token window, a 520-token prompt."""
    from pathlib import Path

    import openvino as ov

    from ov_npu_emu.testing import CPU_EXACT_CONFIG
    from tests.npuw._oracle import real_npuw_config

    lm = Path(__file__).resolve().parents[1] / "fixtures" / "vlm" / "gemma3-fp32" / "openvino_language_model.xml"
    model = ov.Core().read_model(lm)
    cpu = ov.Core().compile_model(model, "CPU", CPU_EXACT_CONFIG).create_infer_request()
    cfg = {**real_npuw_config(576, 64, NPUW_LLM_PREFILL_HINT="STATIC"), "KV_CACHE_PRECISION": "f32",
           "NPUW_LLM_GENERATE_LADDER": "NO"}
    ours = emu_core.compile_model(model, "NPU", cfg).create_infer_request()
    n, hidden = 520, model.input("inputs_embeds").get_partial_shape()[2].get_length()
    rng = np.random.default_rng(3)

    def run(req):
        req.reset_state()
        feed = {"inputs_embeds": (rng.standard_normal((1, n, hidden)) * 0.5).astype(np.float32),
                "attention_mask": np.ones((1, n), np.int64), "position_ids": np.arange(base, n + base)[None],
                "token_type_ids": np.zeros((1, n), np.int64), "beam_idx": np.zeros(1, np.int32)}
        out = [np.array(req.infer(feed)["logits"])[0, -1]]
        for i in range(4):
            length = n + i + 1
            feed = {"inputs_embeds": (rng.standard_normal((1, 1, hidden)) * 0.5).astype(np.float32),
                    "attention_mask": np.ones((1, length), np.int64), "position_ids": np.array([[length - 1 + base]]),
                    "token_type_ids": np.zeros((1, 1), np.int64), "beam_idx": np.zeros(1, np.int32)}
            out.append(np.array(req.infer(feed)["logits"])[0, -1])
        return out

    rng = np.random.default_rng(3)
    want = run(cpu)
    rng = np.random.default_rng(3)
    got = run(ours)
    for step, (o, c) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(o, c, rtol=1e-4, atol=1e-4, err_msg=f"step {step}")
