"""SHAVE element-wise, activation, softmax, reduction and normalisation kernels."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ov_npu_emu_npu.blob.kernel_params import AxisParams, KernelParams, ReduceParams
from ov_npu_emu_npu.device.kernels.registry import KERNELS, Maker, Runner, kernel


def _erf(x: np.ndarray, out: np.ndarray) -> None:
    # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), computed in f64 for headroom
    x64 = x.astype(np.float64)
    s = np.sign(x64)
    a = np.abs(x64)
    t = 1.0 / (1.0 + 0.3275911 * a)
    y = 1.0 - (
        ((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592
    ) * t * np.exp(-a * a)
    np.multiply(s, y, out=out, casting="unsafe")


_BIN_UFUNC = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "power": np.power,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "equal": np.equal,
    "not_equal": np.not_equal,
    "less": np.less,
    "less_equal": np.less_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
    "logical_xor": np.logical_xor,
    "floor_mod": np.mod,
    "mod": np.fmod,
    # OpenVINO's Bitwise* on boolean are the logical ops, on integers bitwise: numpy's too
    "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor,
}


def _f16_binary(name: str, a: np.ndarray, b: np.ndarray, o: np.ndarray) -> Runner | None:
    """f16 mode's add/subtract/multiply/divide into an f16 output: numpy's f16 bits at f32 speed
    (:mod:`.f16`); None for other operations, types and layouts."""
    if o.dtype != np.float16 or name not in ("add", "subtract", "multiply", "divide"):
        return None
    # numba loads (slowly) on the first task that uses it, not with every import of the device
    from ov_npu_emu_npu.device.kernels.f16 import binary_runner

    return binary_runner(name, a, b, o)


def _widened_operand(uf: Callable[..., Any], a: np.ndarray, b: np.ndarray, o: np.ndarray) -> Runner | None:
    """An f16 operand next to an f32 one, into an f32 output (f16 mode's Power of the residual in an
    f32 RMSNorm): numpy's f32 loop reads the f16 operand cast to f32, exactly; widening it first
    with kernels/f16.py gives that loop the same values without numpy's per-element cast."""
    if o.dtype != np.float32 or {a.dtype, b.dtype} != {np.dtype(np.float16), np.dtype(np.float32)}:
        return None
    h = a if a.dtype == np.float16 else b
    if not h.flags.c_contiguous:
        return None
    from ov_npu_emu_npu.device.kernels.f16 import widen_runner

    h32 = np.empty(h.shape, np.float32)
    widen = widen_runner(h, h32)
    if widen is None:
        return None
    x, y = (h32, b) if h is a else (a, h32)

    def run() -> None:
        widen()
        uf(x, y, out=o)

    return run


def _make_binary(name: str) -> Maker:
    uf = _BIN_UFUNC[name]

    def maker(ins: Sequence[np.ndarray], outs: Sequence[np.ndarray], params: KernelParams) -> Runner:
        a, b = ins
        o = outs[0]
        fast = _f16_binary(name, a, b, o) or _widened_operand(uf, a, b, o)
        if fast is not None:
            return fast
        # bound as C-level partials: no Python frame per task on the hot path
        if o.dtype == a.dtype or o.dtype == np.bool_:
            return functools.partial(uf, a, b, out=o)
        return functools.partial(uf, a, b, out=o, casting="unsafe")

    return maker


for _n in _BIN_UFUNC:
    KERNELS[_n] = _make_binary(_n)


@kernel("divide")
def _divide(ins, outs, params):
    a, b = ins
    o = outs[0]
    fast = _f16_binary("divide", a, b, o)
    if fast is not None:
        return fast
    if o.dtype.kind == "f":
        return functools.partial(np.divide, a, b, out=o, casting="unsafe")
    if params.python_division:  # python division for integers: floor
        return lambda: np.floor_divide(a, b, out=o)
    return lambda: np.copyto(o, np.trunc(a / b), casting="unsafe")


@kernel("squared_difference")
def _sqdiff(ins, outs, params):
    a, b = ins
    o = outs[0]

    def run() -> None:
        np.subtract(a, b, out=o, casting="unsafe")
        np.square(o, out=o)

    return run


