"""f16 mode's conversions and element-wise arithmetic, at f32 speed and with numpy's f16 bits.

numpy converts halves one element at a time in software on hosts whose baseline lacks F16C, and
its f16 arithmetic loops (``HALF_add`` & co.) do, per element: widen both operands to f32, one f32
operation, round the f32 result to f16 (``npy_float_to_half``, nearest-even).  In the f16 mode
(the default) that made a decode step's element-wise tasks 4-5x the f32 mode's and the
f16 <-> f32 copies around each decode MatMul cost as much again (issue 34: the 1B int4 decoded
at 1.12x the f32 mode's TPOT).  These numba loops do the same per-element steps with LLVM's
``fpext`` / ``fptrunc`` (one vcvtph2ps / vcvtps2ph per vector with F16C):

* :func:`widen`: f16 -> f32 is exact, so every value gets numpy's bits (a signalling NaN comes
  back quiet: the bits of a NaN's payload are the only difference).
* :func:`narrow`: f32 -> nearest f16 (ties to even, overflow to inf).  Checked against numpy's
  cast on all 2^32 f32 bit patterns: the same bits for every value but the signalling NaNs
  (quietened here), which no f32 arithmetic produces.
* :func:`binary_runner`: ``add``, ``subtract``, ``multiply``, ``divide`` with an f16 output:
  each operand widened (exact), one f32 operation, the result narrowed — numpy's ``HALF_*`` loop
  for two f16 operands, its f32 loop plus the output cast for mixed ones.  No fused multiply-add,
  no reassociation (no ``fastmath``).  Transcendental functions keep numpy's (their f16 loops
  call libm on one element at a time, their f32 loops a SIMD implementation: not the same bits).

numba loads on the first task that uses it (imported lazily by the kernels), as for :mod:`.gemv`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types

from ov_npu_emu_npu.device.kernels.gemv import _f32, _gemv_f32, _intrinsic

__all__ = ["binary_runner", "convert_runner", "gemv_f16_rows", "narrow", "narrow_runner", "swish_runner", "widen",
           "widen_runner"]

# no fastmath: every operation rounds as numpy's loops do
_JIT: dict[str, Any] = {"nogil": True, "cache": True, "error_model": "numpy"}  # x / 0 is inf or NaN, as numpy

#: the element-wise operations :func:`binary_runner` computes, as its kernel's operation code
OPS = {"add": 0, "subtract": 1, "multiply": 2, "divide": 3}


@_intrinsic
def _f16_bits(typingctx, v):
    """f32 -> the bits (uint16) of the nearest f16, ties to even."""
    if v != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), ir.IntType(16))

    return types.uint16(v), codegen


@njit(**_JIT)
def _widen(src, dst):  # pragma: no cover - compiled by numba
    for i in range(src.size):
        dst[i] = _f32(src[i])


@njit(**_JIT)
def _widen_finite(src, dst):  # pragma: no cover - compiled by numba
    """:func:`_widen` when no element is an infinity or a NaN (exponent 31: ``e + 0x400`` sets
    bit 15 for that exponent alone); False, with nothing written, otherwise."""
    flag = 0
    for i in range(src.size):
        flag |= (src[i] & 0x7C00) + 0x0400
    if flag & 0x8000:
        return False
    for i in range(src.size):
        dst[i] = _f32(src[i])
    return True


@njit(**_JIT)
def _narrow(src, dst):  # pragma: no cover - compiled by numba
    for i in range(src.size):
        dst[i] = _f16_bits(src[i])


@njit(**_JIT)
def _gemv_f16_rows(a16, a32, x, x_pitch, w, w_pitch, k, o32, o32_flat, o16, n0, n1, row):  # pragma: no cover
    """The f16 mode's small decode MatMul in one call: the f16 rows widened, the f32 gemv loop,
    the product narrowed -- the three steps' bits, one dispatch instead of three (numba's
    dispatch and a Python closure per step were a tenth of stories260K's f16 decode step)."""
    _widen(a16, a32)
    _gemv_f32(x, x_pitch, w, w_pitch, k, o32, n0, n1, row)  # x: a32's rows
    _narrow(o32_flat, o16)


@njit(**_JIT)
def _rows_rows(ar, br, orow, op):  # pragma: no cover - compiled by numba
    n = orow.size
    if op == 0:
        for j in range(n):
            orow[j] = _f16_bits(_f32(ar[j]) + _f32(br[j]))
    elif op == 1:
        for j in range(n):
            orow[j] = _f16_bits(_f32(ar[j]) - _f32(br[j]))
    elif op == 2:
        for j in range(n):
            orow[j] = _f16_bits(_f32(ar[j]) * _f32(br[j]))
    else:
        for j in range(n):
            orow[j] = _f16_bits(_f32(ar[j]) / _f32(br[j]))


