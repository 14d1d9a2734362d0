"""A square (prefill) attention runs its BLAS products on one thread, window and full run alike,
and the process's BLAS thread count is restored after (device/kernels/blasthreads.py)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from ov_npu_emu_npu.device.kernels import RowWindow, make_kernel
from ov_npu_emu_npu.device.kernels import blasthreads as bt


@pytest.fixture
def two_blas_threads():
    libs = bt.blas_libraries()
    if not libs:
        pytest.skip("numpy's BLAS is no OpenBLAS")
    original = [lib.get_num_threads() for lib in libs]
    for lib in libs:
        lib.set_num_threads(2)  # two BLAS threads, whatever the host's default
    yield lambda: [lib.get_num_threads() for lib in libs]
    for lib, n in zip(libs, original, strict=True):
        lib.set_num_threads(n)


def _square_case(L: int = 64, D: int = 16, w0: int = 40):
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, 2, L, D)).astype(np.float32) for _ in range(3))
    allowed = np.tril(np.ones((L, L), bool))
    allowed[w0:, :w0] = False  # the real rows never see the padding
    mask = np.where(allowed, 0.0, np.finfo(np.float16).min).astype(np.float32)[None, None]
    return q, k, v, mask, w0


def test_square_attention_products_run_on_one_blas_thread(two_blas_threads, monkeypatch):
    counts = two_blas_threads
    q, k, v, mask, w0 = _square_case()
    params = np.array([0, 1, 0, 1], np.float64)
    seen: list[int] = []
    real_matmul = np.matmul

    def spy(*args, **kwargs):
        seen.append(max(counts()))
        return real_matmul(*args, **kwargs)

    full = np.zeros((*q.shape[:-1], q.shape[-1]), np.float32)
    run = make_kernel("sdpa", [q, k, v, mask], [full], params)
    window = RowWindow()
    part = np.zeros_like(full)
    win = make_kernel("sdpa", [q, k, v, mask], [part], params, window)
    window.size, window.start = q.shape[-2], w0
    monkeypatch.setattr(np, "matmul", spy)
    run()
    win()
    monkeypatch.undo()
    assert window.used == 1 and seen and set(seen) == {1}
    assert counts() == [2] * len(counts())
    assert np.array_equal(part[..., w0:, :], full[..., w0:, :])


def test_one_blas_thread_is_restored_by_the_last_user(two_blas_threads):
    """Concurrent users share the setting; the last one out restores it (threadpoolctl 3.8's own
    setter would ignore a thread other than the first that set it)."""
    counts = two_blas_threads
    n = len(counts())
    inside, leave = threading.Event(), threading.Event()

    def hold() -> None:
        with bt.one_blas_thread():
            inside.set()
            leave.wait(5)

    t = threading.Thread(target=hold)
    t.start()
    assert inside.wait(5)
    assert counts() == [1] * n  # set by the other thread
    with bt.one_blas_thread():  # a second user while the first holds the setting
        assert counts() == [1] * n
    assert counts() == [1] * n  # the first still holds it
    leave.set()
    t.join(5)
    assert counts() == [2] * n


def test_a_windowed_prefill_runs_on_one_blas_thread(two_blas_threads, monkeypatch):
    """A token-row window's inference runs with numpy's BLAS on one thread (its big products
    have their own threads or few rows); an inference without a window keeps the setting."""
    from ov_npu_emu import Core
    from ov_npu_emu_npu.plugin import NpuInferRequest
    from tests.npu.device.token_rows_models import P
    from tests.npu.device.token_rows_models import int8_matmul_model as _int8_matmul_model
    from tests.npu.device.token_rows_models import run_cmx as _run_cmx

    counts = two_blas_threads
    seen: list[int] = []
    submit = NpuInferRequest._submit

    def spy(self):
        seen.append(max(counts()))
        submit(self)

    monkeypatch.setattr(NpuInferRequest, "_submit", spy)
    model = _int8_matmul_model(P)
    emu_core = Core()
    req, _ = _run_cmx(emu_core, model, 32 * 1024, 210, True)
    assert req.impl.counters["windowed_inferences"] == 1 and seen == [1]
    seen.clear()
    _run_cmx(emu_core, model, 32 * 1024, 210, False)
    assert seen == [2]
    assert counts() == [2] * len(counts())
