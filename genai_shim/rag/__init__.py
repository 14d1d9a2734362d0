"""Retrieval pipelines (openvino.genai's rag/): TextEmbeddingPipeline, TextRerankPipeline, EmbeddingPipeline."""

from genai_shim.rag.config import PoolingType, TextEmbeddingConfig
from genai_shim.rag.embedding import EmbeddingPipeline, EmbedResult, VideoMetadata
from genai_shim.rag.text_embedding import TextEmbeddingPipeline
from genai_shim.rag.text_rerank import TextRerankConfig, TextRerankPipeline

__all__ = [
    "EmbedResult", "EmbeddingPipeline", "PoolingType", "TextEmbeddingConfig", "TextEmbeddingPipeline",
    "TextRerankConfig", "TextRerankPipeline", "VideoMetadata",
]
