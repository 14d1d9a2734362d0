"""NPUW's Whisper-decoder mode (NPUW_WHISPER=YES) side by side with the real NPUW on CPU, on the
tiny random Whisper's stateful decoder (tests/fixtures/whisper/whisper-tiny-random-fp32) compiled
as openvino.genai's default NPU path compiles it: the logits of a call sequence (prefill, generate
steps, a one-token call after reset_state, a one-token first call), the forced EOS when the KV cache
fills, and our typed errors where the real corrupts memory or has nothing to say."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import pytest

from ov_npu_emu import Core
from ov_npu_emu.errors import KVCacheFullError, PromptTooLongError, UserInputError

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "tests" / "fixtures" / "whisper" / "whisper-tiny-random-fp32"
EOS = 400
#: what openvino.genai's update_npu_config_whisper sets (f32 hints for exact numerics)
WHISPER = {"NPU_USE_NPUW": "YES", "NPUW_LLM": "YES", "NPUW_WHISPER": "YES", "NPUW_WHISPER_EOS_TOKEN": EOS,
           "NPUW_ONLINE_PIPELINE": "NONE", "NPUW_FUNCALL_FOR_ALL": "NO", "NPUW_FOLD": "NO",
           "NPUW_LLM_BATCH_DIM": 0, "NPUW_LLM_SEQ_LEN_DIM": 2, "NPUW_LLM_MAX_PROMPT_LEN": 4,
           "NPUW_LLM_MIN_RESPONSE_LEN": 444, "NPUW_LLM_PREFILL_HINT": "STATIC", "INFERENCE_PRECISION_HINT": "f32"}
_RNG = np.random.default_rng(0)
ENC_A = _RNG.standard_normal((1, 1500, 32)).astype(np.float32)
ENC_B = _RNG.standard_normal((1, 1500, 32)).astype(np.float32)
#: ("infer", ids, hidden states) or ("reset",): a one-token first call (a prefill), a prompt and
#: steps, then a one-token call after reset_state on other audio (the real continues the previous
#: sequence: openvino.genai's language detection on a pipeline's second call), prompts of 3 and 2
SEQUENCE: list[tuple[Any, ...]] = [
    ("infer", [401], ENC_A), ("infer", [401, 402, 502, 506], ENC_A),
    *[("infer", [t], ENC_A) for t in (10, 20, 30)],
    ("reset",), ("infer", [401], ENC_B), ("infer", [401, 403, 502], ENC_B), ("infer", [7], ENC_B),
    ("reset",), ("infer", [401, 404], ENC_A), ("infer", [9], ENC_A),
]


def _decoder(core: Any) -> Any:
    model = core.read_model(FOLDER / "openvino_decoder_model.xml")
    shape = model.input("encoder_hidden_states").get_partial_shape()
    shape[1] = 1500  # openvino.genai makes it static at the encoder's frames
    model.reshape({"encoder_hidden_states": shape})
    return model


def _feed(ids: list[int], hidden: np.ndarray) -> dict[str, Any]:
    return {"input_ids": np.array([ids], np.int64), "encoder_hidden_states": hidden,
            "beam_idx": np.zeros(1, np.int32)}


def _run(compiled: Any, sequence: list[tuple[Any, ...]]) -> list[np.ndarray]:
    request = compiled.create_infer_request()
    out = []
    for step in sequence:
        if step[0] == "reset":
            request.reset_state()
            continue
        request.infer(_feed(step[1], step[2]))
        out.append(np.array(request.get_tensor("logits").data))
    return out


@pytest.fixture(scope="module")
def real() -> list[np.ndarray]:
    core = ov.Core()
    return _run(core.compile_model(_decoder(core), "NPU", {**WHISPER, "NPUW_DEVICES": "CPU"}), SEQUENCE)


@pytest.fixture(scope="module")
def ours_cpu() -> Any:
    core = Core()
    return core.compile_model(_decoder(core), "NPU", {**WHISPER, "NPUW_DEVICES": "CPU"})


def test_call_sequence_equals_real_npuw_on_cpu(real: list[np.ndarray], ours_cpu: Any) -> None:
    ours = _run(ours_cpu, SEQUENCE)
    for i, (want, got) in enumerate(zip(real, ours, strict=True)):
        # prefill logits of the prompt's rows, [1, 1, V] for a step: shapes and values bit-exact
        assert got.shape == want.shape, i
        np.testing.assert_array_equal(got, want, err_msg=f"call {i}")


def test_one_token_after_reset_continues_the_previous_sequence(ours_cpu: Any) -> None:
    """What makes the real's language detection read the previous call: the 7th call (ENC_B)
    equals a plain continuation of the 5th on ENC_A, and nothing that ENC_B gives."""
    assert SEQUENCE[5] == ("reset",)
    after_reset = _run(ours_cpu, [*SEQUENCE[:6], ("infer", [401], ENC_B)])
    continued = _run(ours_cpu, [*SEQUENCE[:5], ("infer", [401], np.zeros_like(ENC_B))])
    np.testing.assert_array_equal(after_reset[-1], continued[-1])
    fresh = _run(ours_cpu, [("infer", [401], ENC_B)])  # a request's first call: a prefill on ENC_B
    assert np.abs(fresh[-1] - after_reset[-1]).max() > 1.0


def test_call_sequence_on_the_emulated_npu(real: list[np.ndarray]) -> None:
    core = Core()
    ours = _run(core.compile_model(_decoder(core), "NPU", WHISPER), SEQUENCE)
    for want, got in zip(real, ours, strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=0.05)  # logits std ~14
        assert (got.argmax(-1) == want.argmax(-1)).all()


def test_full_kv_forces_eos_then_refuses(ours_cpu: Any) -> None:
    """The step that fills the 448-token KV sets the EOS logit to +inf (the real's workaround, read
    side by side with the real); the next step is the real's "KV-Cache is full."."""
    core = ov.Core()
    steps = [("infer", [401, 402, 502, 506], ENC_A)] + [("infer", [11 + i % 50], ENC_A) for i in range(444)]
    want = _run(core.compile_model(_decoder(core), "NPU", {**WHISPER, "NPUW_DEVICES": "CPU"}), steps)[-2:]
    request = ours_cpu.create_infer_request()
    got = []
    for _, ids, hidden in steps:
        request.infer(_feed(ids, hidden))
        got.append(np.array(request.get_tensor("logits").data))
    for w, g in zip(want, got[-2:], strict=True):
        np.testing.assert_array_equal(g, w)
    assert np.isposinf(got[-1][0, 0, EOS]) and np.isfinite(got[-2][0, 0, EOS])
    with pytest.raises(KVCacheFullError, match="KV-Cache is full"):
        request.infer(_feed([5], ENC_A))
    # a new prompt starts over
    request.infer(_feed([401, 402], ENC_A))
    assert np.asarray(request.get_tensor("logits").data).shape == (1, 2, 2008)


