"""Compiler stages: static-shape check, lambda lifting, typed unsupported ops, tiling, verifiers."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops

from ov_npu_emu.errors import DynamicShapeError, MemoryPlanError, UnsupportedOpError
from ov_npu_emu_npu.arch import HardwareConfig
from ov_npu_emu_npu.blob import BlobReader
from ov_npu_emu_npu.compiler import compile_to_blob
from ov_npu_emu_npu.compiler.frontend import prepare
from ov_npu_emu_npu.compiler.lower import lower
from ov_npu_emu_npu.compiler.memory import plan_memory
from ov_npu_emu_npu.compiler.schedule import schedule
from ov_npu_emu_npu.compiler.verify import verify_memory, verify_schedule
from tests.npu.conftest import cpu_reference, llm_feed, make_group_conv_cnn, make_mlp, rel_err

ROOT = Path(__file__).resolve().parents[3]


def test_dynamic_input_names_the_input_and_says_reshape():
    x = ops.parameter(ov.PartialShape([1, -1]), np.float32, name="tokens")
    m = ov.Model([ops.result(ops.relu(x))], [x], "dyn")
    with pytest.raises(DynamicShapeError, match="tokens.*[Rr]eshape") as e:
        compile_to_blob(m)
    assert e.value.input_name == "tokens"


def test_stateful_llm_without_reshape_is_dynamic_shape_error(npu_core, stories260k_dir):
    with pytest.raises(DynamicShapeError, match="input_ids"):
        npu_core.compile_model(str(stories260k_dir / "openvino_model.xml"), "NPU")


def test_unsupported_op_names_type_and_node():
    x = ops.parameter([4, 4], np.float32, name="x")
    t = ops.einsum([x, x], "ij,jj->ij")
    t.set_friendly_name("my_einsum")
    m = ov.Model([ops.result(t)], [x], "einsum")
    with pytest.raises(UnsupportedOpError, match="Einsum.*my_einsum") as e:
        compile_to_blob(m)
    assert (e.value.op_type, e.value.node_name) == ("Einsum", "my_einsum")


def test_lambda_lifting_records_variables():
    from ov_npu_emu.testing import make_model_with_memory

    prep = prepare(make_model_with_memory())
    assert [v.variable_id for v in prep.variables] == ["var_id_667"]
    assert len(prep.model.get_parameters()) == 2 and len(prep.model.get_results()) == 2
    assert not prep.model.get_sinks()
    meta = BlobReader(compile_to_blob(make_model_with_memory())).meta
    (var,) = meta["variables"]
    assert var == {"id": "var_id_667", "shape": [1, 4], "element_type": "f32", "input": 1, "output": 1, "init": None}
    assert meta["inputs"][1]["state"] == "var_id_667"


def test_nonzero_initial_value_is_recorded_and_used_by_reset(npu_core):
    from openvino.op.util import Variable, VariableInfo

    info = VariableInfo()
    info.data_shape, info.data_type, info.variable_id = ov.PartialShape([2]), ov.Type.f32, "acc"
    var = Variable(info)
    x = ops.parameter([2], np.float32, name="x")
    rv = ops.read_value(ops.constant(np.array([7, 8], np.float32)), var)
    add = ops.add(rv, x)
    m = ov.Model([ops.result(add)], [ops.assign(add, var)], [x], "init")
    req = npu_core.compile_model(m, "NPU").create_infer_request()
    ref = ov.Core().compile_model(m, "CPU").create_infer_request()
    one = np.ones(2, np.float32)
    for r in (req, ref):
        r.infer({"x": one})
        r.reset_state()
    np.testing.assert_array_equal(req.infer({"x": one})[0], ref.infer({"x": one})[0])


def test_small_cmx_tiles_matmul_with_dma_staging(npu_core):
    m = make_mlp(rows=16)
    hw = {"NPU_EMU_CMX_SIZE": 1024}
    big = BlobReader(compile_to_blob(m)).meta["tasks"]
    small = BlobReader(compile_to_blob(m, hw)).meta["tasks"]
    dpu_big = sum(t["engine"] == "DPU" for t in big)
    dpu_small = sum(t["engine"] == "DPU" for t in small)
    dma_small = sum(t["engine"] == "DMA" for t in small)
    # activation chunks, weight chunks and output tiles all move by DMA
    assert dpu_small > dpu_big and dma_small > dpu_small
    feed = {"x": np.random.default_rng(0).standard_normal((1, 16, 16)).astype(np.float32)}
    out = npu_core.compile_model(m, "NPU", hw).create_infer_request().infer(feed)[0]
    assert rel_err(out, cpu_reference(m, feed)[0]) <= 1e-4


def test_tiled_llm_prefill_still_matches(npu_core, stories_prefill):
    feed = llm_feed(stories_prefill)
    cm = npu_core.compile_model(stories_prefill, "NPU", {"NPU_EMU_CMX_SIZE": 4096})
    ours = list(cm.create_infer_request().infer(feed).values())
    for a, b in zip(ours, cpu_reference(stories_prefill, feed), strict=False):
        assert rel_err(a, b) <= 1e-4


def test_verifiers_catch_overlap_and_missing_barrier():
    prep = prepare(make_mlp())
    lw = lower(prep, HardwareConfig())
    plan = plan_memory(lw, HardwareConfig().cmx_size)
    sched = schedule(lw, plan.reuse_deps)
    verify_memory(lw)
    verify_schedule(lw, sched)
    # move two simultaneously live CMX buffers onto each other
    cmx = [v for v in lw.values if v.alias is None and v.place.value == "cmx"]
    cmx[1].offset = cmx[0].offset
    with pytest.raises(MemoryPlanError):
        verify_memory(lw)


def test_runtime_packages_never_import_the_compiler():
    """driver/device/blob and the plugin's module level must work from a blob alone."""
    bad = []
    for pkg in ("driver", "device", "blob"):
        for f in (ROOT / "plugins" / "ov_npu_emu_npu" / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(f.read_text())):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                bad += [f"{f.name}: {m}" for m in mods if m.startswith("ov_npu_emu_npu.compiler")]
    plugin = ast.parse((ROOT / "plugins" / "ov_npu_emu_npu" / "plugin.py").read_text())
    for node in plugin.body:  # module level only; compile_model imports the compiler lazily
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ov_npu_emu_npu.compiler"):
            bad.append(f"plugin: {node.module}")
    assert not bad, bad


def test_convolution_is_staged_and_channel_tiled_in_small_cmx(npu_core):
    m = make_group_conv_cnn()
    feed = {"image": np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)}
    cfg = {"NPU_EMU_CMX_SIZE": 8192, "INFERENCE_PRECISION_HINT": "f32"}  # f32 tiles; exact vs the CPU plugin
    tasks = BlobReader(compile_to_blob(m, cfg)).meta["tasks"]
    convs = [t for t in tasks if t["kernel"] == "conv"]
    assert len(convs) > 2  # the first Convolution is split over output-channel tiles
    out = npu_core.compile_model(m, "NPU", cfg).create_infer_request().infer(feed)[0]
    assert rel_err(out, cpu_reference(m, feed)[0]) <= 1e-4