_UN_UFUNC = {
    "relu": None,
    "tanh": np.tanh,
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "negative": np.negative,
    "abs": np.abs,
    "sin": np.sin,
    "cos": np.cos,
    "floor": np.floor,
    "ceiling": np.ceil,
    "logical_not": np.logical_not,
    "sign": np.sign,
    "tan": np.tan,
    "atan": np.arctan,
    "bitwise_not": np.invert,
    "round_even": np.rint,  # half to even (Round's HALF_TO_EVEN; integer Interpolate's rounding)
}


def _make_unary(name: str) -> Maker:
    uf = _UN_UFUNC[name]

    def maker(ins: Sequence[np.ndarray], outs: Sequence[np.ndarray], params: KernelParams) -> Runner:
        x, o = ins[0], outs[0]
        if uf is None:  # relu
            return functools.partial(np.maximum, x, 0, out=o, casting="unsafe")
        return functools.partial(uf, x, out=o, casting="unsafe")

    return maker


for _n in _UN_UFUNC:
    KERNELS[_n] = _make_unary(_n)


@kernel("sigmoid")
def _sigmoid(ins, outs, params):
    x, o = ins[0], outs[0]

    def run() -> None:
        np.negative(x, out=o, casting="unsafe")
        np.exp(o, out=o)
        np.add(o, 1, out=o)
        np.reciprocal(o, out=o)

    return run


@kernel("erf")
def _erf_k(ins, outs, params):
    x, o = ins[0], outs[0]
    return lambda: _erf(x, o)


@kernel("softplus")
def _softplus(ins, outs, params):
    x, o = ins[0], outs[0]
    return lambda: np.logaddexp(0, x, out=o, casting="unsafe")


def _hswish(ins, outs, params):
    x, o = ins[0], outs[0]
    return lambda: np.copyto(o, x * np.clip(x + 3, 0, 6) / 6, casting="unsafe")


def _hsigmoid(ins, outs, params):
    x, o = ins[0], outs[0]
    return lambda: np.copyto(o, np.clip(x + 3, 0, 6) / 6, casting="unsafe")


def _mish(ins, outs, params):
    x, o = ins[0], outs[0]
    return lambda: np.copyto(o, x * np.tanh(np.logaddexp(0, x)), casting="unsafe")


KERNELS.update({"hswish": _hswish, "hsigmoid": _hsigmoid, "mish": _mish})


@kernel("gelu")
def _gelu(ins, outs, params):
    x, o = ins[0], outs[0]
    tanh_mode = params.tanh_approximation
    tmp = np.empty(o.shape, np.float32)
    c = math.sqrt(2.0 / math.pi)

    def run() -> None:
        if tanh_mode:
            np.multiply(x, x, out=tmp)
            np.multiply(tmp, x, out=tmp)
            np.multiply(tmp, 0.044715, out=tmp)
            np.add(tmp, x, out=tmp)
            np.multiply(tmp, c, out=tmp)
            np.tanh(tmp, out=tmp)
        else:
            np.multiply(x, 1.0 / math.sqrt(2.0), out=tmp)
            _erf(tmp, tmp)
        np.add(tmp, 1.0, out=tmp)
        np.multiply(tmp, x, out=tmp)
        np.multiply(tmp, 0.5, out=tmp)
        np.copyto(o, tmp, casting="unsafe")

    return run


@kernel("swish")
def _swish(ins, outs, params):
    x, o = ins[0], outs[0]
    beta = params.beta
    if x.dtype == o.dtype == np.float16:  # f16 mode: the same bits at f32 speed
        from ov_npu_emu_npu.device.kernels.f16 import swish_runner

        fast = swish_runner(x, o, beta)
        if fast is not None:
            return fast
    tmp = np.empty(o.shape, np.float32)
    # 0-d arrays of the dtype a Python float would take (NEP 50): same loops, no per-call scalar
    # conversion (a fixed cost per ufunc call that dominates on these small tensors)
    neg_beta = _weak_scalar(-beta, x.dtype)
    one = np.array(1.0, np.float32)

    def run() -> None:
        np.multiply(x, neg_beta, out=tmp)
        np.exp(tmp, out=tmp)
        np.add(tmp, one, out=tmp)
        np.divide(x, tmp, out=o, casting="unsafe")

    return run