def test_prompt_longer_than_the_prefill_is_refused(ours_cpu: Any) -> None:
    request = ours_cpu.create_infer_request()
    # the real copies all 5 ids into its 4-slot buffer (heap corruption); ours says what to do
    with pytest.raises(PromptTooLongError, match="initial_prompt / hotwords"):
        request.infer(_feed([504, 11, 12, 401, 402], ENC_A))
    with pytest.raises(UserInputError, match="batch 1"):
        request.infer({**_feed([401], ENC_A), "input_ids": np.array([[401], [401]], np.int64),
                       "beam_idx": np.zeros(2, np.int32)})


def test_properties_and_unbuilt_keys(ours_cpu: Any) -> None:
    assert ours_cpu.get_property("NPUW_WHISPER") is True
    assert ours_cpu.get_property("NPUW_WHISPER_EOS_TOKEN") == EOS
    # taken as given (the real's Whisper mode: KV 448), not aligned to 64 as for an LLM
    assert ours_cpu.get_property("NPUW_LLM_MAX_PROMPT_LEN") == 4
    assert ours_cpu.get_property("NPUW_LLM_MIN_RESPONSE_LEN") == 444
    assert ours_cpu.get_property("NPUW_WHISPER_DECOMPOSE_SDPA") is False
    assert [o.get_any_name() for o in ours_cpu.outputs] == ["logits"]


