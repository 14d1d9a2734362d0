"""EmbeddingPipeline, EmbedResult and VideoMetadata: openvino.genai's one-call embedding API
(src/cpp/src/rag/embedding_pipeline.cpp, src/python/py_rag.cpp) for text models.

A folder with ``openvino_language_model.xml`` is a multimodal embedding model (Qwen3-VL-Embedding
style) in the real; genai_shim has no such pipeline yet and says so.  Any other folder is a text
model: a :class:`~genai_shim.rag.text_embedding.TextEmbeddingPipeline` underneath, configured from
the individual config keys (``pooling_type=...``, ``normalize=...``) or from one
``text_embedding_config=TextEmbeddingPipeline.Config(...)`` (mixing both is the real's error).
``embed(text, images=[], videos=[], videos_metadata=[], **kwargs)`` gives an :class:`EmbedResult`
whose ``embeddings`` is an f32 ``openvino.Tensor`` [texts, hidden]; ``embedding_prompt=`` prefixes
every text (the real's ``TextEmbeddingPipeline.embed(texts, prompt)``), other keyword arguments are
ignored as the real ignores them; images or videos on a text model are the real's refusal.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from genai_shim.rag.config import CONFIG_KEYS, TextEmbeddingConfig
from genai_shim.rag.text_embedding import TextEmbeddingPipeline
from ov_npu_emu.errors import ConfigError, UnsupportedFeatureError, UserInputError, UserTypeError

__all__ = ["EmbedResult", "EmbeddingPipeline", "VideoMetadata"]

MULTIMODAL_XML = "openvino_language_model.xml"


class VideoMetadata:
    """A video's ``fps`` (0.0) and the ``frames_indices`` it was sampled at ([]), as the real's."""

    def __init__(self) -> None:
        self.fps: float = 0.0
        self.frames_indices: list[int] = []


class EmbedResult:
    """``EmbedResult(embeddings)``: ``embeddings``, an ``openvino.Tensor`` [batch, hidden]."""

    def __init__(self, embeddings: ov.Tensor) -> None:
        self.embeddings = embeddings

    @property
    def embeddings(self) -> ov.Tensor:
        """The embedding vectors, an f32 ``openvino.Tensor`` [batch, hidden] (read-write)."""
        return self._embeddings

    @embeddings.setter
    def embeddings(self, value: ov.Tensor) -> None:
        if not isinstance(value, ov.Tensor):
            raise UserTypeError(f"embeddings must be an openvino.Tensor, got {type(value).__name__}")
        self._embeddings = value


def _texts(text: Any) -> list[str]:
    if isinstance(text, str):
        return [text]
    if isinstance(text, (list, tuple)) and all(isinstance(t, str) for t in text):
        return list(text)
    raise UserTypeError(f"text must be a str or a list of str, got {type(text).__name__}")


class EmbeddingPipeline:
    """Embedding pipeline.

    Computes embedding vectors for text (genai_shim: text models only; the real also takes
    text + images + videos on a multimodal embedding model).

    ``EmbeddingPipeline(models_path, device, **kwargs)``: plugin and/or config properties, e.g.
    ``CACHE_DIR=...``, ``pooling_type=PoolingType.MEAN``, or
    ``text_embedding_config=TextEmbeddingPipeline.Config()``.
    """

    def __init__(self, models_path: str | os.PathLike[str], device: str, **kwargs: Any) -> None:
        if not isinstance(models_path, (str, os.PathLike)):
            raise UserTypeError(f"models_path must be a folder path, got {type(models_path).__name__}")
        folder = Path(models_path)
        if (folder / MULTIMODAL_XML).is_file():
            raise UnsupportedFeatureError(
                f"{folder} holds {MULTIMODAL_XML}: a multimodal embedding model (text + images + videos), which "
                "genai_shim's EmbeddingPipeline does not run yet; it runs text embedding models "
                "(optimum-cli export openvino --task feature-extraction)", key="models_path")
        config = kwargs.pop("text_embedding_config", None)
        if config is not None:
            if not isinstance(config, TextEmbeddingConfig):
                raise UserTypeError("text_embedding_config must be a TextEmbeddingPipeline.Config, got "
                                    f"{type(config).__name__}")
            mixed = [k for k in CONFIG_KEYS if k in kwargs]
            if mixed:
                raise ConfigError("Mixing individual config properties with text_embedding_config is not allowed. "
                                  f"Conflicting property: {mixed[0]}", key=mixed[0])
        self._pipe = TextEmbeddingPipeline(folder, device, config, **kwargs)

    def embed(self, text: Any = None, images: Any = (), videos: Any = (), videos_metadata: Any = (),
              **kwargs: Any) -> EmbedResult:
        """Computes embedding vectors for text or a batch of texts (with images and videos on a
        multimodal model).  Generation arguments (e.g. ``embedding_prompt=...``, which prefixes
        every text) can be passed as keyword arguments; ``text=`` may be one too."""
        if text is None:
            text = kwargs.pop("text", "")
        if len(images) or len(videos) or len(videos_metadata):
            raise UserInputError("This model does not support image/video input (a text embedding model: pass "
                                 "text only)")
        texts = _texts(text)
        if not texts:
            return EmbedResult(ov.Tensor(np.zeros((0, 0), dtype=np.float32)))
        prompt = kwargs.get("embedding_prompt")
        vectors = self._pipe.embed(texts, prompt) if prompt is not None else self._pipe.embed_documents(texts)
        return EmbedResult(ov.Tensor(np.ascontiguousarray(np.asarray(vectors, dtype=np.float32))))
