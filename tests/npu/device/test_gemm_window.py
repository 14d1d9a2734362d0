"""A token-row window over a prefill matmul_dq (kernels/gemm.py, device/windowed.py): the
window's rows are the full run's bit for bit, with no probe over the real weights.

The hazard: a product's sums may depend on the call's shapes (BLAS picks its kernel and
summation order from them; OpenBLAS sums small products, M·N·K up to about 10⁶, in another
order), and a window of 16 rows or fewer would take the stored-format kernel
(kernels/gemv.py). The block kernel's micro-kernel sums every output element in one loop
whatever rows and channels run beside it, so a row's result does not depend on them.
"""

from __future__ import annotations

import numpy as np
import pytest

from ov_npu_emu_npu.blob.format import WEIGHT_FORMATS
from ov_npu_emu_npu.blob.kernel_params import MatMulDqParams
from ov_npu_emu_npu.device import windowed
from ov_npu_emu_npu.device.kernels import RowWindow
from ov_npu_emu_npu.device.kernels.dequant import STORED_FORMAT_MAX_ROWS
from ov_npu_emu_npu.device.kernels.gemm import GEMM_BLOCK_BYTES, ROW_BLOCK_BYTES, gemm_runner

K, GS, ROWS = 1024, 64, 24
N = 2 * (GEMM_BLOCK_BYTES // (4 * K)) + 5  # two whole blocks of output channels and one of 5


def _u4(rng: np.random.Generator, n: int = N, k: int = K):
    vals = rng.integers(0, 16, (n, k // GS, GS)).astype(np.uint8)
    q = (vals[..., 0::2] | (vals[..., 1::2] << 4)).astype(np.uint8)
    zp = rng.integers(0, 16, (n, k // GS, 1)).astype(np.uint8)
    scale = (rng.random((n, k // GS, 1)) * 0.05 + 1e-3).astype(np.float16)
    return q, scale, zp


def _weight(rng: np.random.Generator, name: str, n: int = N, k: int = K):
    if name == "u4":
        return _u4(rng, n, k)
    if name == "i8":
        q = rng.integers(-128, 128, (n, k // GS, GS)).astype(np.int8)
        return q, (rng.random((n, k // GS, 1)) * 0.01 + 1e-3).astype(np.float32), None
    return rng.standard_normal((n, k)).astype(np.float16), None, None


@pytest.mark.parametrize("name", ["u4", "i8", "f16"])
def test_every_window_start_gives_the_full_runs_rows(name):
    """Each start of the window: the rows from it on equal the full run's bit for bit, and the
    rows before it are left as they were (padding: nobody reads them)."""
    rng = np.random.default_rng(5)
    q, scale, zp = _weight(rng, name)
    x = rng.standard_normal((ROWS, K)).astype(np.float32)
    full = np.empty((ROWS, N), np.float32)
    run = gemm_runner(name, x, q, scale, zp, full, K)
    assert run is not None
    run()
    for start in range(1, ROWS):
        out = np.full((ROWS, N), np.nan, np.float32)
        win = gemm_runner(name, x, q, scale, zp, out, K, rows_from=start)
        assert win is not None
        win()
        assert np.array_equal(out[start:], full[start:]), start
        assert np.isnan(out[:start]).all(), start
    assert gemm_runner(name, x, q, scale, zp, full, K, rows_from=ROWS) is None  # no rows: nothing to run


def test_a_rows_result_does_not_depend_on_the_rows_or_channels_beside_it():
    """The property the windows and the row tiles rest on: a row's product is the same bit for
    bit whatever other rows share the call (their count, the row's place among them, rows past
    a row block) and whatever range of output channels is computed. A product whose kernel or
    summation order follows the call's shape (BLAS) fails this."""
    rng = np.random.default_rng(8)
    k = 2048
    n = 2 * (GEMM_BLOCK_BYTES // (4 * k)) + 7  # a partial block, not a whole number of passes
    q, scale, zp = _u4(rng, n, k)
    rb = ROW_BLOCK_BYTES // (4 * k)
    m = rb + 23  # past one block of activation rows
    x = (rng.standard_normal((m, k)) * np.exp2(rng.integers(-12, 13, (m, k)))).astype(np.float32)
    full = np.empty((m, n), np.float32)
    gemm_runner("u4", x, q, scale, zp, full, k)()
    for a, b in [(0, 17), (5, 22), (3, m), (m - 17, m), (rb - 9, rb + 10), (1, 18 + 4 * 3)]:
        part = np.empty((b - a, n), np.float32)
        gemm_runner("u4", np.ascontiguousarray(x[a:b]), q, scale, zp, part, k)()
        assert np.array_equal(part, full[a:b]), (a, b)
    others = np.ascontiguousarray(np.concatenate([rng.standard_normal((20, k)).astype(np.float32), x[7:8]]))
    alone = np.empty((21, n), np.float32)
    gemm_runner("u4", others, q, scale, zp, alone, k)()
    assert np.array_equal(alone[-1], full[7])
    c0, c1 = 5, n - 3  # a channel range starting and ending inside passes of channels
    cols = np.empty((m, c1 - c0), np.float32)
    gemm_runner("u4", x, q[c0:c1].copy(), scale[c0:c1].copy(), zp[c0:c1].copy(), cols, k)()
    assert np.array_equal(cols, full[:, c0:c1])


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




@pytest.mark.parametrize("kernel", ["_mm_block_4x6", "_mm_block_2x6"])
def test_both_micro_kernels_sum_a_row_alone(kernel):
    """Each micro-kernel (4 x 6 on AVX-512 hosts, 2 x 6 elsewhere: gemm.MR picks one per host;
    both run here) gives a row the same bits whatever rows run beside it and wherever it sits
    among them, and close to numpy's product (float64 reference)."""
    from ov_npu_emu_npu.device.kernels import gemm

    mm = getattr(gemm, kernel)
    mr = 4 if kernel.endswith("4x6") else 2
    rng = np.random.default_rng(11)
    k, h = 1000, 13  # 13 channels: two whole passes of 6 and one padded
    w = np.zeros((18, k), np.float32)
    w[:h] = rng.standard_normal((h, k))
    x = rng.standard_normal((12, k)).astype(np.float32)
    full = np.full((12, 20), np.nan, np.float32)
    mm(w, h, x, 12, full, 3, 4 * mr)
    assert np.isnan(full[:, :3]).all() and np.isnan(full[:, 3 + h:]).all()
    ref = x.astype(np.float64) @ w[:h].T.astype(np.float64)
    assert np.allclose(full[:, 3:3 + h], ref, rtol=1e-4, atol=1e-3)
    for row in range(12):
        alone = np.zeros((mr, k), np.float32)  # the row first among zero padding rows
        alone[0] = x[row]
        out = np.full((1, 20), np.nan, np.float32)
        mm(w, h, alone, 1, out, 3, mr)
        assert np.array_equal(out[0, 3:3 + h], full[row, 3:3 + h]), row
        last = np.zeros((2 * mr, k), np.float32)  # the row last, after other rows
        last[:-1] = rng.standard_normal((2 * mr - 1, k))
        last[-1] = x[row]
        out2 = np.full((2 * mr, 20), np.nan, np.float32)
        mm(w, h, last, 2 * mr, out2, 3, mr)
        assert np.array_equal(out2[-1, 3:3 + h], full[row, 3:3 + h]), row
