"""The shared model factories and fixtures in ov_npu_emu.testing behave as documented."""

from __future__ import annotations

import json
import sysconfig
from collections import Counter
from importlib import metadata

import numpy as np
import openvino as ov
import pytest

from ov_npu_emu.models import BUNDLED_MODELS_DIR, MODELS_DIR_ENV, find_model
from ov_npu_emu.testing import (
    make_add_model,
    make_model_with_memory,
    make_small_cnn,
)


def test_make_add_model():
    compiled = ov.Core().compile_model(make_add_model((2, 3)), "CPU")
    a, b = np.ones((2, 3), np.float32), np.arange(6, dtype=np.float32).reshape(2, 3)
    assert np.array_equal(compiled({"a": a, "b": b})["res"], a + b)


def test_make_model_with_memory_accumulates():
    model = make_model_with_memory((1, 4), np.float32, "var_x")
    assert [v.get_info().variable_id for v in model.get_variables()] == ["var_x"]
    req = ov.Core().compile_model(model, "CPU").create_infer_request()
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    for step in range(1, 4):
        assert np.array_equal(req.infer({"input_data": x})["res"], step * x)
    req.reset_state()
    assert np.array_equal(req.infer({"input_data": x})["res"], x)


def test_make_small_cnn():
    model = make_small_cnn()
    ops = Counter(op.get_type_name() for op in model.get_ordered_ops())
    for op in (
        "Convolution",
        "GroupConvolution",
        "MaxPool",
        "AvgPool",
        "Relu",
        "Clamp",
        "Add",
        "Multiply",
        "Softmax",
        "Reshape",
        "Transpose",
    ):
        assert ops[op] >= 1, op
    assert all(p.get_partial_shape().is_static for p in model.inputs)
    prob = ov.Core().compile_model(model, "CPU")(
        np.random.default_rng(0).random((1, 3, 16, 16), np.float32)
    )["prob"]
    assert prob.shape == (1, 10) and abs(float(prob.sum()) - 1.0) < 1e-5


def test_find_model_defaults_to_the_bundled_copy(monkeypatch):
    monkeypatch.delenv(MODELS_DIR_ENV, raising=False)
    folder = find_model("stories260K")
    assert folder == BUNDLED_MODELS_DIR / "stories260K"
    assert {"LICENSE", "README.md", "config.json", "openvino_tokenizer.xml"} <= {
        f.name for f in folder.iterdir()
    }
    with pytest.raises(FileNotFoundError, match="'missing' not found in the ov_npu_emu package"):
        find_model("missing")


def test_find_model_env_override(monkeypatch, tmp_path):
    (tmp_path / "stories260K").mkdir()
    (tmp_path / "stories260K" / "openvino_model.xml").touch()
    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path))
    assert find_model("stories260K") == tmp_path / "stories260K"
    with pytest.raises(FileNotFoundError, match=MODELS_DIR_ENV):
        find_model("missing")


def test_installed_package_ships_the_bundled_model():
    """The wheel carries every file of ov_npu_emu/models/stories260K (pyproject package-data).

    Checked on a regular install (what .ci/run makes); an editable install is the source tree.
    Looks in site-packages only: the source tree's ov_npu_emu.egg-info is on sys.path too."""
    site = sysconfig.get_paths()["purelib"]
    dists = list(metadata.distributions(name="ov-npu-emu", path=[site]))
    if not dists:
        pytest.skip(f"ov-npu-emu is not installed in {site}")
    dist = dists[0]
    direct_url = json.loads(dist.read_text("direct_url.json") or "{}")
    if direct_url.get("dir_info", {}).get("editable"):
        pytest.skip("editable install: the package is the source tree")
    installed = {f.as_posix() for f in dist.files or ()}
    expected = {
        f"ov_npu_emu/models/stories260K/{f.name}"
        for f in (BUNDLED_MODELS_DIR / "stories260K").iterdir()
    }
    assert len(expected) == 12 and expected <= installed, sorted(expected - installed)


def test_stories260k_fixture_runs_on_cpu(stories260k_dir):
    compiled = ov.Core().compile_model(
        stories260k_dir / "openvino_model.xml", "CPU", {"INFERENCE_PRECISION_HINT": "f32"}
    )
    assert {p.get_any_name() for p in compiled.inputs} == {
        "input_ids",
        "attention_mask",
        "position_ids",
        "beam_idx",
    }


def test_tiny_reference_fixture(tiny_reference, tiny_model_dir):
    tokens = tiny_reference.greedy_generate([1, 2, 3], 4)
    assert len(tokens) == 4 and tiny_reference.config.vocab_size == 512
