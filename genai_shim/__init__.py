"""genai_shim: a drop-in for openvino_genai's LLM, VLM and Whisper APIs (``import genai_shim as
openvino_genai``)."""

from __future__ import annotations

from genai_shim.asr import (
    ASRDecodedResultChunk,
    ASRDecodedResults,
    ASRGenerationConfig,
    ASRPerfMetrics,
    ASRPipeline,
    ASRRawPerfMetrics,
)
from genai_shim.chat import ChatHistory
from genai_shim.continuous_batching import (
    ContinuousBatchingPipeline,
    EncodedGenerationResult,
    GenerationHandle,
    GenerationOutput,
    GenerationResult,
    GenerationStatus,
    PipelineMetrics,
)
from genai_shim.generation_config import GenerationConfig, StopCriteria, WhisperGenerationConfig
from genai_shim.lora import Adapter, AdapterConfig
from genai_shim.paged.cache_eviction import AggregationMode, CacheEvictionConfig
from genai_shim.parser_streamer import TextParserStreamer
from genai_shim.parsers import (
    DeepSeekR1ReasoningIncrementalParser,
    DeepSeekR1ReasoningParser,
    IncrementalParser,
    Llama3JsonToolParser,
    Llama3PythonicToolParser,
    Parser,
    Phi4ReasoningIncrementalParser,
    Phi4ReasoningParser,
    ReasoningIncrementalParser,
    ReasoningParser,
    VLLMParserWrapper,
)
from genai_shim.perf_metrics import MeanStdPair, PerfMetrics, RawPerfMetrics, SummaryStats
from genai_shim.pipeline import LLMPipeline, SchedulerConfig
from genai_shim.rag import EmbeddingPipeline, EmbedResult, TextEmbeddingPipeline, TextRerankPipeline, VideoMetadata
from genai_shim.results import DecodedResults, EncodedResults, GenerationFinishReason
from genai_shim.speculative.draft import draft_model
from genai_shim.streamers import StreamerBase, StreamingStatus, TextStreamer
from genai_shim.structured_output import (
    StructuralTagItem,
    StructuralTagsConfig,
    StructuredOutputConfig,
)
from genai_shim.tokenizer import TokenizedInputs, Tokenizer
from genai_shim.vlm.pipeline import VLMDecodedResults, VLMPipeline, VLMPipelineBase
from genai_shim.whisper.pipeline import WhisperPipeline
from genai_shim.whisper.results import (
    WhisperDecodedResultChunk,
    WhisperDecodedResults,
    WhisperPerfMetrics,
    WhisperRawPerfMetrics,
    WhisperWordTiming,
)

__version__ = "2026.4.1.0-ov_npu_emu"

__all__ = [
    # pipeline
    "LLMPipeline",
    "ContinuousBatchingPipeline",
    "SchedulerConfig",
    "CacheEvictionConfig",
    "AggregationMode",
    "GenerationHandle",
    "GenerationOutput",
    "GenerationResult",
    "EncodedGenerationResult",
    "GenerationStatus",
    "PipelineMetrics",
    "draft_model",
    "VLMPipeline",
    "VLMPipelineBase",
    "WhisperPipeline",
    "ASRPipeline",
    "TextEmbeddingPipeline",
    "TextRerankPipeline",
    "EmbeddingPipeline",
    "EmbedResult",
    "VideoMetadata",
    # configuration
    "GenerationConfig",
    "WhisperGenerationConfig",
    "ASRGenerationConfig",
    "StopCriteria",
    "StructuredOutputConfig",
    "StructuralTagsConfig",
    "StructuralTagItem",
    "Adapter",
    "AdapterConfig",
    # tokenization and chat
    "ChatHistory",
    "TokenizedInputs",
    "Tokenizer",
    # results and metrics
    "DecodedResults",
    "VLMDecodedResults",
    "WhisperDecodedResults",
    "WhisperDecodedResultChunk",
    "WhisperWordTiming",
    "WhisperPerfMetrics",
    "WhisperRawPerfMetrics",
    "ASRDecodedResults",
    "ASRDecodedResultChunk",
    "ASRPerfMetrics",
    "ASRRawPerfMetrics",
    "EncodedResults",
    "GenerationFinishReason",
    "MeanStdPair",
    "PerfMetrics",
    "RawPerfMetrics",
    "SummaryStats",
    # streaming
    "StreamerBase",
    "StreamingStatus",
    "TextStreamer",
    "TextParserStreamer",
    # output parsers
    "Parser",
    "IncrementalParser",
    "ReasoningParser",
    "ReasoningIncrementalParser",
    "DeepSeekR1ReasoningParser",
    "DeepSeekR1ReasoningIncrementalParser",
    "Phi4ReasoningParser",
    "Phi4ReasoningIncrementalParser",
    "Llama3JsonToolParser",
    "Llama3PythonicToolParser",
    "VLLMParserWrapper",
    "get_version",
]


def __getattr__(name: str) -> object:
    """Names of the real openvino_genai that genai_shim lacks raise UnsupportedFeatureError
    (a ConfigError and an AttributeError) naming the feature."""
    from genai_shim.api_coverage import missing

    raise missing(name)


def get_version() -> str:
    """Version string, like ``openvino_genai.get_version()``."""
    return __version__
