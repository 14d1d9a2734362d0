"""Prefill-shaped MatMul (many activation rows) on a weight's stored format.

Above :data:`..dequant.STORED_FORMAT_MAX_ROWS` rows each decompressed weight is reused by
every row. The weight is decompressed one block of output channels at a time, by the numba
loops of :mod:`.gemv` (the IR's f32 ``(q - zp) * scale``, f16 converted exactly: the same values
as :func:`..dequant.dequantize`), into a per-thread f32 buffer that stays in L2, and a numba
micro-kernel multiplies all activation rows by that block: each weight is read and
decompressed once per run, no whole-weight f32 copy exists, and no cache entry is taken.
Ranges of output channels are claimed by the calling thread and the gemv pool (the loops
release the GIL).

The micro-kernel computes :data:`MR` activation rows (4 on AVX-512 hosts, 2 elsewhere) x 6
output channels per pass of one vectorised loop over K; fewer rows or channels are padded with
zeros (whose products are discarded). 4-bit weights are decompressed as [even columns | odd
columns] and the activation rows' columns reordered likewise (contiguous stores). Every output
element is therefore that one loop's sum of ``x[m, k] * w[n, k]``, in an order fixed by K
alone: whatever the number of rows, a row's position among them, or how channels and rows are
blocked, a row's result is the same bit for bit. So a token-row window
(device/windowed.py) computes just its rows (:func:`gemm_runner`'s ``rows_from``) and they are
the full run's by construction, with no probe; and the row tiles of one prefill MatMul give the
rows one product over all of them would. (BLAS, used here before, picks its kernel and
summation order from the call's shapes: a window's rows matched the full run's only on as many
trailing rows as a probe on random data showed exact, often the whole tile.)
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable

import numpy as np
from numba import njit

from ov_npu_emu_npu.device.kernels.gemv import (
    _JIT,
    _dq_row_q4,
    _dq_row_q8,
    _f32,
    _pool,
    _workers,
    avx512,
    grouped_weight,
)

#: f32 bytes of one decompressed block of output channels (a buffer per thread): with a block of
#: activation rows (:data:`ROW_BLOCK_BYTES`) it stays in a core's L2 while the micro-kernel passes
GEMM_BLOCK_BYTES = 1024 * 1024
#: f32 bytes of the activation rows multiplied by one decompressed block before the next rows
ROW_BLOCK_BYTES = 512 * 1024
#: activation rows and output channels per micro-kernel pass (the units of zero padding). On
#: AVX-512, 4 x 6: 24 accumulators, with the loaded operands within its 32 vector registers (4 x 6
#: ran ~1.2x the FLOP rate of 4 x 4 there, loading 10 vectors per 24 FMAs instead of 8 per 16).
#: Elsewhere (AVX2: 16 registers) 2 x 6: 4 x 6 spills its accumulators there (24 GFLOP/s per
#: core on the Zen 1 host of issue 29 against 36-38 for 2 x 6, 2 x 4 or 3 x 4, L2-resident blocks)
MR, NR = (4, 6) if avx512() else (2, 6)
#: below this many weight elements one thread does the whole product
_SPLIT_MIN_ELEMENTS = 1 << 18
#: ranges of output channels per worker thread (claimed as threads come free: a core another
#: process holds for a while then delays the product by one range, not by half of it)
_RANGES_PER_WORKER = 4


@njit(**_JIT)
def _mm_block_4x6(w, h, x, m_real, out, c0, rb):
    """``out[m, c0 + n] = sum_k x[m, k] * w[n, k]`` for m < ``m_real``, n < ``h``: ``x`` has a
    multiple of 4 rows (zero rows after ``m_real``), ``w`` one of 6 rows (zeros after ``h``).
    Every element is one pass of the same loop (4 rows x 6 channels: 24 accumulators, vectorised
    over K with a fixed reduction order), so it does not depend on which rows or channels run
    beside it."""
    mp, k = x.shape
    hp = (h + 5) // 6 * 6
    for m_lo in range(0, mp, rb):
        m_hi = min(mp, m_lo + rb)
        for n0 in range(0, hp, 6):
            w0, w1, w2, w3, w4, w5 = w[n0], w[n0 + 1], w[n0 + 2], w[n0 + 3], w[n0 + 4], w[n0 + 5]
            for m0 in range(m_lo, m_hi, 4):
                x0, x1, x2, x3 = x[m0], x[m0 + 1], x[m0 + 2], x[m0 + 3]
                a00 = a01 = a02 = a03 = a04 = a05 = np.float32(0.0)
                a10 = a11 = a12 = a13 = a14 = a15 = np.float32(0.0)
                a20 = a21 = a22 = a23 = a24 = a25 = np.float32(0.0)
                a30 = a31 = a32 = a33 = a34 = a35 = np.float32(0.0)
                for j in range(k):
                    v0, v1, v2, v3 = x0[j], x1[j], x2[j], x3[j]
                    u = w0[j]
                    a00 += v0 * u
                    a10 += v1 * u
                    a20 += v2 * u
                    a30 += v3 * u
                    u = w1[j]
                    a01 += v0 * u
                    a11 += v1 * u
                    a21 += v2 * u
                    a31 += v3 * u
                    u = w2[j]
                    a02 += v0 * u
                    a12 += v1 * u
                    a22 += v2 * u
                    a32 += v3 * u
                    u = w3[j]
                    a03 += v0 * u
                    a13 += v1 * u
                    a23 += v2 * u
                    a33 += v3 * u
                    u = w4[j]
                    a04 += v0 * u
                    a14 += v1 * u
                    a24 += v2 * u
                    a34 += v3 * u
                    u = w5[j]
                    a05 += v0 * u
                    a15 += v1 * u
                    a25 += v2 * u
                    a35 += v3 * u
                c, end = c0 + n0, c0 + h
                _store6(out, m0, m_real, c, end, a00, a01, a02, a03, a04, a05)
                _store6(out, m0 + 1, m_real, c, end, a10, a11, a12, a13, a14, a15)
                _store6(out, m0 + 2, m_real, c, end, a20, a21, a22, a23, a24, a25)
                _store6(out, m0 + 3, m_real, c, end, a30, a31, a32, a33, a34, a35)


@njit(**_JIT)
def _mm_block_2x6(w, h, x, m_real, out, c0, rb):
    """:func:`_mm_block_4x6` two rows at a time (12 accumulators): AVX2's 16 vector registers hold
    them with the loaded operands, where 4 x 6's 24 accumulators spill."""
    mp, k = x.shape
    hp = (h + 5) // 6 * 6
    for m_lo in range(0, mp, rb):
        m_hi = min(mp, m_lo + rb)
        for n0 in range(0, hp, 6):
            w0, w1, w2, w3, w4, w5 = w[n0], w[n0 + 1], w[n0 + 2], w[n0 + 3], w[n0 + 4], w[n0 + 5]
            for m0 in range(m_lo, m_hi, 2):
                x0, x1 = x[m0], x[m0 + 1]
                a00 = a01 = a02 = a03 = a04 = a05 = np.float32(0.0)
                a10 = a11 = a12 = a13 = a14 = a15 = np.float32(0.0)
                for j in range(k):
                    v0, v1 = x0[j], x1[j]
                    u = w0[j]
                    a00 += v0 * u
                    a10 += v1 * u
                    u = w1[j]
                    a01 += v0 * u
                    a11 += v1 * u
                    u = w2[j]
                    a02 += v0 * u
                    a12 += v1 * u
                    u = w3[j]
                    a03 += v0 * u
                    a13 += v1 * u
                    u = w4[j]
                    a04 += v0 * u
                    a14 += v1 * u
                    u = w5[j]
                    a05 += v0 * u
                    a15 += v1 * u
                c, end = c0 + n0, c0 + h
                _store6(out, m0, m_real, c, end, a00, a01, a02, a03, a04, a05)
                _store6(out, m0 + 1, m_real, c, end, a10, a11, a12, a13, a14, a15)


