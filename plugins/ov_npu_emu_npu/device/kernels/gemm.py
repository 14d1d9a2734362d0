"""Prefill-shaped MatMul (many activation rows) on a weight's stored format.

Above :data:`..dequant.STORED_FORMAT_MAX_ROWS` rows each decompressed weight is reused by
every row, so BLAS on f32 is the fast product. The weight is decompressed one block of output
channels at a time, by the numba loops of :mod:`.gemv` (the IR's f32 ``(q - zp) * scale``,
f16 converted exactly: the same values as :func:`..dequant.dequantize`), into an L2-sized f32
buffer per thread, and BLAS multiplies all activation rows by that block: each weight is read
and decompressed once per run, no whole-weight f32 copy exists, and no cache entry is taken.
Blocks of output channels are claimed by the calling thread and the gemv pool (the numba loops
and BLAS release the GIL). Rows are decompressed in column order, so BLAS pairs the same terms
as on the whole decompressed weight (the cached path); its summation order depends on the
operand shapes, so the results agree with that path to the last f32 bits, not always bit for
bit (tested within the summation-order bound and against the CPU plugin).

A token-row window (device/windowed.py) asks the runner for its last rows only
(:func:`gemm_runner`'s ``rows_from``). BLAS's sums depend on the call's shapes, not on the
data: OpenBLAS takes a different kernel for small products (M·N·K up to about 10⁶ here), so a
6-row window of a 42-row tile does not give the tile's bits. Each block of output channels
therefore runs on the fewest trailing rows that a product on random data of exactly those
shapes shows equal to the full run's (:func:`_exact_rows`, once per shape; at worst all the
rows: the full run's own call), so the window's rows are the full run's bit for bit without a
pass over the real weights.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import itertools
import threading
from collections.abc import Callable, Iterator

import numpy as np
from numba import njit
from threadpoolctl import ThreadpoolController

from ov_npu_emu_npu.device.kernels.gemv import _JIT, _dq_row_q4, _dq_row_q8, _f32, _pool, _workers, grouped_weight

#: f32 bytes of one decompressed block of output channels (a buffer per thread).  BLAS packs the
#: activation rows again for every call, so fewer, taller blocks than L2 holds won; the gain
#: levels off around this size (docs/performance.md, "Large models on the emulated NPU")
GEMM_BLOCK_BYTES = 2 * 1024 * 1024
#: below this many weight elements one thread does the whole product
_SPLIT_MIN_ELEMENTS = 1 << 18


@njit(**_JIT)
def _dq_block_f16(q, r0, r1, buf):
    """Rows [r0, r1) of an f16 weight (uint16 bits) -> f32 ``buf``, exactly."""
    _, k = q.shape
    for i in range(r1 - r0):
        qn, dst = q[r0 + i], buf[i]
        for j in range(k):
            dst[j] = _f32(qn[j])


@njit(**_JIT)
def _dq_block_q8(q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, r0, r1, buf):
    for i in range(r1 - r0):
        _dq_row_q8(q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, r0 + i, buf[i])


@njit(**_JIT)
def _dq_block_q4(q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, r0, r1, buf):
    """4-bit rows in column order (low nibble first), so BLAS sums the terms as it does on the
    whole decompressed weight (the decode loop's [even | odd] layout would reorder them)."""
    for i in range(r1 - r0):
        _dq_row_q4(q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, r0 + i, buf[i], True)


_SCRATCH = threading.local()

_BLAS_LOCK = threading.Lock()
_blas_users = 0
_blas_saved: list[tuple[_OpenBLAS, int]] = []


class _OpenBLAS:
    """One loaded OpenBLAS's process-wide thread count, called directly: threadpoolctl finds the
    libraries, but its own setter (3.8 on) obeys only the first Python thread that ever set it,
    while the threads running inferences here come and go (the count of users is kept below)."""

    def __init__(self, path: str) -> None:
        lib = ctypes.CDLL(path)  # the loaded library itself (dlopen of a loaded path)
        names = [(f"{p}openblas_get_num_threads{s}", f"{p}openblas_set_num_threads{s}")
                 for p in ("", "scipy_") for s in ("", "64_")]
        get, put = next(((getattr(lib, g), getattr(lib, t)) for g, t in names
                         if hasattr(lib, g) and hasattr(lib, t)), (None, None))
        if get is None or put is None:
            raise AttributeError(f"no OpenBLAS thread-count functions in {path}")
        get.restype, put.argtypes = ctypes.c_int, [ctypes.c_int]
        self.get_num_threads, self.set_num_threads = get, put


@functools.cache
def _blas_libraries() -> list[_OpenBLAS]:
    libs = []
    for info in ThreadpoolController().select(internal_api="openblas").info():
        try:
            libs.append(_OpenBLAS(info["filepath"]))
        except (OSError, AttributeError):  # another build: its threads stay as they are
            pass
    return libs


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """BLAS on one thread while block products run (and while their rows are probed, so that
    the probe and the run take the same kernels).  The block pool is the parallelism, one block
    per core; OpenBLAS's own threads on top of it wait for cores the pool holds, which slowed a
    large prefill window markedly (docs/performance.md, "Large models on the
    emulated NPU").  OpenBLAS's
    thread count is process-wide, so concurrent and nested users share one setting, restored
    by the last one out."""
    global _blas_users
    with _BLAS_LOCK:
        if _blas_users == 0:
            _blas_saved[:] = [(lib, lib.get_num_threads()) for lib in _blas_libraries()]
            for lib, _ in _blas_saved:
                lib.set_num_threads(1)
        _blas_users += 1
    try:
        yield
    finally:
        with _BLAS_LOCK:
            _blas_users -= 1
            if _blas_users == 0:
                for lib, n in _blas_saved:
                    lib.set_num_threads(n)


def _block_buffer(size: int) -> np.ndarray:
    """This thread's f32 block buffer (``size`` items), shared by every task: a buffer per task
    would hold half a megabyte for each of the thousands of prefill MatMul tasks of an LLM."""
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None or buf.size < size:
        buf = _SCRATCH.buf = np.empty(max(size, GEMM_BLOCK_BYTES // 4), np.float32)
    return buf[:size]


def block_dequantizer(
    name: str, q: np.ndarray, scale: np.ndarray | None, zp: np.ndarray | None, n: int, k: int, mul_f16: bool,
) -> Callable[[int, int, np.ndarray], None] | None:
    """``fill(r0, r1, buf)`` writing weight rows [r0, r1) as f32 into ``buf[:r1 - r0]``, or None
    when the operands are not a layout the numba loops read (the caller keeps the numpy path)."""
    if q.shape[0] != n or not q.flags.c_contiguous:
        return None
    if name == "f16":
        if q.size != n * k:
            return None
        bits = q.reshape(n, k).view(np.uint16)
        return lambda r0, r1, buf: _dq_block_f16(bits, r0, r1, buf)
    gw = grouped_weight(q, scale, zp, n)
    if gw is None:
        return None
    qb, scale, zp_bits, has_zp, zp_flip, groups = gw
    if name in ("u8", "i8") and groups * q.shape[2] == k:
        qf8 = 128 if name == "i8" else 0
        return lambda r0, r1, buf: _dq_block_q8(qb, scale, zp_bits, has_zp, qf8, zp_flip, mul_f16, r0, r1, buf)
    if name in ("u4", "i4") and groups * q.shape[2] * 2 == k:
        qf4 = 8 if name == "i4" else 0
        return lambda r0, r1, buf: _dq_block_q4(qb, scale, zp_bits, has_zp, qf4, zp_flip, mul_f16, r0, r1, buf)
    return None


#: (block rows, K, activation rows) -> {trailing rows m: whether the product on the last m rows
#: gives the full product's last rows bit for bit}, filled as windows ask: each m is probed once
#: per shape, however many window starts (prompt lengths) come to need it
_EXACT: dict[tuple[int, int, int], dict[int, bool]] = {}
_EXACT_LOCK = threading.Lock()
_EXACT_TRIALS = 3


def _exact_rows(h: int, k: int, m_rows: int, need: int) -> int:
    """The fewest trailing activation rows, at least ``need``, whose product with an [h, K]
    block gives the full ``m_rows`` product's last rows bit for bit (``m_rows``: the full run's
    own call). Probed on random data in the very calls the runner makes (the thread's block
    buffer, contiguous transposed activations, row slices of the output): BLAS picks its kernel
    and summation order from the shapes alone."""
    with _EXACT_LOCK:
        known = _EXACT.setdefault((h, k, m_rows), {})
        exact: Callable[[int], bool] | None = None  # the probe, made when a count is unknown
        for m in range(max(need, 1), m_rows):
            ok = known.get(m)
            if ok is None:
                exact = exact or _trailing_rows_probe(h, k, m_rows)
                ok = known[m] = exact(m)
            if ok:
                return m
        return m_rows


def _trailing_rows_probe(h: int, k: int, m_rows: int) -> Callable[[int], bool]:
    """:func:`_exact_rows`'s probe (called under its lock): ``exact(m)`` says whether the last
    ``m`` rows' product equals the full one's on every trial; BLAS on one thread as in the runs."""
    rng = np.random.default_rng(0)
    w = _block_buffer(h * k).reshape(h, k)
    trials = []
    with one_blas_thread():
        for _ in range(_EXACT_TRIALS):
            # magnitudes over 2**±16: any other pairing or order of the sums changes the rounding
            x = (rng.standard_normal((m_rows, k)) * np.exp2(rng.integers(-16, 17, (m_rows, k)))).astype(np.float32)
            wt = (rng.standard_normal((h, k)) * np.exp2(rng.integers(-16, 17, (h, k)))).astype(np.float32)
            w[...] = wt
            full = np.empty((h, m_rows), np.float32)
            np.matmul(w, np.ascontiguousarray(x.T), out=full)
            trials.append((wt, x, full))

    def exact(m: int) -> bool:
        with one_blas_thread():
            for wt, x, full in trials:  # the first differing trial settles it
                w[...] = wt
                part = np.empty((h, m), np.float32)
                np.matmul(w, np.ascontiguousarray(x[m_rows - m:].T), out=part)
                if not np.array_equal(part, full[:, m_rows - m:]):
                    return False
        return True

    return exact


def _run_jobs(do_block: Callable[[int, np.ndarray, np.ndarray], None], jobs: list[tuple[int, np.ndarray, np.ndarray]],
              workers: int) -> None:
    """``do_block(*job)`` for every job, on ``workers`` threads (the caller's one of them)."""
    if workers == 1:
        for job in jobs:
            do_block(*job)
        return
    # blocks claimed by whichever thread is free (a pool thread may wait for a core)
    claim = itertools.count()
    done = itertools.count(1)
    finished = threading.Event()
    errors: list[BaseException] = []

    def work() -> None:
        while (i := next(claim)) < len(jobs):
            try:
                do_block(*jobs[i])
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


def gemm_runner(
    name: str, x: np.ndarray, q: np.ndarray, scale: np.ndarray | None, zp: np.ndarray | None, out: np.ndarray,
    k: int, mul_f16: bool = False, rows_from: int = 0,
) -> Callable[[], None] | None:
    """A runner computing ``out[M, N] = x[M, K] @ W.T`` block by block of decompressed output
    channels, or None when the operands are not a layout this path reads. Arguments as for
    :func:`.gemv.gemv_runner` (any number of rows).

    ``rows_from``: only rows [rows_from, M) of ``out`` must be right (a token-row window; the
    rows before it may be left as they are or overwritten), and they are bit for bit the rows
    the runner with ``rows_from=0`` computes (module docstring)."""
    m_rows, n = out.shape
    if x.shape != (m_rows, k) or m_rows == 0 or not 0 <= rows_from < m_rows:
        return None
    fill = block_dequantizer(name, q, scale, zp, n, k, mul_f16)
    if fill is None:
        return None
    block = max(1, min(n, GEMM_BLOCK_BYTES // (4 * k)))
    starts = list(range(0, n, block))
    workers = 1 if n * k < _SPLIT_MIN_ELEMENTS else min(_workers(), len(starts))

    def do_block(r0: int, x_t: np.ndarray, dst: np.ndarray) -> None:
        r1 = min(n, r0 + block)
        buf = _block_buffer((r1 - r0) * k).reshape(r1 - r0, k)
        fill(r0, r1, buf)
        np.matmul(buf, x_t, out=dst)  # dst: the block's rows of a C-contiguous [*, rows] array

    def products(jobs: list[tuple[int, np.ndarray, np.ndarray]]) -> None:
        with one_blas_thread():
            _run_jobs(do_block, jobs, workers)

    if rows_from == 0:
        def run() -> None:
            # the product as out.T = W @ x.T: BLAS runs a block [nb, K] @ [K, M] faster than the
            # [M, K] @ [K, nb] of x @ W.T (for prompt-sized M). Both made per run: a
            # task holding them would keep them resident for every prefill MatMul of the model
            x_t = np.ascontiguousarray(x.T)
            out_t = np.empty((n, m_rows), np.float32)
            products([(r0, x_t, out_t[r0:r0 + block]) for r0 in starts])
            np.copyto(out, out_t.T)

        # device/windowed.py: this run's last rows, exact without a probe on the real weights
        run.window_from = lambda start: gemm_runner(  # type: ignore[attr-defined]
            name, x, q, scale, zp, out, k, mul_f16, rows_from=start)
        return run

    # the trailing rows each block height runs on (only the last block may be shorter)
    need = m_rows - rows_from
    rows_of = {h: _exact_rows(h, k, m_rows, need) for h in {min(block, n - r0) for r0 in starts}}
    groups: dict[int, list[int]] = {}  # rows -> block starts (adjacent: one output slice each)
    for r0 in starts:
        groups.setdefault(rows_of[min(block, n - r0)], []).append(r0)
    spans = [(m, rs[0], min(n, rs[-1] + block)) for m, rs in groups.items()]

    def run_window() -> None:
        jobs, copies = [], []
        for m, c0, c1 in spans:
            x_t = np.ascontiguousarray(x[m_rows - m:].T)
            out_t = np.empty((c1 - c0, m), np.float32)
            jobs += [(r0, x_t, out_t[r0 - c0:r0 - c0 + block]) for r0 in starts if c0 <= r0 < c1]
            copies.append((out[m_rows - m:, c0:c1], out_t.T))
        products(jobs)
        for dst, src in copies:
            np.copyto(dst, src)

    return run_window
