"""genai_shim.EmbeddingPipeline / EmbedResult / VideoMetadata on a text model (the tiny BERT,
tests/fixtures/rag/bert-embed-fp32) side by side with the real openvino_genai 2026.4.1 on CPU
under f32 hints: one text, a batch with ``embedding_prompt``, ``text_embedding_config``, and the
real's refusals (images on a text model, mixing config keys with text_embedding_config)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import pytest

import genai_shim
from ov_npu_emu.errors import ConfigError, UnsupportedFeatureError, UserInputError

og = pytest.importorskip("openvino_genai")

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "tests" / "fixtures" / "rag" / "bert-embed-fp32"
F32 = {"INFERENCE_PRECISION_HINT": "f32"}
TEXTS = ["Who rowed out to the ship?", "Bread."]


def calls(lib: Any) -> list[Any]:
    cfg = lib.TextEmbeddingPipeline.Config(normalize=False, pooling_type=lib.TextEmbeddingPipeline.PoolingType.MEAN)
    pipe = lib.EmbeddingPipeline(str(FOLDER), "CPU", **F32)
    other = lib.EmbeddingPipeline(str(FOLDER), "CPU", text_embedding_config=cfg, **F32)
    return [pipe.embed(TEXTS[0]), pipe.embed(TEXTS, embedding_prompt="passage: "), other.embed(text=TEXTS)]


def test_matches_real() -> None:
    ours_all = calls(genai_shim)
    for ours, real in zip(ours_all, calls(og), strict=True):
        assert isinstance(ours, genai_shim.EmbedResult) and isinstance(ours.embeddings, ov.Tensor)
        assert list(ours.embeddings.shape) == list(real.embeddings.shape)
        np.testing.assert_allclose(ours.embeddings.data, real.embeddings.data, rtol=0, atol=1e-6)
    # the knobs act: the prompt and the config change the vectors
    ours = ours_all
    assert np.abs(ours[1].embeddings.data[0] - ours[0].embeddings.data[0]).max() > 1e-3
    assert np.abs(ours[2].embeddings.data[0] - ours[0].embeddings.data[0]).max() > 1e-3


def test_refusals_and_types(tmp_path: Path) -> None:
    pipe = genai_shim.EmbeddingPipeline(FOLDER, "CPU", **F32)
    image = ov.Tensor(np.zeros((1, 1, 1, 1), dtype=np.float32))
    with pytest.raises(UserInputError, match="This model does not support image/video input"):
        pipe.embed(TEXTS[0], images=[image])
    cfg = genai_shim.TextEmbeddingPipeline.Config()
    with pytest.raises(ConfigError, match="Conflicting property: normalize"):
        genai_shim.EmbeddingPipeline(FOLDER, "CPU", text_embedding_config=cfg, normalize=False)
    (tmp_path / "openvino_language_model.xml").write_text("<net/>")
    with pytest.raises(UnsupportedFeatureError, match="multimodal embedding model"):
        genai_shim.EmbeddingPipeline(tmp_path, "CPU")
    assert hasattr(genai_shim.EmbedResult, "embeddings") and hasattr(og.EmbedResult, "embeddings")
    meta, real_meta = genai_shim.VideoMetadata(), og.VideoMetadata()
    assert (meta.fps, meta.frames_indices) == (real_meta.fps, list(real_meta.frames_indices))
