"""f16 mode's fast element-wise kernels and conversions (kernels/f16.py) give numpy's f16 bits.

The reference is computed the slow way, by numpy's own f16 loops and casts, which the kernels
computed with before (issue 34: the same rounding points, faster)."""

from __future__ import annotations

import numpy as np
import pytest

from ov_npu_emu_npu.blob.kernel_params import MatMulDqParams, SwishParams
from ov_npu_emu_npu.device.kernels import make_kernel
from ov_npu_emu_npu.device.kernels.f16 import binary_runner

_RNG = np.random.default_rng(34)


def _halves(shape: tuple[int, ...]) -> np.ndarray:
    """f16 values over the whole range: random bits (finite), with zeros, subnormals, the
    largest finite values and infinities planted at the front."""
    bits = _RNG.integers(0, 0x7C00, size=int(np.prod(shape)), dtype=np.uint16)
    bits |= _RNG.integers(0, 2, size=bits.size, dtype=np.uint16) << 15
    special = np.array([0, 0x8000, 1, 0x83FF, 0x03FF, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x3C00, 0x3C01], np.uint16)
    bits[:special.size] = special[:bits.size]
    return bits.view(np.float16).reshape(shape)


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all()
    assert (got.view(np.uint16)[~nan] == want.view(np.uint16)[~nan]).all()


#: (a, b) shapes: whole, a gamma row, a per-row column (RMSNorm's divide), a scalar
_SHAPES = [((2, 3, 64), (2, 3, 64)), ((2, 3, 64), (64,)), ((1, 3, 64), (1, 3, 1)), ((1, 1, 64), (1,)),
           ((1,), (1, 5, 8))]


@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "divide"])
def test_binary_f16_bits(name: str) -> None:
    """f16 x f16 -> f16 is numpy's HALF loop, f16 x f32 -> f16 its f32 loop and output cast:
    every broadcast layout, the operand order swapped, over the whole f16 range (overflow to
    inf, subnormal results, inf - inf)."""
    uf = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide}[name]
    with np.errstate(all="ignore"):
        for sa, sb in _SHAPES:
            for a, b in ((_halves(sa), _halves(sb)), (_halves(sa), _halves(sb).astype(np.float32) * 1.5),
                         (_halves(sa).astype(np.float32) / 3, _halves(sb))):
                for x, y in ((a, b), (b, a)):
                    shape = np.broadcast_shapes(x.shape, y.shape)
                    want = np.empty(shape, np.float16)
                    uf(x, y, out=want, casting="unsafe")
                    got = np.full(shape, np.nan, np.float16)
                    assert binary_runner(name, x, y, got) is not None  # the fast loop, not numpy's
                    make_kernel(name, [x, y], [got], np.zeros(1 if name == "divide" else 0))()
                    _same_bits(got, want)


def test_swish_f16_bits() -> None:
    """swish on f16 (a non-unit beta: its product is rounded to f16 as numpy's f16 loop does)."""
    x = _halves((3, 200))
    for beta in (1.0, 1.7):
        want = np.empty_like(x)
        with np.errstate(all="ignore"):
            t = np.empty(x.shape, np.float32)
            np.multiply(x, np.array(-beta, np.float16), out=t)
            np.exp(t, out=t)
            np.add(t, np.float32(1), out=t)
            np.divide(x, t, out=want, casting="unsafe")
        got = np.empty_like(x)
        with np.errstate(over="ignore"):
            make_kernel("swish", [x], [got], SwishParams(beta=beta))()
        _same_bits(got, want)


