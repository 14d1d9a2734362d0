"""The NPU property translation on its own (what openvino.genai's update_npu_config does)."""

from __future__ import annotations

import openvino as ov
import pytest

from genai_shim.npu_config import get_kv_axes_pos, translate_npu_config
from ov_npu_emu.errors import ConfigError


@pytest.fixture(scope="module")
def model(stories_dir):
    return ov.Core().read_model(stories_dir / "openvino_model.xml")


def test_defaults_and_kv_axes(model):
    out = translate_npu_config(model, {})
    assert get_kv_axes_pos(model) == (0, 2)
    assert out.config == {
        "NPU_USE_NPUW": "YES",
        "NPUW_LLM": "YES",
        "NPUW_LLM_BATCH_DIM": 0,
        "NPUW_LLM_SEQ_LEN_DIM": 2,
        "NPUW_LLM_MAX_PROMPT_LEN": 1024,
        "NPUW_LLM_MIN_RESPONSE_LEN": 128,
    }
    assert (out.blob_path, out.export_blob) == (None, False)


def test_renames_passthrough_and_blob_keys(model):
    out = translate_npu_config(
        model,
        {
            "MAX_PROMPT_LEN": 300,
            "MIN_RESPONSE_LEN": 0,
            "PREFILL_HINT": "STATIC",
            "GENERATE_HINT": "BEST_PERF",
            "SHARED_HEAD_CONFIG": {"X": 1},
            "++PREFILL_CONFIG": {"Y": 2},
            "CACHE_DIR": "/tmp/c",
            "NPUW_DEVICES": "CPU",
            "BLOB_PATH": "/tmp/m.blob",
            "EXPORT_BLOB": "YES",
        },
    )
    cfg = out.config
    assert cfg["NPUW_LLM_MAX_PROMPT_LEN"] == 300 and cfg["NPUW_LLM_MIN_RESPONSE_LEN"] == 0
    assert cfg["NPUW_LLM_PREFILL_HINT"] == "STATIC" and cfg["NPUW_LLM_GENERATE_HINT"] == "BEST_PERF"
    assert cfg["NPUW_LLM_SHARED_HEAD_CONFIG"] == {"X": 1}
    assert cfg["++NPUW_LLM_PREFILL_CONFIG"] == {"Y": 2}
    assert cfg["CACHE_DIR"] == "/tmp/c" and cfg["NPUW_DEVICES"] == "CPU"
    assert "BLOB_PATH" not in cfg and "EXPORT_BLOB" not in cfg
    assert (out.blob_path, out.export_blob) == ("/tmp/m.blob", True)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-5, "MIN_RESPONSE_LEN cannot be negative!"),
        ("64", "Failed to extract MIN_RESPONSE_LEN. Type mismatch: expected types: int or int64_t"),
        (True, "Failed to extract MIN_RESPONSE_LEN. Type mismatch"),
    ],
)
def test_bad_lengths(model, value, message):
    with pytest.raises(ConfigError, match=message):
        translate_npu_config(model, {"MIN_RESPONSE_LEN": value})