def _weak_scalar(value: float, dtype: np.dtype) -> np.ndarray | float:
    """``value`` as a 0-d array of the type a Python float takes next to ``dtype`` operands."""
    return np.array(value, dtype) if np.dtype(dtype).kind == "f" else value


@kernel("clamp")
def _clamp(ins, outs, params):
    x, o = ins[0], outs[0]
    lo, hi = params.min_value, params.max_value
    if o.dtype.kind in "iu":
        lo, hi = math.ceil(lo), math.floor(hi)
    return functools.partial(np.clip, x, lo, hi, out=o, casting="unsafe")


@kernel("convert")
def _convert(ins, outs, params):
    x, o = ins[0], outs[0]
    if x.dtype == np.float16 and o.dtype == np.float32:
        # numpy converts halves one element at a time, which made the past-KV Converts of a decode
        # step the costliest SHAVE tasks (docs/performance.md, "Decode kernels against the
        # bandwidth floor"); the numba loop (kernels/f16.py) gives numpy's bits in one pass, where
        # four whole-array integer passes replaced numpy's cast before (docs/npu_device.md, "Speed")
        from ov_npu_emu_npu.device.kernels.f16 import convert_runner

        fast = convert_runner(x, o)
        if fast is not None:
            return fast
    if x.dtype.kind == "f" and o.dtype.kind in "iub":
        if o.dtype == np.bool_:
            return functools.partial(np.not_equal, x, 0, out=o)
        # OpenVINO's CPU plugin truncates towards zero when converting floats to integers
        return lambda: np.copyto(o, np.trunc(x), casting="unsafe")
    return functools.partial(np.copyto, o, x, casting="unsafe")


@kernel("select")
def _select(ins, outs, params):
    c, a, b = ins
    o = outs[0]

    def run() -> None:
        np.copyto(o, b, casting="unsafe")
        np.copyto(o, a, casting="unsafe", where=c)

    return run


def _make_softmax(log: bool) -> Maker:
    def maker(ins: Sequence[np.ndarray], outs: Sequence[np.ndarray], params: AxisParams) -> Runner:
        x, o = ins[0], outs[0]
        axis = params.axis
        rshape = list(x.shape)
        rshape[axis] = 1
        mx = np.empty(rshape, np.float32)
        sm = np.empty(rshape, np.float32)
        tmp = np.empty(x.shape, np.float32)

        def run() -> None:
            np.max(x, axis=axis, keepdims=True, out=mx)
            np.subtract(x, mx, out=tmp)
            if log:
                np.exp(tmp, out=o, casting="unsafe")
                np.sum(o, axis=axis, keepdims=True, out=sm, dtype=np.float32)
                np.log(sm, out=sm)
                np.subtract(tmp, sm, out=o, casting="unsafe")
            else:
                np.exp(tmp, out=tmp)
                np.sum(tmp, axis=axis, keepdims=True, out=sm)
                np.divide(tmp, sm, out=o, casting="unsafe")

        return run

    return maker


KERNELS["softmax"] = _make_softmax(False)
KERNELS["log_softmax"] = _make_softmax(True)

_REDUCE: dict[str, Callable[..., Any]] = {
    "reduce_mean": np.mean,
    "reduce_sum": np.sum,
    "reduce_max": np.max,
    "reduce_min": np.min,
    "reduce_prod": np.prod,
}


def _make_reduce(name: str) -> Maker:
    def maker(ins: Sequence[np.ndarray], outs: Sequence[np.ndarray], params: ReduceParams) -> Runner:
        x, o = ins[0], outs[0]
        axes = params.axes
        kshape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
        ok = o.reshape(kshape)
        if name == "reduce_l2":
            return lambda: np.copyto(
                ok, np.sqrt(np.sum(np.square(x, dtype=np.float32), axis=axes, keepdims=True)), casting="unsafe"
            )
        fn = _REDUCE[name]
        if name == "reduce_mean" and x.dtype == o.dtype == np.float32:
            # np.mean's own f32 steps (sum, then divide by the intp count) without its Python layers.
            # np.mean divides in f64 and rounds to f32; for a count exact in f32 a correctly rounded
            # f32 division gives the same bits (53 >= 2*24 + 2: double rounding is innocuous) and
            # skips the mixed-type loop (a fixed cost per call)
            n_items = math.prod(x.shape[a] for a in axes)
            count = np.array(n_items, np.float32) if n_items < 2**24 else np.intp(n_items)

            def mean() -> None:
                np.add.reduce(x, axis=axes, keepdims=True, out=ok)
                np.true_divide(ok, count, out=ok, casting="unsafe")

            return mean
        if o.dtype == np.float16:
            return lambda: np.copyto(ok, fn(x, axis=axes, keepdims=True, dtype=np.float32), casting="unsafe")
        return lambda: fn(x, axis=axes, keepdims=True, out=ok)

    return maker


