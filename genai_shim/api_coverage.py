"""Which public names of the real ``openvino_genai`` genai_shim implements, and what the others
raise: ``genai_shim.<name>`` for a name genai_shim lacks raises
:class:`ov_npu_emu.errors.UnsupportedFeatureError` (a ConfigError and an AttributeError) naming
the feature, instead of a bare AttributeError.

``tools/api_coverage.py`` writes the coverage table of docs/genai_shim.md from the real package;
``tests/genai_shim/test_api_coverage.py`` checks it.
"""

from __future__ import annotations

from typing import Any

from ov_npu_emu.errors import UnsupportedFeatureError

__all__ = ["FEATURES", "INTERNAL", "feature_of", "missing"]

#: names of the real package that are its own imports, not API
INTERNAL = frozenset({"openvino", "os", "py_openvino_genai"})

#: feature → (names of openvino_genai 2026.4.1 that belong to it, what genai_shim offers)
FEATURES: dict[str, tuple[tuple[str, ...], str]] = {
    "continuous batching pipeline": (
        (
            "ContinuousBatchingPipeline", "GenerationResult", "GenerationStatus",
            "KVCrushConfig", "KVCrushAnchorPointMode",
            "SparseAttentionConfig", "SparseAttentionMode",
        ),
        "cache eviction, KVCrush and sparse attention are not implemented (CacheEvictionConfig and "
        "AggregationMode exist as configuration); SchedulerConfig.use_cache_eviction / "
        "use_sparse_attention raise ConfigError",
    ),
    "speech generation and omni models": (
        (
            "Text2SpeechPipeline", "Text2SpeechDecodedResults", "SpeechGenerationConfig",
            "SpeechGenerationPerfMetrics", "OmniPipeline", "OmniDecodedResults",
            "OmniSpeechStreamerBase", "OmniTalkerSpeechConfig", "Talker", "TalkerBase",
            "TalkerPerfMetrics", "TalkerResults",
        ),
        "not implemented",
    ),
    "image and video generation": (
        (
            "Text2ImagePipeline", "Image2ImagePipeline", "InpaintingPipeline",
            "ImageGenerationConfig", "ImageGenerationPerfMetrics", "RawImageGenerationPerfMetrics",
            "Text2VideoPipeline", "VideoGenerationConfig", "VideoGenerationPerfMetrics",
            "VideoGenerationResult", "AutoencoderKL", "AutoencoderKLLTXVideo", "CLIPTextModel",
            "CLIPTextModelWithProjection", "T5EncoderModel", "Qwen3TextEncoder",
            "Qwen2_5_VLForConditionalGeneration", "UNet2DConditionModel", "SD3Transformer2DModel",
            "FluxTransformer2DModel", "Flux2Transformer2DModel", "LTXVideoTransformer3DModel",
            "QwenImageTransformer2DModel", "ZImageTransformer2DModel", "Scheduler", "Generator",
            "CppStdGenerator", "TorchGenerator", "TaylorSeerCacheConfig",
        ),
        "not implemented",
    ),
}

_BY_NAME = {n: f for f, (names, _) in FEATURES.items() for n in names}


def feature_of(name: str) -> str | None:
    """The feature a name of the real package belongs to, if genai_shim lacks it."""
    return _BY_NAME.get(name)


def missing(name: str) -> AttributeError:
    """The error ``genai_shim.<name>`` raises for a name genai_shim does not define."""
    feature = feature_of(name)
    if feature is None or name.startswith("_"):
        return AttributeError(f"module 'genai_shim' has no attribute {name!r}")
    offer = FEATURES[feature][1]
    return UnsupportedFeatureError(
        f"openvino_genai.{name} ({feature}) is not implemented in genai_shim, which emulates the "
        f"text-generation LLMPipeline stack ({offer}); see docs/genai_shim.md, API coverage",
        key=name,
    )


def coverage_rows(real: Any, shim: Any) -> list[tuple[str, str, str]]:
    """(name, status, detail) for every public name of ``real`` (the real openvino_genai)."""
    rows = []
    for name in sorted(n for n in dir(real) if not n.startswith("_")):
        if name in INTERNAL:
            continue
        if name in vars(shim):
            rows.append((name, "implemented", ""))
            continue
        feature = feature_of(name)
        rows.append(
            (name, "typed error" if feature else "MISSING", feature or "no entry in FEATURES")
        )
    return rows


def field_rows(real_config: Any) -> list[tuple[str, str, str]]:
    """(field, status, detail) for every field of the real ``GenerationConfig()``."""
    from genai_shim.generation_config import ASSISTING_FIELDS, UNSUPPORTED_FIELDS

    rows = []
    for name in sorted(n for n in dir(real_config) if not n.startswith("_")):
        if callable(getattr(real_config, name)):
            continue
        if name == "adapters":
            note = "LoRA; in a pipeline created with the adapters property, else ConfigError unless default"
            rows.append((name, "implemented", note))
        elif name == "parsers":
            note = (
                "LLMPipeline with text inputs (DecodedResults.parsed); ContinuousBatchingPipeline: "
                "ConfigError unless default"
            )
            rows.append((name, "implemented", note))
        elif name in UNSUPPORTED_FIELDS:
            rows.append((name, "typed error", f"ConfigError unless default: {UNSUPPORTED_FIELDS[name]}"))
        elif name in ASSISTING_FIELDS:
            note = (
                "with draft_model or prompt_lookup; else ConfigError unless default or the "
                "folder's generation_config.json value"
            )
            rows.append((name, "implemented", note))
        elif name == "structured_output_config":
            rows.append((name, "implemented", "xgrammar; ConfigError with beam search or draft_model"))
        else:
            rows.append((name, "implemented", ""))
    return rows


MARK_BEGIN = "<!-- api-coverage:begin (tools/api_coverage.py --write) -->"
MARK_END = "<!-- api-coverage:end -->"


def markdown(real: Any, shim: Any) -> str:
    """The coverage tables of docs/genai_shim.md (between MARK_BEGIN and MARK_END)."""
    names = coverage_rows(real, shim)
    fields = field_rows(real.GenerationConfig())
    summary = (
        f"Public names of openvino_genai {real.get_version().split('-')[0]}: "
        f"{sum(r[1] == 'implemented' for r in names)} implemented, "
        f"{sum(r[1] == 'typed error' for r in names)} raise `UnsupportedFeatureError` naming their "
        "feature (`ov_npu_emu.errors`, a `ConfigError` and an `AttributeError`, so `hasattr` is "
        "False)."
    )
    implemented = ", ".join(f"`{n}`" for n, s, _ in names if s == "implemented")
    out = [
        summary,
        "",
        "| feature | status | names |",
        "|---|---|---|",
        f"| text generation | implemented | {implemented} |",
    ]
    for feature, (_members, offer) in FEATURES.items():
        present = [n for n, s, f in names if f == feature]
        if present:
            out.append(
                f"| {feature} | typed error ({offer}) | " + ", ".join(f"`{n}`" for n in present) + " |"
            )
    out += ["", "| GenerationConfig field | status | note |", "|---|---|---|"]
    out += [f"| `{n}` | {s} | {d} |" for n, s, d in fields]
    out += [
        "",
        (
            "An unknown keyword in `GenerationConfig(...)`, `update_generation_config(...)` or "
            "`generate(..., **kwargs)` is a `ConfigError` naming it (the real ignores it)."
        ),
    ]
    return "\n".join(out)
