"""The genai flow for weightless NPU blobs, side by side with the real openvino_genai (NPUW on CPU):
EXPORT_BLOB + CACHE_MODE=OPTIMIZE_SIZE, then BLOB_PATH with and without WEIGHTS_PATH."""

from __future__ import annotations

import shutil

import pytest

import genai_shim

F32 = {"INFERENCE_PRECISION_HINT": "f32", "NPUW_ONLINE_PIPELINE": "NONE"}


def blob_flow(mod, folder, device: str, blob: str) -> str:  # noqa: ANN001
    """LLMPipeline NPU with EXPORT_BLOB + CACHE_MODE=OPTIMIZE_SIZE, then BLOB_PATH without and
    with WEIGHTS_PATH; returns the text (the same before export and after import)."""
    props = {**F32, "NPUW_DEVICES": device}
    exporter = mod.LLMPipeline(
        str(folder), "NPU", **props, MAX_PROMPT_LEN=64, MIN_RESPONSE_LEN=64,
        EXPORT_BLOB="YES", BLOB_PATH=blob, CACHE_MODE="OPTIMIZE_SIZE",
    )
    first = exporter.generate("Once upon a time", max_new_tokens=16)
    del exporter
    with pytest.raises(RuntimeError, match="Blob is weightless but no WEIGHTS_PATH nor MODEL_PTR"):
        mod.LLMPipeline(str(folder), "NPU", **props, BLOB_PATH=blob)
    weights = str(folder / "openvino_model.bin")
    importer = mod.LLMPipeline(str(folder), "NPU", **props, BLOB_PATH=blob, WEIGHTS_PATH=weights)
    assert importer.generate("Once upon a time", max_new_tokens=16) == first
    return first


@pytest.fixture(scope="module")
def folder(stories_dir, tmp_path_factory):  # noqa: ANN001
    out = tmp_path_factory.mktemp("weightless") / "model"
    shutil.copytree(stories_dir, out)
    return out


@pytest.fixture(scope="module")
def real_text(real_genai, folder):  # noqa: ANN001
    """The real openvino_genai's run of the flow (its NPU path: NPUW on CPU)."""
    return blob_flow(real_genai, folder, "CPU", str(folder.parent / "real.blob"))


@pytest.mark.parametrize("ours_device", ["NPU", "CPU"])
def test_genai_blob_flow_matches_the_real(folder, real_text, ours_device):
    """Ours with NPUW_DEVICES=NPU (our references in the artefact) and CPU (the CPU plugin's
    own weightless sub-blobs): the same text as the real, the same error without WEIGHTS_PATH."""
    assert blob_flow(genai_shim, folder, ours_device, str(folder.parent / f"ours_{ours_device}.blob")) == real_text


def test_openvino_objects_as_properties_survive_export(folder, real_genai, tmp_path):
    """Upstream's static-pipeline tests pass ``ov.Type`` values (INFERENCE_PRECISION_HINT=ov.Type.f32,
    KV_CACHE_PRECISION=ov.Type.f16): the real exports and imports such a pipeline; ours normalises
    them at the boundary and does the same.  (The real's genai kwargs refuse enum objects such as
    CacheMode.OPTIMIZE_SPEED; Core takes them, tests/api/test_core.py.)"""
    import openvino as ov

    def flow(mod, blob: str) -> str:  # noqa: ANN001
        cfg = {"NPUW_DEVICES": "CPU", "NPUW_ONLINE_PIPELINE": "NONE", "INFERENCE_PRECISION_HINT": ov.Type.f32,
               "KV_CACHE_PRECISION": ov.Type.f16, "MAX_PROMPT_LEN": 64, "MIN_RESPONSE_LEN": 64}
        exporter = mod.LLMPipeline(str(folder), "NPU", **cfg, EXPORT_BLOB="YES", BLOB_PATH=blob,
                                   CACHE_MODE="OPTIMIZE_SPEED")
        first = exporter.generate("Once upon a time", max_new_tokens=16)
        del exporter
        importer = mod.LLMPipeline(str(folder), "NPU", **cfg, BLOB_PATH=blob)
        assert importer.generate("Once upon a time", max_new_tokens=16) == first
        return first

    assert flow(genai_shim, str(tmp_path / "ours.blob")) == flow(real_genai, str(tmp_path / "real.blob"))