for _n in [*_REDUCE, "reduce_l2"]:
    KERNELS[_n] = _make_reduce(_n)



@kernel("prelu")
def _prelu(ins, outs, params):
    x, slope = ins
    o = outs[0]
    # a 1-D slope applies per channel (axis 1) as in OpenVINO, unless it matches the last axis
    if slope.ndim == 1 and x.ndim > 1 and slope.size not in (1, x.shape[-1]):
        slope = slope.reshape((1, -1) + (1,) * (x.ndim - 2))
    return lambda: np.copyto(o, np.where(x < 0, x * slope, x), casting="unsafe")


@kernel("elu")
def _elu(ins, outs, params):
    x, o = ins[0], outs[0]
    alpha = params.alpha
    return lambda: np.copyto(o, np.where(x > 0, x, alpha * (np.exp(np.minimum(x, 0)) - 1)), casting="unsafe")



@kernel("mvn")
def _mvn(ins, outs, params):
    x, o = ins[0], outs[0]
    norm_var, eps, inside, axes = params.normalize_variance, params.eps, params.eps_inside_sqrt, params.axes

    def run() -> None:
        xf = x.astype(np.float32, copy=False)
        c = xf - xf.mean(axis=axes, keepdims=True)
        if norm_var:
            var = np.mean(c * c, axis=axes, keepdims=True)
            c = c / (np.sqrt(var + eps) if inside else np.sqrt(var) + eps)
        np.copyto(o, c, casting="unsafe")

    return run


@kernel("normalize_l2")
def _normalize_l2(ins, outs, params):
    x, o = ins[0], outs[0]
    eps, add, axes = params.eps, params.eps_add, params.axes

    def run() -> None:
        xf = x.astype(np.float32, copy=False)
        ss = np.sum(xf * xf, axis=axes, keepdims=True) if axes else xf * xf
        np.copyto(o, xf / np.sqrt(ss + np.float32(eps) if add else np.maximum(ss, np.float32(eps))), casting="unsafe")

    return run


@kernel("lrn")
def _lrn(ins, outs, params):
    x, o = ins[0], outs[0]
    size, axes = params.size, params.axes
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2  # window [i - lo, i + hi], clipped
    scale = np.float32(params.alpha / size ** len(axes))

    def run() -> None:
        xf = x.astype(np.float32, copy=False)
        s = xf * xf
        for ax in axes:  # box sum along each axis through a cumulative sum with a leading zero
            n = s.shape[ax]
            c = np.concatenate([np.zeros_like(np.take(s, [0], axis=ax)), np.cumsum(s, axis=ax)], axis=ax)
            i = np.arange(n)
            s = np.take(c, np.minimum(i + hi + 1, n), axis=ax) - np.take(c, np.maximum(i - lo, 0), axis=ax)
        np.copyto(o, xf / (np.float32(params.bias) + scale * s) ** np.float32(params.beta), casting="unsafe")

    return run


@kernel("cumsum")
def _cumsum(ins, outs, params):
    x, o = ins[0], outs[0]
    axis, exclusive, reverse = params.axis, params.exclusive, params.reverse

    def run() -> None:
        v = np.flip(x, axis) if reverse else x
        c = np.cumsum(v, axis=axis, dtype=o.dtype)
        if exclusive:
            c = np.concatenate([np.zeros_like(np.take(c, [0], axis=axis)), np.delete(c, -1, axis=axis)], axis=axis)
        np.copyto(o, np.flip(c, axis) if reverse else c, casting="unsafe")

    return run
