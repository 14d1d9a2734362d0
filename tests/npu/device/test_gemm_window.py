"""A token-row window over a prefill matmul_dq (kernels/gemm.py, device/windowed.py): the
window's rows are the full run's bit for bit, with no probe over the real weights.

The hazard: BLAS picks its kernel from the call's shapes (OpenBLAS sums small products,
M·N·K up to about 10⁶, in another order), and a window of 16 rows or fewer would take the
stored-format kernel (kernels/gemv.py): a row-sliced product need not give the full one's bits.
"""

from __future__ import annotations

import numpy as np
import pytest

from ov_npu_emu_npu.blob.format import WEIGHT_FORMATS
from ov_npu_emu_npu.blob.kernel_params import MatMulDqParams
from ov_npu_emu_npu.device import windowed
from ov_npu_emu_npu.device.kernels import RowWindow
from ov_npu_emu_npu.device.kernels.dequant import STORED_FORMAT_MAX_ROWS
from ov_npu_emu_npu.device.kernels.gemm import GEMM_BLOCK_BYTES, gemm_runner

K, GS, ROWS = 1024, 64, 24
N = 2 * (GEMM_BLOCK_BYTES // (4 * K)) + 5  # two whole blocks of output channels and one of 5


def _u4(rng: np.random.Generator, n: int = N, k: int = K):
    vals = rng.integers(0, 16, (n, k // GS, GS)).astype(np.uint8)
    q = (vals[..., 0::2] | (vals[..., 1::2] << 4)).astype(np.uint8)
    zp = rng.integers(0, 16, (n, k // GS, 1)).astype(np.uint8)
    scale = (rng.random((n, k // GS, 1)) * 0.05 + 1e-3).astype(np.float16)
    return q, scale, zp


def test_every_window_start_gives_the_full_runs_rows():
    """Each start of the window: the rows from it on equal the full run's bit for bit (the rows
    before it are padding, free to hold anything)."""
    rng = np.random.default_rng(5)
    q, scale, zp = _u4(rng)
    x = rng.standard_normal((ROWS, K)).astype(np.float32)
    full = np.empty((ROWS, N), np.float32)
    run = gemm_runner("u4", x, q, scale, zp, full, K)
    assert run is not None
    run()
    for start in range(1, ROWS):
        out = np.full((ROWS, N), np.nan, np.float32)
        win = gemm_runner("u4", x, q, scale, zp, out, K, rows_from=start)
        assert win is not None
        win()
        assert np.array_equal(out[start:], full[start:]), start
    assert gemm_runner("u4", x, q, scale, zp, full, K, rows_from=ROWS) is None  # no rows: nothing to run


def _bound(name: str, x: np.ndarray, q, scale, zp, out: np.ndarray, full, made: list[int]):
    """bind_task_window for a matmul_dq row tile whose token rows are rows [off, off + n)."""
    n = x.shape[0]
    window = RowWindow()
    params = MatMulDqParams(False, True, WEIGHT_FORMATS["u4"], True, False, out.shape[1], K).pack()
    params = np.array(params, np.float64)

    def make(ins, outs):
        made.append(ins[0].shape[0])
        return gemm_runner("u4", ins[0], q, scale, zp, outs[0], K)

    rows = {"L": 256, "off": 256 - n, "n": n, "axes": [0, -1, -1, -1, 0]}
    run = windowed.bind_task_window(name, rows, window, [x, q, scale, zp], [out], params, full, make)
    return window, run


def test_windowed_matmul_dq_takes_the_exact_runner_without_a_probe():
    """The gemm runner offers its own exact window: device/windowed.py uses it and never binds
    the kernel on random data (two more passes over the real weights) to probe it."""
    rng = np.random.default_rng(6)
    q, scale, zp = _u4(rng)
    x = rng.standard_normal((ROWS, K)).astype(np.float32)
    ref = np.empty((ROWS, N), np.float32)
    gemm_runner("u4", x, q, scale, zp, ref, K)()
    out = np.full((ROWS, N), np.nan, np.float32)
    full = gemm_runner("u4", x, q, scale, zp, out, K)
    made: list[int] = []
    window, run = _bound("matmul_dq", x, q, scale, zp, out, full, made)
    window.size, window.start = 256, 256 - 6  # the tile's last 6 rows are the window
    probes = len(windowed._PROBES)
    run()
    assert made == [] and len(windowed._PROBES) == probes
    assert window.windowed_tasks == 1
    assert np.array_equal(out[-6:], ref[-6:])


@pytest.mark.parametrize("keep", [6, STORED_FORMAT_MAX_ROWS + 4])
def test_a_matmul_dq_window_keeps_the_full_runs_kernel(keep):
    """Without an exact runner (e.g. a weight in the decompressed-weights cache, multiplied by
    BLAS), a window of a tile of more than STORED_FORMAT_MAX_ROWS rows keeps more than that many
    rows: fewer would bind the stored-format kernel, whose sums differ from the full run's."""
    rng = np.random.default_rng(7)
    q, scale, zp = _u4(rng, 64, K)
    x = rng.standard_normal((ROWS, K)).astype(np.float32)
    out = np.full((ROWS, 64), np.nan, np.float32)
    plain = gemm_runner("u4", x, q, scale, zp, out, K)

    def full() -> None:  # the same product, without the exact window
        plain()

    made: list[int] = []
    window, run = _bound("matmul_dq", x, q, scale, zp, out, full, made)
    window.size, window.start = 256, 256 - keep
    run()
    assert made and min(made) == max(keep, STORED_FORMAT_MAX_ROWS + 1)


def test_block_products_run_blas_on_one_thread_and_restore_it():
    """The block pool is the parallelism: BLAS runs on one thread inside it (and inside the row
    probe), and the process's BLAS thread count is restored after, also with a concurrent user
    on another thread (threadpoolctl 3.8's own setter would ignore that thread)."""
    import threading

    from ov_npu_emu_npu.device.kernels import gemm

    libs = gemm._blas_libraries()
    if not libs:
        pytest.skip("numpy's BLAS is no OpenBLAS")
    counts = lambda: [lib.get_num_threads() for lib in libs]  # noqa: E731
    original = counts()
    for lib in libs:
        lib.set_num_threads(2)  # two BLAS threads, whatever the host's default
    try:
        seen: list[int] = []
        rng = np.random.default_rng(7)
        q, scale, zp = _u4(rng)
        x = rng.standard_normal((ROWS, K)).astype(np.float32)
        out = np.empty((ROWS, N), np.float32)
        run = gemm_runner("u4", x, q, scale, zp, out, K)
        real_matmul = np.matmul

        def spy(*args, **kwargs):
            seen.append(max(counts()))
            return real_matmul(*args, **kwargs)

        np.matmul = spy
        try:
            run()
        finally:
            np.matmul = real_matmul
        assert seen and set(seen) == {1}
        assert counts() == [2] * len(libs)

        inside, leave = threading.Event(), threading.Event()

        def hold() -> None:
            with gemm.one_blas_thread():
                inside.set()
                leave.wait(5)

        t = threading.Thread(target=hold)
        t.start()
        assert inside.wait(5)
        assert counts() == [1] * len(libs)  # set by the other thread
        with gemm.one_blas_thread():  # a second user while the first holds the setting
            assert counts() == [1] * len(libs)
        assert counts() == [1] * len(libs)  # the first still holds it
        leave.set()
        t.join(5)
        assert counts() == [2] * len(libs)
    finally:
        for lib, n in zip(libs, original, strict=True):
            lib.set_num_threads(n)


def test_exact_rows_remembers_each_row_count_once():
    """The trailing-row probe settles each row count once per shape, whatever order windows ask
    in: the answers equal a fresh probe's for every need (kernels/gemm.py ``_EXACT``)."""
    from ov_npu_emu_npu.device.kernels import gemm

    h, k, m_rows = 8, 2048, 24  # M·N·K around OpenBLAS's small-product switch
    gemm._EXACT.pop((h, k, m_rows), None)
    needs = [20, 3, 12, 1, 23, 7]
    remembered = [gemm._exact_rows(h, k, m_rows, need) for need in needs]
    known = dict(gemm._EXACT[(h, k, m_rows)])
    assert all(r >= need for r, need in zip(remembered, needs, strict=True))
    fresh = []
    for need in needs:
        gemm._EXACT.pop((h, k, m_rows), None)
        fresh.append(gemm._exact_rows(h, k, m_rows, need))
    assert remembered == fresh
    assert all(known[m] for m in remembered if m < m_rows)  # each answer is a count settled exact
