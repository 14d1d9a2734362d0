"""AsyncInferQueue against openvino's: the same results per userdata, the pool's flow control,
errors raised once where the caller can catch them (the real aborts or segfaults there)."""

from __future__ import annotations

import threading

import numpy as np
import openvino
import pytest

import ov_npu_emu as ov
from ov_npu_emu.errors import UserInputError
from ov_npu_emu.testing import keep_alive, run_isolated


def _model() -> openvino.Model:
    ops = openvino.opset13
    x = ops.parameter([1, 8], openvino.Type.f32, name="x")
    y = ops.relu(ops.add(ops.multiply(x, ops.constant(np.float32(3.0))), ops.constant(np.float32(-1.0))))
    return openvino.Model([y], [x], "affine")


def _run(queue_cls, compiled, jobs: int, n: int) -> tuple[dict[int, np.ndarray], list[str]]:
    out: dict[int, np.ndarray] = {}
    threads: list[str] = []
    queue = queue_cls(compiled, jobs)

    def done(request, userdata):  # noqa: ANN001
        out[userdata] = request.get_output_tensor(0).data.copy()
        threads.append(threading.current_thread().name)

    queue.set_callback(done)
    for i in range(n):
        queue.start_async({"x": np.arange(8, dtype=np.float32)[None] - i}, i)
    queue.wait_all()
    assert len(queue) == jobs and queue.is_ready()
    # each request's last userdata: distinct, and the last one started among them
    assert len(set(queue.userdata)) == jobs and set(queue.userdata) <= set(range(n)) and n - 1 in queue.userdata
    keep_alive(compiled, queue)  # the real's: never released (run_isolated)
    return out, threads


def _real_results() -> dict[int, np.ndarray]:
    """openvino's own queue, in a process of its own (run_isolated: its teardown can deadlock)."""
    return _run(openvino.AsyncInferQueue, openvino.Core().compile_model(_model(), "CPU"), 3, 10)[0]


def _real_queue_len(cfg: dict) -> int:
    compiled = openvino.Core().compile_model(_model(), "CPU", cfg)
    queue = openvino.AsyncInferQueue(compiled)
    keep_alive(compiled, queue)
    return len(queue)


@pytest.mark.parametrize("device", ["CPU", "NPU"])
def test_results_per_userdata_match_openvino(device):
    real = run_isolated(_real_results)
    ours, threads = _run(ov.AsyncInferQueue, ov.Core().compile_model(_model(), device), 3, 10)
    assert sorted(ours) == sorted(real) == list(range(10))
    for i in range(10):
        np.testing.assert_allclose(ours[i], real[i], rtol=1e-6)
    assert threading.main_thread().name not in threads  # callbacks ran on the requests' threads


def test_jobs_zero_takes_the_optimal_number_of_requests():
    for hint in ("LATENCY", "THROUGHPUT"):
        cfg = {"PERFORMANCE_HINT": hint}
        ours = ov.AsyncInferQueue(ov.Core().compile_model(_model(), "CPU", cfg))
        assert len(ours) == run_isolated(_real_queue_len, cfg)
    assert len(ov.AsyncInferQueue(ov.Core().compile_model(_model(), "NPU"))) >= 1


def test_without_a_callback_results_stay_on_the_requests():
    queue = ov.AsyncInferQueue(ov.Core().compile_model(_model(), "CPU"), 1)
    queue.start_async(np.ones((1, 8), np.float32))
    queue.wait_all()
    np.testing.assert_array_equal(queue[0].get_output_tensor(0).data, np.full((1, 8), 2.0, np.float32))
    assert [type(r).__name__ for r in queue] == ["InferRequest"]
    assert queue.get_idle_request_id() == 0


def test_bad_input_raises_in_the_caller_and_leaves_the_pool_usable():
    queue = ov.AsyncInferQueue(ov.Core().compile_model(_model(), "CPU"), 2)
    with pytest.raises(UserInputError):
        queue.start_async({"x": np.zeros((1, 3), np.float32)})
    assert queue.is_ready()
    queue.start_async({"x": np.ones((1, 8), np.float32)}, "ok")
    queue.wait_all()
    assert "ok" in queue.userdata


def test_a_callback_error_is_raised_once_by_the_next_flow_control_call():
    queue = ov.AsyncInferQueue(ov.Core().compile_model(_model(), "CPU"), 1)
    seen = []

    def callback(request, userdata):  # noqa: ANN001
        seen.append(userdata)
        if userdata in (0, 3):
            raise ValueError(f"boom {userdata}")

    queue.set_callback(callback)
    ones = {"x": np.ones((1, 8), np.float32)}
    queue.start_async(ones, 0)
    with pytest.raises(ValueError, match="boom 0"):  # one request: start_async waits for request 0
        queue.start_async(ones, 1)
    queue.start_async(ones, 2)  # raised once; the pool goes on
    queue.wait_all()
    queue.start_async(ones, 3)
    with pytest.raises(ValueError, match="boom 3"):
        queue.wait_all()
    queue.wait_all()
    assert seen == [0, 2, 3]


def test_bad_arguments_are_typed_errors():
    compiled = ov.Core().compile_model(_model(), "CPU")
    with pytest.raises(UserInputError, match="jobs"):
        ov.AsyncInferQueue(compiled, -1)
    queue = ov.AsyncInferQueue(compiled, 2)
    with pytest.raises(UserInputError, match="out of range"):
        queue[5]
    with pytest.raises(UserInputError, match="callable"):
        queue.set_callback(42)


def test_an_infer_request_callback_error_is_raised_by_wait():
    request = ov.Core().compile_model(_model(), "CPU").create_infer_request()
    request.set_callback(lambda userdata: 1 / 0, None)
    request.start_async({"x": np.ones((1, 8), np.float32)})
    with pytest.raises(ZeroDivisionError):
        request.wait()
    request.set_callback(lambda userdata: None, None)
    for _ in range(3):  # the request's worker goes on
        request.start_async({"x": np.ones((1, 8), np.float32)})
        assert request.wait_for(10_000)
    np.testing.assert_array_equal(request.get_output_tensor(0).data, np.full((1, 8), 2.0, np.float32))
