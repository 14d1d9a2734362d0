"""Decode attention over the KV slots the mask leaves open, bit for bit the full computation.

A generate step attends one query row per head against the whole static KV window (NPUW's
MAX_PROMPT_LEN + MIN_RESPONSE_LEN slots) while the mask opens only the slots in use: the past
tokens at the front and the new one in the last slot.  The full path multiplies every slot (a
bench-0.5b step: 24 x 0.33 ms with 30-80 of 1152 slots open).  Here the work runs on the
64-slot blocks that hold an open slot, when that provably gives the same bits:

1. **Exact zeros.** A slot whose mask is at most ``open_min - 2B - margin`` (B bounds every
   score: max|q| * max|K| * D * |scale|, as attention's masked-column skipper) has
   exp(score - rowmax) == +0 exactly in f32, and it cannot be a row's maximum; boolean masks
   set such slots to -inf.  V finite: 0 * V adds +0.
2. **Same order.** The probabilities are laid out full width (+0 in the skipped slots) for the
   row sums, so those add in the full path's order; QK^T and probs @ V run on the kept blocks
   gathered compact.  Whether BLAS gives those products' bits for a block layout is checked
   once per layout (shapes, blocks, host alignments) on random data against the full kernel,
   as attention's window and the host fusion probe theirs (:mod:`.attention`,
   ``device/fusion.py``); a layout that differs keeps the full path.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

import numpy as np

__all__ = ["BLOCK", "narrow_decode"]

#: KV slots per block the narrow path keeps or skips (one probe per distinct block layout)
BLOCK = 64
#: the narrow path runs only when its blocks hold at most this share of the slots
_MAX_SHARE = 0.5
#: below this many slots the full path costs about what the checks do
_MIN_SLOTS = 4 * BLOCK
_EXP_ZERO_MARGIN = 128.0  # as attention's masked-column skipper: exp(x) == 0 for x < -103.98
_ALIGN = 64
_PROBES: dict[tuple, bool] = {}
_PROBE_LOCK = threading.Lock()

FullRun = Callable[[], None]


def _mod(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0] % _ALIGN


def _aligned_like(a: np.ndarray) -> np.ndarray:
    """A zeroed C-contiguous array of ``a``'s shape and dtype at ``a``'s cache-line offset."""
    nbytes = a.size * a.itemsize
    buf = np.zeros(nbytes + 2 * _ALIGN, np.uint8)
    off = (_mod(a) - _mod(buf)) % _ALIGN
    return buf[off:off + nbytes].view(a.dtype).reshape(a.shape)


def _runs(blocks: np.ndarray, S: int) -> tuple[tuple[int, int], ...]:
    """Kept 64-slot blocks (sorted block indices) as (start, stop) slot ranges, adjacent merged."""
    out: list[list[int]] = []
    for b in blocks.tolist():
        lo, hi = b * BLOCK, min(S, (b + 1) * BLOCK)
        if out and out[-1][1] == lo:
            out[-1][1] = hi
        else:
            out.append([lo, hi])
    return tuple((lo, hi) for lo, hi in out)


def narrow_decode(ins: list[np.ndarray], out: np.ndarray, q: np.ndarray, o: np.ndarray, mask: np.ndarray,
                  scale: float, groups: int, L: int,
                  make_full: Callable[[list[np.ndarray], np.ndarray], FullRun]) -> Callable[[], bool] | None:
    """A runner doing the decode attention on the kept blocks, or None when shapes do not fit.

    The runner returns False (nothing written) when this inference's mask and data do not
    prove the narrow path equal to the full one; the caller then runs the full path.
    ``ins``/``out``: the task's operands (q, K, V, mask) and output as stored; ``q``/``o``: them
    as (b, Hkv, G*L, D) f32 views (grouped rows stacked), K/V (b, Hkv, S, D) f32, ``mask``: the
    mask view broadcastable to the (b, Hkv, [G,] L, S) scores, as the kernel binds them.
    ``make_full(ins, out)`` binds the full kernel on other arrays of these shapes (the probe's
    reference).
    """
    if len(ins) != 4:
        return None
    k, v, mask_in = ins[1], ins[2], ins[3]
    S, D = k.shape[-2], k.shape[-1]
    if (S < _MIN_SLOTS or q.ndim != 4 or k.ndim != 4 or v.ndim != 4 or q.shape[:2] != k.shape[:2]
            or v.shape[:2] != k.shape[:2] or v.shape[-2] != S or o.shape != (*q.shape[:-1], v.shape[-1])
            or any(a.dtype != np.float32 or not a.flags.c_contiguous for a in (q, k, v, o, out))
            or mask.shape[-1] != S):
        return None
    try:
        m2 = mask_in.reshape(-1, S)
    except ValueError:
        return None
    if not np.shares_memory(m2, mask_in) and m2.size:
        return None  # a copy would detach the runner from device memory
    is_bool = m2.dtype == np.bool_
    if not is_bool and m2.dtype.kind != "f":
        return None
    b, hkv, rows = q.shape[0], q.shape[1], q.shape[2]
    Dv = v.shape[-1]
    grouped = (b, hkv, groups, L) if groups > 1 else (b, hkv, L)
    qf, kf, vf = q.reshape(-1), k.reshape(-1), v.reshape(-1)
    colmax = np.empty(S, m2.dtype)  # several mask rows: per slot, its best over the rows
    rowbest = np.empty(m2.shape[0], m2.dtype)
    wide = np.zeros((b, hkv, rows, S), np.float32)  # full-width probabilities: the sums' layout
    sums = np.empty((b, hkv, rows, 1), np.float32)
    kc_buf = np.empty(k.size, np.float32)
    vc_buf = np.empty(v.size, np.float32)
    sc_buf = np.empty(b * hkv * rows * S, np.float32)
    mc_buf = np.empty(mask.size, mask.dtype)
    layout_key = (q.shape, k.shape, v.shape, mask.shape, str(mask.dtype), mask_in.shape, groups, L,
                  _mod(q), _mod(k), _mod(v), _mod(mask_in), _mod(o), _mod(wide))

    def finite_absmax(x: np.ndarray) -> float:
        # numpy's own reductions: a BLAS dot this long would hand half to a second thread, which
        # a loaded 2-core host deschedules; NaN propagates through both
        return max(float(np.maximum.reduce(x)), -float(np.minimum.reduce(x)))

    def kept_runs() -> tuple[tuple[int, int], ...] | None:
        if m2.shape[0] == 1:
            cm, best = m2[0], m2[0]
        else:
            reduce = np.logical_or.reduce if is_bool else np.maximum.reduce
            cm, best = colmax, rowbest
            reduce(m2, axis=0, out=colmax)
            reduce(m2, axis=1, out=rowbest)
        if is_bool:
            if not (best.any() if m2.shape[0] == 1 else best.all()):
                return None  # a fully masked row: NaN in the full computation
            if not math.isfinite(finite_absmax(kf)):
                return None  # an inf/NaN score in an open slot: keep the full path's propagation
            nz = np.flatnonzero(cm)
        else:
            open_min = float(np.maximum.reduce(best)) if m2.shape[0] == 1 else float(np.minimum.reduce(best))
            bound = finite_absmax(qf) * finite_absmax(kf) * D * abs(scale) * (1.0 + 2.0**-10)
            if not (math.isfinite(open_min) and math.isfinite(bound)):
                return None
            limit = open_min - 2.0 * bound - _EXP_ZERO_MARGIN - 2.0**-16 * (abs(open_min) + 2.0 * bound)
            nz = np.flatnonzero(~(cm <= limit))  # NaN mask entries are kept
        if nz.size == 0 or not math.isfinite(finite_absmax(vf)):
            return None  # 0 * inf in a skipped slot is NaN in the full computation
        blk = nz // BLOCK
        blocks = blk[np.concatenate(([True], blk[1:] != blk[:-1]))]
        if blocks.size * BLOCK > _MAX_SHARE * S:
            return None
        return _runs(blocks, S)

    def compute(runs: tuple[tuple[int, int], ...], qa: np.ndarray, ka: np.ndarray, va: np.ndarray,
                ma: np.ndarray, oa: np.ndarray, wa: np.ndarray) -> None:
        n = sum(hi - lo for lo, hi in runs)
        kc = kc_buf[:b * hkv * n * D].reshape(b, hkv, n, D)
        vc = vc_buf[:b * hkv * n * Dv].reshape(b, hkv, n, Dv)
        mc = mc_buf[:ma.size // S * n].reshape(*ma.shape[:-1], n)
        at = 0
        for lo, hi in runs:  # a few runs (the past tokens' blocks, the last slot's): slice copies
            np.copyto(kc[..., at:at + hi - lo, :], ka[..., lo:hi, :])
            np.copyto(vc[..., at:at + hi - lo, :], va[..., lo:hi, :])
            np.copyto(mc[..., at:at + hi - lo], ma[..., lo:hi])
            at += hi - lo
        sc = sc_buf[:b * hkv * rows * n].reshape(b, hkv, rows, n)
        kct = np.swapaxes(kc, -1, -2)
        if groups > 1:  # the groups as a broadcast batch axis: one call, a gemv per group's rows
            np.matmul(qa.reshape(*grouped, D), kct[:, :, None], out=sc.reshape(*grouped, n))
        else:
            np.matmul(qa, kct, out=sc)
        np.multiply(sc, scale, out=sc)
        scm = sc.reshape(*grouped, n)
        if is_bool:
            np.copyto(scm, -np.inf, where=~mc)
        else:
            np.add(scm, mc, out=scm, casting="unsafe")
        np.maximum.reduce(sc, axis=-1, keepdims=True, out=sums)
        np.subtract(sc, sums, out=sc)
        np.exp(sc, out=sc)
        at = 0
        for lo, hi in runs:
            wa[..., lo:hi] = sc[..., at:at + hi - lo]
            at += hi - lo
        np.add.reduce(wa, axis=-1, keepdims=True, out=sums)
        for lo, hi in runs:  # the next step may keep other blocks
            wa[..., lo:hi] = 0.0
        np.divide(sc, sums, out=sc)
        np.matmul(sc, vc, out=oa)

    def probe(runs: tuple[tuple[int, int], ...]) -> bool:
        key = (*layout_key, runs)
        with _PROBE_LOCK:
            hit = _PROBES.get(key)
            if hit is not None:
                return hit
            rng = np.random.default_rng(2)
            qa_in, ka, va, ma_in, oa_full, oa_nar, wa = (
                _aligned_like(a) for a in (ins[0], k, v, mask_in, out, out, wide))
            qa = qa_in.reshape(q.shape)
            for a in (qa_in, ka, va):
                a[...] = rng.standard_normal(a.shape).astype(np.float32)
            slot_open = np.zeros(S, np.bool_)
            for lo, hi in runs:  # open every other slot of the kept blocks
                slot_open[lo:hi:2] = True
            slot_open[runs[-1][1] - 1] = True
            if is_bool:
                ma_in[...] = slot_open
            else:
                ma_in[...] = np.where(slot_open, 0.0, np.finfo(np.float32).min).astype(ma_in.dtype)
            ma = ma_in.reshape(mask.shape) if mask.shape != mask_in.shape else ma_in
            ok = False
            try:
                make_full([qa_in, ka, va, ma_in], oa_full)()
                compute(runs, qa, ka, va, ma, oa_nar.reshape(o.shape), wa)
                ok = bool(np.array_equal(oa_full, oa_nar))
            except (ValueError, TypeError):
                ok = False
            _PROBES[key] = ok
            return ok

    def run() -> bool:
        runs = kept_runs()
        if runs is None or not probe(runs):
            return False
        compute(runs, q, k, v, mask, o, wide)
        return True

    return run
