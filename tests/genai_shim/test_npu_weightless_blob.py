"""The genai flow for weightless NPU blobs, side by side with the real openvino_genai (NPUW on CPU):
EXPORT_BLOB + CACHE_MODE=OPTIMIZE_SIZE, then BLOB_PATH with and without WEIGHTS_PATH."""

from __future__ import annotations

import shutil

import pytest

import genai_shim


def test_genai_blob_flow_matches_the_real(stories_dir, real_genai, tmp_path):
    """LLMPipeline NPU with EXPORT_BLOB + CACHE_MODE=OPTIMIZE_SIZE, then BLOB_PATH + WEIGHTS_PATH,
    each side by side with the real openvino_genai (NPUW on CPU, f32) on a copy of the folder."""
    folder = tmp_path / "model"
    shutil.copytree(stories_dir, folder)
    weights = str(folder / "openvino_model.bin")
    f32 = {"INFERENCE_PRECISION_HINT": "f32", "NPUW_ONLINE_PIPELINE": "NONE"}
    texts = {}
    for name, mod, device in (("real", real_genai, "CPU"), ("ours", genai_shim, "NPU")):
        blob = str(tmp_path / f"{name}.blob")
        props = {**f32, "NPUW_DEVICES": device}
        exporter = mod.LLMPipeline(
            str(folder), "NPU", **props, MAX_PROMPT_LEN=64, MIN_RESPONSE_LEN=64,
            EXPORT_BLOB="YES", BLOB_PATH=blob, CACHE_MODE="OPTIMIZE_SIZE",
        )
        first = exporter.generate("Once upon a time", max_new_tokens=30)
        del exporter
        with pytest.raises(RuntimeError, match="Blob is weightless but no WEIGHTS_PATH nor MODEL_PTR"):
            mod.LLMPipeline(str(folder), "NPU", **props, BLOB_PATH=blob)
        importer = mod.LLMPipeline(str(folder), "NPU", **props, BLOB_PATH=blob, WEIGHTS_PATH=weights)
        assert importer.generate("Once upon a time", max_new_tokens=30) == first
        texts[name] = first
    assert texts["ours"] == texts["real"]