# -- NPUW_WHISPER_DECOMPOSE_SDPA (openvino.genai's word timestamps) ---------------------------------

DECOMPOSE = {**WHISPER, "NPUW_WHISPER_DECOMPOSE_SDPA": "YES"}
#: sot, language, task, notimestamps, 20 text tokens, eot: what the word-timestamp run feeds
ALIGN_IDS = [401, 408, 502, 506, *range(30, 50), EOS]
SCORES = [f"cross_attention_qk_scaled_scores_{i}" for i in range(2)]


def _decomposed_run(compiled: Any) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(logits of the prefill and two steps, both layers' scores after the prefill and after the
    steps)."""
    request = compiled.create_infer_request()
    logits, scores = [], []
    for ids in (ALIGN_IDS, [7], [8]):
        request.infer(_feed(ids, ENC_A))
        logits.append(np.array(request.get_tensor("logits").data))
        if ids is ALIGN_IDS or ids == [8]:
            scores += [np.array(request.get_tensor(name).data) for name in SCORES]
    return logits, scores


def test_decompose_sdpa_equals_real_npuw_on_cpu() -> None:
    """The real NPUW (2026.4.1) on CPU: a prefill of total - 1 = 447 tokens; two outputs
    cross_attention_qk_scaled_scores_<layer> (f32, rank 0 in the port) holding the last prefill's
    [1, heads, 447, frames] scores, padding rows at the f32 minimum; a generate step leaves them."""
    core = ov.Core()
    real_cm = core.compile_model(_decoder(core), "NPU", {**DECOMPOSE, "NPUW_DEVICES": "CPU"})
    want_logits, want_scores = _decomposed_run(real_cm)
    ours = Core()
    cm = ours.compile_model(_decoder(ours), "NPU", {**DECOMPOSE, "NPUW_DEVICES": "CPU"})
    assert [sorted(o.get_names()) for o in cm.outputs] == [sorted(o.get_names()) for o in real_cm.outputs]
    assert [o.get_partial_shape() for o in cm.outputs] == [o.get_partial_shape() for o in real_cm.outputs]
    assert cm.get_property("NPUW_WHISPER_DECOMPOSE_SDPA") is True
    assert cm.get_property("NPUW_LLM_MAX_PROMPT_LEN") == 447
    with pytest.raises(UserInputError, match="run inference first"):
        cm.create_infer_request().get_tensor(SCORES[0])
    got_logits, got_scores = _decomposed_run(cm)
    for want, got in zip(want_logits + want_scores, got_logits + got_scores, strict=True):
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    assert got_scores[0].shape == (1, 4, 447, 1500)
    assert (got_scores[1][:, :, len(ALIGN_IDS):] == np.finfo(np.float32).min).all()
    np.testing.assert_array_equal(got_scores[2], got_scores[0])  # the steps leave the prefill's
    # the real: "Check '*roi_end <= *max_dim'", then heap corruption
    with pytest.raises(PromptTooLongError):
        cm.create_infer_request().infer(_feed([401] * 448, ENC_A))


def test_decompose_sdpa_in_f16_keeps_the_prompt_rows_finite() -> None:
    """On the emulated NPU at its default f16 the padding rows' mask is -32768, not the f32 minimum
    (which overflows to -inf: a row of -inf softmaxes to NaN, and the self-attention's 0 x NaN
    would carry it into the prompt's rows; the upstream STATIC_PIPELINE word-timestamp test met
    it as NaN logits)."""
    core = Core()
    f16 = {k: v for k, v in DECOMPOSE.items() if k != "INFERENCE_PRECISION_HINT"}
    request = core.compile_model(_decoder(core), "NPU", f16).create_infer_request()
    request.infer(_feed(ALIGN_IDS, ENC_A))
    assert np.isfinite(np.asarray(request.get_tensor("logits").data)).all()
    scores = np.asarray(request.get_tensor(SCORES[0]).data)
    assert np.isfinite(scores).all() and (scores[:, :, len(ALIGN_IDS):] < -3e4).all()
