"""NPUW on a VLM's language model (Qwen2-VL: ``inputs_embeds`` [1, L, E], M-RoPE ``position_ids``
[3, 1, L] with a rope delta): our NPUW against the real NPUW on CPU and the f32 CPU stateful model,
step by step (prefill, then decode steps whose positions are not their KV slots)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import openvino as ov
import pytest

from ov_npu_emu.errors import UserInputError
from ov_npu_emu.testing import CPU_EXACT_CONFIG
from tests.npuw._oracle import real_npuw_config

LM = Path(__file__).resolve().parents[1] / "fixtures" / "vlm" / "qwen2vl-fp32" / "openvino_language_model.xml"
N, DELTA, STEPS = 21, -3, 6


def _prompt() -> tuple[np.ndarray, np.ndarray]:
    """Seeded embeddings and image-like M-RoPE positions: 5 text tokens, a 2x3 grid of vision
    tokens (height/width rows differ), text after it at positions compressed by the grid."""
    rng = np.random.default_rng(3)
    emb = (rng.standard_normal((1, N, 64)) * 0.5).astype(np.float32)
    pos = np.zeros((3, 1, N), np.int64)
    pos[:, 0, :5] = np.arange(5)
    grid = np.arange(6)
    pos[0, 0, 5:11] = 5
    pos[1, 0, 5:11] = 5 + grid // 3
    pos[2, 0, 5:11] = 5 + grid % 3
    pos[:, 0, 11:] = np.arange(8, 8 + N - 11)  # max(2, 3) = 3 positions for the grid
    assert int(pos.max()) + 1 - N == DELTA
    return emb, pos


def _run(req: ov.InferRequest, steps: int = STEPS) -> list[np.ndarray]:
    emb, pos = _prompt()
    rng = np.random.default_rng(4)
    req.reset_state()
    feed = {"inputs_embeds": emb, "attention_mask": np.ones((1, N), np.int64), "position_ids": pos,
            "beam_idx": np.zeros(1, np.int32)}
    out = [np.array(req.infer(feed)["logits"])[0, -1]]
    for i in range(steps):
        length = N + i + 1
        feed = {"inputs_embeds": (rng.standard_normal((1, 1, 64)) * 0.5).astype(np.float32),
                "attention_mask": np.ones((1, length), np.int64),
                "position_ids": np.full((3, 1, 1), length - 1 + DELTA, np.int64),
                "beam_idx": np.zeros(1, np.int32)}
        out.append(np.array(req.infer(feed)["logits"])[0, -1])
    return out


@pytest.fixture(scope="module")
def model() -> ov.Model:
    return ov.Core().read_model(LM)


def test_embeds_and_mrope_match_cpu_and_real_npuw(model: ov.Model, emu_core) -> None:
    cfg = real_npuw_config(64, 64)
    cpu = _run(ov.Core().compile_model(model, "CPU", CPU_EXACT_CONFIG).create_infer_request())
    real = _run(ov.Core().compile_model(model, "NPU", cfg).create_infer_request())
    ours = _run(emu_core.compile_model(model, "NPU", {**cfg, "KV_CACHE_PRECISION": "f32"}).create_infer_request())
    for step, (c, r, o) in enumerate(zip(cpu, real, ours, strict=True)):
        # f32 KV in ours: the CPU model's logits; the real keeps its f16 KV: its argmax
        np.testing.assert_allclose(o, c, rtol=1e-4, atol=1e-4, err_msg=f"step {step}")
        assert int(o.argmax()) == int(r.argmax()) == int(c.argmax()), step


def test_wrong_position_shape_is_a_user_error(model: ov.Model, emu_core) -> None:
    req = emu_core.compile_model(model, "NPU", real_npuw_config(64, 64)).create_infer_request()
    emb, _ = _prompt()
    with pytest.raises(UserInputError, match="position_ids"):
        req.infer({"inputs_embeds": emb, "attention_mask": np.ones((1, N), np.int64),
                   "position_ids": np.zeros((1, 1, N), np.int64), "beam_idx": np.zeros(1, np.int32)})
