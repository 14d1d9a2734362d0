"""Retrieval pipelines (openvino.genai's rag/): TextEmbeddingPipeline, TextRerankPipeline."""

from genai_shim.rag.config import PoolingType, TextEmbeddingConfig
from genai_shim.rag.text_embedding import TextEmbeddingPipeline
from genai_shim.rag.text_rerank import TextRerankConfig, TextRerankPipeline

__all__ = ["PoolingType", "TextEmbeddingConfig", "TextEmbeddingPipeline", "TextRerankConfig", "TextRerankPipeline"]