@njit(**_JIT)
def _row_scalar(ar, y, orow, op):  # pragma: no cover - compiled by numba
    n = orow.size
    if op == 0:
        for j in range(n):
            orow[j] = _f16_bits(_f32(ar[j]) + y)
    elif op == 1:
        for j in range(n):
            orow[j] = _f16_bits(_f32(ar[j]) - y)
    elif op == 2:
        for j in range(n):
            orow[j] = _f16_bits(_f32(ar[j]) * y)
    else:
        for j in range(n):
            orow[j] = _f16_bits(_f32(ar[j]) / y)


@njit(**_JIT)
def _scalar_row(x, br, cb, orow, op):  # pragma: no cover - compiled by numba
    for j in range(orow.size):
        y = _f32(br[j if cb else 0])
        if op == 0:
            z = x + y
        elif op == 1:
            z = x - y
        elif op == 2:
            z = x * y
        else:
            z = x / y
        orow[j] = _f16_bits(z)


@njit(**_JIT)
def _binary(a, b, o, op):  # pragma: no cover - compiled by numba
    """``o = narrow(a OP b)`` over [rows, n]; ``a`` and ``b`` are [rows or 1, n or 1] (uint16 f16
    bits or f32), ``o`` uint16.  The operation is chosen outside the inner loops."""
    ra, ca = a.shape[0] > 1, a.shape[1] > 1
    rb, cb = b.shape[0] > 1, b.shape[1] > 1
    for r in range(o.shape[0]):
        ar = a[r if ra else 0]
        br = b[r if rb else 0]
        if ca and cb:
            _rows_rows(ar, br, o[r], op)
        elif ca:
            _row_scalar(ar, _f32(br[0]), o[r], op)
        else:
            _scalar_row(_f32(ar[0]), br, cb, o[r], op)


def _bits(x: np.ndarray) -> np.ndarray:
    return x.view(np.uint16) if x.dtype == np.float16 else x


def widen(src: np.ndarray, dst: np.ndarray) -> None:
    """f16 ``src`` -> f32 ``dst`` (both C-contiguous, the same size), exactly."""
    _widen(src.reshape(-1).view(np.uint16), dst.reshape(-1))


def narrow(src: np.ndarray, dst: np.ndarray) -> None:
    """f32 ``src`` -> f16 ``dst`` (both C-contiguous, the same size), nearest-even as numpy."""
    _narrow(src.reshape(-1), dst.reshape(-1).view(np.uint16))


def widen_runner(src: np.ndarray, dst: np.ndarray) -> Callable[[], None] | None:
    """A bound :func:`widen` of these views, or None when they are not flat-viewable pairs."""
    if not (src.dtype == np.float16 and dst.dtype == np.float32 and src.size == dst.size
            and src.flags.c_contiguous and dst.flags.c_contiguous):
        return None
    s, d = src.reshape(-1).view(np.uint16), dst.reshape(-1)
    return functools.partial(_widen, s, d)  # a partial: no Python frame between caller and loop


def convert_runner(src: np.ndarray, dst: np.ndarray) -> Callable[[], None] | None:
    """An f16 -> f32 Convert with numpy's bits for every input: finite values widened by the
    numba loop (exact), an array holding an infinity or a NaN converted by numpy (which keeps a
    signalling NaN's bits; the loop's conversion would quieten it).  None: not a flat pair."""
    if widen_runner(src, dst) is None:
        return None
    s, d = src.reshape(-1).view(np.uint16), dst.reshape(-1)

    def run() -> None:
        if not _widen_finite(s, d):
            np.copyto(dst, src, casting="unsafe")

    return run


def narrow_runner(src: np.ndarray, dst: np.ndarray) -> Callable[[], None] | None:
    """A bound :func:`narrow` of these views, or None when they are not flat-viewable pairs."""
    if not (src.dtype == np.float32 and dst.dtype == np.float16 and src.size == dst.size
            and src.flags.c_contiguous and dst.flags.c_contiguous):
        return None
    s, d = src.reshape(-1), dst.reshape(-1).view(np.uint16)
    return functools.partial(_narrow, s, d)


