"""NPU property translation, as openvino.genai does it before compiling an LLM on "NPU"."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import openvino as ov

from ov_npu_emu.errors import ConfigError
from ov_npu_emu.options import as_bool

__all__ = [
    "DEFAULT_MAX_PROMPT_LEN",
    "DEFAULT_MIN_RESPONSE_LEN",
    "NpuCompileConfig",
    "get_kv_axes_pos",
    "translate_npu_config",
]

logger = logging.getLogger(__name__)

DEFAULT_MAX_PROMPT_LEN = 1024
DEFAULT_MIN_RESPONSE_LEN = 128

#: user-facing GenAI key -> NPUW key
_RENAMES = {
    "PREFILL_HINT": "NPUW_LLM_PREFILL_HINT",
    "GENERATE_HINT": "NPUW_LLM_GENERATE_HINT",
    "PREFILL_CONFIG": "NPUW_LLM_PREFILL_CONFIG",
    "GENERATE_CONFIG": "NPUW_LLM_GENERATE_CONFIG",
    "SHARED_HEAD_CONFIG": "NPUW_LLM_SHARED_HEAD_CONFIG",
    "++PREFILL_CONFIG": "++NPUW_LLM_PREFILL_CONFIG",
    "++GENERATE_CONFIG": "++NPUW_LLM_GENERATE_CONFIG",
    "++SHARED_HEAD_CONFIG": "++NPUW_LLM_SHARED_HEAD_CONFIG",
}


@dataclass
class NpuCompileConfig:
    """Result of the translation."""

    config: dict[str, Any] = field(default_factory=dict)  # for compile_model(…, "NPU", …)
    blob_path: str | None = None  # BLOB_PATH, consumed by the pipeline
    export_blob: bool = False  # EXPORT_BLOB, consumed by the pipeline
    max_prompt_len: int = DEFAULT_MAX_PROMPT_LEN  # requested (NPUW aligns it up to 64)
    min_response_len: int = DEFAULT_MIN_RESPONSE_LEN


def _pop_int(cfg: dict[str, Any], key: str, default: int) -> int:
    """Same checks and messages as the real ``pop_int_and_cast``."""
    if key not in cfg:
        return default
    value = cfg.pop(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(
            f"Failed to extract {key}. Type mismatch: expected types: int or int64_t", key=key
        )
    if value < 0:
        raise ConfigError(f"{key} cannot be negative!", key=key)
    return int(value)


def get_kv_axes_pos(model: ov.Model) -> tuple[int, int]:
    """(batch axis, sequence axis) of the KV cache: the Gather(beam_idx) axis and the Concat axis
    after it; (0, 2) when the pattern is not found."""
    batch, seq = 0, 2
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Gather" or op.get_input_size() < 3:
            continue
        idx = op.input_value(1).get_node()
        if idx.get_type_name() != "Parameter" or "beam_idx" not in op.input_value(1).get_names():
            continue
        axis_node = op.input_value(2).get_node()
        if axis_node.get_type_name() == "Constant":
            batch = int(axis_node.get_data().ravel()[0])
        for target in op.output(0).get_target_inputs():
            node = target.get_node()
            if node.get_type_name() == "Concat":
                rank = node.get_output_partial_shape(0).rank
                a = int(node.get_attributes().get("axis", 2))
                seq = a + rank.get_length() if (a < 0 and rank.is_static) else a
                return batch, seq
    return batch, seq


def translate_npu_config(model: ov.Model, properties: Mapping[str, Any]) -> NpuCompileConfig:
    """Turn LLMPipeline properties for "NPU" into the NPUW compile config."""
    cfg = dict(properties)
    out = NpuCompileConfig()
    blob = cfg.pop("BLOB_PATH", None)
    out.blob_path = str(blob) if blob not in (None, "") else None
    out.export_blob = as_bool("EXPORT_BLOB", cfg.pop("EXPORT_BLOB", False))
    out.max_prompt_len = _pop_int(cfg, "MAX_PROMPT_LEN", DEFAULT_MAX_PROMPT_LEN)
    out.min_response_len = _pop_int(cfg, "MIN_RESPONSE_LEN", DEFAULT_MIN_RESPONSE_LEN)
    batch_dim, seq_dim = get_kv_axes_pos(model)
    npu: dict[str, Any] = {
        "NPU_USE_NPUW": "YES",
        "NPUW_LLM": "YES",
        "NPUW_LLM_BATCH_DIM": batch_dim,
        "NPUW_LLM_SEQ_LEN_DIM": seq_dim,
        "NPUW_LLM_MAX_PROMPT_LEN": out.max_prompt_len,
        "NPUW_LLM_MIN_RESPONSE_LEN": out.min_response_len,
    }
    # the real's rename_key runs last: a user's PREFILL_HINT replaces an NPUW_LLM_PREFILL_HINT
    # already there (the one VLMPipeline inserts for Gemma 3)
    for key, value in sorted(cfg.items(), key=lambda kv: kv[0] in _RENAMES):
        npu[_RENAMES.get(key, key)] = value
    out.config = npu
    return out
