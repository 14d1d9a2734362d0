"""Scaled dot-product attention (SHAVE), with the masked-column skipper and the padded-row window."""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ov_npu_emu.errors import ExecutionError
from ov_npu_emu_npu.blob.kernel_params import SdpaParams
from ov_npu_emu_npu.device.kernels.blasthreads import one_blas_thread
from ov_npu_emu_npu.device.kernels.hostalign import ALIGN, aligned, mod
from ov_npu_emu_npu.device.kernels.registry import Runner, kernel


class RowWindow:
    """The driver's "valid rows" hint for one inference (NPU_EMU_SKIP_PADDED_ROWS).

    ``size`` > 0: in attention whose query and key axes both have ``size`` entries, rows and
    columns before ``start`` are left padding whose outputs nobody reads.  Attention then runs
    on the window alone when the mask provably shuts every window row off the padding columns
    (see :func:`_sdpa`); when it cannot prove that it sets ``violated`` and the driver re-runs
    the inference without the hint.  ``size`` 0: no hint.
    """

    __slots__ = ("rows_computed", "rows_full", "size", "start", "unusable", "used", "violated", "windowed_tasks")

    def __init__(self) -> None:
        self.size = 0
        self.start = 0
        self.violated = False
        self.used = 0  # attention tasks that ran on the window in the last inference
        self.unusable = False  # an attention's layout admits no window: stop hinting
        # row-wise tasks (device/windowed.py) in the last inference: how many ran on the window,
        # and the token rows they computed against the rows a full run computes
        self.windowed_tasks = 0
        self.rows_computed = 0
        self.rows_full = 0

    def reset(self) -> None:
        """Before an inference: no window until the driver sets one."""
        self.size = self.start = self.used = 0
        self.windowed_tasks = self.rows_computed = self.rows_full = 0
        self.violated = False

    def active(self, rows: int, cols: int) -> bool:
        return self.size > 0 and self.start > 0 and rows == cols == self.size



