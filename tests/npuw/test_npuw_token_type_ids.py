"""NPUW on Gemma 3's language model (``inputs_embeds``, 1-based ``position_ids`` and
``token_type_ids``, whose 1s make an image's tokens attend to each other both ways in the
export's mask): the token types laid out like the tokens in the padded prefill (whole or
chunked) and in generate steps, against the f32 CPU stateful model step by step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import pytest

from ov_npu_emu.errors import UserInputError
from ov_npu_emu.testing import CPU_EXACT_CONFIG
from tests.npuw._oracle import real_npuw_config

LM = Path(__file__).resolve().parents[1] / "fixtures" / "vlm" / "gemma3-fp32" / "openvino_language_model.xml"
N, STEPS = 30, 5


def _prompt(image: tuple[int, int] | None = (18, 28)) -> tuple[np.ndarray, np.ndarray]:
    """Seeded embeddings; token types 1 on an 'image' block (by default 18..27: inside the second
    16-token chunk of a chunked prefill)."""
    rng = np.random.default_rng(7)
    emb = (rng.standard_normal((1, N, 64)) * 0.5).astype(np.float32)
    types = np.zeros((1, N), np.int64)
    if image:
        types[0, image[0] : image[1]] = 1
    return emb, types


def _run(req: ov.InferRequest, image: tuple[int, int] | None = (18, 28)) -> list[np.ndarray]:
    emb, types = _prompt(image)
    rng = np.random.default_rng(8)
    req.reset_state()
    feed = {"inputs_embeds": emb, "attention_mask": np.ones((1, N), np.int64),
            "position_ids": np.arange(1, N + 1, dtype=np.int64)[None], "token_type_ids": types,
            "beam_idx": np.zeros(1, np.int32)}
    out = [np.array(req.infer(feed)["logits"])[0, -1]]
    for i in range(STEPS):
        length = N + i + 1
        feed = {"inputs_embeds": (rng.standard_normal((1, 1, 64)) * 0.5).astype(np.float32),
                "attention_mask": np.ones((1, length), np.int64),
                "position_ids": np.array([[length]], np.int64), "token_type_ids": np.zeros((1, 1), np.int64),
                "beam_idx": np.zeros(1, np.int32)}
        out.append(np.array(req.infer(feed)["logits"])[0, -1])
    return out


@pytest.fixture(scope="module")
def model() -> ov.Model:
    return ov.Core().read_model(LM)


@pytest.fixture(scope="module")
def cpu(model: ov.Model) -> Any:
    return ov.Core().compile_model(model, "CPU", CPU_EXACT_CONFIG).create_infer_request()


@pytest.mark.parametrize("image", [(18, 28), (0, 10), None], ids=["image", "image_first", "text_only"])
def test_whole_prefill_matches_cpu(model: ov.Model, cpu: Any, emu_core: Any, image: tuple[int, int] | None) -> None:
    cfg = {**real_npuw_config(64, 64, NPUW_LLM_PREFILL_HINT="STATIC"), "KV_CACHE_PRECISION": "f32"}
    ours = emu_core.compile_model(model, "NPU", cfg).create_infer_request()
    want = _run(cpu, image)
    for step, (o, c) in enumerate(zip(_run(ours, image), want, strict=True)):
        np.testing.assert_allclose(o, c, rtol=1e-4, atol=1e-4, err_msg=f"step {step}")
    if image:  # the types matter: without the image block the prefill's logits are others
        assert not np.allclose(_run(cpu, None)[0], want[0], atol=1e-2)


def test_chunked_prefill_with_image_tokens_is_not_the_cpu_model(model: ov.Model, cpu: Any, emu_core: Any) -> None:
    """Why the real pipeline prefills Gemma 3 whole (NPUW_LLM_PREFILL_HINT=STATIC): the export's
    image mask reads ``token_type_ids`` [1, L] for the keys too, which holds only when the keys
    are the queries (no past). A chunk model has past slots, so its image rows are wrong even
    when the whole prompt fits one chunk; text-only prompts (types all 0) are fine."""
    chunked = {**real_npuw_config(64, 64, NPUW_LLM_PREFILL_HINT="DYNAMIC", NPUW_LLM_PREFILL_CHUNK_SIZE=32),
               "KV_CACHE_PRECISION": "f32"}
    ours = emu_core.compile_model(model, "NPU", chunked).create_infer_request()
    np.testing.assert_allclose(_run(ours, None)[0], _run(cpu, None)[0], rtol=1e-4, atol=1e-4)
    assert not np.allclose(_run(ours)[0], _run(cpu)[0], atol=1e-2)


def test_token_types_of_the_wrong_length_are_a_user_error(model: ov.Model, emu_core: Any) -> None:
    req = emu_core.compile_model(model, "NPU", real_npuw_config(64, 64)).create_infer_request()
    emb, types = _prompt()
    with pytest.raises(UserInputError, match="token_type_ids"):
        req.infer({"inputs_embeds": emb, "attention_mask": np.ones((1, N), np.int64),
                   "position_ids": np.arange(1, N + 1, dtype=np.int64)[None], "token_type_ids": types[:, :5],
                   "beam_idx": np.zeros(1, np.int32)})
