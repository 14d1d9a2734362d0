"""Decode-shaped MatMul (a few activation rows) straight from a weight's stored format (f32 too).

A decode step multiplies one (or a few) activation rows by every weight of the model once, so
its cost is reading the weights. Decompressing them to f32 first (a cache, or a tile per run)
moves 2-8x more bytes than the stored format; these numba kernels read f16 / 8-bit / 4-bit
weights as stored and decompress them in registers. f16 converts exactly; one activation row
times an 8-/4-bit weight sums ``x * (q - zp)`` over each group (``q - zp`` is a small integer,
exact in f32) and multiplies the group's scale into that sum once, instead of into every
weight as :func:`..dequant.dequantize` does (``(q - zp) * scale``), which the f16-rounding
variant and several activation rows still do. On AVX-512 hosts one row takes 16-lane loops:
4-bit weights through each group's 16-entry table of decompressed weights (``(q - zp) * scale``
itself, so there the product differs from a decompressed one only in summation order), 8-bit
ones widened 16 bytes at a time. f32 weights (the ``matmul`` kernel's decode shapes) run a loop
of their own (four weight rows per pass, nothing to convert).
Output channels are split over the host's cores by numba parallel loops on its TBB threading
layer (a cheap hand-off, so products from 2^17 weight elements, 2^15 for 8-/4-bit, gain from
the second core); without that layer, a thread pool (a costlier hand-off) from 2^18 (2^20 for
f32) (docs/performance.md, "Decode kernels against the bandwidth floor"). The kernels release
the GIL.

Only the summation order (and, for the grouped formats on one row, where the scale enters)
differs from numpy/BLAS on a decompressed tile, so results agree to f32 rounding: within any
summation order's bound K * eps32 * (|x| @ |W|.T). Prefill-shaped MatMuls (many rows) take
:mod:`.gemm`: there each decompressed weight is reused across rows and BLAS wins.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import numba
import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

from ov_npu_emu_npu.device.kernels.act_quant import A8_PASS_BYTES, quantize_split_row
from ov_npu_emu_npu.device.kernels.dequant import STORED_FORMAT_MAX_ROWS as MAX_ROWS

logger = logging.getLogger(__name__)

#: below this many weight elements one core does the whole product (a thread hand-off costs more
#: than the second core saves)
_SPLIT_MIN_ELEMENTS = 1 << 18
#: the same for f32 weights on that pool: a pass over an f32 weight is cheap per element, so
#: splitting pays only from a larger product (docs/performance.md, "Decode kernels against the bandwidth floor")
_POOL_MIN_F32 = 1 << 20
#: with numba's parallel loops (a much cheaper dispatch on the TBB layer) products split from
#: here, where a cached f32 product starts to gain from the second core; the 8- and 4-bit loops
#: do several times the arithmetic per element, so they split from a quarter of it
#: (docs/performance.md, "Decode kernels against the bandwidth floor")
_PAR_MIN_ELEMENTS = 1 << 17
_PAR_MIN_GROUPED = 1 << 15
#: output channels per parallel block (a multiple of the f32 kernel's 4 rows per pass)
_PAR_BLOCK = 64
#: chunks of output channels per thread (each a kernel call of a few µs of dispatch)
_CHUNKS_PER_WORKER = 2
#: the int8-activation row over a weight of this many elements (an LM head's size) takes the pool,
#: not numba's parallel loops: on a shared host, chunks claimed by whichever thread is free
#: streamed such a weight faster than the TBB blocks; on a decoder layer's weights the pool's
#: hand-off per call cost more than that (docs/performance_log.md, "Int8 activations")
_A8_POOL_MIN = 1 << 26
#: its chunks per thread there: more than two, so that a thread that got its core late does less
_A8_CHUNKS_PER_WORKER = 8

_JIT: dict[str, Any] = {"nogil": True, "cache": True, "fastmath": {"reassoc", "contract"}}  # reassoc: vector sums



def _intrinsic(fn: Callable[..., Any]) -> Callable[..., Any]:
    """numba's ``intrinsic``, typed as jitted code calls it: numba's stubs type the call with the
    typing context as its first argument, which the call in jitted code does not pass."""
    return intrinsic(fn)


@_intrinsic
def _f32(typingctx, v):
    """An f32 scalar, or f16 bits (uint16) -> f32 exactly (subnormals, inf, NaN): LLVM's fpext,
    one vcvtph2ps per vector with F16C. Inlined IR (an overload here costs a call per group)."""
    if v == types.uint16:
        def codegen(context, builder, signature, args):
            return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())
    elif v == types.float32:
        def codegen(context, builder, signature, args):
            return args[0]
    else:
        return None
    return types.float32(v), codegen


@_intrinsic
def _round_f16(typingctx, v):
    """f32 -> nearest f16 -> f32 (vcvtps2ph / vcvtph2ps): NNCF's f16 ``(q - zp) * scale``, whose
    exact f32 product rounded once equals the f16 multiply."""
    if v != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.fpext(builder.fptrunc(args[0], ir.HalfType()), ir.FloatType())

    return types.float32(v), codegen


@njit(**_JIT)
def _w(v, z, s, mul_f16):
    """One decompressed weight from its integer value ``v``, as the IR computes it."""
    w = (v - z) * s
    return _round_f16(w) if mul_f16 else w


@njit(**_JIT)
def _gemv_f32(x, x_pitch, w, w_pitch, k, out, n0, n1, row):
    """out[m, n] = x row m . w row n for n in [n0, n1); row i of ``x`` / ``w`` is the k items at
    i * pitch of the flat array (so a column slice of a wider array is read in place, by the same
    compiled loop as a whole one). Four weight rows per pass share each activation load (fewer
    loads per product; docs/performance.md, "Decode kernels against the bandwidth floor"); a
    block past n1 repeats the last row, so every output element is the same loop over K
    whatever n0/n1 and the pitches are: its bits do not depend on how N is cut or where the rows
    live (a tile of the weight and the whole weight agree: the host fusion's probe relies on it)."""
    m_rows = out.shape[0]
    last = n1 - 1
    for n in range(n0, n1, 4):
        b0, b1 = n * w_pitch, min(n + 1, last) * w_pitch
        b2, b3 = min(n + 2, last) * w_pitch, min(n + 3, last) * w_pitch
        w0, w1, w2, w3 = w[b0:b0 + k], w[b1:b1 + k], w[b2:b2 + k], w[b3:b3 + k]
        for m in range(m_rows):
            xm = x[m * x_pitch:m * x_pitch + k]
            a0 = a1 = a2 = a3 = np.float32(0.0)
            for j in range(k):
                xj = xm[j]
                a0 += xj * w0[j]
                a1 += xj * w1[j]
                a2 += xj * w2[j]
                a3 += xj * w3[j]
            out[m, n] = a0
            if n + 1 <= last:
                out[m, n + 1] = a1
            if n + 2 <= last:
                out[m, n + 2] = a2
            if n + 3 <= last:
                out[m, n + 3] = a3


_PARALLEL: bool | None = None


def parallel_loops() -> bool:
    """Whether numba's parallel loops may run here: more than one thread, and the TBB threading
    layer (OpenVINO's wheel brings the libtbb it loads): safe for launches from several host
    threads at once and across fork. numba's other layers are not both (its fallback
    "workqueue" aborts the process on concurrent launches, GNU OpenMP in a forked child), so
    with them, or one core, products are split by the thread pool instead. Decided on the
    first call by one tiny launch (numba picks its layer once per process)."""
    global _PARALLEL
    if _PARALLEL is None:
        ok = False
        try:
            if numba.get_num_threads() > 1:
                x = np.ones((1, 4), np.float32)
                out = np.empty((1, 4), np.float32)
                _gemv_f32_par(x.ravel(), 4, x.ravel(), 4, 4, out, 0, 1)
                ok = numba.threading_layer() == "tbb"
        except Exception:  # noqa: BLE001  # no usable layer: the serial loop is always there
            logger.debug("numba parallel loops unavailable", exc_info=True)
        _PARALLEL = ok
    return _PARALLEL


def _rows_flat(v: np.ndarray) -> tuple[np.ndarray, int] | None:
    """A 2-D f32 array whose rows are contiguous as (flat 1-D view from its first item, row
    pitch in items), or None. The loops then take one compiled layout for whole and sliced
    operands (a strided 2-D operand compiles to an unvectorised loop that sums in another order)."""
    item = v.itemsize
    if v.ndim != 2 or v.dtype != np.float32 or (v.shape[1] > 1 and v.strides[1] != item) or v.size == 0:
        return None
    pitch = v.strides[0] // item if v.shape[0] > 1 else v.shape[1]
    if pitch < v.shape[1] or v.strides[0] % item:
        return None
    span = (v.shape[0] - 1) * pitch + v.shape[1]
    return np.lib.stride_tricks.as_strided(v, (span,), (item,)), pitch


@_intrinsic
def _prefetch(typingctx, a, offset):
    """Hint the cache line ``offset`` bytes past ``a``'s data (llvm.prefetch: no fault, no effect
    on any value)."""
    if not isinstance(a, types.Array) or not isinstance(offset, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        i8 = ir.IntType(8).as_pointer()
        ptr = builder.gep(builder.bitcast(data, i8), [args[1]])
        fn = builder.module.declare_intrinsic(
            "llvm.prefetch", fnty=ir.FunctionType(ir.VoidType(), [i8, *[ir.IntType(32)] * 3]))
        read, keep, data_cache = (ir.Constant(ir.IntType(32), c) for c in (0, 3, 1))
        builder.call(fn, [ptr, read, keep, data_cache])
        return context.get_dummy_value()

    return types.none(a, offset), codegen


#: how far ahead of the row being read the f16 loop hints the weight's cache lines. The hardware
#: prefetcher alone keeps too few lines in flight for one core when each byte also costs a
#: conversion (f16; docs/performance.md, "Decode kernels against the bandwidth floor"). The
#: 8-lane 8-/4-bit loops are bound by their decode arithmetic, not the read: hints gained nothing there.
#: 1 KiB on the AVX-512 Xeon of issue 29 (1.3x 4 KiB's speed there; 4 KiB was chosen on an earlier host)
PREFETCH_BYTES = 1024


#: the same for the 16-lane 4-bit loop (the 8-bit one takes PREFETCH_BYTES): without hints they
#: stream a weight at about the sum of their arithmetic time and the read time (no overlap);
#: 2 KiB ahead gained 1.2x (4-bit) on one core, 1 KiB 1.7x (8-bit), farther less
#: (docs/performance_log.md, "Bandwidth floor")
LANE_PREFETCH_BYTES = 2048


@njit(inline="always", **_JIT)  # numba-level inlining: a call per row/group costs
def _prefetch_row(q, n, ahead=PREFETCH_BYTES):
    """Hint the bytes of C-contiguous ``q`` that row n + ahead / row bytes will read."""
    rb = q.strides[0]
    lo = n * rb + ahead
    hi = min(lo + rb, q.size * q.itemsize)
    for off in range(lo - lo % 64, hi, 64):
        _prefetch(q, off)


@njit(**_JIT)
def _dot_rows(x, row, out, n):
    """out[m, n] = x[m] . row for every activation row m (one decompressed weight row)."""
    m_rows, k = x.shape
    for m in range(m_rows):
        acc = np.float32(0.0)
        xm = x[m]
        for j in range(k):
            acc += xm[j] * row[j]
        out[m, n] = acc


@njit(**_JIT)
def _scale_zero(s_bits, zp_bits, has_zp, zp_flip, q_flip, mul_f16):
    """(scale, zero point) of one group as f32, for ``_w(q ^ q_flip, z, s, mul_f16)``: the bit
    flip that reads i8 / i4 codes as unsigned is folded into the zero point (exact, small
    integers); ``zp_flip`` 128 reads i8 zero points' bits likewise. Scalars in, scalars out: a
    helper taking the arrays costs a call per group, which slows the 4-bit decode markedly."""
    s = _f32(s_bits)
    if mul_f16:  # the IR converts the scale to f16 first
        s = _round_f16(s)
    z = np.float32(q_flip)
    if has_zp:
        z += np.float32(zp_bits ^ np.uint8(zp_flip)) - np.float32(zp_flip)
    return s, z


@njit(**_JIT)
def _gemv_f16(x, q, out, n0, n1, row):
    """out[:, n] = x @ f32(q[n]) for n in [n0, n1); q is [N, K] f16 bits."""
    m_rows, k = x.shape
    for n in range(n0, n1):
        _prefetch_row(q, n)
        qn = q[n]
        if m_rows == 1:  # converted in registers
            acc = np.float32(0.0)
            x0 = x[0]
            for j in range(k):
                acc += x0[j] * _f32(qn[j])
            out[0, n] = acc
        else:  # converted once into ``row`` for every activation row
            for j in range(k):
                row[j] = _f32(qn[j])
            _dot_rows(x, row, out, n)


@njit(**_JIT)
def _dq_row_q8(q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, n, row):
    """Row n of an 8-bit weight [N, G, gs] (u8 bits) -> f32 ``row``: ``(q - zp) * scale``.
    ``q_flip`` 128 reads the bits as i8 (``(b ^ 128) - 128``); ``zp`` likewise with ``zp_flip``."""
    _, groups, gs = q.shape
    qf = np.uint8(q_flip)
    for g in range(groups):
        s, z = _scale_zero(scale[n, g, 0], zp[n, g, 0] if has_zp else np.uint8(0), has_zp, zp_flip, q_flip, mul_f16)
        # views indexed by the loop counter: LLVM then knows every index is in [0, gs) (an
        # offset index keeps numba's negative-index branch, which blocks vectorising)
        qg, dst = q[n, g], row[g * gs:(g + 1) * gs]
        for j in range(gs):
            # in 8-bit lanes (numba's np.float32(u8 ^ u8) widens to i64 first: scalar on AVX2)
            dst[j] = _w(_byte(np.uint8(qg[j] ^ qf)), z, s, mul_f16)


@_intrinsic
def _nibble(typingctx, b, high):
    """The low (``high`` False) or high nibble of a u8 as f32, in 8-bit lanes (numba's own
    integer ops widen to 64 bits first)."""
    if b != types.uint8 or not isinstance(high, types.BooleanLiteral):
        return None
    shift = high.literal_value

    def codegen(context, builder, signature, args):
        v = args[0]
        v = builder.lshr(v, ir.Constant(ir.IntType(8), 4)) if shift else builder.and_(v, ir.Constant(ir.IntType(8), 15))
        return builder.uitofp(v, ir.FloatType())

    return types.float32(b, high), codegen


def _byte_to_f32(signed: bool) -> Callable[..., Any]:
    """An intrinsic converting a u8 to f32 in 8-bit lanes (see :func:`_nibble`), its bits read as
    unsigned or as i8 (``(b ^ 128) - 128`` in one conversion)."""
    convert = "sitofp" if signed else "uitofp"

    def typer(typingctx, b):
        if b != types.uint8:
            return None

        def codegen(context, builder, signature, args):
            return getattr(builder, convert)(args[0], ir.FloatType())

        return types.float32(b), codegen

    return _intrinsic(typer)


_byte = _byte_to_f32(signed=False)
_sbyte = _byte_to_f32(signed=True)


@njit(inline="always", **_JIT)
def _q8_group_dot(xg, qg, z):
    """sum_j xg[j] * (q_j - z) over one group's u8 codes ``qg``, for the group's scale to
    multiply once (see :func:`_q4_group_dot`)."""
    part = np.float32(0.0)
    for j in range(qg.shape[0]):
        part += xg[j] * (_byte(qg[j]) - z)
    return part


@njit(inline="always", **_JIT)
def _q8s_group_dot(xg, qg, z):
    """:func:`_q8_group_dot` over i8 bits: ``z`` is the zero point in signed terms (the unsigned
    one less 128), and the codes convert as signed bytes: the same exact integers as
    ``(q ^ 128) - (z + 128)``, without the xor (numba's u8 xor widens to 64-bit lanes, a third of
    the loop's speed on AVX2). A symmetric weight (``z`` 0, the common i8 case) skips the
    subtraction, which changes no bit: ``q - 0`` is ``q``."""
    part = np.float32(0.0)
    if z == 0:
        for j in range(qg.shape[0]):
            part += xg[j] * _sbyte(qg[j])
    else:
        for j in range(qg.shape[0]):
            part += xg[j] * (_sbyte(qg[j]) - z)
    return part


@njit(**_JIT)
def _gemv_q8(x, q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, out, n0, n1, row):
    """8-bit weights, see :func:`_dq_row_q8`. One row: decompressed in registers."""
    m_rows = x.shape[0]
    _, groups, gs = q.shape
    qf = np.uint8(q_flip)
    for n in range(n0, n1):
        if m_rows > 1:
            _dq_row_q8(q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, n, row)
            _dot_rows(x, row, out, n)
            continue
        acc = np.float32(0.0)
        for g in range(groups):
            s, z = _scale_zero(scale[n, g, 0], zp[n, g, 0] if has_zp else np.uint8(0), has_zp, zp_flip, q_flip, mul_f16)
            qg, xg = q[n, g], x[0, g * gs:(g + 1) * gs]
            if mul_f16:  # each weight rounded to f16: the scale stays inside
                for j in range(gs):
                    acc += xg[j] * _w(np.float32(qg[j] ^ qf), z, s, mul_f16)
            elif q_flip:  # as _q4_group_dot: the scale once per group
                acc += _q8s_group_dot(xg, qg, z - np.float32(128.0)) * s
            else:
                acc += _q8_group_dot(xg, qg, z) * s
        out[0, n] = acc


@njit(**_JIT)
def _dq_row_q4(q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, n, row):
    """Row n of a 4-bit weight [N, G, gs/2] (two per byte, low nibble first) -> f32 ``row`` as
    [even columns | odd columns] (contiguous reads and stores: the decode loops' layout, and the
    prefill block kernel's, which reorders the activation's columns likewise). ``q_flip`` 8
    reads nibbles as i4 (``(v ^ 8) - 8``)."""
    _, groups, gh = q.shape
    half = groups * gh
    fb = np.uint8(q_flip * 17)  # the flip on both nibbles of a byte
    for g in range(groups):
        s, z = _scale_zero(scale[n, g, 0], zp[n, g, 0] if has_zp else np.uint8(0), has_zp, zp_flip, q_flip, mul_f16)
        qg = q[n, g]
        # nibbles in 8-bit lanes (_nibble; numba's own u8 ops widen to i64, scalar on AVX2:
        # 2.0 G weights/s per core there, 1.5 in column order; now 3.2, the same values)
        lo, hi = row[g * gh:(g + 1) * gh], row[half + g * gh:half + (g + 1) * gh]
        for j in range(gh):
            b = np.uint8(qg[j] ^ fb)
            lo[j] = _w(_nibble(b, False), z, s, mul_f16)
            hi[j] = _w(_nibble(b, True), z, s, mul_f16)


@njit(inline="always", **_JIT)
def _q4_group_dot(xe, xo, qg, z, flip):
    """sum_j xe[j] * (lo_j - z) + xo[j] * (hi_j - z) over one group's bytes ``qg`` (xor ``flip``
    first: 0x88 reads both nibbles as i4). ``q - z`` is a small integer, exact in f32, so the
    group's scale can multiply the sum once instead of every weight (a faster decode than the
    per-weight form; one horizontal sum per group either way; docs/performance.md, "Decode
    kernels against the bandwidth floor")."""
    part = np.float32(0.0)
    for j in range(qg.shape[0]):
        b = np.uint8(qg[j] ^ flip)
        part += xe[j] * (_nibble(b, False) - z) + xo[j] * (_nibble(b, True) - z)
    return part


_F32 = ir.FloatType()
_I64 = ir.IntType(64)
_V8F = ir.VectorType(_F32, 8)
_V8B = ir.VectorType(ir.IntType(8), 8)
#: bytes of 4-bit codes per pass of :func:`_q4_row_dot` (two 8-byte halves: four accumulators)
Q4_ROW_STEP = 16


def _splat(builder: ir.IRBuilder, value: ir.Value, vty: ir.VectorType) -> ir.Value:
    undef = ir.Constant(vty, ir.Undefined)
    one = builder.insert_element(undef, value, ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(one, undef, ir.Constant(ir.VectorType(ir.IntType(32), vty.count), [0] * vty.count))


def _q4_group_loop(builder: ir.IRBuilder, name: str, ps: ir.Value, pz: ir.Value, pxs: ir.Value, groups: ir.Value,
                   step: ir.Value, pass_bytes: int,
                   pass_body: Callable[[ir.Value, list[ir.Value]], list[ir.Value]]) -> ir.Value:
    """The loops both 4-bit IR rows share, emitted at the builder's position; returns the row's sum.

    For each group g: four 8-lane partial sums, zero at the group's start, which
    ``pass_body(off, parts)`` advances over code bytes ``[off, off + pass_bytes)`` (``off`` =
    ``g * step + j``, ``j`` stepping by ``pass_bytes`` to ``step``); then the group's sum minus
    ``z[g] * xs8[g]`` (one fma: the zero point's term) scaled into an 8-lane accumulator by ``s[g]``
    (one fma); at the end the accumulator's lanes summed in a fixed order."""
    fma = builder.module.declare_intrinsic("llvm.fma.v8f32", fnty=ir.FunctionType(_V8F, [_V8F] * 3))
    zero = ir.Constant(_V8F, [0.0] * 8)
    fn, entry = builder.function, builder.block
    g_head, g_body, j_head, j_body, g_tail, done = (
        fn.append_basic_block(f"{name}.{n}") for n in ("g_head", "g_body", "j_head", "j_body", "g_tail", "done"))
    builder.branch(g_head)

    builder.position_at_end(g_head)  # for g in range(groups)
    g, acc = builder.phi(_I64), builder.phi(_V8F)
    g.add_incoming(ir.Constant(_I64, 0), entry)
    acc.add_incoming(zero, entry)
    builder.cbranch(builder.icmp_signed("<", g, groups), g_body, done)

    builder.position_at_end(g_body)
    sv = _splat(builder, builder.load(builder.gep(ps, [g])), _V8F)
    zv = _splat(builder, builder.load(builder.gep(pz, [g])), _V8F)
    xsv = builder.load(builder.bitcast(builder.gep(pxs, [builder.mul(g, ir.Constant(_I64, 8))]),
                                       _V8F.as_pointer()), align=4)
    base = builder.mul(g, step)
    builder.branch(j_head)

    builder.position_at_end(j_head)  # for j in range(0, step, pass_bytes)
    j = builder.phi(_I64)
    parts = [builder.phi(_V8F) for _ in range(4)]
    j.add_incoming(ir.Constant(_I64, 0), g_body)
    for part in parts:
        part.add_incoming(zero, g_body)
    builder.cbranch(builder.icmp_signed("<", j, step), j_body, g_tail)

    builder.position_at_end(j_body)
    for part, value in zip(parts, pass_body(builder.add(base, j), list(parts)), strict=True):
        part.add_incoming(value, builder.block)
    j.add_incoming(builder.add(j, ir.Constant(_I64, pass_bytes)), builder.block)
    builder.branch(j_head)

    builder.position_at_end(g_tail)
    group = builder.fadd(builder.fadd(parts[0], parts[1]), builder.fadd(parts[2], parts[3]))
    group = builder.call(fma, [builder.fneg(zv), xsv, group])  # sum x * (code - z), per lane, one rounding
    g.add_incoming(builder.add(g, ir.Constant(_I64, 1)), g_tail)
    acc.add_incoming(builder.call(fma, [group, sv, acc]), g_tail)
    builder.branch(g_head)

    builder.position_at_end(done)
    lane = [builder.extract_element(acc, ir.Constant(ir.IntType(32), i)) for i in range(8)]
    return builder.fadd(builder.fadd(builder.fadd(lane[0], lane[4]), builder.fadd(lane[2], lane[6])),
                        builder.fadd(builder.fadd(lane[1], lane[5]), builder.fadd(lane[3], lane[7])))


@_intrinsic
def _q4_row_dot(typingctx, xe, xo, xs8, qrow, s, z, gh, flip):
    """One row of a 4-bit weight times one activation row, written as vector IR:
    ``sum_g s[g] * sum_j (xe[g*gh + j] * (lo_j - z[g]) + xo[g*gh + j] * (hi_j - z[g]))`` over
    the row's bytes ``qrow`` [groups, gh] (each xor ``flip``), with ``gh`` a multiple of
    :data:`Q4_ROW_STEP`.  The zero point comes out of the sum: each lane adds ``x * code`` and
    the group subtracts ``z[g] * xs8[g]`` once, ``xs8`` [groups * 8] being the activation's sums
    per group and lane (:func:`_lane_sums`, once per activation row for all output channels):
    one subtraction per 8 weights fewer in an ALU-bound loop.

    Why IR: numba's loop over one group ends in a horizontal sum of the vector lanes, and a
    group is only 4-8 vector steps (128 weights), so that sum, the group's setup and the loop's
    remainder checks cost about as much as the products. Here each group's four 8-lane partial
    sums are scaled into an 8-lane accumulator (one fma), and the lanes are summed once per row,
    in a fixed order, faster than the numba loop (docs/performance.md, "Decode kernels against
    the bandwidth floor"). Every row is the same
    instruction sequence whatever rows or blocks the caller runs, so the bits do not depend on
    how output channels are cut."""
    if not all(isinstance(a, types.Array) and a.ndim >= 1 and a.layout == "C" for a in (xe, xo, xs8, qrow, s, z)):
        return None
    if (xe.dtype, xo.dtype, xs8.dtype, qrow.dtype, s.dtype, z.dtype) != (
            types.float32, types.float32, types.float32, types.uint8, types.float32, types.float32):
        return None
    if not isinstance(gh, types.Integer) or flip != types.uint8:
        return None

    def codegen(context, builder, signature, args):
        arrays = [context.make_array(t)(context, builder, a) for t, a in zip(signature.args[:6], args[:6], strict=True)]
        pxe, pxo, pxs, pq, ps, pz = (a.data for a in arrays)
        groups = builder.extract_value(arrays[4].shape, 0)
        step = builder.sext(args[6], _I64) if args[6].type != _I64 else args[6]
        fma = builder.module.declare_intrinsic("llvm.fma.v8f32", fnty=ir.FunctionType(_V8F, [_V8F] * 3))
        flip8 = _splat(builder, args[7], _V8B)
        low_mask, four = ir.Constant(_V8B, [15] * 8), ir.Constant(_V8B, [4] * 8)

        def pass_body(off: ir.Value, parts: list[ir.Value]) -> list[ir.Value]:
            new = []
            for half in range(2):  # bytes j..j+7 and j+8..j+15: low nibbles pair with xe, high with xo
                at = builder.add(off, ir.Constant(_I64, 8 * half))
                packed = builder.load(builder.bitcast(builder.gep(pq, [at]), _V8B.as_pointer()), align=1)
                codes = builder.xor(packed, flip8)
                lo = builder.uitofp(builder.and_(codes, low_mask), _V8F)
                hi = builder.uitofp(builder.lshr(codes, four), _V8F)
                x_lo = builder.load(builder.bitcast(builder.gep(pxe, [at]), _V8F.as_pointer()), align=4)
                x_hi = builder.load(builder.bitcast(builder.gep(pxo, [at]), _V8F.as_pointer()), align=4)
                new += [builder.call(fma, [x_lo, lo, parts[2 * half]]),
                        builder.call(fma, [x_hi, hi, parts[2 * half + 1]])]
            return new

        return _q4_group_loop(builder, "q4row", ps, pz, pxs, groups, step, Q4_ROW_STEP, pass_body)

    return types.float32(xe, xo, xs8, qrow, s, z, gh, flip), codegen


_V8I = ir.VectorType(ir.IntType(32), 8)
#: code bytes per pass of :func:`_q4_dword_row_dot` (64 codes: an 8 x 8 block of the activation)
Q4_DWORD_STEP = 32


@_intrinsic
def _q4_dword_row_dot(typingctx, xp, xs8, qrow, s, z, gh, flip):
    """One row of a 4-bit weight times one activation row, as :func:`_q4_row_dot` computes it but
    with the nibbles taken in 32-bit lanes: each pass loads 32 code bytes as eight dwords, and
    nibble k of every dword (``(w >> 4k) & 15``: a shift and a mask for 8 codes, one conversion,
    one fma) multiplies the activation values at columns ``8l + k`` of the pass's 64, which
    :func:`_permute_block_columns` laid out at ``8k + l`` (``xp``).  The 8-lane row spent a
    mask, a shift pair, a zero-extension and a conversion per 8 codes in byte lanes of which
    it used a quarter.  ``gh`` (code bytes per group) is a multiple of :data:`Q4_DWORD_STEP`;
    ``xs8`` [groups * 8] holds the activation's sums per group and lane (the zero point's term,
    as :func:`_q4_row_dot`); ``flip`` 0x88 reads i4.  Every row is the same instruction sequence
    whatever rows or blocks the caller runs."""
    if not all(isinstance(a, types.Array) and a.ndim >= 1 and a.layout == "C" for a in (xp, xs8, qrow, s, z)):
        return None
    if (xp.dtype, xs8.dtype, qrow.dtype, s.dtype, z.dtype) != (
            types.float32, types.float32, types.uint8, types.float32, types.float32):
        return None
    if not isinstance(gh, types.Integer) or flip != types.uint8:
        return None

    def codegen(context, builder, signature, args):
        arrays = [context.make_array(t)(context, builder, a) for t, a in zip(signature.args[:5], args[:5], strict=True)]
        pxp, pxs, pq, ps, pz = (a.data for a in arrays)
        groups = builder.extract_value(arrays[3].shape, 0)
        step = builder.sext(args[5], _I64) if args[5].type != _I64 else args[5]
        fma = builder.module.declare_intrinsic("llvm.fma.v8f32", fnty=ir.FunctionType(_V8F, [_V8F] * 3))
        flip4 = builder.mul(builder.zext(args[6], ir.IntType(32)), ir.Constant(ir.IntType(32), 0x01010101))
        flip32 = _splat(builder, flip4, _V8I)  # the flip on every byte of a dword
        mask = ir.Constant(_V8I, [15] * 8)

        def pass_body(off: ir.Value, parts: list[ir.Value]) -> list[ir.Value]:
            words = builder.load(builder.bitcast(builder.gep(pq, [off]), _V8I.as_pointer()), align=1)
            words = builder.xor(words, flip32)
            xoff = builder.add(off, off)  # two codes per byte: the pass's 64 columns start at 2 * off
            for k in range(8):
                shifted = words if k == 0 else builder.lshr(words, ir.Constant(_V8I, [4 * k] * 8))
                codes = shifted if k == 7 else builder.and_(shifted, mask)
                cf = builder.sitofp(codes, _V8F)  # 0..15: the signed conversion is exact and one instruction
                xv = builder.load(builder.bitcast(builder.gep(pxp, [builder.add(xoff, ir.Constant(_I64, 8 * k))]),
                                                  _V8F.as_pointer()), align=4)
                parts[k % 4] = builder.call(fma, [xv, cf, parts[k % 4]])
            return parts

        return _q4_group_loop(builder, "q4dw", ps, pz, pxs, groups, step, Q4_DWORD_STEP, pass_body)

    return types.float32(xp, xs8, qrow, s, z, gh, flip), codegen


_V32B = ir.VectorType(ir.IntType(8), 32)
_V16S = ir.VectorType(ir.IntType(16), 16)


#: output channels per pass of :func:`_q4a8_rows_dot` (sharing each activation load)
A8_ROWS = 4


def _loop(builder: ir.IRBuilder, name: str, start: ir.Value, stop: ir.Value, step: ir.Value, carried: list[ir.Value],
          body: Callable[[ir.Value, list[ir.Value]], list[ir.Value]]) -> list[ir.Value]:
    """``for i in range(start, stop, step)`` at the builder's position, threading ``carried``
    values through ``body(i, values) -> values``; returns their final values."""
    entry = builder.block
    head, loop_body, done = (builder.function.append_basic_block(f"{name}.{n}") for n in ("head", "body", "done"))
    builder.branch(head)
    builder.position_at_end(head)
    i = builder.phi(start.type)
    i.add_incoming(start, entry)
    phis = []
    for v in carried:
        phi = builder.phi(v.type)
        phi.add_incoming(v, entry)
        phis.append(phi)
    builder.cbranch(builder.icmp_signed("<", i, stop), loop_body, done)
    builder.position_at_end(loop_body)
    new = body(i, list(phis))
    for phi, v in zip(phis, new, strict=True):
        phi.add_incoming(v, builder.block)
    i.add_incoming(builder.add(i, step), builder.block)
    builder.branch(head)
    builder.position_at_end(done)
    return list(phis)


@_intrinsic
def _q4a8_rows_dot(typingctx, qe, qo, sa8, xs8, q, n, n1, s_rows, z_rows, signed, res):
    """Output channels ``n .. n + A8_ROWS - 1`` (each past ``n1 - 1`` repeats that last row) of a
    4-bit weight ``q`` [N, groups, gh] times one int8-quantized activation row (dynamic
    quantization, :mod:`.act_quant`) into ``res`` [A8_ROWS]: per row
    ``sum_g s[g] * (sum_p sa8[p] * sum_j code_j * q_j - z[g] * xs8[g])`` with ``s`` / ``z`` its
    row of ``s_rows`` / ``z_rows`` [A8_ROWS, groups], the inner sums in exact integers.

    ``qe`` / ``qo`` hold the activation's codes at the even / odd columns (int8). Each pass takes
    32 code bytes of each row, masks and shifts them into 32 low and 32 high nibbles, multiplies
    those by ``qe`` / ``qo`` with vpmaddubsw (unsigned x signed byte pairs summed into 16 bits:
    at most 4 * 15 * 127 here, no saturation) and vpmaddwd (pairs of those into 8 int32 lanes,
    lane l summing bytes 4l..4l+3), then scales the lanes by ``sa8`` (their activation scales,
    per pass) into the group's f32 sum; then ``z[g] * xs8[g]`` comes off and ``s[g]`` scales it
    into the row's 8-lane accumulator (as :func:`_q4_group_loop`), whose lanes are summed once, in
    a fixed order.  About a quarter of the vector operations per code of the f32 rows
    (:func:`_q4_dword_row_dot`, which convert every code to f32), and the rows share each pass's
    activation loads and the loops' overhead.  Every row is the same instruction sequence
    whatever rows or blocks the caller runs, so the bits do not depend on how channels are cut.
    ``gh`` is a multiple of 32; ``signed`` (a literal) reads i4: each byte xor 0x88 (the offset
    that makes is in ``z``)."""
    arrays = (qe, qo, sa8, xs8, q, s_rows, z_rows, res)
    if not all(isinstance(a, types.Array) and a.layout == "C" for a in arrays) or q.ndim != 3:
        return None
    if tuple(a.dtype for a in arrays) != (types.int8, types.int8, types.float32, types.float32, types.uint8,
                                          types.float32, types.float32, types.float32):
        return None
    if not isinstance(n, types.Integer) or not isinstance(n1, types.Integer):
        return None
    if not isinstance(signed, types.BooleanLiteral):
        return None
    flip = signed.literal_value

    def codegen(context, builder, signature, args):
        arrs = [context.make_array(t)(context, builder, a) for t, a in zip(signature.args, args, strict=True)
                if isinstance(t, types.Array)]
        pqe, pqo, psa, pxs, pq, ps, pz, pres = (a.data for a in arrs)
        _, groups, gh = (builder.extract_value(arrs[4].shape, i) for i in range(3))
        i64 = [builder.sext(v, _I64) if v.type != _I64 else v for v in (args[5], args[6])]
        n0, last = i64[0], builder.sub(i64[1], ir.Constant(_I64, 1))
        row_bytes = builder.mul(groups, gh)
        rows = []
        for r in range(A8_ROWS):  # each row's first byte (rows past n1 - 1 read the last one)
            nr = builder.add(n0, ir.Constant(_I64, r))
            nr = builder.select(builder.icmp_signed(">", nr, last), last, nr)
            rows.append(builder.gep(pq, [builder.mul(nr, row_bytes)]))
        fma = builder.module.declare_intrinsic("llvm.fma.v8f32", fnty=ir.FunctionType(_V8F, [_V8F] * 3))
        maddubs = builder.module.declare_intrinsic("llvm.x86.avx2.pmadd.ub.sw",
                                                   fnty=ir.FunctionType(_V16S, [_V32B, _V32B]))
        maddwd = builder.module.declare_intrinsic("llvm.x86.avx2.pmadd.wd", fnty=ir.FunctionType(_V8I, [_V16S, _V16S]))
        flip32 = ir.Constant(_V32B, [0x88] * 32)
        low_mask, four = ir.Constant(_V32B, [15] * 32), ir.Constant(_V32B, [4] * 32)
        ones = ir.Constant(_V16S, [1] * 16)
        zero = ir.Constant(_V8F, [0.0] * 8)
        step = ir.Constant(_I64, A8_PASS_BYTES)

        def group(g: ir.Value, accs: list[ir.Value]) -> list[ir.Value]:
            base = builder.mul(g, gh)

            def one_pass(j: ir.Value, parts: list[ir.Value]) -> list[ir.Value]:
                off = builder.add(base, j)
                ae, ao = _v16_load(builder, pqe, off, _V32B, 1), _v16_load(builder, pqo, off, _V32B, 1)
                scales = _v16_load(builder, psa, builder.lshr(off, ir.Constant(_I64, 2)), _V8F, 4)  # 8 per pass
                out = []
                for r in range(A8_ROWS):
                    codes = _v16_load(builder, rows[r], off, _V32B, 1)
                    if flip:
                        codes = builder.xor(codes, flip32)
                    lo, hi = builder.and_(codes, low_mask), builder.lshr(codes, four)
                    pairs = builder.add(builder.call(maddubs, [lo, ae]), builder.call(maddubs, [hi, ao]))
                    lanes = builder.sitofp(builder.call(maddwd, [pairs, ones]), _V8F)
                    out.append(builder.call(fma, [lanes, scales, parts[r]]))
                return out

            parts = _loop(builder, "a8pass", ir.Constant(_I64, 0), gh, step, [zero] * A8_ROWS, one_pass)
            xsv = _v16_load(builder, pxs, builder.mul(g, ir.Constant(_I64, 8)), _V8F, 4)
            new = []
            for r in range(A8_ROWS):
                at = builder.add(builder.mul(ir.Constant(_I64, r), groups), g)
                sv = _splat(builder, builder.load(builder.gep(ps, [at])), _V8F)
                zv = _splat(builder, builder.load(builder.gep(pz, [at])), _V8F)
                part = builder.call(fma, [builder.fneg(zv), xsv, parts[r]])  # the zero point's term, one rounding
                new.append(builder.call(fma, [part, sv, accs[r]]))
            return new

        accs = _loop(builder, "a8group", ir.Constant(_I64, 0), groups, ir.Constant(_I64, 1), [zero] * A8_ROWS, group)
        for r in range(A8_ROWS):
            lane = [builder.extract_element(accs[r], ir.Constant(ir.IntType(32), i)) for i in range(8)]
            total = builder.fadd(builder.fadd(builder.fadd(lane[0], lane[4]), builder.fadd(lane[2], lane[6])),
                                 builder.fadd(builder.fadd(lane[1], lane[5]), builder.fadd(lane[3], lane[7])))
            builder.store(total, builder.gep(pres, [ir.Constant(_I64, r)]))
        return context.get_dummy_value()

    return types.none(qe, qo, sa8, xs8, q, n, n1, s_rows, z_rows, signed, res), codegen


@njit(**_JIT)
def _gemv_q4a8(x_split, qa, sa8, xs8, ok, q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, out, n0, n1, row):
    """4-bit weights, one activation row quantized to int8 (:func:`_prepare_a8` made ``qa``,
    ``sa8``, ``xs8`` from ``x_split``): :func:`_q4a8_rows_dot` per :data:`A8_ROWS` output
    channels; a row that is not finite (``ok[0]`` 0) multiplies as float (the per-weight loop on
    ``x_split``)."""
    if not ok[0]:
        _gemv_q4_rows(x_split, np.zeros(0, np.float32), q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, out, n0, n1,
                      row)
        return
    groups, gh = q.shape[1], q.shape[2]
    half = groups * gh
    qe, qo = qa[:half], qa[half:]
    s_rows, z_rows = np.empty((A8_ROWS, groups), np.float32), np.empty((A8_ROWS, groups), np.float32)
    res = np.empty(A8_ROWS, np.float32)
    for n in range(n0, n1, A8_ROWS):
        for r in range(A8_ROWS):  # rows past n1 - 1 repeat it
            _prefetch_row(q, n + r, LANE_PREFETCH_BYTES)
            _row_scales(scale, zp, has_zp, q_flip, zp_flip, mul_f16, min(n + r, n1 - 1), s_rows[r], z_rows[r])
        if q_flip:
            _q4a8_rows_dot(qe, qo, sa8, xs8, q, n, n1, s_rows, z_rows, True, res)
        else:
            _q4a8_rows_dot(qe, qo, sa8, xs8, q, n, n1, s_rows, z_rows, False, res)
        for r in range(min(A8_ROWS, n1 - n)):
            out[0, n + r] = res[r]


@njit(**_JIT)
def _block_lane_sums(xp, groups, gcols):
    """[groups * 8]: per group of ``gcols`` permuted activation values, the sum over the values
    at each place modulo 8 -- the lane of :func:`_q4_dword_row_dot` that reads them."""
    xs8 = np.zeros(groups * 8, np.float32)
    for g in range(groups):
        for m in range(gcols):
            xs8[g * 8 + (m & 7)] += xp[g * gcols + m]
    return xs8


@njit(**_JIT)
def _gemv_q4_dw(x_perm, q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, out, n0, n1, row):
    """4-bit weights, one activation row, groups of a multiple of 64 codes, without AVX-512:
    :func:`_q4_dword_row_dot` per output channel; ``x_perm`` is the row permuted by
    :func:`_permute_block_columns` (``row`` unused)."""
    xs8 = _block_lane_sums(x_perm[0], q.shape[1], 2 * q.shape[2])
    if np.isfinite(xs8).all():
        _gemv_q4_dw_rows(x_perm, xs8, q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, out, n0, n1)
    else:  # an infinite or NaN activation: the per-weight loop, as _q4_lane_sums says why
        _gemv_q4_rows(_unpermute_block_columns(x_perm), np.zeros(0, np.float32), q, scale, zp, has_zp, q_flip, zp_flip,
                      mul_f16, out, n0, n1, row)


@njit(**_JIT)
def _unpermute_block_columns(x_perm):
    """:func:`_permute_block_columns`'s row back in :func:`_split_columns`'s [even | odd] layout."""
    k = x_perm.shape[1]
    half = k // 2
    x_split = np.empty((1, k), np.float32)
    for b in range(k // 64):
        for kk in range(8):
            for lane in range(8):
                c = 8 * lane + kk  # the block's column
                x_split[0, (c & 1) * half + (b * 64 + c) // 2] = x_perm[0, b * 64 + 8 * kk + lane]
    return x_split


@njit(**_JIT)
def _gemv_q4_dw_rows(x_perm, xs8, q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, out, n0, n1):
    groups, gh = q.shape[1], q.shape[2]
    s_row, z_row = np.empty(groups, np.float32), np.empty(groups, np.float32)
    flip = np.uint8(0x88) if q_flip else np.uint8(0)
    xp = x_perm[0]
    for n in range(n0, n1):
        _row_scales(scale, zp, has_zp, q_flip, zp_flip, mul_f16, n, s_row, z_row)
        out[0, n] = _q4_dword_row_dot(xp, xs8, q[n], s_row, z_row, gh, flip)


@njit(**_JIT)
def _lane_sums(x_even, x_odd, groups, gh):
    """[groups * 8]: per group of ``gh`` columns of each half, the sum of ``x_even + x_odd`` over
    the columns at each place modulo 8 -- the lane of :func:`_q4_row_dot` that reads them."""
    xs8 = np.zeros(groups * 8, np.float32)
    for g in range(groups):
        for m in range(gh):
            xs8[g * 8 + (m & 7)] += x_even[g * gh + m] + x_odd[g * gh + m]
    return xs8


_V16F = ir.VectorType(_F32, 16)
_V16I = ir.VectorType(ir.IntType(32), 16)
_V16B = ir.VectorType(ir.IntType(8), 16)
#: bytes of codes per pass of the 16-lane rows (:func:`_q4_lut_row_dot`, :func:`_q8_lanes_row_dot`):
#: one cache line; a group (4-bit: a row) of a multiple of it takes them
LANE_BYTES = 64

@functools.cache
def _jit_features() -> frozenset[str]:
    """The CPU features numba compiles for (NUMBA_CPU_FEATURES, else the host's: numba's own rule)."""
    import llvmlite.binding as ll
    from numba.core import config

    features = getattr(config, "CPU_FEATURES", None)
    if features is None:
        features = ll.get_host_cpu_features().flatten()
    return frozenset(features.split(","))


def avx512() -> bool:
    """Whether numba compiles for AVX-512F here: the 16-lane rows use its vpermps, and 16-lane
    vectors; elsewhere the 8-lane rows run."""
    return "+avx512f" in _jit_features()


def avx2() -> bool:
    """Whether numba compiles for AVX2 here: the int8-activation row's vpmaddubsw / vpmaddwd."""
    return "+avx2" in _jit_features()


def _array_args(context: Any, builder: ir.IRBuilder, sig: Any, args: Any, count: int) -> list[Any]:
    return [context.make_array(t)(context, builder, a) for t, a in zip(sig.args[:count], args[:count], strict=True)]


def _v16_load(builder: ir.IRBuilder, base: ir.Value, offset: ir.Value, vty: ir.VectorType, align: int) -> ir.Value:
    return builder.load(builder.bitcast(builder.gep(base, [offset]), vty.as_pointer()), align=align)


def _lane_sum(builder: ir.IRBuilder, vectors: list[ir.Value]) -> ir.Value:
    """The sum of equal-width vectors and then of their lanes, as a fixed pairwise tree."""
    while len(vectors) > 1:
        vectors = [builder.fadd(vectors[i], vectors[i + 1]) for i in range(0, len(vectors), 2)]
    lanes = [builder.extract_element(vectors[0], ir.Constant(ir.IntType(32), i)) for i in range(vectors[0].type.count)]
    while len(lanes) > 1:
        half = len(lanes) // 2
        lanes = [builder.fadd(lanes[i], lanes[i + half]) for i in range(half)]
    return lanes[0]


def _f16_round_v(builder: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """Each lane to the nearest f16 and back (vcvtps2ph / vcvtph2ps): :func:`_round_f16`."""
    return builder.fpext(builder.fptrunc(v, ir.VectorType(ir.HalfType(), v.type.count)), v.type)


def _c_arrays(*arrays: Any) -> bool:
    return all(isinstance(a, types.Array) and a.layout == "C" for a in arrays)


@_intrinsic
def _q4_lut_row_dot(typingctx, xp, qrow, s, z, codes, mul_f16):
    """One row of a 4-bit weight times one activation row on AVX-512, each weight through its
    group's 16-entry table: ``sum_j xp[j] * T_g[code_j]`` with ``T_g[c] = (codes[c] - z[g]) *
    s[g]`` (f16-rounded with ``mul_f16``: NNCF's multiply), i.e. exactly the decompressed
    weight :func:`_w` gives, so the sum differs from a decompressed product only in its order.

    Why: the decode arithmetic, not memory, limited the 8-lane row (:func:`_q4_row_dot`, a mask
    or shift, a widening, a conversion, a subtraction and an fma per 8 codes). Here 64 bytes
    (128 codes) are one 16-lane load; lane d holds codes 8d..8d+7 in its nibbles, so a shift by
    4i and one vpermps (which reads the low 4 bits of each lane as the table index: no mask, no
    conversion) give code 8d + i of every lane, and one fma adds it: 3 instructions per 16
    codes. ``xp`` is the activation permuted to match (:func:`_permute_columns`); ``qrow`` is
    [groups, gh] with gh a multiple of :data:`LANE_BYTES`; ``codes`` the 16 code values as read
    (``c ^ 8`` for i4). Eight 16-lane accumulators run over the whole row and are summed once
    in a fixed order: every row is the same instruction sequence, so the bits do not depend on
    how output channels are cut."""
    if not _c_arrays(xp, qrow, s, z, codes) or qrow.ndim != 2 or not isinstance(mul_f16, types.BooleanLiteral):
        return None
    if (xp.dtype, qrow.dtype, s.dtype, z.dtype, codes.dtype) != (types.float32, types.uint8, types.float32,
                                                                  types.float32, types.float32):
        return None
    rounded = mul_f16.literal_value

    def codegen(context, builder, signature, args):
        arrays = _array_args(context, builder, signature, args, 5)
        px, pq, ps, pz, pc = (a.data for a in arrays)
        groups, gh = (builder.extract_value(arrays[1].shape, i) for i in range(2))
        fma = builder.module.declare_intrinsic("llvm.fma.v16f32", fnty=ir.FunctionType(_V16F, [_V16F] * 3))
        perm = builder.module.declare_intrinsic("llvm.x86.avx512.permvar.sf.512",
                                                fnty=ir.FunctionType(_V16F, [_V16F, _V16I]))
        zero = ir.Constant(_V16F, [0.0] * 16)
        code_values = _v16_load(builder, pc, ir.Constant(_I64, 0), _V16F, 4)
        fn, entry = builder.function, builder.block
        g_head, g_body, j_head, j_body, g_tail, done = (
            fn.append_basic_block(f"q4lut.{n}") for n in ("g_head", "g_body", "j_head", "j_body", "g_tail", "done"))
        builder.branch(g_head)

        builder.position_at_end(g_head)  # for g in range(groups)
        g = builder.phi(_I64)
        accs = [builder.phi(_V16F) for _ in range(8)]
        g.add_incoming(ir.Constant(_I64, 0), entry)
        for acc in accs:
            acc.add_incoming(zero, entry)
        builder.cbranch(builder.icmp_signed("<", g, groups), g_body, done)

        builder.position_at_end(g_body)  # the group's table
        sv = _splat(builder, builder.load(builder.gep(ps, [g])), _V16F)
        zv = _splat(builder, builder.load(builder.gep(pz, [g])), _V16F)
        table = builder.fmul(builder.fsub(code_values, zv), sv)
        if rounded:
            table = _f16_round_v(builder, table)
        base = builder.mul(g, gh)
        builder.branch(j_head)

        builder.position_at_end(j_head)  # for j in range(0, gh, LANE_BYTES)
        j = builder.phi(_I64)
        parts = [builder.phi(_V16F) for _ in range(8)]
        j.add_incoming(ir.Constant(_I64, 0), g_body)
        for part, acc in zip(parts, accs, strict=True):
            part.add_incoming(acc, g_body)
        builder.cbranch(builder.icmp_signed("<", j, gh), j_body, g_tail)

        builder.position_at_end(j_body)
        off = builder.add(base, j)
        packed = _v16_load(builder, pq, off, _V16I, 1)
        x_off = builder.shl(off, ir.Constant(_I64, 1))  # two codes per byte
        new = []
        for i, part in enumerate(parts):
            idx = builder.lshr(packed, ir.Constant(_V16I, [4 * i] * 16)) if i else packed
            xv = _v16_load(builder, px, builder.add(x_off, ir.Constant(_I64, 16 * i)), _V16F, 4)
            new.append(builder.call(fma, [xv, builder.call(perm, [table, idx]), part]))
        for part, value in zip(parts, new, strict=True):
            part.add_incoming(value, j_body)
        j.add_incoming(builder.add(j, ir.Constant(_I64, LANE_BYTES)), j_body)
        builder.branch(j_head)

        builder.position_at_end(g_tail)
        for acc, part in zip(accs, parts, strict=True):
            acc.add_incoming(part, g_tail)
        g.add_incoming(builder.add(g, ir.Constant(_I64, 1)), g_tail)
        builder.branch(g_head)

        builder.position_at_end(done)
        return _lane_sum(builder, list(accs))

    return types.float32(xp, qrow, s, z, codes, mul_f16), codegen


@_intrinsic
def _q8_lanes_row_dot(typingctx, x, qrow, s, z, signed, mul_f16):
    """One row of an 8-bit weight times one activation row in 16-lane vector IR, the codes
    widened from bytes (vpmovzxbd / vpmovsxbd with ``signed``: i8 bits, ``z`` then offset by
    128 as :func:`_scale_zero` reads them): ``sum_g s[g] * sum_j x[j] * (q_j - z[g])``, each
    group's four 16-lane partial sums scaled into the accumulator once, as
    :func:`_q8_group_dot`'s loop; with ``mul_f16`` every weight is ``_w``'s f16-rounded
    ``(q - z) * s`` instead. ``qrow`` is [groups, gs] with gs a multiple of :data:`LANE_BYTES`.
    Why IR: numba's loop ends each group in a horizontal sum, and its widening and conversion
    ran on 8 lanes (docs/performance.md, "Decode kernels against the bandwidth floor")."""
    if not _c_arrays(x, qrow, s, z) or qrow.ndim != 2:
        return None
    if not isinstance(signed, types.BooleanLiteral) or not isinstance(mul_f16, types.BooleanLiteral):
        return None
    if (x.dtype, qrow.dtype, s.dtype, z.dtype) != (types.float32, types.uint8, types.float32, types.float32):
        return None
    is_signed, rounded = signed.literal_value, mul_f16.literal_value

    def codegen(context, builder, signature, args):
        arrays = _array_args(context, builder, signature, args, 4)
        px, pq, ps, pz = (a.data for a in arrays)
        groups, gs = (builder.extract_value(arrays[1].shape, i) for i in range(2))
        fma = builder.module.declare_intrinsic("llvm.fma.v16f32", fnty=ir.FunctionType(_V16F, [_V16F] * 3))
        zero = ir.Constant(_V16F, [0.0] * 16)
        fn, entry = builder.function, builder.block
        g_head, g_body, j_head, j_body, g_tail, done = (
            fn.append_basic_block(f"q8row.{n}") for n in ("g_head", "g_body", "j_head", "j_body", "g_tail", "done"))
        builder.branch(g_head)

        builder.position_at_end(g_head)  # for g in range(groups)
        g = builder.phi(_I64)
        accs = [builder.phi(_V16F) for _ in range(4 if rounded else 1)]
        g.add_incoming(ir.Constant(_I64, 0), entry)
        for acc in accs:
            acc.add_incoming(zero, entry)
        builder.cbranch(builder.icmp_signed("<", g, groups), g_body, done)

        builder.position_at_end(g_body)
        sv = _splat(builder, builder.load(builder.gep(ps, [g])), _V16F)
        z_g = builder.load(builder.gep(pz, [g]))
        if is_signed:  # the bits read as i8 are the u8 reading minus 128 (exact: small integers)
            z_g = builder.fsub(z_g, ir.Constant(_F32, 128.0))
        zv = _splat(builder, z_g, _V16F)
        base = builder.mul(g, gs)
        builder.branch(j_head)

        builder.position_at_end(j_head)  # for j in range(0, gs, LANE_BYTES)
        j = builder.phi(_I64)
        parts = [builder.phi(_V16F) for _ in range(4)]
        j.add_incoming(ir.Constant(_I64, 0), g_body)
        for i, part in enumerate(parts):
            part.add_incoming(accs[i] if rounded else zero, g_body)
        builder.cbranch(builder.icmp_signed("<", j, gs), j_body, g_tail)

        builder.position_at_end(j_body)
        new = []
        for i, part in enumerate(parts):
            off = builder.add(builder.add(base, j), ir.Constant(_I64, 16 * i))
            codes = _v16_load(builder, pq, off, _V16B, 1)
            wide = builder.sext(codes, _V16I) if is_signed else builder.zext(codes, _V16I)
            w = builder.fsub(builder.sitofp(wide, _V16F), zv)
            if rounded:  # each weight as the IR's f16 multiply makes it; the scale stays inside
                w = _f16_round_v(builder, builder.fmul(w, sv))
            new.append(builder.call(fma, [_v16_load(builder, px, off, _V16F, 4), w, part]))
        for part, value in zip(parts, new, strict=True):
            part.add_incoming(value, j_body)
        j.add_incoming(builder.add(j, ir.Constant(_I64, LANE_BYTES)), j_body)
        builder.branch(j_head)

        builder.position_at_end(g_tail)
        if rounded:
            for acc, part in zip(accs, parts, strict=True):
                acc.add_incoming(part, g_tail)
        else:
            group = builder.fadd(builder.fadd(parts[0], parts[1]), builder.fadd(parts[2], parts[3]))
            accs[0].add_incoming(builder.call(fma, [group, sv, accs[0]]), g_tail)
        g.add_incoming(builder.add(g, ir.Constant(_I64, 1)), g_tail)
        builder.branch(g_head)

        builder.position_at_end(done)
        return _lane_sum(builder, list(accs))

    return types.float32(x, qrow, s, z, signed, mul_f16), codegen


@njit(inline="always", **_JIT)
def _row_scales(scale, zp, has_zp, q_flip, zp_flip, mul_f16, n, s_row, z_row):
    """Row n's groups' (scale, zero point) as f32 into ``s_row`` / ``z_row`` (:func:`_scale_zero`)."""
    for g in range(s_row.shape[0]):
        s_row[g], z_row[g] = _scale_zero(scale[n, g, 0], zp[n, g, 0] if has_zp else np.uint8(0), has_zp,
                                         zp_flip, q_flip, mul_f16)


@njit(**_JIT)
def _gemv_q4_lut(x_perm, q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, out, n0, n1, row):
    """4-bit weights, one activation row, on AVX-512: :func:`_q4_lut_row_dot` per output
    channel; ``x_perm`` is the row permuted by :func:`_permute_columns` (``row`` unused)."""
    groups = q.shape[1]
    s_row, z_row = np.empty(groups, np.float32), np.empty(groups, np.float32)
    codes = np.empty(16, np.float32)
    for c in range(16):
        codes[c] = np.float32(c ^ q_flip)
    xp = x_perm[0]
    for n in range(n0, n1):
        _prefetch_row(q, n, LANE_PREFETCH_BYTES)
        _row_scales(scale, zp, has_zp, q_flip, zp_flip, mul_f16, n, s_row, z_row)
        if mul_f16:
            out[0, n] = _q4_lut_row_dot(xp, q[n], s_row, z_row, codes, True)
        else:
            out[0, n] = _q4_lut_row_dot(xp, q[n], s_row, z_row, codes, False)


@njit(**_JIT)
def _gemv_q8_lanes(x, q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, out, n0, n1, row):
    """8-bit weights, one activation row, on AVX-512: :func:`_q8_lanes_row_dot` per output
    channel (``row`` unused)."""
    groups = q.shape[1]
    s_row, z_row = np.empty(groups, np.float32), np.empty(groups, np.float32)
    x0 = x[0]
    for n in range(n0, n1):
        _prefetch_row(q, n)
        _row_scales(scale, zp, has_zp, q_flip, zp_flip, mul_f16, n, s_row, z_row)
        if q_flip:
            if mul_f16:
                out[0, n] = _q8_lanes_row_dot(x0, q[n], s_row, z_row, True, True)
            else:
                out[0, n] = _q8_lanes_row_dot(x0, q[n], s_row, z_row, True, False)
        elif mul_f16:
            out[0, n] = _q8_lanes_row_dot(x0, q[n], s_row, z_row, False, True)
        else:
            out[0, n] = _q8_lanes_row_dot(x0, q[n], s_row, z_row, False, False)


@njit(inline="always", **_JIT)
def _q4_vector_ir(x_split, q, mul_f16):
    """Whether :func:`_gemv_q4` runs :func:`_q4_row_dot`."""
    return x_split.shape[0] == 1 and not mul_f16 and q.shape[2] % Q4_ROW_STEP == 0


@njit(inline="always", **_JIT)
def _q4_lane_sums(x_split, q, mul_f16):
    """:func:`_lane_sums` of the activation row when the vector IR row reads them; empty (the
    per-weight loop, zero point inside) when it does not, or when a sum is not finite: with an
    infinite activation ``x * code - z * sum`` is inf - inf where ``x * (code - z)`` keeps the
    exact product's infinities."""
    if not _q4_vector_ir(x_split, q, mul_f16):
        return np.zeros(0, np.float32)
    half = x_split.shape[1] // 2
    sums = _lane_sums(x_split[0, :half], x_split[0, half:], q.shape[1], q.shape[2])
    return sums if np.isfinite(sums).all() else np.zeros(0, np.float32)


@njit(**_JIT)
def _gemv_q4(x_split, q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, out, n0, n1, row):
    """4-bit weights, see :func:`_dq_row_q4`; ``x_split`` is each activation row as [even
    columns | odd columns], so every loop reads contiguously. One row: decompressed in registers."""
    _gemv_q4_rows(x_split, _q4_lane_sums(x_split, q, mul_f16), q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, out,
                  n0, n1, row)


@njit(**_JIT)
def _gemv_q4_rows(x_split, xs8, q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, out, n0, n1, row):
    """:func:`_gemv_q4` over output channels [n0, n1) with the activation's lane sums given."""
    m_rows, k = x_split.shape
    half = k // 2
    _, groups, gh = q.shape
    qf = np.uint8(q_flip)
    vector_ir = xs8.size > 0  # _q4_lane_sums: the vector IR row takes this row
    s_row, z_row = np.empty(groups, np.float32), np.empty(groups, np.float32)
    x_even, x_odd = x_split[0, :half], x_split[0, half:]
    flip = np.uint8(0x88) if q_flip else np.uint8(0)
    for n in range(n0, n1):
        if m_rows > 1:
            _dq_row_q4(q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, n, row)
            _dot_rows(x_split, row, out, n)
            continue
        if vector_ir:  # the groups' scales and zero points as f32, then the row in vector IR
            for g in range(groups):
                s_row[g], z_row[g] = _scale_zero(scale[n, g, 0], zp[n, g, 0] if has_zp else np.uint8(0), has_zp,
                                                 zp_flip, q_flip, mul_f16)
            out[0, n] = _q4_row_dot(x_even, x_odd, xs8, q[n], s_row, z_row, gh, flip)
            continue
        acc = np.float32(0.0)
        for g in range(groups):
            s, z = _scale_zero(scale[n, g, 0], zp[n, g, 0] if has_zp else np.uint8(0), has_zp, zp_flip, q_flip, mul_f16)
            qg = q[n, g]
            xe, xo = x_split[0, g * gh:(g + 1) * gh], x_split[0, half + g * gh:half + (g + 1) * gh]
            if mul_f16:  # each weight rounded to f16: the scale stays inside
                for j in range(gh):
                    b = qg[j]
                    lo = _w(np.float32((b & np.uint8(15)) ^ qf), z, s, mul_f16)
                    hi = _w(np.float32((b >> np.uint8(4)) ^ qf), z, s, mul_f16)
                    acc += xe[j] * lo + xo[j] * hi
            elif q_flip:  # the loop once per flip, the flip a constant in it (faster for i4)
                acc += _q4_group_dot(xe, xo, qg, z, np.uint8(0x88)) * s
            else:
                acc += _q4_group_dot(xe, xo, qg, z, np.uint8(0)) * s
        out[0, n] = acc


# The kernels over blocks of ``_PAR_BLOCK`` output channels on numba's threads (one each: a
# kernel passed as an argument would not cache). Every output element is the same compiled loop
# as on one thread, so the bits do not depend on the cut; the multi-row paths' weight row is
# scratch per block.

@njit(inline="always", **_JIT)
def _blocks(n0, n1):
    """How many blocks cover output channels [n0, n1)."""
    return (n1 - n0 + _PAR_BLOCK - 1) // _PAR_BLOCK


@njit(inline="always", **_JIT)
def _block(n0, n1, b):
    """Output channels [lo, hi) of block ``b``."""
    lo = n0 + b * _PAR_BLOCK
    return lo, min(n1, lo + _PAR_BLOCK)


@njit(parallel=True, **_JIT)
def _gemv_f32_par(x, x_pitch, w, w_pitch, k, out, n0, n1):
    for b in prange(_blocks(n0, n1)):
        lo, hi = _block(n0, n1, b)
        _gemv_f32(x, x_pitch, w, w_pitch, k, out, lo, hi, x)


@njit(parallel=True, **_JIT)
def _gemv_f16_par(x, q, out, n0, n1):
    for b in prange(_blocks(n0, n1)):
        lo, hi = _block(n0, n1, b)
        _gemv_f16(x, q, out, lo, hi, np.empty(x.shape[1], np.float32))


@njit(parallel=True, **_JIT)
def _gemv_q8_par(x, q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, out, n0, n1):
    for b in prange(_blocks(n0, n1)):
        lo, hi = _block(n0, n1, b)
        _gemv_q8(x, q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, out, lo, hi, np.empty(x.shape[1], np.float32))


@njit(parallel=True, **_JIT)
def _gemv_q4_par(x_split, q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, out, n0, n1):
    xs8 = _q4_lane_sums(x_split, q, mul_f16)  # once for all blocks: the same values as one thread's
    for b in prange(_blocks(n0, n1)):
        lo, hi = _block(n0, n1, b)
        _gemv_q4_rows(x_split, xs8, q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, out, lo, hi,
                      np.empty(x_split.shape[1], np.float32))


@njit(parallel=True, **_JIT)
def _gemv_q4_dw_par(x_perm, q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, out, n0, n1):
    xs8 = _block_lane_sums(x_perm[0], q.shape[1], 2 * q.shape[2])  # once for all blocks
    if not np.isfinite(xs8).all():  # the per-weight loop, on this thread, as _gemv_q4_dw: a rare case
        _gemv_q4_rows(_unpermute_block_columns(x_perm), np.zeros(0, np.float32), q, scale, zp, has_zp, q_flip, zp_flip,
                      mul_f16, out, n0, n1, x_perm[0])
        return
    for b in prange(_blocks(n0, n1)):
        lo, hi = _block(n0, n1, b)
        _gemv_q4_dw_rows(x_perm, xs8, q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, out, lo, hi)


@njit(parallel=True, **_JIT)
def _gemv_q4a8_par(x_split, qa, sa8, xs8, ok, q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, out, n0, n1):
    for b in prange(_blocks(n0, n1)):
        lo, hi = _block(n0, n1, b)
        _gemv_q4a8(x_split, qa, sa8, xs8, ok, q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, out, lo, hi,
                   np.empty(x_split.shape[1], np.float32))


@njit(parallel=True, **_JIT)
def _gemv_q8_lanes_par(x, q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, out, n0, n1):
    for b in prange(_blocks(n0, n1)):
        lo, hi = _block(n0, n1, b)
        _gemv_q8_lanes(x, q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, out, lo, hi, x[0])


@njit(parallel=True, **_JIT)
def _gemv_q4_lut_par(x_perm, q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, out, n0, n1):
    for b in prange(_blocks(n0, n1)):
        lo, hi = _block(n0, n1, b)
        _gemv_q4_lut(x_perm, q, scale, zp, has_zp, q_flip, zp_flip, mul_f16, out, lo, hi, x_perm[0])


_PARALLEL_OF = {_gemv_f32: _gemv_f32_par, _gemv_f16: _gemv_f16_par, _gemv_q8: _gemv_q8_par, _gemv_q4: _gemv_q4_par,
                _gemv_q8_lanes: _gemv_q8_lanes_par, _gemv_q4_lut: _gemv_q4_lut_par, _gemv_q4_dw: _gemv_q4_dw_par,
                _gemv_q4a8: _gemv_q4a8_par}


def _workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=max(1, _workers() - 1), thread_name_prefix="ov_npu_emu-gemv")
    return _POOL


_ZERO_ZP = np.zeros((1, 1, 1), np.uint8)


class GroupedWeight(NamedTuple):
    """A grouped u8/i8/u4/i4 weight's operands as the numba loops read them."""

    qb: np.ndarray  # the codes as u8 bytes, [N, groups, group bytes]
    scale: np.ndarray  # [N, groups, 1] f32, or the f16 scales' u16 bits
    zp_bits: np.ndarray  # zero points as u8 bits ([1, 1, 1] zeros without any)
    has_zp: bool
    zp_flip: int  # 128: i8 zero points (their bits read as u8 are offset by 128)
    groups: int


def grouped_weight(q: np.ndarray, scale: np.ndarray | None, zp: np.ndarray | None, n: int) -> GroupedWeight | None:
    """``q``/``scale``/``zp`` (laid out as for :func:`..dequant.dequantize`) as the loops read them,
    or None for a layout they do not take (the caller keeps the numpy path)."""
    if scale is None or q.ndim != 3 or not scale.flags.c_contiguous:
        return None
    groups = q.shape[1]
    if scale.shape != (n, groups, 1) or (zp is not None and zp.shape != (n, groups, 1)):
        return None
    if scale.dtype == np.float16:
        scale = scale.view(np.uint16)
    elif scale.dtype != np.float32:
        return None
    if zp is not None and (zp.dtype not in (np.uint8, np.int8) or not zp.flags.c_contiguous):
        return None
    zp_bits = _ZERO_ZP if zp is None else zp.view(np.uint8)
    zp_flip = 128 if zp is not None and zp.dtype == np.int8 else 0
    return GroupedWeight(q.view(np.uint8), scale, zp_bits, zp is not None, zp_flip, groups)


def _split_columns(x: np.ndarray, x_split: np.ndarray) -> None:
    """The activation's even / odd columns side by side, for the nibble loop."""
    half = x.shape[1] // 2
    np.copyto(x_split[:, :half], x[:, 0::2])
    np.copyto(x_split[:, half:], x[:, 1::2])


def _permute_columns(x: np.ndarray, x_perm: np.ndarray) -> None:
    """The activation row in :func:`_q4_lut_row_dot`'s order: in each block of 128 columns,
    column 8d + i moves to 16i + d (the codes one shift by 4i puts in lane d)."""
    m, k = x.shape
    np.copyto(x_perm.reshape(m, k // 128, 8, 16), x.reshape(m, k // 128, 16, 8).transpose(0, 1, 3, 2))


def _permute_block_columns(x: np.ndarray, x_perm: np.ndarray) -> None:
    """The activation row in :func:`_q4_dword_row_dot`'s order: in each block of 64 columns,
    column 8l + k moves to 8k + l (nibble k of dword lane l reads it)."""
    m, k = x.shape
    np.copyto(x_perm.reshape(m, k // 64, 8, 8), x.reshape(m, k // 64, 8, 8).transpose(0, 1, 3, 2))


def _copy_columns(x: np.ndarray, x_line: np.ndarray) -> None:
    np.copyto(x_line, x)


def _line_aligned(shape: tuple[int, int]) -> np.ndarray:
    """An f32 scratch array starting on a 64-byte line: the 16-lane loops' activation loads
    then never straddle two lines (10-15 % in cache, docs/performance_log.md "Bandwidth floor")."""
    size = shape[0] * shape[1]
    buf = np.empty(size + LANE_BYTES // 4, np.float32)
    start = (-buf.ctypes.data) % LANE_BYTES // 4
    return buf[start:start + size].reshape(shape)


def _prepare_a8(x: np.ndarray, args: tuple[Any, ...]) -> None:
    """The one-row activation split, then quantized to int8 (:func:`.act_quant.quantize_split_row`)
    into the kernel's ``qa`` / ``sa8`` / ``xs8``, and whether it was finite into ``ok``."""
    x_split, qa, sa8, xs8, ok, qb = args[:6]
    _split_columns(x, x_split)
    ok[0] = quantize_split_row(x_split[0], qb.shape[2], qa, sa8, xs8)


def _first(layout: Callable[[np.ndarray, np.ndarray], None]) -> Callable[[np.ndarray, tuple[Any, ...]], None]:
    return lambda x, args: layout(x, args[0])


#: what the runner makes per call before the kernel reads it: the activation copy in the kernel's
#: layout (on 64-byte lines), or its int8 quantization
_PREPARE: dict[Callable[..., None], Callable[[np.ndarray, tuple[Any, ...]], None]] = {
    _gemv_q4: _first(_split_columns), _gemv_q4_lut: _first(_permute_columns), _gemv_q8_lanes: _first(_copy_columns),
    _gemv_q4_dw: _first(_permute_block_columns), _gemv_q4a8: _prepare_a8}


def _a8_kernel(name: str, q: np.ndarray, scale: np.ndarray | None, zp: np.ndarray | None, out: np.ndarray, k: int,
               mul_f16: bool) -> tuple[Callable[..., None], tuple[Any, ...]] | None:
    """:func:`_gemv_q4a8` and its leading arguments (scratch the runner's prepare fills), or None
    when it does not take the operands: one row of a 4-bit weight whose groups are whole passes
    (64 columns), on a host with AVX2 (vpmaddubsw)."""
    gw = grouped_weight(q, scale, zp, out.shape[1]) if q.flags.c_contiguous else None
    if (gw is None or name not in ("u4", "i4") or out.shape[0] != 1 or mul_f16 or not avx2()
            or q.shape[2] % A8_PASS_BYTES or gw.groups * q.shape[2] * 2 != k):
        return None
    qb, scale, zp_bits, has_zp, zp_flip, groups = gw
    scratch = (_line_aligned((1, k)), np.empty(k, np.int8), np.empty(k // 64 * 8, np.float32),
               np.empty(groups * 8, np.float32), np.zeros(1, np.uint8))
    return _gemv_q4a8, (*scratch, qb, scale, zp_bits, has_zp, 8 if name == "i4" else 0, zp_flip, mul_f16)


def _gemv_kernel(
    name: str, x: np.ndarray, q: np.ndarray, scale: np.ndarray | None, zp: np.ndarray | None, out: np.ndarray,
    k: int, mul_f16: bool, int8_activations: bool = False,
) -> tuple[Callable[..., None], tuple[Any, ...]] | None:
    """(kernel, its leading arguments) for :func:`gemv_runner`'s weight format, or None when the
    operands are not a layout it reads."""
    if int8_activations:
        return _a8_kernel(name, q, scale, zp, out, k, mul_f16)
    m_rows, n = out.shape
    if name == "f32":  # x, q and out may be column slices of wider arrays (rows contiguous)
        xf, wf = _rows_flat(x), _rows_flat(q)
        if xf is None or wf is None or q.shape != (n, k) or out.dtype != np.float32:
            return None
        return _gemv_f32, (*xf, *wf, k)
    if not q.flags.c_contiguous:
        return None
    if name == "f16":
        return _gemv_f16, (x, q.reshape(n, k).view(np.uint16))
    gw = grouped_weight(q, scale, zp, n)
    if gw is None:
        return None
    qb, scale, zp_bits, has_zp, zp_flip, groups = gw
    if name in ("u8", "i8"):
        if groups * q.shape[2] != k:
            return None
        codes = (qb, scale, zp_bits, has_zp, 128 if name == "i8" else 0, zp_flip, mul_f16)
        if m_rows == 1 and q.shape[2] % LANE_BYTES == 0 and avx512():
            return _gemv_q8_lanes, (_line_aligned((1, k)), *codes)
        return _gemv_q8, (x, *codes)
    if name in ("u4", "i4"):
        if groups * q.shape[2] * 2 != k:
            return None
        x_split = _line_aligned((m_rows, k))
        if m_rows == 1 and q.shape[2] % LANE_BYTES == 0 and avx512():
            return _gemv_q4_lut, (x_split, qb, scale, zp_bits, has_zp, 8 if name == "i4" else 0, zp_flip, mul_f16)
        if m_rows == 1 and q.shape[2] % Q4_DWORD_STEP == 0 and not mul_f16:  # the 8-lane hosts' one-row path
            return _gemv_q4_dw, (x_split, qb, scale, zp_bits, has_zp, 8 if name == "i4" else 0, zp_flip, mul_f16)
        return _gemv_q4, (x_split, qb, scale, zp_bits, has_zp, 8 if name == "i4" else 0, zp_flip, mul_f16)
    return None


def gemv_runner(
    name: str, x: np.ndarray, q: np.ndarray, scale: np.ndarray | None, zp: np.ndarray | None, out: np.ndarray,
    k: int, mul_f16: bool = False, int8_activations: bool = False,
) -> Callable[[], None] | None:
    """A runner computing ``out[M, N] = x[M, K] @ W.T`` from the stored weight, or None when this
    path does not take the operands (the caller keeps the numpy path).

    ``name`` is the weight format ("f32", "f16", "u8", "i8", "u4", "i4"); ``q``/``scale``/``zp`` are
    laid out as for :func:`..dequant.dequantize` ("f32": ``q`` is the [N, K] weight, no scale;
    ``mul_f16``: the IR multiplies in f16); ``x`` and ``out`` are f32 and C-contiguous ("f32":
    ``x``, ``q`` and ``out`` need only contiguous rows).

    ``int8_activations``: the product of dynamic quantization (:mod:`.act_quant`): the one-row
    integer kernel, or None where it does not run (the caller then quantizes the rows itself).
    """
    m_rows, n = out.shape
    if not 1 <= m_rows <= MAX_ROWS or x.shape != (m_rows, k) or q.shape[0] != n:
        return None
    chosen = _gemv_kernel(name, x, q, scale, zp, out, k, mul_f16, int8_activations)
    if chosen is None:
        return None
    kern, args = chosen
    prepare = _PREPARE.get(kern)
    par_min = _PAR_MIN_ELEMENTS if name in ("f32", "f16") else _PAR_MIN_GROUPED
    pool_first = kern is _gemv_q4a8 and n * k >= _A8_POOL_MIN
    if n * k >= par_min and n > _PAR_BLOCK and not pool_first and parallel_loops():
        call = functools.partial(_PARALLEL_OF[kern], *args, out, 0, n)
        if prepare is None:
            return call

        def run_par() -> None:
            prepare(x, args)
            call()

        return run_par
    # chunks of output channels claimed by whichever thread is free: on a shared host the pool
    # thread may not get a core for a while, and then this thread does every chunk itself
    # instead of waiting for a fixed half
    split_min = _POOL_MIN_F32 if name == "f32" else _SPLIT_MIN_ELEMENTS
    workers = 1 if n * k < split_min else min(_workers(), n)
    per_worker = _A8_CHUNKS_PER_WORKER if kern is _gemv_q4a8 else _CHUNKS_PER_WORKER
    chunks = 1 if workers == 1 else min(n, per_worker * workers)
    bounds = [n * i // chunks for i in range(chunks + 1)]
    rows = [np.empty(k, np.float32) for _ in range(workers)]  # a weight row per thread (multi-row path)

    if chunks == 1 and prepare is None:  # one call in this thread: no closure between caller and kernel
        return functools.partial(kern, *args, out, 0, n, rows[0])

    def run() -> None:
        if prepare is not None:
            prepare(x, args)
        if chunks == 1:
            kern(*args, out, 0, n, rows[0])
            return
        claim = itertools.count()
        done = itertools.count(1)
        finished = threading.Event()

        def work(row: np.ndarray) -> None:
            while (i := next(claim)) < chunks:  # next() on a count is atomic under the GIL
                kern(*args, out, bounds[i], bounds[i + 1], row)
                if next(done) == chunks:
                    finished.set()

        pool = _pool()
        for w in range(1, workers):
            pool.submit(work, rows[w])
        work(rows[0])
        finished.wait()

    return run