def test_matmul_dq_f16_rows_bits() -> None:
    """A decode matmul_dq on f16 rows: the rows widened, the f32 product rounded to f16 as the f32
    mode's product (same kernel) cast by numpy."""
    n, k, gs = 48, 64, 32
    q = _RNG.integers(0, 256, size=(n, k // gs, gs // 2), dtype=np.uint8)
    scale = (_RNG.random((n, k // gs, 1)) * 0.05).astype(np.float16)
    a = (_RNG.standard_normal((1, 1, k)) * 4).astype(np.float16)
    p = MatMulDqParams(transpose_a=False, transpose_b=True, weight_format=3, has_zero_point=False,
                       f16_rounding=False, n=n, k=k)
    o32 = np.empty((1, 1, n), np.float32)
    make_kernel("matmul_dq", [a.astype(np.float32), q, scale], [o32], p)()
    got = np.empty((1, 1, n), np.float16)
    make_kernel("matmul_dq", [a, q, scale], [got], p)()
    _same_bits(got, o32.astype(np.float16))


def test_f16_operand_into_f32_output_bits() -> None:
    """An f16 operand next to an f32 one into an f32 output (the f32 RMSNorm's Power of an f16
    residual): widened first, numpy's f32 loop then reads the same values."""
    x = _halves((2, 64))
    for name, y in (("power", np.array([2.0], np.float32)), ("multiply", _halves((64,)).astype(np.float32) / 3)):
        uf = {"power": np.power, "multiply": np.multiply}[name]
        for a, b in ((x, y), (y, x)):
            with np.errstate(all="ignore"):
                want = uf(a, b, dtype=np.float32)
                got = np.empty(want.shape, np.float32)
                make_kernel(name, [a, b], [got], np.zeros(0))()
            nan = np.isnan(want)
            assert (np.isnan(got) == nan).all()
            assert (got.view(np.uint32)[~nan] == want.view(np.uint32)[~nan]).all()


#: (a, b, transpose_a, transpose_b): prefill rows x f32 / f16 weights, attention's QK^T and PV
#: with batch / head axes (broadcast), 1-D operands, transposed activations
_MATMULS = [((5, 64), (48, 64), False, True), ((1, 7, 64), (64, 48), False, False),
            ((1, 4, 7, 16), (1, 4, 9, 16), False, True), ((1, 4, 7, 9), (1, 1, 9, 16), False, False),
            ((2, 1, 16, 7), (3, 16, 5), True, False), ((64,), (64, 8), False, False),
            ((6, 64), (64,), False, False), ((3, 1152), (40, 1152), False, True)]


@pytest.mark.parametrize(("sa", "sb", "ta", "tb"), _MATMULS)
def test_generic_matmul_f16_bits(sa: tuple[int, ...], sb: tuple[int, ...], ta: bool, tb: bool) -> None:
    """The f16 mode's generic MatMul (kernels/linear.py ``_f16_generic``): each f16 operand widened,
    numpy's f32 matmul on the same layouts, the product rounded to f16 -- the bits of numpy's
    ``astype`` / ``matmul`` / cast, for f16 x f16 and f16 x f32 operands."""
    from ov_npu_emu_npu.blob.kernel_params import MatMulParams
    from ov_npu_emu_npu.device.kernels.linear import _f16_generic

    p = MatMulParams(transpose_a=ta, transpose_b=tb)
    a = (_RNG.standard_normal(sa) * 3).astype(np.float16)
    for b in ((_RNG.standard_normal(sb) * 3).astype(np.float16), _RNG.standard_normal(sb).astype(np.float32)):
        av = np.swapaxes(a, -1, -2) if ta and a.ndim > 1 else a
        bv = np.swapaxes(b, -1, -2) if tb and b.ndim > 1 else b
        want = np.matmul(av.astype(np.float32), bv.astype(np.float32, copy=False)).astype(np.float16)
        got = np.full(want.shape, np.nan, np.float16)
        assert _f16_generic(a, b, got, ta, tb) is not None  # this path, not the fallback
        make_kernel("matmul", [a, b], [got], p)()
        _same_bits(got, want)


@pytest.mark.parametrize("rows", [1, 3])
def test_decode_matmul_f16_one_call_bits(rows: int) -> None:
    """f16 mode's small decode MatMul (f16 rows x f32 [N, K] weight) runs as one numba call
    (kernels/f16.py ``_gemv_f16_rows``) with the bits of the f32 mode's gemv on the widened rows,
    rounded to f16 by numpy."""
    from ov_npu_emu_npu.blob.kernel_params import MatMulParams
    from ov_npu_emu_npu.device.kernels.f16 import _gemv_f16_rows

    p = MatMulParams(transpose_a=False, transpose_b=True)
    a = (_RNG.standard_normal((1, rows, 64)) * 3).astype(np.float16)
    w = _RNG.standard_normal((172, 64)).astype(np.float32)
    o32 = np.empty((1, rows, 172), np.float32)
    make_kernel("matmul", [a.astype(np.float32), w], [o32], p)()
    got = np.full((1, rows, 172), np.nan, np.float16)
    run = make_kernel("matmul", [a, w], [got], p)
    assert getattr(run, "func", None) is _gemv_f16_rows  # the fused call, not three steps
    run()
    _same_bits(got, o32.astype(np.float16))


def test_decode_matmul_f32_rows_into_f16_bits() -> None:
    """f32 rows into an f16 output (the LM head after an f32 RMSNorm in f16 mode): the f32 mode's
    gemv, rounded to f16 by numpy -- not BLAS on the generic path."""
    from ov_npu_emu_npu.blob.kernel_params import MatMulParams

    p = MatMulParams(transpose_a=False, transpose_b=True)
    a = _RNG.standard_normal((1, 1, 64)).astype(np.float32)
    w = _RNG.standard_normal((512, 64)).astype(np.float32)
    o32 = np.empty((1, 1, 512), np.float32)
    make_kernel("matmul", [a, w], [o32], p)()
    got = np.full((1, 1, 512), np.nan, np.float16)
    run = make_kernel("matmul", [a, w], [got], p)
    assert run.__qualname__.startswith("_f16_decode.")  # the gemv, not the generic path's BLAS
    run()
    _same_bits(got, o32.astype(np.float16))