_mm_block = _mm_block_4x6 if MR == 4 else _mm_block_2x6


@njit(**_JIT)
def _store6(out, m, m_real, c, c_end, a0, a1, a2, a3, a4, a5):
    """One row's six sums into ``out[m, c:c + 6]``, those before row ``m_real`` / column ``c_end``."""
    if m >= m_real:
        return
    row = out[m]
    for i, a in enumerate((a0, a1, a2, a3, a4, a5)):
        if c + i < c_end:
            row[c + i] = a


@njit(**_JIT)
def _pad_rows(buf, h):
    """Zero rows ``h`` up to the next multiple of NR: the micro-kernel's padding channels."""
    for i in range(h, (h + NR - 1) // NR * NR):
        buf[i, :] = 0.0


@njit(**_JIT)
def _gemm_f16(x, m_real, q, out, c0, c1, hb, rb, buf):
    """Output channels [c0, c1) of ``x @ f32(q).T``; q is [N, K] f16 bits."""
    _, k = q.shape
    for b0 in range(c0, c1, hb):
        h = min(c1, b0 + hb) - b0
        for i in range(h):
            qn, dst = q[b0 + i], buf[i]
            for j in range(k):
                dst[j] = _f32(qn[j])
        _pad_rows(buf, h)
        _mm_block(buf, h, x, m_real, out, b0, rb)


@njit(**_JIT)
def _gemm_q8(x, m_real, q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, out, c0, c1, hb, rb, buf):
    for b0 in range(c0, c1, hb):
        h = min(c1, b0 + hb) - b0
        for i in range(h):
            _dq_row_q8(q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, b0 + i, buf[i])
        _pad_rows(buf, h)
        _mm_block(buf, h, x, m_real, out, b0, rb)


@njit(**_JIT)
def _gemm_q4(x, m_real, q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, out, c0, c1, hb, rb, buf):
    """4-bit rows decompressed as [even columns | odd columns] (contiguous stores; ``x`` has its
    columns in that order: :func:`gemm_runner`)."""
    for b0 in range(c0, c1, hb):
        h = min(c1, b0 + hb) - b0
        for i in range(h):
            _dq_row_q4(q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, b0 + i, buf[i])
        _pad_rows(buf, h)
        _mm_block(buf, h, x, m_real, out, b0, rb)


_SCRATCH = threading.local()


def _block_buffer(rows: int, k: int) -> np.ndarray:
    """This thread's f32 block buffer as [rows, k], shared by every task: a buffer per task would
    hold a megabyte for each of the thousands of prefill MatMul tasks of an LLM."""
    size = rows * k
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None or buf.size < size:
        buf = _SCRATCH.buf = np.empty(max(size, GEMM_BLOCK_BYTES // 4), np.float32)
    return buf[:size].reshape(rows, k)


def block_kernel(
    name: str, q: np.ndarray, scale: np.ndarray | None, zp: np.ndarray | None, n: int, k: int, mul_f16: bool,
) -> Callable[[np.ndarray, int, np.ndarray, int, int, int, int, np.ndarray], None] | None:
    """``kernel(x, m_real, out, c0, c1, hb, rb, buf)`` computing output channels [c0, c1) of the
    product (see :func:`_gemm_q4`), or None when the operands are not a layout the numba loops
    read (the caller keeps the numpy path)."""
    if q.shape[0] != n or not q.flags.c_contiguous:
        return None
    if name == "f16":
        if q.size != n * k:
            return None
        bits = q.reshape(n, k).view(np.uint16)
        return lambda x, m, out, c0, c1, hb, rb, buf: _gemm_f16(x, m, bits, out, c0, c1, hb, rb, buf)
    gw = grouped_weight(q, scale, zp, n)
    if gw is None:
        return None
    qb, sc, zp_bits, has_zp, zp_flip, groups = gw
    if name in ("u8", "i8") and groups * q.shape[2] == k:
        qf8 = 128 if name == "i8" else 0
        return lambda x, m, out, c0, c1, hb, rb, buf: _gemm_q8(
            x, m, qb, sc, zp_bits, has_zp, qf8, zp_flip, mul_f16, out, c0, c1, hb, rb, buf)
    if name in ("u4", "i4") and groups * q.shape[2] * 2 == k:
        qf4 = 8 if name == "i4" else 0
        return lambda x, m, out, c0, c1, hb, rb, buf: _gemm_q4(
            x, m, qb, sc, zp_bits, has_zp, qf4, zp_flip, mul_f16, out, c0, c1, hb, rb, buf)
    return None


def _run_jobs(do: Callable[[int, int], None], jobs: list[tuple[int, int]], workers: int) -> None:
    """``do(*job)`` for every job, on ``workers`` threads (the caller's one of them)."""
    if workers == 1:
        for job in jobs:
            do(*job)
        return
    # ranges claimed by whichever thread is free (a pool thread may wait for a core)
    claim = itertools.count()
    done = itertools.count(1)
    finished = threading.Event()
    errors: list[BaseException] = []

    def work() -> None:
        while (i := next(claim)) < len(jobs):
            try:
                do(*jobs[i])
            except BaseException as e:  # noqa: BLE001 - re-raised by the calling thread
                errors.append(e)
            if next(done) == len(jobs):
                finished.set()

    pool = _pool()
    for _ in range(1, workers):
        pool.submit(work)
    work()
    finished.wait()
    if errors:
        raise errors[0]


def _channel_ranges(n: int, hb: int, parts: int) -> list[tuple[int, int]]:
    """[c0, c1) ranges covering [0, n), about ``parts`` of them, cut on block edges."""
    blocks = -(-n // hb)
    per = max(1, -(-blocks // parts))
    return [(b * hb, min(n, (b + per) * hb)) for b in range(0, blocks, per)]


def gemm_runner(
    name: str, x: np.ndarray, q: np.ndarray, scale: np.ndarray | None, zp: np.ndarray | None, out: np.ndarray,
    k: int, mul_f16: bool = False, rows_from: int = 0,
) -> Callable[[], None] | None:
    """A runner computing ``out[M, N] = x[M, K] @ W.T`` block by block of decompressed output
    channels, or None when the operands are not a layout this path reads. Arguments as for
    :func:`.gemv.gemv_runner` (any number of rows).

    ``rows_from``: only rows [rows_from, M) of ``out`` are computed (a token-row window; the rows
    before it are left as they are), bit for bit the rows the runner with ``rows_from=0``
    computes (module docstring)."""
    m_rows, n = out.shape
    if x.shape != (m_rows, k) or m_rows == 0 or not 0 <= rows_from < m_rows or k == 0:
        return None
    if out.dtype != np.float32 or not out.flags.c_contiguous:
        return None
    kernel = block_kernel(name, q, scale, zp, n, k, mul_f16)
    if kernel is None:
        return None
    m = m_rows - rows_from
    mp = -(-m // MR) * MR
    hb = max(NR, GEMM_BLOCK_BYTES // (4 * k) // NR * NR)  # blocks of whole passes: padding in the last only
    rb = max(MR, ROW_BLOCK_BYTES // (4 * k) // MR * MR)
    workers = 1 if n * k < _SPLIT_MIN_ELEMENTS else _workers()
    jobs = _channel_ranges(n, hb, workers * _RANGES_PER_WORKER if workers > 1 else 1)
    dst = out[rows_from:]
    # the rows as the kernel reads them: a view when they are whole passes of C-contiguous
    # f32, else a copy padded with zero rows (made per run: a task holding it would keep it
    # resident for every prefill MatMul of the model)
    # 4-bit weights are decompressed as [even columns | odd columns], so the rows' columns are
    # reordered likewise: each output element still sums over K in one order fixed by K alone
    split = name in ("u4", "i4")
    direct = mp == m and x.dtype == np.float32 and x.flags.c_contiguous and not split

    def run() -> None:
        if direct:
            xs = x[rows_from:]
        elif split:
            xs = np.zeros((mp, k), np.float32)
            xs[:m, :k // 2] = x[rows_from:, 0::2]
            xs[:m, k // 2:] = x[rows_from:, 1::2]
        else:
            xs = np.zeros((mp, k), np.float32)
            xs[:m] = x[rows_from:]

        def do(c0: int, c1: int) -> None:
            kernel(xs, m, dst, c0, c1, hb, rb, _block_buffer(-(-hb // NR) * NR, k))

        _run_jobs(do, jobs, min(workers, len(jobs)))

    if rows_from == 0:
        # device/windowed.py: this run's last rows, the full run's bits without a probe
        run.window_from = lambda start: gemm_runner(  # type: ignore[attr-defined]
            name, x, q, scale, zp, out, k, mul_f16, rows_from=start)
    return run
