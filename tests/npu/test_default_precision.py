"""The emulated NPU computes as the real NPU does by default: INFERENCE_PRECISION_HINT f16.

The real NPU plugin's option table gives ``INFERENCE_PRECISION_HINT`` the default
``ov::element::f16`` (docs/npu_device.md "Precision", with its sources); so must ours: the
device and compiled-model properties report f16, the blob records it, and a run with no key
stores activations in f16 — its outputs differ from the f32 mode's but stay within the f16
tolerance of the CPU plugin (f32).  ``INFERENCE_PRECISION_HINT=f32`` is the exact mode.
"""

from __future__ import annotations

import numpy as np
import pytest

from ov_npu_emu_npu.blob.reader import BlobReader
from tests.npu.conftest import cpu_reference, llm_feed, make_mlp, rel_err

F32 = {"INFERENCE_PRECISION_HINT": "f32"}
F32_TOL = 1e-4
#: the documented f16 tolerance (docs/npu_device.md "Precision"; test_numerics.F16_TOL)
F16_TOL = 2e-2


def _run(compiled, feed):
    res = compiled.create_infer_request().infer(feed)
    return [np.array(res[i]) for i in range(len(compiled.outputs))]


def test_device_and_compiled_model_report_f16_by_default(npu_core_default):
    core = npu_core_default
    assert core.get_property("NPU", "INFERENCE_PRECISION_HINT") == "f16"
    compiled = core.compile_model(make_mlp(), "NPU")
    assert compiled.get_property("INFERENCE_PRECISION_HINT") == "f16"
    assert core.compile_model(make_mlp(), "NPU", F32).get_property("INFERENCE_PRECISION_HINT") == "f32"


def test_a_core_wide_f32_key_is_the_default_of_later_compiles():
    import ov_npu_emu

    core = ov_npu_emu.Core()
    core.set_property("NPU", F32)
    assert core.get_property("NPU", "INFERENCE_PRECISION_HINT") == "f32"
    assert core.compile_model(make_mlp(), "NPU").get_property("INFERENCE_PRECISION_HINT") == "f32"


def test_the_blob_records_the_precision(npu_core_default):
    npu_core = npu_core_default
    default = npu_core.compile_model(make_mlp(), "NPU").export_model().getvalue()
    exact = npu_core.compile_model(make_mlp(), "NPU", F32).export_model().getvalue()
    assert BlobReader(default).meta["precision"] == "f16"
    assert BlobReader(exact).meta["precision"] == "f32"
    # an imported blob keeps the precision it was compiled with, whatever the import config says
    import io

    imported = npu_core.import_model(io.BytesIO(default), "NPU", F32)
    assert imported.get_property("INFERENCE_PRECISION_HINT") == "f16"


@pytest.mark.parametrize("which", ["mlp", "stories_decode"])
def test_a_default_run_is_f16_within_its_tolerance_of_the_cpu_plugin(npu_core_default, which, request):
    npu_core = npu_core_default
    if which == "mlp":
        model = make_mlp()
        feed = {"x": np.random.default_rng(0).standard_normal((1, 4, 16)).astype(np.float32)}
    else:
        model = request.getfixturevalue("stories_decode")
        feed = llm_feed(model)
    ref = cpu_reference(model, feed)
    default = _run(npu_core.compile_model(model, "NPU"), feed)
    exact = _run(npu_core.compile_model(model, "NPU", F32), feed)
    # the f32 mode is the exact one ...
    assert max(rel_err(a, b) for a, b in zip(exact, ref, strict=True)) <= F32_TOL
    # ... the default stores activations in f16: not the f32 bits, but within the f16 tolerance,
    # and measurably further from the CPU plugin than f32 is
    assert any(not np.array_equal(a, b) for a, b in zip(default, exact, strict=True))
    errs = [rel_err(a, b) for a, b in zip(default, ref, strict=True)]
    assert max(errs) <= F16_TOL
    assert max(errs) > F32_TOL