def _view(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``a`` reshaped without copying (a copy would detach the kernel from device memory)."""
    v = a.view()
    v.shape = shape  # raises instead of copying
    return v


#: margin (in logits) below which a masked-out column's exp() underflows to exactly 0 in f32
#: (exp(x) == 0 for x < -103.98), with room for the roundings of scale and mask additions
_EXP_ZERO_MARGIN = 128.0
_F32_LOWEST = float(np.finfo(np.float32).min)
#: skip masked-out columns only when at least this share of the window is masked out
_SKIP_SHARE = 0.05
#: ... and only for score matrices this large: the checks and gathers cost ~30 numpy calls,
#: more than a decode step's whole attention
_SKIP_MIN_SCORES = 1 << 16


def _absmax(x: np.ndarray) -> float:
    """max |x|; NaN propagates through both reductions."""
    return max(abs(float(np.maximum.reduce(x, axis=None))), abs(float(np.minimum.reduce(x, axis=None))))


def _softmax_times_v(scores, rowmax, v, o, direct: bool, blocks=None,
                     staged: tuple[np.ndarray, Runner] | None = None) -> None:
    """``o = softmax(scores, -1) @ v``, the softmax in place in ``scores`` (``rowmax`` is scratch);
    ``direct``: ``o`` has the product's shape and dtype, else it is copied in reshaped;
    ``blocks``: the [a, b) score rows of each product call (:func:`row_blocks`), else one call;
    ``staged``: (an f32 buffer of the product's shape, the runner rounding it into an f16 ``o``):
    numpy's cast's bits without its per-element conversion (kernels/f16.py)."""
    np.maximum.reduce(scores, axis=-1, keepdims=True, out=rowmax)  # np.max/np.sum minus their Python layers
    np.subtract(scores, rowmax, out=scores)
    np.exp(scores, out=scores)
    np.add.reduce(scores, axis=-1, keepdims=True, out=rowmax)
    np.divide(scores, rowmax, out=scores)
    if staged is not None and not direct:
        out32, narrow = staged
        for a, b in blocks if blocks is not None else ((0, scores.shape[-2]),):
            np.matmul(scores[..., a:b, :], v, out=out32[..., a:b, :])
        narrow()
    elif blocks is not None:
        out = o if direct else np.empty((*scores.shape[:-1], v.shape[-1]), np.float32)
        for a, b in blocks:
            np.matmul(scores[..., a:b, :], v, out=out[..., a:b, :])
        if not direct:
            np.copyto(o, out.reshape(o.shape), casting="unsafe")
    elif direct:
        np.matmul(scores, v, out=o)
    else:
        np.copyto(o, np.matmul(scores, v).reshape(o.shape), casting="unsafe")


def _f16_staging(o: np.ndarray, shape: tuple[int, ...]) -> tuple[np.ndarray, Runner] | None:
    """For an f16 attention output: an f32 buffer of the product's ``shape`` and the runner that
    rounds it into ``o`` (:func:`_softmax_times_v`'s ``staged``); None for other outputs."""
    if o.dtype != np.float16 or not o.flags.c_contiguous or math.prod(shape) != o.size:
        return None
    from ov_npu_emu_npu.device.kernels.f16 import narrow_runner

    out32 = np.empty(shape, np.float32)
    narrow = narrow_runner(out32, o)
    return None if narrow is None else (out32, narrow)


def _f16_widened(x: np.ndarray) -> tuple[np.ndarray, Runner | None]:
    """For a C-contiguous f16 ``x``: an f32 copy starting on a line and the runner that refreshes
    it exactly (kernels/f16.py); ``(x, None)`` for anything else."""
    if x.dtype != np.float16 or not x.flags.c_contiguous:
        return x, None
    from ov_npu_emu_npu.device.kernels.f16 import widen_runner

    x32 = aligned(x.shape, np.dtype(np.float32), 0)
    widen = widen_runner(x, x32)
    return (x, None) if widen is None else (x32, widen)


def _masked_column_skipper(
    q32,
    k,
    v,
    mask_in,
    mask,
    groups: int,
    L: int,
    scale: float,
    batch: tuple[int, ...],
    rows: int,
    o,
    direct: bool,
    k_absmax: Callable[[], float] | None = None,
) -> Callable[[], bool] | None:
    """Attention over only the columns the mask leaves open, when that is provably the same.

    A column is skipped when its mask is so low against every row's best open column that
    exp(score - rowmax) underflows to exactly 0 for any q and K within the bound
    B = max|q| * max|k| * D * |scale| (a score moves by at most B):
    colmax(mask) <= min_rows(rowmax(mask)) - 2B - margin (less relative slack for the f32
    roundings of large masks and scores).  Such columns add exact zeros to the
    row sums and (V finite) to the output, so the result is the full computation's up to
    summation order.  NaN/inf in q, K or V, a fully masked row or a mostly open window take the
    full path.  Chunked prefill and short prompts in a long KV window mask most columns.
    ``k_absmax``: max|K| over the K the caller stands for (sdpa_kv: its f16 past, whose closed
    rows its copy ``k`` holds as zeros), else taken over ``k``.
    """
    S, D = k.shape[-2], k.shape[-1]
    try:
        m2 = _view(mask_in, (-1, S))
    except (AttributeError, ValueError):
        return None
    is_bool = m2.dtype == np.bool_
    colmax = np.empty(S, np.bool_ if is_bool else m2.dtype)
    rowmask = np.empty(m2.shape[0], colmax.dtype)
    kb, vb = k.shape[:-2], v.shape[:-2]
    kt_flat = np.empty(math.prod(kb) * D * S, np.float32)
    v_flat = np.empty(math.prod(vb) * S * v.shape[-1], np.float32)
    m_flat = np.empty(mask.size, mask.dtype)
    s_flat = np.empty(math.prod(batch) * rows * S, np.float32)
    rowmax = np.empty((*batch, rows, 1), np.float32)
    qa = q32.reshape(-1) if q32.flags.c_contiguous else q32
    ka, va = k.reshape(-1), v.reshape(-1)

    def run() -> bool:
        if is_bool:
            np.logical_or.reduce(m2, axis=0, out=colmax)
            np.logical_or.reduce(m2, axis=1, out=rowmask)
            if not rowmask.all():  # a fully masked row: NaN in the full computation, keep it
                return False
            keep = colmax
        else:
            np.maximum.reduce(m2, axis=0, out=colmax)
            np.maximum.reduce(m2, axis=1, out=rowmask)
            rowmin = float(np.minimum.reduce(rowmask))
            if not math.isfinite(rowmin) or np.count_nonzero(colmax <= rowmin - _EXP_ZERO_MARGIN) < _SKIP_SHARE * S:
                return False
        # the relative terms cover the f32 roundings of q.k (D terms), scale and mask additions
        bound = _absmax(qa) * (_absmax(ka) if k_absmax is None else k_absmax()) * D * abs(scale) * (1.0 + 2.0**-10)
        if not math.isfinite(bound) or not math.isfinite(_absmax(va)):
            return False
        if not is_bool:
            limit = rowmin - 2.0 * bound - _EXP_ZERO_MARGIN - 2.0**-16 * (abs(rowmin) + 2.0 * bound)
            if limit < _F32_LOWEST:  # a row masked with the f32 minimum everywhere: no column can go
                return False
            keep = ~(colmax <= limit)
        idx = np.flatnonzero(keep)
        n = idx.size
        if n == 0 or S - n < _SKIP_SHARE * S:
            return False
        kt = kt_flat[: math.prod(kb) * D * n].reshape(*kb, D, n)
        np.copyto(kt, np.swapaxes(np.take(k, idx, axis=-2), -1, -2), casting="unsafe")
        vr = v_flat[: math.prod(vb) * n * v.shape[-1]].reshape(*vb, n, v.shape[-1])
        np.copyto(vr, np.take(v, idx, axis=-2), casting="unsafe")
        mr = m_flat[: mask.size // S * n].reshape(*mask.shape[:-1], n)
        np.take(mask, idx, axis=-1, out=mr)
        sc = s_flat[: math.prod(batch) * rows * n].reshape(*batch, rows, n)
        scm = sc.reshape(*batch, groups, L, n) if groups > 1 else sc
        np.matmul(q32, kt, out=sc)
        np.multiply(sc, scale, out=sc)
        if is_bool:
            np.copyto(scm, -np.inf, where=~mr)
        else:
            np.add(scm, mr, out=scm, casting="unsafe")
        _softmax_times_v(sc, rowmax, vr, o, direct)
        return True

    return run


@dataclasses.dataclass
class _SquareOps:
    """What a square attention's window path shares with its full run: the operands (``q5``,
    ``o5``: (..., Hkv, G, L, D); ``k``, ``v``: (..., Hkv, L, D); ``mask5`` broadcastable to the
    (..., Hkv, G, L, L) scores), and the full run's call layout: its row ``blocks`` of the
    stacked (..., G * L) query rows and the scores' ``batch``."""

    q5: np.ndarray
    k: np.ndarray
    v: np.ndarray
    mask5: np.ndarray | None
    bias: np.ndarray | None
    o5: np.ndarray
    groups: int
    blocks: list[tuple[int, int]]
    batch: tuple[int, ...]


#: query rows per BLAS call of a square (prefill) attention, counted back from its last row.  The
#: full run and a token-row window make the very same calls on the rows they share, so the
#: window's rows are the full run's bit for bit by construction: BLAS picks its kernel and
#: summation order from the operand shapes (and the CPU), so a window run at other shapes only
#: agreed where a probe on random data said so - on an AVX2-only AMD EPYC host no shape of the
#: LLMs measured did, and every windowed prefill ran twice.
ROW_BLOCK = 64
_WINDOW_LOCK = threading.Lock()


def row_blocks(L: int, groups: int) -> list[tuple[int, int]]:
    """[a, b) rows of the stacked (groups * L) query axis per BLAS call: ROW_BLOCK rows counted
    back from each group's last row (a shorter block first when L is no multiple of it)."""
    cuts = sorted({0, *range(L % ROW_BLOCK, L, ROW_BLOCK)})
    per_group = list(zip(cuts, [*cuts[1:], L], strict=True))
    return [(g * L + a, g * L + b) for g in range(groups) for a, b in per_group if b > a]


def _windowed_attention(ops: _SquareOps, scale: float, window: RowWindow) -> bool:
    """Attention of the rows [start, L) over the columns [start, L) only; False (and nothing
    written) when the mask does not provably shut those rows off the columns before ``start``.

    The driver sets the window only when every padding row is the same token at the same
    position (so they all compute the same K/V) and the window holds at least one padding row:
    the window's K rows then bound every skipped column's K.  With B = max|q| * max|K| * D *
    |scale| over the window (any score moves by at most B), a padding column whose mask is
    <= min over window rows of the row's best open mask entry - 2B - margin has
    exp(score - rowmax) == 0 exactly in f32, as the masked-column skipper proves it; boolean
    masks must simply be False there.  QK^T and probs @ V run as the full run's own calls
    (:func:`row_blocks`) on the blocks holding window rows, against all L key columns; the
    scores before the window (uncomputed K rows) are replaced by the exact zeros the full run's
    exp() gives there, V's rows before the window by zeros (0 * finite V adds +0 either way), so
    the row sums and products add the same terms in the same order: the window rows are the
    full computation's, bit for bit.  The padding rows of the output are zeroed (finite: no
    0 * NaN can reach a real row later).
    """
    q, k, v, mask5, bias, o5 = ops.q5, ops.k, ops.v, ops.mask5, ops.bias, ops.o5
    w0 = window.start
    L = q.shape[-2]
    if mask5 is None or mask5.shape[-1] != L:
        return False  # no mask, or one broadcast over the columns: the padding stays open
    mrows = mask5[..., w0:, :] if mask5.shape[-2] == L else mask5
    pad, win = mrows[..., :w0], mrows[..., w0:]
    qw, kw = q[..., w0:, :], k[..., w0:, :]

    if mask5.dtype == np.bool_:
        if pad.any() or not np.logical_or.reduce(win, axis=-1).all():
            return False
    else:
        open_min = float(np.minimum.reduce(np.maximum.reduce(win, axis=-1), axis=None))
        bound = _absmax(qw) * _absmax(kw) * q.shape[-1] * abs(scale) * (1.0 + 2.0**-10)
        if not (math.isfinite(open_min) and math.isfinite(bound)):
            return False
        limit = open_min - 2.0 * bound - _EXP_ZERO_MARGIN - 2.0**-16 * (abs(open_min) + 2.0 * bound)
        if not float(np.maximum.reduce(pad, axis=None)) <= limit:
            return False
    # V's rows before the window meet only exact-zero probabilities: zeros here (the row-wise
    # tasks that ran on the window left them uncomputed)
    vf: np.ndarray = np.zeros(v.shape, np.float32)
    np.copyto(vf[..., w0:, :], v[..., w0:, :], casting="unsafe")
    if not math.isfinite(_absmax(vf)):
        return False  # 0 * inf: a zero probability would not zero a padding column's V
    # The full run's calls on the row blocks holding window rows, into arrays of this run: the
    # full run's persistent scratch (hundreds of MB for a 3B model, transparent huge pages)
    # would stay resident for the few rows a window touches.  The operands keep the full run's
    # shapes and row strides (all L key columns); only where they live differs.
    G, L_ = ops.groups, L
    blocks = [(a, b) for a, b in ops.blocks if b % L == 0 or b % L > w0]  # blocks holding window rows
    first = min(a % L for a, _ in blocks)  # rows [first, L) of each group run (padding before w0)
    heads = q.shape[-4] if q.ndim >= 4 else 1
    parts = _head_parts(heads, q.size // (L_ * q.shape[-1]) * (L_ - first) * L_)  # score elements

    def part(h0: int, h1: int) -> None:
        def cut(a: np.ndarray, axis: int) -> np.ndarray:  # heads [h0, h1) of a per-head operand
            if a.ndim < -axis or a.shape[axis] != heads or (h0, h1) == (0, heads):
                return a
            sl = [slice(None)] * a.ndim
            sl[axis] = slice(h0, h1)
            return a[tuple(sl)]

        _window_products(cut(q, -4), cut(k, -3), cut(vf, -3), cut(win, -4), bias, cut(o5, -4), scale,
                         mask5.dtype == np.bool_, w0, first, G, L, blocks)

    if len(parts) == 1:
        part(*parts[0])
    else:
        _in_parallel(part, parts)
    window.used += 1
    return True


def _window_products(q: np.ndarray, k: np.ndarray, vf: np.ndarray, win: np.ndarray, bias: np.ndarray | None,
                     o5: np.ndarray, scale: float, boolean: bool, w0: int, first: int, G: int, L: int,
                     blocks: list[tuple[int, int]]) -> None:
    """The products and softmax of :func:`_windowed_attention` for the heads in ``q`` (..., Hkv,
    G, L, D): per head the same calls whatever heads run beside it (numpy loops over the batch
    axes, one BLAS product per head; the element-wise steps and the row reductions are per
    element / per row), so the heads can be cut among threads."""
    n = L - first
    batch = q.shape[:-3]

    def local(a: int, b: int) -> tuple[int, slice]:  # stacked rows [a, b) -> (group, rows here)
        return a // L, slice(a % L - first, a % L - first + b - a)

    qb = np.ascontiguousarray(q[..., first:, :], dtype=np.float32)  # (..., G, n, D)
    kt = np.ascontiguousarray(np.swapaxes(k, -1, -2), dtype=np.float32)  # as the full run's kt_buf
    s5 = np.empty((*batch, G, n, L), np.float32)
    with np.errstate(all="ignore"):  # the scores of the uncomputed K columns are discarded
        for a, b in blocks:
            g, r = local(a, b)
            np.matmul(qb[..., g, r, :], kt, out=s5[..., g, r, :])
    sw = s5[..., w0 - first :, w0:]
    np.multiply(sw, scale, out=sw)
    if boolean:
        np.copyto(sw, -np.inf, where=~win)
    else:
        np.add(sw, win, out=sw, casting="unsafe")
    if bias is not None:
        np.add(sw, bias[w0:, w0:], out=sw)
    rowmax = np.maximum.reduce(sw, axis=-1, keepdims=True)
    np.subtract(sw, rowmax, out=sw)
    np.exp(sw, out=sw)
    s5[..., : w0 - first, :] = 0.0  # padding rows of the blocks: finite, discarded
    s5[..., w0 - first :, :w0] = 0.0  # the full run's exact zeros
    rows = s5[..., w0 - first :, :]
    total = np.add.reduce(rows, axis=-1, keepdims=True)
    np.divide(rows, total, out=rows)
    out5 = np.empty((*batch, G, n, vf.shape[-1]), np.float32)
    for a, b in blocks:
        g, r = local(a, b)
        np.matmul(s5[..., g, r, :], vf, out=out5[..., g, r, :])
    o5[..., :w0, :] = 0
    np.copyto(o5[..., w0:, :], out5[..., w0 - first :, :], casting="unsafe")


#: score elements from which a window's heads are split between two threads
_SPLIT_SCORES = 1 << 18
_HEAD_POOL: list[ThreadPoolExecutor] = []


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _head_parts(heads: int, scores: int) -> list[tuple[int, int]]:
    """[h0, h1) ranges of KV heads, one per thread: two halves when there are two cores or more,
    two heads or more and enough work, else all heads at once."""
    if heads < 2 or scores < _SPLIT_SCORES or _cores() < 2:
        return [(0, heads)]
    mid = heads // 2
    return [(0, mid), (mid, heads)]


def _in_parallel(fn: Callable[[int, int], None], parts: list[tuple[int, int]]) -> None:
    """``fn(*part)`` for each part, the last on this thread (numpy and BLAS release the GIL)."""
    if not _HEAD_POOL:
        with _WINDOW_LOCK:
            if not _HEAD_POOL:
                _HEAD_POOL.append(ThreadPoolExecutor(max_workers=1, thread_name_prefix="ov_npu_emu-attn"))
    futures = [_HEAD_POOL[0].submit(fn, *p) for p in parts[:-1]]
    try:
        fn(*parts[-1])
    finally:
        for f in futures:
            f.result()


#: (batch, G, D, S, host alignments) -> whether one broadcast matmul gives the per-group gemvs' bits
_GROUPED_GEMV: dict[tuple[int, ...], bool] = {}
def _at_alignment_of(ref: np.ndarray, data: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``data`` whose data pointer has ``ref``'s offset past a cache line."""
    out = aligned(data.shape, data.dtype, mod(ref))
    out[...] = data
    return out


def _grouped_gemv_ok(q: np.ndarray, kt: np.ndarray, scores: np.ndarray, groups: int) -> bool:
    """Whether one ``matmul(q as (b, Hkv, G, 1, D), K^T view as (b, Hkv, 1, D, S))`` gives the
    bits of the G per-group ``matmul(q[:, :, g], K^T view)`` calls; checked once per shape and
    host alignment on random data.  numpy hands each (1, D) x (D, S) product to the same BLAS
    gemv either way; the probe keeps that a fact of this host rather than an assumption."""
    k = np.swapaxes(kt, -1, -2)
    if not (q.flags.c_contiguous and k.flags.c_contiguous and scores.flags.c_contiguous):
        return False
    key = (*q.shape, groups, *k.shape, *(mod(x) for x in (q, k, scores)))
    with _WINDOW_LOCK:
        hit = _GROUPED_GEMV.get(key)
        if hit is not None:
            return hit
        rng = np.random.default_rng(3)
        qa = _at_alignment_of(q, rng.standard_normal(q.shape).astype(np.float32))
        ka = _at_alignment_of(k, rng.standard_normal(k.shape).astype(np.float32))
        per = _at_alignment_of(scores, np.zeros(scores.shape, np.float32))
        one = _at_alignment_of(scores, np.zeros(scores.shape, np.float32))
        lead, D, S = q.shape[:2], k.shape[-1], k.shape[-2]
        q5, kta = qa.reshape(*lead, groups, 1, D), np.swapaxes(ka, -1, -2)
        per5 = per.reshape(*lead, groups, 1, S)
        for g in range(groups):
            np.matmul(q5[:, :, g], kta, out=per5[:, :, g])
        np.matmul(q5, kta[..., None, :, :], out=one.reshape(*lead, groups, 1, S))
        ok = bool(np.array_equal(per, one))
        _GROUPED_GEMV[key] = ok
        return ok


@kernel("sdpa")
def _sdpa(ins, outs, params, window: RowWindow | None = None, k_absmax: Callable[[], float] | None = None):
    """Attention (SdpaParams: causal, has_mask, scale (0: 1/sqrt(D)), query heads per K/V head).

    Grouped (G > 1): K/V hold Hkv heads and query head h reads K/V head h // G, as the IR's
    Unsqueeze/Broadcast/Reshape expansion did; the G query heads of a group share one matmul.
    ``window``: the driver's padded-rows hint (RowWindow), read on every run; ``k_absmax``: see
    :func:`_masked_column_skipper`.
    """
    q, k, v = ins[:3]
    mask = ins[3] if len(ins) > 3 else None
    mask_in = mask
    o = outs[0]
    causal, scale = params.causal, params.scale
    groups = max(params.kv_groups, 1)
    if scale == 0.0:
        scale = 1.0 / math.sqrt(q.shape[-1])
    L, S = q.shape[-2], k.shape[-2]
    f32 = any(t.dtype != np.float32 for t in (q, k, v))
    if groups > 1:
        q, o = _stack_groups(q, k, o, groups)
    # scratch buffers live as long as the command list: nothing is allocated per inference
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    rows = q.shape[-2]
    scores = np.empty((*batch, rows, S), np.float32)
    rowmax = np.empty((*batch, rows, 1), np.float32)
    # mask and causal bias apply per query head and row: on grouped scores through a 5-D view
    scores_m = scores.reshape(*batch, groups, L, S) if groups > 1 else scores
    if mask is not None and groups > 1:
        mask = _grouped_mask(mask, k.shape[1], groups)
    # with several query rows BLAS is much faster on a row-major K^T than on the transposed view of K
    # (the copy costs one pass over K); one query row (decode) multiplies the view directly
    kt_buf = np.empty((*k.shape[:-2], k.shape[-1], S), np.float32) if rows >= 8 else None
    q32 = np.empty(q.shape, np.float32) if f32 else q
    k32 = np.empty(k.shape, np.float32) if f32 and kt_buf is None else k
    v32 = np.empty(v.shape, np.float32) if f32 else v
    kt = np.swapaxes(k32, -1, -2) if kt_buf is None else kt_buf
    k_src = np.swapaxes(k, -1, -2)
    bias = np.where(np.tril(np.ones((L, S), bool)), 0.0, -np.inf).astype(np.float32) if causal else None
    blocked = np.empty(mask.shape, np.bool_) if mask is not None and mask.dtype == np.bool_ else None
    direct = not f32 and o.dtype == np.float32 and tuple(o.shape[:-2]) == tuple(batch)
    staged = None if direct else _f16_staging(o, (*batch, rows, v.shape[-1]))
    skip = None
    if mask is not None and not causal and mask.shape[-1] == S and scores.size >= _SKIP_MIN_SCORES:
        skip = _masked_column_skipper(q32, k, v, mask_in, mask, groups, L, scale, batch, rows, o, direct, k_absmax)
    # square (prefill) attention: the products in row blocks that a token-row window repeats
    blocks = row_blocks(L, groups) if kt_buf is not None and L == S else None
    qk = _qk_product(q32, kt, scores, scores_m, tuple(batch), groups, L, kt_buf is None, blocks)
    win_ops = None
    if window is not None and blocks is not None:
        win_ops = _square_ops(ins, outs[0], k, v, mask, bias, groups, blocks, tuple(batch))

    def products() -> None:
        if window is not None and window.active(L, S):
            # the hint is on for this attention: the window or a re-run, never the full path
            # over padding rows that earlier windowed layers left zero
            _run_window(win_ops, scale, window)
            return
        if f32:
            np.copyto(q32, q)
        if skip is not None and skip():
            return
        if f32:
            np.copyto(v32, v)
            if kt_buf is None:
                np.copyto(k32, k)
        if kt_buf is not None:
            np.copyto(kt_buf, k_src, casting="unsafe")
        qk()
        np.multiply(scores, scale, out=scores)
        if mask is not None:
            _apply_mask(scores_m, mask, blocked)
        if bias is not None:
            np.add(scores_m, bias, out=scores_m)
        _softmax_times_v(scores, rowmax, v32, o, direct, blocks, staged)

    return products if blocks is None else _on_one_blas_thread(products)


def _on_one_blas_thread(products: Runner) -> Runner:
    """A square attention's row-block products on one BLAS thread, its window and full run
    alike (the same calls): OpenBLAS's threads, busy-waiting for a core on a loaded 2-core
    host, made them up to ~20x slower (docs/performance.md)."""

    def run() -> None:
        with one_blas_thread():
            products()

    return run


def _run_window(win_ops: _SquareOps | None, scale: float, window: RowWindow) -> None:
    """The windowed attention of a run the hint is on for; flags the window when it cannot run."""
    if win_ops is None:
        window.unusable = True  # a layout without the window path: stop hinting
        window.violated = True
    elif not _windowed_attention(win_ops, scale, window):
        window.violated = True


def _apply_mask(scores_m: np.ndarray, mask: np.ndarray, blocked: np.ndarray | None) -> None:
    """A boolean mask (``blocked``: its scratch) shuts scores to -inf; a float mask adds."""
    if blocked is not None:
        np.logical_not(mask, out=blocked)
        np.copyto(scores_m, -np.inf, where=blocked)
    else:
        np.add(scores_m, mask, out=scores_m, casting="unsafe")


def _stack_groups(q: np.ndarray, k: np.ndarray, o: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Views of grouped ``q`` and ``o`` with the query rows of a group stacked: one matmul each."""
    L = q.shape[-2]
    b, h = q.shape[0], q.shape[1]
    if q.ndim != 4 or k.ndim != 4 or h != k.shape[1] * groups or o.shape[:2] != (b, h):
        raise ExecutionError(f"sdpa: {groups} query heads per K/V head do not fit q {q.shape}, k {k.shape}")
    hkv = k.shape[1]
    return _view(q, (b, hkv, groups * L, q.shape[-1])), _view(o, (b, hkv, groups * L, o.shape[-1]))


def _grouped_mask(mask: np.ndarray, hkv: int, groups: int) -> np.ndarray:
    """``mask`` as a 5-D view broadcastable to grouped scores (..., Hkv, G, L, S)."""
    m4 = _view(mask, (1,) * (4 - mask.ndim) + mask.shape)
    return _view(
        m4, (m4.shape[0], 1, 1, *m4.shape[2:]) if m4.shape[1] == 1 else (m4.shape[0], hkv, groups, *m4.shape[2:])
    )


def _qk_product(q32: np.ndarray, kt: np.ndarray, scores: np.ndarray, scores_m: np.ndarray, batch: tuple[int, ...],
                groups: int, L: int, kt_view: bool, blocks: list[tuple[int, int]] | None) -> Runner:
    """scores = q32 @ kt, as the layout calls for (``kt_view``: kt is the transposed view of K)."""
    S = scores.shape[-1]
    if groups > 1 and kt_view:
        # a few grouped rows against the K^T view: numpy's BLAS dispatch only takes the transposed
        # view for one row per head (gemv), so each group's query rows multiply separately
        q5 = _view(q32, (*batch, groups, L, q32.shape[-1]))
        qk_parts = [(q5[..., g, :, :], scores_m[..., g, :, :]) for g in range(groups)]
        if L == 1 and len(batch) == 2 and _grouped_gemv_ok(q32, kt, scores, groups):
            # decode: the groups as a broadcast batch axis of one call (the same gemv per group and
            # K/V head, one numpy dispatch instead of G; probed to give the per-group calls' bits)
            return functools.partial(np.matmul, _view(q32, (*batch, groups, 1, q32.shape[-1])), kt[..., None, :, :],
                                     out=_view(scores, (*batch, groups, 1, S)))

        def parts() -> None:
            for qg, sg in qk_parts:
                np.matmul(qg, kt, out=sg)

        return parts
    if blocks is not None:
        def in_blocks() -> None:
            for a, b in blocks:
                np.matmul(q32[..., a:b, :], kt, out=scores[..., a:b, :])

        return in_blocks
    return functools.partial(np.matmul, q32, kt, out=scores)


def _square_ops(ins: Sequence[np.ndarray], o_full: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None,
                bias: np.ndarray | None, groups: int, blocks: list[tuple[int, int]], batch: tuple[int, ...]
                ) -> _SquareOps | None:
    """The windowed path's operands in one layout, (…, [G,] L|S, D) with the mask broadcastable
    to it (``mask`` as _sdpa shaped it); None when the output has no such view."""
    mask5: np.ndarray | None
    o5: np.ndarray | None
    q_in = ins[0]
    L = q_in.shape[-2]
    if groups > 1:
        b, hkv = q_in.shape[0], k.shape[1]
        q5 = _view(q_in, (b, hkv, groups, L, q_in.shape[-1]))
        o5 = _view(o_full, (b, hkv, groups, L, o_full.shape[-1]))
        mask5 = mask
    else:
        q5 = q_in[..., None, :, :]
        ok = o_full.shape[:-2] == batch and o_full.shape[-2] == L
        o5 = o_full[..., None, :, :] if ok else None
        mask5 = mask if mask is None or mask.ndim < 3 else mask[..., None, :, :]
    if o5 is None:
        return None
    return _SquareOps(q5, k, v, mask5, bias, o5, groups, blocks, batch)


#: f16 bits without the sign from here up: an infinity or a NaN
_F16_NONFINITE = 0x7C00


def _f16_value(bits: int) -> float:
    """The magnitude whose f16 bits (sign cleared) are ``bits``."""
    return float(np.array(bits, np.uint16).view(np.float16))


def _kv_operands(ins: Sequence[np.ndarray], params) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                                             np.ndarray, np.ndarray | None]:
    """(q, past K, past V, new K, new V, mask or None) of an sdpa_kv task, checked."""
    q, kp, vp, new = ins[:4]
    mask = ins[4] if params.has_mask and len(ins) > 4 else None
    if new.ndim != 5 or new.shape[0] != 2:
        raise ExecutionError(f"sdpa_kv: the new K and V rows come stacked as [2, B, H, M, D], not {new.shape}; "
                             "recompile the model")
    kn, vn = new[0], new[1]
    P = params.past_len
    joins = all(p.ndim == 4 and p.shape[-2] == P and p.dtype == np.float16 and p.flags.c_contiguous
                and n.shape[:-2] == p.shape[:-2] and n.shape[-1] == p.shape[-1] for p, n in ((kp, kn), (vp, vn)))
    if not joins:
        raise ExecutionError(f"sdpa_kv: past K {kp.shape} / V {vp.shape} ({kp.dtype}, {vp.dtype}) and new K "
                             f"{kn.shape} / V {vn.shape} do not join at {P} past rows; recompile the model")
    return q, kp, vp, kn, vn, mask


#: the compact products' past width grows in steps of this many columns (one probe per step)
_COMPACT_STEP = 64
#: ... and serves windows up to this share of the past: past it, its copies and the full-row
#: softmax cost more than the columns it leaves out save (bench/bench_fused_kv.py)
_COMPACT_MAX_SHARE = 0.5
#: (q, K, scores shapes, groups, compact width, host alignments) -> whether the compact QK^T has
#: the full one's bits on its columns
_COMPACT_QK: dict[tuple[int, ...], bool] = {}
_COMPACT_LOCK = threading.Lock()  # not _WINDOW_LOCK: the probe's products take that one


def _compact_qk_ok(q: np.ndarray, k: np.ndarray, c_scores: np.ndarray, groups: int, L: int,
                   batch: tuple[int, ...], wp: int, P: int) -> bool:
    """Whether the decode QK^T over the first ``wp`` past rows and the new rows moved right after
    them (``wp`` ≡ P mod 4) gives, per column, the bits of the product over all of K.

    BLAS's gemv computes each K row's dot product alone, but its kernel handles rows in blocks
    (of 4 here), so a row's summation can depend on its place in the call: the compact call keeps
    every row's place modulo 4.  Probed once per shape and host alignment on random data (the
    full product's scores in each alignment a host allocation can have), as
    :func:`_grouped_gemv_ok` is."""
    S, D = k.shape[-2], k.shape[-1]
    rows = q.shape[-2]
    w = wp + S - P
    key = (*q.shape, *k.shape, groups, L, wp, mod(q), mod(k), mod(c_scores))
    with _COMPACT_LOCK:
        hit = _COMPACT_QK.get(key)
        if hit is not None:
            return hit
        rng = np.random.default_rng(5)
        qa = _at_alignment_of(q, rng.standard_normal(q.shape).astype(np.float32))
        ka = _at_alignment_of(k, rng.standard_normal(k.shape).astype(np.float32))
        kc = _at_alignment_of(k, np.zeros(k.shape, np.float32))
        kc[..., :wp, :] = ka[..., :wp, :]
        kc[..., wp:w, :] = ka[..., P:, :]
        flat = _at_alignment_of(c_scores, np.zeros(c_scores.shape, np.float32))
        sc = _view(flat[: math.prod(batch) * rows * w], (*batch, rows, w))
        _qk_product(qa, np.swapaxes(kc[..., :w, :], -1, -2), sc, _grouped_scores(sc, groups, L), batch, groups, L,
                    True, None)()
        ok = True
        for offset in range(0, ALIGN, 16):
            full = aligned((*batch, rows, S), np.dtype(np.float32), offset)
            _qk_product(qa, np.swapaxes(ka, -1, -2), full, _grouped_scores(full, groups, L), batch, groups, L, True,
                        None)()
            ok = ok and np.array_equal(full[..., :wp], sc[..., :wp]) and np.array_equal(full[..., P:], sc[..., wp:])
        _COMPACT_QK[key] = bool(ok and D > 0)
        return _COMPACT_QK[key]


def _grouped_scores(scores: np.ndarray, groups: int, L: int) -> np.ndarray:
    return scores.reshape(*scores.shape[:-2], groups, L, scores.shape[-1]) if groups > 1 else scores


class _CompactProducts:
    """The attention products of a fused decode run over the open columns only, with the full
    run's bits: QK^T over the past rows up to the last open one (rounded so each row keeps its
    place modulo 4, :func:`_compact_qk_ok`) and the new rows moved after them; scale, mask, row
    maximum and exp() on those columns (element-wise: the same values); the row sums and the
    products with V on the full row with exact zeros on the closed columns (the sums and BLAS's
    PV then add the same terms in the same order as :func:`_sdpa`)."""

    def __init__(self, q: np.ndarray, k32: np.ndarray, v32: np.ndarray, mask: np.ndarray, o: np.ndarray,
                 params, scale: float) -> None:
        self.groups = groups = max(params.kv_groups, 1)
        self.L = q.shape[-2]
        self.q, self.o = (_stack_groups(q, k32, o, groups) if groups > 1 else (q, o))
        self.k32, self.v32 = k32, v32
        self.scale = scale
        self.batch = tuple(np.broadcast_shapes(self.q.shape[:-2], k32.shape[:-2], v32.shape[:-2]))
        self.rows = rows = self.q.shape[-2]
        S = self.S = k32.shape[-2]
        self.mask = _grouped_mask(mask, k32.shape[1], groups) if groups > 1 else mask
        self.direct = o.dtype == np.float32 and tuple(self.o.shape[:-2]) == self.batch
        self.staged = _f16_staging(self.o, (*self.batch, rows, v32.shape[-1]))
        n = math.prod(self.batch) * rows
        self.c_flat = aligned((n * S,), np.dtype(np.float32), 0)
        self.m_flat = np.empty(self.mask.size, self.mask.dtype)
        self.p_full = np.zeros((*self.batch, rows, S), np.float32)
        self.rowmax = np.empty((*self.batch, rows, 1), np.float32)
        self.prev_wp = 0  # past columns [0, prev_wp) of p_full may hold values

    @staticmethod
    def usable(q: np.ndarray, k32: np.ndarray, mask: np.ndarray | None, params) -> bool:
        """Decode-shaped, f32 query, a float mask over the columns, no column skipper in the
        full run (its own compact products would be the reference then)."""
        groups = max(params.kv_groups, 1)
        rows = q.shape[-2] * groups
        scores = math.prod(q.shape[:-1]) * k32.shape[-2]
        return (mask is not None and mask.dtype != np.bool_ and q.dtype == np.float32 and not params.causal
                and rows < 8 and scores < _SKIP_MIN_SCORES and q.ndim == 4)

    def ok(self, wp: int, P: int) -> bool:
        """Whether the compact QK^T over [0, wp) and the new rows is probed equal here."""
        return _compact_qk_ok(self.q, self.k32, self.c_flat, self.groups, self.L, self.batch, wp, P)

    def __call__(self, wp: int, P: int) -> None:
        """The products with the past columns [0, wp) and the new ones open (``wp`` ≡ P mod 4,
        :meth:`ok`; the new rows already copied to rows [wp, wp + new) of K)."""
        S, rows, batch, groups, L = self.S, self.rows, self.batch, self.groups, self.L
        w = wp + S - P
        sc = _view(self.c_flat[: math.prod(batch) * rows * w], (*batch, rows, w))
        _qk_product(self.q, np.swapaxes(self.k32[..., :w, :], -1, -2), sc, _grouped_scores(sc, groups, L), batch,
                    groups, L, True, None)()
        np.multiply(sc, self.scale, out=sc)
        m = self.mask
        mc = _view(self.m_flat[: m.size // S * w], (*m.shape[:-1], w))
        np.copyto(mc[..., :wp], m[..., :wp])
        np.copyto(mc[..., wp:], m[..., P:])
        scm = _grouped_scores(sc, groups, L)
        np.add(scm, mc, out=scm, casting="unsafe")
        np.maximum.reduce(sc, axis=-1, keepdims=True, out=self.rowmax)
        np.subtract(sc, self.rowmax, out=sc)
        np.exp(sc, out=sc)
        pf = self.p_full
        if self.prev_wp > wp:
            pf[..., wp:self.prev_wp] = 0.0
        self.prev_wp = wp
        np.copyto(pf[..., :wp], sc[..., :wp])
        np.copyto(pf[..., P:], sc[..., wp:])
        np.add.reduce(pf, axis=-1, keepdims=True, out=self.rowmax)
        np.divide(pf, self.rowmax, out=pf)
        if self.direct:
            np.matmul(pf, self.v32, out=self.o)
        elif self.staged is not None:  # f16 mode: numpy's rounding, faster (kernels/f16.py)
            out32, narrow = self.staged
            np.matmul(pf, self.v32, out=out32)
            narrow()
        else:
            np.copyto(self.o, np.matmul(pf, self.v32).reshape(self.o.shape), casting="unsafe")


class _FusedKv:
    """The runner of one sdpa_kv task (see :func:`_sdpa_kv`)."""

    def __init__(self, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray], params) -> None:
        q, kp, vp, kn, vn, mask = _kv_operands(ins, params)
        self.q, self.kp, self.vp, self.kn, self.vn, self.o = q, kp, vp, kn, vn, outs[0]
        # f16 mode's additive mask, widened per run (exactly) into an f32 copy that every step
        # below reads: numpy reduces, compares and adds f16 one element at a time
        self.widen_mask: Runner | None = None
        if mask is not None:
            mask, self.widen_mask = _f16_widened(mask)
        self.P = P = params.past_len
        S = self.S = P + kn.shape[-2]
        self.D = D = kp.shape[-1]
        self.k32 = aligned((*kp.shape[:-2], S, D), np.dtype(np.float32), 0)
        self.v32 = aligned((*vp.shape[:-2], S, vp.shape[-1]), np.dtype(np.float32), 0)
        self.k_max: float | None = None  # max|K| of the joined K the copy stands for (None: the copy's own)
        # f16 mode's query, widened per run (exactly: the f32 query the full run's products read)
        # so that the compact products serve it too (without it f16 decode attention took every
        # column) and the plain path reads f32 operands only (with an f16 query it copied the
        # whole f32 K and V copies and cast q element by element on every run; issue 34)
        self.q32, self.widen_q = _f16_widened(q)
        sdpa = SdpaParams(params.causal, mask is not None, params.scale, params.kv_groups)
        self.plain = _sdpa([self.q32, self.k32, self.v32, *([] if mask is None else [mask])], outs, sdpa,
                           k_absmax=lambda: _absmax(self.k32) if self.k_max is None else self.k_max)
        self.written = np.zeros(P, np.bool_)  # past rows the copy holds from an earlier run
        # (f16 bits as uint16 (H, P, D), f32 copy (H, S, D), largest closed / open bits per head)
        self.parts = [(p.reshape(-1, P, p.shape[-1]).view(np.uint16), c.reshape(-1, S, c.shape[-1]),
                       np.empty(math.prod(p.shape[:-2]), np.int32), np.empty(math.prod(p.shape[:-2]), np.int32))
                      for p, c in ((kp, self.k32), (vp, self.v32))]
        self.all_rows, self.no_rows = np.ones(P, np.uint8), np.zeros(P, np.uint8)
        self.scale = self.scale_of(params, q)
        self.m2: np.ndarray | None = None
        if mask is not None and mask.shape[-1] == S:
            try:
                self.m2 = _view(mask, (-1, S))
            except (AttributeError, ValueError):
                self.m2 = None
        self.compact: _CompactProducts | None = None
        if self.m2 is not None and mask is not None and _CompactProducts.usable(self.q32, self.k32, mask, params):
            self.compact = _CompactProducts(self.q32, self.k32, self.v32, mask, outs[0], params,
                                            self.scale_of(params, q))
        if self.m2 is not None:
            self.colmax = np.empty(S, self.m2.dtype)
            self.rowmask = np.empty(self.m2.shape[0], self.m2.dtype)
            self.open_cols = np.empty(S, np.bool_)
            self.open_rows = np.empty(P, np.uint8)
            self.clear_rows = np.empty(P, np.bool_)

    @staticmethod
    def scale_of(params, q: np.ndarray) -> float:
        return float(params.scale) if params.scale != 0.0 else 1.0 / math.sqrt(q.shape[-1])

    def __call__(self) -> None:
        if self.widen_mask is not None:
            self.widen_mask()
        if self.m2 is None or not self._fast():
            self._full()

    def _products(self, open_past: np.ndarray) -> None:
        """The attention on the copy: over the open columns (:class:`_CompactProducts`) where
        that is probed exact, else :func:`_sdpa` over all of them."""
        c, P = self.compact, self.P
        new = self.S - P
        if c is not None:
            hi = int(np.flatnonzero(open_past)[-1]) + 1 if open_past.any() else 0
            hi = -(-hi // _COMPACT_STEP) * _COMPACT_STEP  # a few widths per conversation: a probe each
            wp = hi + (P - hi) % 4  # each K row keeps its place modulo 4 in the compact QK^T
            if wp + new <= P * _COMPACT_MAX_SHARE and c.ok(wp, P):
                # the new rows after the prefix (closed past rows: the next run zeroes them)
                np.copyto(self.k32[..., wp:wp + new, :], self.kn, casting="unsafe")
                self.written[wp:wp + new] = True
                c(wp, P)
                return
        self.plain()

    def _join_new(self) -> None:
        np.copyto(self.k32[..., self.P:, :], self.kn, casting="unsafe")
        np.copyto(self.v32[..., self.P:, :], self.vn, casting="unsafe")

    def _full(self) -> None:
        """The unfused path: every past row converted (numpy's conversion where one is not finite)."""
        from ov_npu_emu_npu.device.kernels.kvrows import join_rows

        if self.widen_q is not None:  # the plain path reads the widened query
            self.widen_q()

        for (src, dst, c, m), past, copy in zip(self.parts, (self.kp, self.vp), (self.k32, self.v32), strict=True):
            if join_rows(src, dst, self.all_rows, self.no_rows, c, m)[1] >= _F16_NONFINITE:
                np.copyto(copy[..., :self.P, :], past, casting="unsafe")
        self.written[:] = True
        self._join_new()
        self.k_max = None
        self.plain()

    def _open_columns(self) -> float | None:
        """Marks the open columns; the smallest row maximum of a float mask (0.0 for a boolean
        one), or None when a row has no open column."""
        m2, colmax, rowmask = self.m2, self.colmax, self.rowmask
        assert m2 is not None
        if m2.dtype == np.bool_:
            np.logical_or.reduce(m2, axis=0, out=colmax)
            np.logical_or.reduce(m2, axis=1, out=rowmask)
            if not rowmask.all():  # a fully masked row: NaN on the unfused path, keep it
                return None
            np.copyto(self.open_cols, colmax)
            return 0.0
        np.maximum.reduce(m2, axis=0, out=colmax)
        np.maximum.reduce(m2, axis=1, out=rowmask)
        rowmin = float(np.minimum.reduce(rowmask))
        if not math.isfinite(rowmin):
            return None
        np.greater(colmax, rowmin - _EXP_ZERO_MARGIN, out=self.open_cols)
        return rowmin

    def _fast(self) -> bool:
        from ov_npu_emu_npu.device.kernels.kvrows import join_rows

        rowmin = self._open_columns()
        if self.widen_q is not None:
            self.widen_q()
        q_max = _absmax(self.q32)  # the f16 query's values, exactly
        if rowmin is None or not math.isfinite(q_max):
            return False
        open_past = self.open_cols[:self.P]
        np.copyto(self.open_rows, open_past, casting="unsafe")
        np.greater(self.written, open_past, out=self.clear_rows)  # held, closed now: zeroed
        (kc, ko), (vc, vo) = (join_rows(src, dst, self.open_rows, self.clear_rows.view(np.uint8), c, m)
                              for src, dst, c, m in self.parts)
        np.copyto(self.written, open_past)
        if max(kc, ko, vc, vo) >= _F16_NONFINITE:
            return False
        self._join_new()
        # the new rows' values as joined into the f32 copies (exact widenings of f16 rows: the same
        # maxima; numpy reduces f16 one element at a time)
        k_new = _absmax(self.k32[..., self.P:, :])
        if not (math.isfinite(k_new) and math.isfinite(_absmax(self.v32[..., self.P:, :]))):
            return False
        k_abs = max(_f16_value(max(kc, ko)), k_new)
        if self.m2 is not None and self.m2.dtype != np.bool_:
            bound = q_max * k_abs * self.D * abs(self.scale) * (1.0 + 2.0**-10)
            limit = rowmin - 2.0 * bound - _EXP_ZERO_MARGIN - 2.0**-16 * (abs(rowmin) + 2.0 * bound)
            closed_max = float(np.maximum.reduce(self.colmax, where=~self.open_cols, initial=-np.inf))
            if not (math.isfinite(limit) and closed_max <= limit):
                return False
        self.k_max = k_abs
        self._products(open_past)
        return bool(np.count_nonzero(self.o) == self.o.size)  # an exact 0 may carry the other sign


@kernel("sdpa_kv")
def _sdpa_kv(ins, outs, params):
    """Attention over a past K/V stored as f16 joined with the new rows (SdpaKvParams; operands
    q, past K, past V, the new K and V rows stacked [2, B, H, M, D], mask; the compiler's
    fuse_kv pass), with the bits of the unfused ``Convert -> Concat -> sdpa``
    (NPU_EMU_FUSE_KV=NO).

    The kernel keeps its own f32 copy of the joined K and V.  Each run converts only the past
    rows the mask leaves open (:func:`.kvrows.join_rows`: one pass over the f16 rows, which
    also takes the largest magnitude of the closed ones), zeroes the rows the copy holds from
    earlier runs that are closed now, copies the new rows and runs :func:`_sdpa` on the copy.
    A column is closed when the mask shuts it for every query row so far that its score
    cannot reach the softmax in f32 for any K within the measured bound (the masked-column
    skipper's proof: colmax <= min_rows(rowmax(mask)) - 2B - margin, B = max|q| · max|K| · D ·
    |scale|; boolean masks: False in every row).  exp() then gives exact zeros there both on
    the copy (a zero K row) and on the real rows (any finite K), so the row sums and products
    add the same terms (:func:`_sdpa`'s column skipper is handed the real max|K|, so it takes
    the same columns).  A product 0 · V can differ in the sign of a zero, which shows only
    where an output is exactly 0.  The run takes the unfused path instead (every row
    converted, the copy then holding them all) when the proof does not hold: an infinity or
    NaN in q, K or V (a closed row's too), a row with no open column, a mask with no
    per-column layout, or an output that is exactly 0.
    """
    return _FusedKv(ins, outs, params)
