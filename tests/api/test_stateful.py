"""Stateful semantics (ReadValue/Assign) compared with openvino, after its own test_stateful."""

from __future__ import annotations

import numpy as np
import openvino as real_ov
import pytest

import ov_npu_emu as ov
from ov_npu_emu.testing import make_model_with_memory


def stateful_devices() -> list[str]:
    return [d for d in ("CPU", "NPU") if d in ov.Core().available_devices]


@pytest.fixture(params=stateful_devices())
def device(request):
    return request.param


def _run(cm_or_req, steps, value):
    return [np.array(cm_or_req.infer({"input_data": value})[0]) for _ in range(steps)]


def test_state_accumulates_resets_and_sets_like_openvino(device):
    value = np.arange(4, dtype=np.float32).reshape(1, 4) + 1
    ref_req = real_ov.Core().compile_model(make_model_with_memory(), "CPU").create_infer_request()
    req = ov.Core().compile_model(make_model_with_memory(), device).create_infer_request()

    for r in (ref_req, req):
        assert [s.name for s in r.query_state()] == ["var_id_667"]
    # accumulate
    for ours, ref in zip(_run(req, 3, value), _run(ref_req, 3, value), strict=False):
        np.testing.assert_array_equal(ours, ref)
    np.testing.assert_array_equal(req.query_state()[0].state.data, ref_req.query_state()[0].state.data)
    np.testing.assert_array_equal(req.query_state()[0].state.data, 3 * value)
    # reset of one state
    req.query_state()[0].reset()
    np.testing.assert_array_equal(req.query_state()[0].state.data, np.zeros((1, 4), np.float32))
    np.testing.assert_array_equal(_run(req, 1, value)[0], value)
    # set_state then infer continues from the set value
    for r in (req, ref_req):
        r.query_state()[0].state = real_ov.Tensor(np.full((1, 4), 10, np.float32))
    np.testing.assert_array_equal(_run(req, 1, value)[0], _run(ref_req, 1, value)[0])
    # reset_state on the request resets every variable
    req.reset_state()
    np.testing.assert_array_equal(_run(req, 1, value)[0], value)


def test_compiled_model_call_keeps_state(device):
    cm = ov.Core().compile_model(make_model_with_memory(), device)
    one = np.ones((1, 4), np.float32)
    cm({"input_data": one})
    np.testing.assert_array_equal(cm({"input_data": one})[0], 2 * one)
    assert [s.name for s in cm.query_state()] == ["var_id_667"]
    cm.reset_state()
    np.testing.assert_array_equal(cm({"input_data": one})[0], one)


def test_states_are_per_request(device):
    cm = ov.Core().compile_model(make_model_with_memory(), device)
    r1, r2 = cm.create_infer_request(), cm.create_infer_request()
    one = np.ones((1, 4), np.float32)
    _run(r1, 2, one)
    np.testing.assert_array_equal(_run(r2, 1, one)[0], one)
