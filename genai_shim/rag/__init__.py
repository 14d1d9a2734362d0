"""Retrieval pipelines (openvino.genai's rag/): TextEmbeddingPipeline."""

from genai_shim.rag.config import PoolingType, TextEmbeddingConfig
from genai_shim.rag.text_embedding import TextEmbeddingPipeline

__all__ = ["PoolingType", "TextEmbeddingConfig", "TextEmbeddingPipeline"]