def gemv_f16_rows(a: np.ndarray, a32: np.ndarray, o32: np.ndarray, o: np.ndarray,
                  gemv: Callable[[], None]) -> Callable[[], None] | None:
    """:func:`_gemv_f16_rows` for ``gemv``, the f32 gemv runner of ``o32 = a32 @ W.T`` when it is
    one call of the serial loop on this thread (small weights; larger ones are split over the
    cores, where a dispatch or two do not count); None otherwise."""
    if not (isinstance(gemv, functools.partial) and gemv.func is _gemv_f32 and not gemv.keywords):
        return None
    if not (a.dtype == o.dtype == np.float16 and a.size == a32.size and o.size == o32.size
            and a.flags.c_contiguous and o.flags.c_contiguous and a32.flags.c_contiguous
            and o32.flags.c_contiguous):
        return None
    # gemv.args: (x, x_pitch, w, w_pitch, k, out, n0, n1, row), x / out flat and 2-D views of a32 / o32
    return functools.partial(_gemv_f16_rows, a.reshape(-1).view(np.uint16), a32.reshape(-1), *gemv.args[:6],
                             o32.reshape(-1), o.reshape(-1).view(np.uint16), *gemv.args[6:])


def _rows(x: np.ndarray, shape: tuple[int, ...], split: int) -> np.ndarray | None:
    """``x`` (broadcast to ``shape``) as [rows or 1, n or 1], cut after axis ``split``; None when
    it broadcasts along some but not all of the axes on one side of the cut, or is not contiguous."""
    xs = (1,) * (len(shape) - x.ndim) + x.shape
    lead, trail = xs[:split], xs[split:]
    full_lead = lead == shape[:split]
    full_trail = trail == shape[split:]
    if not (full_lead or all(d == 1 for d in lead)) or not (full_trail or all(d == 1 for d in trail)):
        return None
    if not x.flags.c_contiguous:
        return None
    m = int(np.prod(shape[:split])) if full_lead else 1
    n = int(np.prod(shape[split:])) if full_trail else 1
    if m * n != x.size:
        return None
    return _bits(x).reshape(m, n)


def binary_runner(name: str, a: np.ndarray, b: np.ndarray, o: np.ndarray) -> Callable[[], None] | None:
    """``o = a OP b`` (``OP`` one of :data:`OPS`) for an f16 ``o`` and f16/f32 operands that are
    each whole, a trailing block repeated over leading rows, a column repeated along the rows or
    a scalar (numpy broadcasting); None for other layouts (numpy's loops then)."""
    op = OPS.get(name)
    if op is None or o.dtype != np.float16 or not o.flags.c_contiguous or o.size == 0:
        return None
    if a.dtype not in (np.float16, np.float32) or b.dtype not in (np.float16, np.float32):
        return None
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        return None
    if shape != o.shape:
        return None
    o16 = o.view(np.uint16)
    for split in range(len(shape) + 1):  # the cut that lets both operands be rows / columns / whole
        a2, b2 = _rows(a, shape, split), _rows(b, shape, split)
        if a2 is not None and b2 is not None:
            m = int(np.prod(shape[:split]))
            o2 = o16.reshape(m, -1) if m else o16.reshape(0, 1)
            return functools.partial(_binary, a2, b2, o2, op)
    return None


def swish_runner(x: np.ndarray, o: np.ndarray, beta: float) -> Callable[[], None] | None:
    """``swish`` of an f16 ``x`` into an f16 ``o`` with numpy's f16 bits: ``x * -beta`` rounded to
    f16 (numpy's f16 loop: ``-beta`` is an f16 0-d array), numpy's f32 ``exp`` and ``+ 1``, then
    ``x / that`` in f32 rounded to f16 (numpy's f32 loop and output cast); None otherwise."""
    if not (x.dtype == o.dtype == np.float16 and x.shape == o.shape and x.size
            and x.flags.c_contiguous and o.flags.c_contiguous):
        return None
    x2, o2 = x.view(np.uint16).reshape(1, -1), o.view(np.uint16).reshape(1, -1)
    nb = np.full((1, 1), np.float16(-beta), np.float32)
    t16 = np.empty(x2.shape, np.uint16)
    t32 = np.empty(x2.shape, np.float32)
    one = np.array(1.0, np.float32)

    def run() -> None:
        _binary(x2, nb, t16, 2)
        _widen(t16.reshape(-1), t32.reshape(-1))
        np.exp(t32, out=t32)
        np.add(t32, one, out=t32)
        _binary(x2, t32, o2, 3)

    return run
