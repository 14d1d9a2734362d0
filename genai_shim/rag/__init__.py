"""Retrieval pipelines (openvino.genai's rag/): TextEmbeddingPipeline."""

from genai_shim.rag.text_embedding import PoolingType, TextEmbeddingConfig, TextEmbeddingPipeline

__all__ = ["PoolingType", "TextEmbeddingConfig", "TextEmbeddingPipeline"]
