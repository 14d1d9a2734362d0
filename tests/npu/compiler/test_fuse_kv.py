"""The compiler's fuse_kv pass (NPU_EMU_FUSE_KV): attention over an f16 past KV becomes one
sdpa_kv task where the pattern holds, and nowhere else."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import openvino as ov
import pytest

from ov_npu_emu.errors import ConfigError
from ov_npu_emu.modelbuilder import make_model_folder
from ov_npu_emu_npu.blob import BLOB_VERSION, BlobReader
from ov_npu_emu_npu.compiler import compile_to_blob
from ov_npu_emu_npu.compiler.frontend import prepare
from ov_npu_emu_npu.compiler.fuse_kv import MAX_QUERY_ROWS, find_kv_fusions
from ov_npu_emu_npuw.transform import make_generate_model, make_prefill_model, to_stateless
from tests.npu.device.kv_models import kv_attention_model


def _kernels(model: ov.Model, config: dict | None = None) -> Counter[str]:
    return Counter(t["kernel"] for t in BlobReader(compile_to_blob(model, config or {})).meta["tasks"])


@pytest.mark.parametrize(("heads", "hkv", "expand"), [(8, 2, True), (4, 4, False)], ids=["gqa", "mha"])
def test_fires_on_the_pattern(heads, hkv, expand):
    model = kv_attention_model(heads, hkv, expand=expand)
    fused = find_kv_fusions(prepare(model).model)
    assert len(fused) == 1
    f = next(iter(fused.values()))
    assert (f.k.group, f.k.past_len) == (heads // hkv, 47)
    # Convert, Concat (and the head expansion) of K and V are replaced
    assert Counter(n.get_type_name() for n in f.replaced) == Counter(
        {"Convert": 2, "Concat": 2, **({"Unsqueeze": 2, "Broadcast": 2, "Reshape": 2} if expand else {})})
    # f32 mode: no f16 conversions of the user's inputs/outputs among the counted Converts
    on = _kernels(model, {"INFERENCE_PRECISION_HINT": "f32"})
    off = _kernels(model, {"NPU_EMU_FUSE_KV": "NO", "INFERENCE_PRECISION_HINT": "f32"})
    assert on["sdpa_kv"] == 1 and on["sdpa"] == 0 and on["convert"] == 0
    assert on["dma"] == 2  # the new K and V rows stacked into the task's operand
    assert off["sdpa_kv"] == 0 and off["sdpa"] == 1 and off["convert"] == 2


@pytest.mark.parametrize("case", ["causal", "no_mask", "f32_past", "convert_read_elsewhere", "many_query_rows"])
def test_leaves_other_attention_alone(case):
    kw: dict = {"causal": {"causal": True}, "no_mask": {"with_mask": False}, "f32_past": {"past_type": ov.Type.f32},
                "convert_read_elsewhere": {"convert_reader": True},
                "many_query_rows": {"new": MAX_QUERY_ROWS + 1}}[case]
    model = kv_attention_model(**kw)
    assert find_kv_fusions(prepare(model).model) == {}
    kernels = _kernels(model)
    assert kernels["sdpa_kv"] == 0 and kernels["sdpa"] == 1


def test_bad_value_is_a_config_error():
    with pytest.raises(ConfigError, match="NPU_EMU_FUSE_KV"):
        compile_to_blob(kv_attention_model(), {"NPU_EMU_FUSE_KV": "maybe"})


@pytest.fixture(scope="module")
def npuw_small(tmp_path_factory) -> tuple[ov.Model, object]:
    folder = make_model_folder(tmp_path_factory.mktemp("fuse_kv"), preset="small")
    return to_stateless(ov.Core().read_model(Path(folder) / "openvino_model.xml"))


def test_npuw_generate_model_fuses_every_layer_and_prefill_none(npuw_small):
    """NPUW's generate variant with the default f16 KV: one sdpa_kv per layer; the prefill (no
    past; a chunked one's 64 query rows keep the plain lowering) and an f32 KV (f32 hints) have
    nothing to fuse."""
    sl, kv = npuw_small
    layers = len(kv.past_names) // 2
    gen16 = make_generate_model(sl, kv, 128, ov.Type.f16)
    gen32 = make_generate_model(sl, kv, 128, ov.Type.f32)
    assert _kernels(gen16)["sdpa_kv"] == layers
    assert _kernels(gen32)["sdpa_kv"] == 0
    for chunk in (0, 64):
        prefill = make_prefill_model(sl, kv, 128, chunk, ov.Type.f16)
        assert find_kv_fusions(prepare(prefill).model) == {}


def test_blob_records_the_fused_task_and_version(npu_core):
    model = kv_attention_model()
    blob = compile_to_blob(model)
    r = BlobReader(blob)
    assert tuple(BLOB_VERSION) == (1, 4)
    assert [t["kernel"] for t in r.meta["tasks"]].count("sdpa_kv") == 1
    # the blob runs after an import round trip (the params record unpacks on the device)
    cm = npu_core.import_model(npu_core.compile_model(model, "NPU").export_model(), "NPU")
    rng = np.random.default_rng(0)
    feed = {p.get_any_name(): rng.standard_normal(list(p.get_shape())).astype(p.get_element_type().to_dtype())
            for p in model.inputs}
    feed["mask"][...] = 0.0
    out = cm.create_infer_request().infer(feed)[0]
    assert np.isfinite(out).all()
