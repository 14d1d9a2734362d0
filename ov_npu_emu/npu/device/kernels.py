"""Numpy kernels the DPU and SHAVE engines run over views of device memory.

Each entry is a *maker*: given the operand views and the task's parameters it returns a
zero-argument callable.  Makers run once per command-list build, so scratch arrays a kernel
needs are allocated there, never on the per-inference path.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable, Sequence

import numpy as np

from ov_npu_emu.errors import ExecutionError
from ov_npu_emu.npu.blob.format import SLICE_NONE, WEIGHT_FORMATS

__all__ = ["DQ_TILE_BYTES", "KERNELS", "RowWindow", "Runner", "dequantize", "make_kernel"]

Runner = Callable[[], None]
Maker = Callable[[Sequence[np.ndarray], Sequence[np.ndarray], np.ndarray], Runner]
KERNELS: dict[str, Maker] = {}


def kernel(*names: str) -> Callable[[Maker], Maker]:
    def deco(fn: Maker) -> Maker:
        for n in names:
            KERNELS[n] = fn
        return fn
    return deco


class RowWindow:
    """The driver's "valid rows" hint for one inference (NPU_EMU_SKIP_PADDED_ROWS).

    ``size`` > 0: in attention whose query and key axes both have ``size`` entries, rows and
    columns before ``start`` are left padding whose outputs nobody reads.  Attention then runs
    on the window alone when the mask provably shuts every window row off the padding columns
    (see :func:`_sdpa`); when it cannot prove that it sets ``violated`` and the driver re-runs
    the inference without the hint.  ``size`` 0: no hint.
    """

    __slots__ = ("size", "start", "unusable", "used", "violated")

    def __init__(self) -> None:
        self.size = 0
        self.start = 0
        self.violated = False
        self.used = 0  # attention tasks that ran on the window in the last inference
        self.unusable = False  # an attention's shapes admit no exact window: stop hinting

    def active(self, rows: int, cols: int) -> bool:
        return self.size > 0 and self.start > 0 and rows == cols == self.size


def make_kernel(name: str, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray], params: np.ndarray,
                window: RowWindow | None = None) -> Runner:
    maker = KERNELS.get(name)
    if maker is None:
        raise ExecutionError(f"kernel {name!r} is not in this device's kernel library")
    if window is not None and name == "sdpa":
        return _sdpa(ins, outs, params, window)
    return maker(ins, outs, params)


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


def _make_binary(name: str) -> Maker:
    uf = _BIN_UFUNC[name]

    def maker(ins: Sequence[np.ndarray], outs: Sequence[np.ndarray], params: np.ndarray) -> Runner:
        a, b = ins
        o = outs[0]
        # bound as C-level partials: no Python frame per task on the hot path
        if o.dtype == a.dtype or o.dtype == np.bool_:
            return functools.partial(uf, a, b, out=o)
        return functools.partial(uf, a, b, out=o, casting="unsafe")

    return maker


for _n in _BIN_UFUNC:
    KERNELS[_n] = _make_binary(_n)


@kernel("divide")
def _divide(ins, outs, params):  # type: ignore[no-untyped-def]
    a, b = ins
    o = outs[0]
    if o.dtype.kind == "f":
        return functools.partial(np.divide, a, b, out=o, casting="unsafe")
    if params.size and params[0]:  # python division for integers: floor
        return lambda: np.floor_divide(a, b, out=o)
    return lambda: np.copyto(o, np.trunc(a / b), casting="unsafe")


@kernel("squared_difference")
def _sqdiff(ins, outs, params):  # type: ignore[no-untyped-def]
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
}


def _make_unary(name: str) -> Maker:
    uf = _UN_UFUNC[name]

    def maker(ins: Sequence[np.ndarray], outs: Sequence[np.ndarray], params: np.ndarray) -> Runner:
        x, o = ins[0], outs[0]
        if name == "relu":
            return functools.partial(np.maximum, x, 0, out=o, casting="unsafe")
        return functools.partial(uf, x, out=o, casting="unsafe")

    return maker


for _n in _UN_UFUNC:
    KERNELS[_n] = _make_unary(_n)


@kernel("sigmoid")
def _sigmoid(ins, outs, params):  # type: ignore[no-untyped-def]
    x, o = ins[0], outs[0]

    def run() -> None:
        np.negative(x, out=o, casting="unsafe")
        np.exp(o, out=o)
        np.add(o, 1, out=o)
        np.reciprocal(o, out=o)

    return run


@kernel("erf")
def _erf_k(ins, outs, params):  # type: ignore[no-untyped-def]
    x, o = ins[0], outs[0]
    return lambda: _erf(x, o)


@kernel("softplus")
def _softplus(ins, outs, params):  # type: ignore[no-untyped-def]
    x, o = ins[0], outs[0]
    return lambda: np.logaddexp(0, x, out=o, casting="unsafe")


def _hswish(ins, outs, params):  # type: ignore[no-untyped-def]
    x, o = ins[0], outs[0]
    return lambda: np.copyto(o, x * np.clip(x + 3, 0, 6) / 6, casting="unsafe")


def _hsigmoid(ins, outs, params):  # type: ignore[no-untyped-def]
    x, o = ins[0], outs[0]
    return lambda: np.copyto(o, np.clip(x + 3, 0, 6) / 6, casting="unsafe")


def _mish(ins, outs, params):  # type: ignore[no-untyped-def]
    x, o = ins[0], outs[0]
    return lambda: np.copyto(o, x * np.tanh(np.logaddexp(0, x)), casting="unsafe")


KERNELS.update({"hswish": _hswish, "hsigmoid": _hsigmoid, "mish": _mish})


@kernel("gelu")
def _gelu(ins, outs, params):  # type: ignore[no-untyped-def]
    x, o = ins[0], outs[0]
    tanh_mode = bool(params.size and params[0])
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
def _swish(ins, outs, params):  # type: ignore[no-untyped-def]
    x, o = ins[0], outs[0]
    beta = float(params[0]) if params.size else 1.0
    tmp = np.empty(o.shape, np.float32)
    # 0-d arrays of the dtype a Python float would take (NEP 50): same loops, no per-call scalar
    # conversion (~0.5 us per ufunc call on these small tensors)
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
def _clamp(ins, outs, params):  # type: ignore[no-untyped-def]
    x, o = ins[0], outs[0]
    lo, hi = float(params[0]), float(params[1])
    if o.dtype.kind in "iu":
        lo, hi = math.ceil(lo), math.floor(hi)
    return functools.partial(np.clip, x, lo, hi, out=o, casting="unsafe")


#: f16 bits placed at bit 13 of an f32 are the value scaled by 2**-112 (both exponent fields end
#: at bit 23 of the shifted word); multiplying back is exact for normals, zeros and subnormals
_F16_REBIAS = np.float32(2.0**112)
_F16_SIGN_EM = np.int32(-0x70000001)  # 0x8FFFFFFF: sign bit, then exponent/mantissa at bits 13..27
_F32_SUBNORMAL = np.float32(1e-40)


def _f16_to_f32(x: np.ndarray, o: np.ndarray) -> Runner:
    """Exact f16 -> f32 with four whole-array integer/float passes.

    numpy converts halves one element at a time (about 1.7 ns each), which made the past-KV
    Converts of a decode step the costliest SHAVE tasks.  Infinities/NaNs (f16 exponent 31) and a
    thread flushing subnormal operands to zero take numpy's own conversion, so every input gets
    numpy's bits.
    """
    n = x.size
    s16 = x.reshape(-1).view(np.int16)
    u16 = s16.view(np.uint16)
    of = o.reshape(-1)
    word = np.empty(n, np.int32)
    expo = np.empty(n, np.uint16)
    wf = word.view(np.float32)

    def run() -> None:
        np.copyto(word, s16)  # sign-extended: the sign fills bits 15..31
        np.left_shift(word, 13, out=word)  # exponent/mantissa to bits 13..27, sign copies at 28..31
        np.bitwise_and(word, _F16_SIGN_EM, out=word)
        np.bitwise_and(u16, 0x7C00, out=expo)
        if np.maximum.reduce(expo) == 0x7C00 or _F32_SUBNORMAL * _F16_REBIAS == 0:  # inf/NaN, or DAZ on
            np.copyto(o, x, casting="unsafe")
            return
        np.multiply(wf, _F16_REBIAS, out=of)

    return run


@kernel("convert")
def _convert(ins, outs, params):  # type: ignore[no-untyped-def]
    x, o = ins[0], outs[0]
    if (
        x.dtype == np.float16
        and o.dtype == np.float32
        and x.size >= 256
        and x.flags.c_contiguous
        and o.flags.c_contiguous
    ):
        return _f16_to_f32(x, o)
    if x.dtype.kind == "f" and o.dtype.kind in "iub":
        if o.dtype == np.bool_:
            return functools.partial(np.not_equal, x, 0, out=o)
        # OpenVINO's CPU plugin truncates towards zero when converting floats to integers
        return lambda: np.copyto(o, np.trunc(x), casting="unsafe")
    return functools.partial(np.copyto, o, x, casting="unsafe")


@kernel("select")
def _select(ins, outs, params):  # type: ignore[no-untyped-def]
    c, a, b = ins
    o = outs[0]

    def run() -> None:
        np.copyto(o, b, casting="unsafe")
        np.copyto(o, a, casting="unsafe", where=c)

    return run


def _make_softmax(log: bool) -> Maker:
    def maker(ins: Sequence[np.ndarray], outs: Sequence[np.ndarray], params: np.ndarray) -> Runner:
        x, o = ins[0], outs[0]
        axis = int(params[0])
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

_REDUCE = {
    "reduce_mean": np.mean,
    "reduce_sum": np.sum,
    "reduce_max": np.max,
    "reduce_min": np.min,
    "reduce_prod": np.prod,
}


def _make_reduce(name: str) -> Maker:
    def maker(ins: Sequence[np.ndarray], outs: Sequence[np.ndarray], params: np.ndarray) -> Runner:
        x, o = ins[0], outs[0]
        axes = tuple(int(a) for a in params)
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
            # skips the mixed-type loop (~2 us per call)
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


@kernel("transpose")
def _transpose(ins, outs, params):  # type: ignore[no-untyped-def]
    x, o = ins[0], outs[0]
    xt = x.transpose([int(p) for p in params])
    return functools.partial(np.copyto, o, xt, casting="unsafe")


@kernel("broadcast")
def _broadcast(ins, outs, params):  # type: ignore[no-untyped-def]
    x, o = ins[0], outs[0]
    return functools.partial(np.copyto, o, x, casting="unsafe")


@kernel("slice")
def _slice(ins, outs, params):  # type: ignore[no-untyped-def]
    x, o = ins[0], outs[0]
    p = [int(v) for v in params]
    sl = tuple(slice(p[i], None if p[i + 1] == SLICE_NONE else p[i + 1], p[i + 2]) for i in range(0, len(p), 3))
    view = x[sl]
    return lambda: np.copyto(o, view, casting="unsafe")


@kernel("take")
def _take(ins, outs, params):  # type: ignore[no-untyped-def]
    x, idx = ins
    o = outs[0]
    flat = x.reshape(-1)
    if o.dtype == x.dtype:
        return lambda: np.take(flat, idx, out=o, mode="wrap")
    return lambda: np.copyto(o, flat[idx], casting="unsafe")


@kernel("gather")
def _gather(ins, outs, params):  # type: ignore[no-untyped-def]
    data, idx = ins
    o = outs[0]
    axis, bd = int(params[0]), int(params[1])
    if bd == 0:
        if o.dtype == data.dtype:
            # mode="wrap" maps negative indices like OpenVINO and avoids numpy's buffered copy
            return lambda: np.take(data, idx, axis=axis, out=o, mode="wrap")
        return lambda: np.copyto(o, np.take(data, idx, axis=axis, mode="wrap"), casting="unsafe")
    nb = int(np.prod(data.shape[:bd]))
    d2 = data.reshape((nb, *data.shape[bd:]))
    i2 = idx.reshape((nb, *idx.shape[bd:]))
    o2 = o.reshape((nb, *o.shape[bd:]))

    def run() -> None:
        for b in range(nb):
            np.copyto(o2[b], np.take(d2[b], i2[b], axis=axis - bd, mode="wrap"), casting="unsafe")

    return run


@kernel("gather_elements")
def _gather_elements(ins, outs, params):  # type: ignore[no-untyped-def]
    data, idx = ins
    o = outs[0]
    axis = int(params[0])
    dim = data.shape[axis]

    def run() -> None:
        # negative indices count from the end; wrapped like the gather kernel's mode="wrap"
        np.copyto(o, np.take_along_axis(data, np.mod(idx, dim), axis=axis), casting="unsafe")

    return run


@kernel("topk")
def _topk(ins, outs, params):  # type: ignore[no-untyped-def]
    x = ins[0]
    values, indices = outs
    axis, k = int(params[0]), int(params[1])
    largest, by_index = bool(params[2]), bool(params[3])

    def run() -> None:
        # a stable sort of the negated values: equal values keep their order (lower index first)
        order = np.argsort(-x if largest else x, axis=axis, kind="stable")
        top = np.take(order, np.arange(k), axis=axis)
        if by_index:
            top = np.sort(top, axis=axis)
        np.copyto(indices, top, casting="unsafe")
        np.copyto(values, np.take_along_axis(x, top, axis=axis), casting="unsafe")

    return run


def _wrapped(idx: np.ndarray, dims: tuple[int, ...] | int) -> np.ndarray:
    """Indices with negatives counted from the end (OpenVINO) and out-of-range ones wrapped,
    like the gather kernel's mode="wrap": no IndexError from inside a task."""
    return np.mod(idx, np.asarray(dims, dtype=np.int64))


@kernel("scatter_elements")
def _scatter_elements(ins, outs, params):  # type: ignore[no-untyped-def]
    data, idx, upd = ins
    o = outs[0]
    axis = int(params[0])

    def run() -> None:
        np.copyto(o, data, casting="unsafe")
        np.put_along_axis(o, _wrapped(idx, data.shape[axis]).astype(np.intp), upd.astype(o.dtype), axis=axis)

    return run


@kernel("scatter_update")
def _scatter_update(ins, outs, params):  # type: ignore[no-untyped-def]
    data, idx, upd = ins
    o = outs[0]
    axis = int(params[0])

    def run() -> None:
        np.copyto(o, data, casting="unsafe")
        # updates are [data.shape[:axis], idx.shape, data.shape[axis+1:]]
        flat = _wrapped(idx, data.shape[axis]).reshape(-1)
        u = upd.reshape((*data.shape[:axis], flat.size, *data.shape[axis + 1 :]))
        sel = (slice(None),) * axis
        for j, i in enumerate(flat):
            o[(*sel, int(i))] = u[(*sel, j)]

    return run


@kernel("scatter_nd")
def _scatter_nd(ins, outs, params):  # type: ignore[no-untyped-def]
    data, idx, upd = ins
    o = outs[0]
    depth = idx.shape[-1]

    def run() -> None:
        np.copyto(o, data, casting="unsafe")
        keys = _wrapped(idx.reshape(-1, depth), data.shape[:depth])
        u = upd.reshape((keys.shape[0], *data.shape[depth:]))
        for j, key in enumerate(keys):
            o[tuple(int(v) for v in key)] = u[j]

    return run


def _view(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``a`` reshaped without copying (a copy would detach the kernel from device memory)."""
    v = a.view()
    v.shape = shape  # raises instead of copying
    return v


#: margin (in logits) below which a masked-out column's exp() underflows to exactly 0 in f32
#: (exp(x) == 0 for x < -103.98), with room for the roundings of scale and mask additions
_EXP_ZERO_MARGIN = 128.0
#: skip masked-out columns only when at least this share of the window is masked out
_SKIP_SHARE = 0.05
#: ... and only for score matrices this large: the checks and gathers cost ~30 numpy calls,
#: more than a decode step's whole attention
_SKIP_MIN_SCORES = 1 << 16


def _softmax_times_v(scores, rowmax, v, o, direct: bool) -> None:  # type: ignore[no-untyped-def]
    """``o = softmax(scores, -1) @ v``, the softmax in place in ``scores`` (``rowmax`` is scratch);
    ``direct``: ``o`` has the product's shape and dtype, else it is copied in reshaped."""
    np.maximum.reduce(scores, axis=-1, keepdims=True, out=rowmax)  # np.max/np.sum minus their Python layers
    np.subtract(scores, rowmax, out=scores)
    np.exp(scores, out=scores)
    np.add.reduce(scores, axis=-1, keepdims=True, out=rowmax)
    np.divide(scores, rowmax, out=scores)
    if direct:
        np.matmul(scores, v, out=o)
    else:
        np.copyto(o, np.matmul(scores, v).reshape(o.shape), casting="unsafe")


def _masked_column_skipper(
    q32,
    k,
    v,
    mask_in,
    mask,
    groups: int,
    L: int,
    scale: float,  # type: ignore[no-untyped-def]
    batch: tuple[int, ...],
    rows: int,
    o,
    direct: bool,
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

    def absmax(x: np.ndarray) -> float:  # NaN propagates through both reductions
        return max(abs(float(np.maximum.reduce(x, axis=None))), abs(float(np.minimum.reduce(x, axis=None))))

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
        bound = absmax(qa) * absmax(ka) * D * abs(scale) * (1.0 + 2.0**-10)
        if not math.isfinite(bound) or not math.isfinite(absmax(va)):
            return False
        if not is_bool:
            limit = rowmin - 2.0 * bound - _EXP_ZERO_MARGIN - 2.0**-16 * (abs(rowmin) + 2.0 * bound)
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


#: (batch, Hkv, G, L, D, Dv, window rows) -> rows per group the window's products run with, or 0
#: when no row count up to L gives the full products' rows bit for bit (see _window_rows)
_WINDOW_ROWS: dict[tuple[int, ...], int] = {}
_WINDOW_LOCK = threading.Lock()


def _window_rows(lead: tuple[int, ...], G: int, L: int, D: int, Dv: int, w: int) -> int:
    """Rows per group (>= ``w``) with which the window's QK^T and probs @ V give the full
    products' rows bit for bit, checked once per shape on random data.

    BLAS picks its kernel by problem size (OpenBLAS here: a "small matrix" kernel whose
    accumulation order differs, e.g. 64 of 1024 rows against 8 columns), so the window runs
    with extra zero rows, doubling from ``w``, until its rows equal the full product's; 0 when
    only the full row count does (then attention takes no window).
    """
    key = (*lead, G, L, D, Dv, w)
    with _WINDOW_LOCK:
        if key in _WINDOW_ROWS:
            return _WINDOW_ROWS[key]
        rng = np.random.default_rng(0)
        q = rng.standard_normal((*lead, G * L, D)).astype(np.float32)
        kt = rng.standard_normal((*lead, D, L)).astype(np.float32)
        p = rng.random((*lead, G * L, L), dtype=np.float32)
        v = rng.standard_normal((*lead, L, Dv)).astype(np.float32)
        full_s = np.matmul(q, kt).reshape(*lead, G, L, L)
        full_o = np.matmul(p, v).reshape(*lead, G, L, Dv)
        found, m = 0, w
        while m < L:
            qw = np.ascontiguousarray(q.reshape(*lead, G, L, D)[..., L - m :, :]).reshape(*lead, G * m, D)
            pw = np.ascontiguousarray(p.reshape(*lead, G, L, L)[..., L - m :, :]).reshape(*lead, G * m, L)
            sw = np.matmul(qw, np.ascontiguousarray(kt[..., L - w :])).reshape(*lead, G, m, w)
            ow = np.matmul(pw, v).reshape(*lead, G, m, Dv)
            if np.array_equal(sw[..., m - w :, :], full_s[..., L - w :, L - w :]) and np.array_equal(
                ow[..., m - w :, :], full_o[..., L - w :, :]
            ):
                found = m
                break
            m *= 2
        _WINDOW_ROWS[key] = found
        return found


def _windowed_attention(q5, k4, v4, mask5, bias, o5, scale: float, window: RowWindow) -> bool:
    """Attention of the rows [start, L) over the columns [start, S) only; False (and nothing
    written) when the mask does not provably shut those rows off the columns before ``start``.

    ``q5``/``o5``: (..., Hkv, G, L, D) (G query heads per K/V head, 1 without grouping),
    ``k4``/``v4``: (..., Hkv, S, D), ``mask5`` broadcastable to the (..., Hkv, G, L, S) scores.
    The driver sets the window only when every padding row is the same token at the same
    position (so they all compute the same K/V) and the window holds at least one padding row:
    the window's K rows then bound every skipped column's K.  With B = max|q| * max|K| * D *
    |scale| over the window (any score moves by at most B), a padding column whose mask is
    <= min over window rows of the row's best open mask entry - 2B - margin has
    exp(score - rowmax) == 0 exactly in f32, as the masked-column skipper proves it; boolean
    masks must simply be False there.  The probabilities are then laid out full-width (exact
    zeros in the padding columns) so that the row sums and probs @ V add in the full
    computation's order: the window rows are the full computation's, bit for bit (given BLAS
    rows independent of the row count, see WINDOW_ALIGN in the NPU plugin).  The padding rows
    of ``o5`` are zeroed (finite: no 0 * NaN can reach a real row later).
    """
    w0 = window.start
    L = q5.shape[-2]
    if mask5 is None or mask5.shape[-1] != L:
        return False  # no mask, or one broadcast over the columns: the padding stays open
    mrows = mask5[..., w0:, :] if mask5.shape[-2] == L else mask5
    pad, win = mrows[..., :w0], mrows[..., w0:]
    G, w = q5.shape[-3], L - w0
    lead = q5.shape[:-3]
    m = _window_rows(tuple(lead), G, L, q5.shape[-1], v4.shape[-1], w) if k4.shape[:-2] == lead else 0
    if not m:
        window.unusable = True  # a property of the shapes: no later inference can do better
        return False
    # the window rows last in m rows per group; the m - w rows before them are zero (discarded)
    qm = np.zeros((*lead, G, m, q5.shape[-1]), np.float32)
    qm[..., m - w :, :] = q5[..., w0:, :]
    qs = qm.reshape(*lead, G * m, q5.shape[-1])
    ks = k4[..., w0:, :]
    if mask5.dtype == np.bool_:
        if pad.any() or not np.logical_or.reduce(win, axis=-1).all():
            return False
    else:
        open_min = float(np.minimum.reduce(np.maximum.reduce(win, axis=-1), axis=None))
        bound = (
            max(abs(float(np.maximum.reduce(qs, axis=None))), abs(float(np.minimum.reduce(qs, axis=None))))
            * max(abs(float(np.maximum.reduce(ks, axis=None))), abs(float(np.minimum.reduce(ks, axis=None))))
            * q5.shape[-1]
            * abs(scale)
            * (1.0 + 2.0**-10)
        )
        if not (math.isfinite(open_min) and math.isfinite(bound)):
            return False
        limit = open_min - 2.0 * bound - _EXP_ZERO_MARGIN - 2.0**-16 * (abs(open_min) + 2.0 * bound)
        if not float(np.maximum.reduce(pad, axis=None)) <= limit:
            return False
    vf = v4 if v4.dtype == np.float32 else v4.astype(np.float32)
    if not math.isfinite(
        max(abs(float(np.maximum.reduce(vf, axis=None))), abs(float(np.minimum.reduce(vf, axis=None))))
    ):
        return False  # 0 * inf: a zero probability would not zero a padding column's V
    kt = np.ascontiguousarray(np.swapaxes(ks, -1, -2), dtype=np.float32)
    scm = np.matmul(qs, kt)  # (..., Hkv, G*m, w): plain stacked GEMMs (no broadcast: BLAS)
    sc5 = scm.reshape(*lead, G, m, w)[..., m - w :, :]
    np.multiply(sc5, scale, out=sc5)
    if mask5.dtype == np.bool_:
        np.copyto(sc5, -np.inf, where=~win)
    else:
        np.add(sc5, win, out=sc5, casting="unsafe")
    if bias is not None:
        np.add(sc5, bias[w0:, w0:], out=sc5)
    rowmax = np.maximum.reduce(sc5, axis=-1, keepdims=True)
    np.subtract(sc5, rowmax, out=sc5)
    probs = np.zeros((*lead, G, m, L), np.float32)
    np.exp(sc5, out=probs[..., m - w :, w0:])
    total = np.add.reduce(probs[..., m - w :, :], axis=-1, keepdims=True)
    np.divide(probs[..., m - w :, :], total, out=probs[..., m - w :, :])
    out = np.matmul(probs.reshape(*lead, G * m, L), vf).reshape(*lead, G, m, vf.shape[-1])
    o5[..., :w0, :] = 0
    np.copyto(o5[..., w0:, :], out[..., m - w :, :], casting="unsafe")
    window.used += 1
    return True


@kernel("sdpa")
def _sdpa(ins, outs, params, window: RowWindow | None = None):  # type: ignore[no-untyped-def]
    """Attention; params: causal, has_mask, scale (0: 1/sqrt(D)), query heads per K/V head.

    Grouped (G > 1): K/V hold Hkv heads and query head h reads K/V head h // G, as the IR's
    Unsqueeze/Broadcast/Reshape expansion did; the G query heads of a group share one matmul.
    ``window``: the driver's padded-rows hint (RowWindow), read on every run.
    """
    q, k, v = ins[:3]
    mask = ins[3] if len(ins) > 3 else None
    mask_in = mask
    o = outs[0]
    causal, scale = bool(params[0]), float(params[2])
    groups = int(params[3]) if params.size > 3 and params[3] > 1 else 1
    if scale == 0.0:
        scale = 1.0 / math.sqrt(q.shape[-1])
    L, S = q.shape[-2], k.shape[-2]
    f32 = any(t.dtype != np.float32 for t in (q, k, v))
    if groups > 1:
        b, h = q.shape[0], q.shape[1]
        if q.ndim != 4 or k.ndim != 4 or h != k.shape[1] * groups or o.shape[:2] != (b, h):
            raise ExecutionError(f"sdpa: {groups} query heads per K/V head do not fit q {q.shape}, k {k.shape}")
        hkv = k.shape[1]
        q = _view(q, (b, hkv, groups * L, q.shape[-1]))  # query rows of a group stacked: one matmul each
        o = _view(o, (b, hkv, groups * L, o.shape[-1]))
    # scratch buffers live as long as the command list: nothing is allocated per inference
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    rows = q.shape[-2]
    scores = np.empty((*batch, rows, S), np.float32)
    rowmax = np.empty((*batch, rows, 1), np.float32)
    # mask and causal bias apply per query head and row: on grouped scores through a 5-D view
    scores_m = scores.reshape(*batch, groups, L, S) if groups > 1 else scores
    if mask is not None and groups > 1:
        m4 = _view(mask, (1,) * (4 - mask.ndim) + mask.shape)
        mask = _view(
            m4, (m4.shape[0], 1, 1, *m4.shape[2:]) if m4.shape[1] == 1 else (m4.shape[0], hkv, groups, *m4.shape[2:])
        )
    # with several query rows BLAS is ~4x faster on a row-major K^T than on the transposed view of K
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
    # a few grouped rows against the K^T view: numpy's BLAS dispatch only takes the transposed
    # view for one row per head (gemv), so each group's query rows multiply separately
    qk_parts = (
        [(_view(q32, (*batch, groups, L, q.shape[-1]))[..., g, :, :], scores_m[..., g, :, :]) for g in range(groups)]
        if groups > 1 and kt_buf is None
        else []
    )
    skip = None
    if mask is not None and not causal and mask.shape[-1] == S and scores.size >= _SKIP_MIN_SCORES:
        skip = _masked_column_skipper(q32, k, v, mask_in, mask, groups, L, scale, batch, rows, o, direct)
    win_ops = None
    if window is not None:
        # one layout for the windowed path: (…, [G,] L|S, D), the mask broadcastable to it
        o_full = outs[0]
        if groups > 1:
            q5 = _view(ins[0], (b, hkv, groups, L, q.shape[-1]))
            o5 = _view(o_full, (b, hkv, groups, L, o_full.shape[-1]))
            mask5 = mask
        else:
            q5 = ins[0][..., None, :, :]
            ok = o_full.shape[:-2] == tuple(batch) and o_full.shape[-2] == L
            o5 = o_full[..., None, :, :] if ok else None
            mask5 = mask if mask is None or mask.ndim < 3 else mask[..., None, :, :]
        if o5 is not None:
            win_ops = (q5, k, v, mask5, bias, o5)

    def run() -> None:
        if window is not None and window.active(L, S):
            # the hint is on for this attention: the window or a re-run, never the full path
            # over padding rows that earlier windowed layers left zero
            if win_ops is None or not _windowed_attention(*win_ops, scale, window):
                window.violated = True
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
        if qk_parts:
            for qg, sg in qk_parts:
                np.matmul(qg, kt, out=sg)
        else:
            np.matmul(q32, kt, out=scores)
        np.multiply(scores, scale, out=scores)
        if mask is not None:
            if blocked is not None:
                np.logical_not(mask, out=blocked)
                np.copyto(scores_m, -np.inf, where=blocked)
            else:
                np.add(scores_m, mask, out=scores_m, casting="unsafe")
        if bias is not None:
            np.add(scores_m, bias, out=scores_m)
        _softmax_times_v(scores, rowmax, v32, o, direct)

    return run


@kernel("matmul")
def _matmul(ins, outs, params):  # type: ignore[no-untyped-def]
    a, b = ins
    o = outs[0]
    ta, tb = bool(params[0]), bool(params[1])
    av = np.swapaxes(a, -1, -2) if ta and a.ndim > 1 else a
    bv = np.swapaxes(b, -1, -2) if tb and b.ndim > 1 else b
    if a.ndim == 1 or b.ndim == 1 or a.dtype != np.float32 or b.dtype != np.float32 or o.dtype != np.float32:
        return lambda: np.copyto(
            o, np.matmul(av.astype(np.float32), bv.astype(np.float32)).reshape(o.shape), casting="unsafe"
        )
    return functools.partial(np.matmul, av, bv, out=o)


@kernel("conv")
def _conv(ins, outs, params):  # type: ignore[no-untyped-def]
    x, w = ins
    o = outs[0]
    p = [int(v) for v in params]
    groups, nd = p[0], p[1]
    strides, dil, pb, pe = p[2 : 2 + nd], p[2 + nd : 2 + 2 * nd], p[2 + 2 * nd : 2 + 3 * nd], p[2 + 3 * nd : 2 + 4 * nd]
    ks = w.shape[-nd:]
    padded = np.zeros((*x.shape[:2], *[d + a + b for d, a, b in zip(x.shape[2:], pb, pe, strict=False)]), np.float32)
    inner = tuple(slice(a, a + d) for a, d in zip(pb, x.shape[2:], strict=False))
    win_shape = tuple((k - 1) * d + 1 for k, d in zip(ks, dil, strict=False))
    win = np.lib.stride_tricks.sliding_window_view(padded, win_shape, axis=tuple(range(2, 2 + nd)))
    sel = (slice(None), slice(None), *[slice(None, None, s) for s in strides], *[slice(None, None, d) for d in dil])
    win = win[sel]
    win = win[(slice(None), slice(None), *[slice(0, n) for n in o.shape[2:]])]
    sp = "hwdxyz"[:nd]
    kk = "ijklmn"[:nd]
    wf = w.astype(np.float32)
    if groups == 1:
        eq = f"nc{sp}{kk},oc{kk}->no{sp}"
        wv = wf
        xv = win
    else:
        g = groups
        eq = f"ngc{sp}{kk},goc{kk}->ngo{sp}"
        wv = wf.reshape((g, -1, *wf.shape[-nd - 1 :])) if wf.ndim == nd + 3 else wf
        xv = win.reshape((win.shape[0], g, -1, *win.shape[2:]))
    path = np.einsum_path(eq, xv, wv, optimize="optimal")[0]

    def run() -> None:
        padded[(slice(None), slice(None), *inner)] = x
        r = np.einsum(eq, xv, wv, optimize=path)
        np.copyto(o, r.reshape(o.shape), casting="unsafe")

    return run


def _make_pool(kind: str) -> Maker:
    def maker(ins: Sequence[np.ndarray], outs: Sequence[np.ndarray], params: np.ndarray) -> Runner:
        x, o = ins[0], outs[0]
        p = [int(v) for v in params]
        nd = p[0]
        ks, st, dl = p[1 : 1 + nd], p[1 + nd : 1 + 2 * nd], p[1 + 2 * nd : 1 + 3 * nd]
        pb, pe = p[1 + 3 * nd : 1 + 4 * nd], p[1 + 4 * nd : 1 + 5 * nd]
        fill = -np.inf if kind == "max" else 0.0
        padded = np.full(
            (*x.shape[:2], *[d + a + b for d, a, b in zip(x.shape[2:], pb, pe, strict=False)]), fill, np.float32
        )
        inner = tuple(slice(a, a + d) for a, d in zip(pb, x.shape[2:], strict=False))
        axes = tuple(range(2, 2 + nd))
        wshape = tuple((k - 1) * d + 1 for k, d in zip(ks, dl, strict=False))

        def windows(arr: np.ndarray) -> np.ndarray:
            w = np.lib.stride_tricks.sliding_window_view(arr, wshape, axis=axes)
            w = w[(slice(None), slice(None), *[slice(None, None, s) for s in st], *[slice(None, None, d) for d in dl])]
            return w[(slice(None), slice(None), *[slice(0, n) for n in o.shape[2:]])]

        win = windows(padded)
        red = tuple(range(2 + nd, 2 + 2 * nd))
        if kind == "max":

            def run() -> None:
                padded[(slice(None), slice(None), *inner)] = x
                np.copyto(o, win.max(axis=red), casting="unsafe")

            return run
        excl = bool(p[1 + 5 * nd])
        real_pe = p[2 + 5 * nd : 2 + 6 * nd]
        ones = np.zeros(padded.shape, np.float32)
        # exclude_pad counts only real elements; otherwise explicit pads count but ceil overhang does not
        if excl:
            ones[(slice(None), slice(None), *inner)] = 1
        else:
            ones[
                (
                    slice(None),
                    slice(None),
                    *[slice(0, a + d + r) for a, d, r in zip(pb, x.shape[2:], real_pe, strict=False)],
                )
            ] = 1
        counts = windows(ones).sum(axis=red)

        def run_avg() -> None:
            padded[(slice(None), slice(None), *inner)] = x
            np.copyto(o, win.sum(axis=red) / counts, casting="unsafe")

        return run_avg

    return maker


KERNELS["maxpool"] = _make_pool("max")
KERNELS["avgpool"] = _make_pool("avg")


@kernel("prelu")
def _prelu(ins, outs, params):  # type: ignore[no-untyped-def]
    x, slope = ins
    o = outs[0]
    # a 1-D slope applies per channel (axis 1) as in OpenVINO, unless it matches the last axis
    if slope.ndim == 1 and x.ndim > 1 and slope.size not in (1, x.shape[-1]):
        slope = slope.reshape((1, -1) + (1,) * (x.ndim - 2))
    return lambda: np.copyto(o, np.where(x < 0, x * slope, x), casting="unsafe")


@kernel("elu")
def _elu(ins, outs, params):  # type: ignore[no-untyped-def]
    x, o = ins[0], outs[0]
    alpha = float(params[0])
    return lambda: np.copyto(o, np.where(x > 0, x, alpha * (np.exp(np.minimum(x, 0)) - 1)), casting="unsafe")


@kernel("pad")
def _pad(ins, outs, params):  # type: ignore[no-untyped-def]
    x, o = ins[0], outs[0]
    mode, value = int(params[0]), float(params[1])
    n = x.ndim
    pb, pe = [int(v) for v in params[2 : 2 + n]], [int(v) for v in params[2 + n : 2 + 2 * n]]
    width = list(zip(pb, pe, strict=False))
    name = ("constant", "edge", "reflect", "symmetric")[mode]
    if name == "constant":
        inner = o[tuple(slice(b, b + d) for b, d in zip(pb, x.shape, strict=False))]

        def run() -> None:
            o.fill(value)
            np.copyto(inner, x, casting="unsafe")

        return run
    return lambda: np.copyto(o, np.pad(x, width, mode=name), casting="unsafe")


@kernel("mvn")
def _mvn(ins, outs, params):  # type: ignore[no-untyped-def]
    x, o = ins[0], outs[0]
    norm_var, eps, inside = bool(params[0]), float(params[1]), bool(params[2])
    axes = tuple(int(a) for a in params[3:])

    def run() -> None:
        xf = x.astype(np.float32, copy=False)
        c = xf - xf.mean(axis=axes, keepdims=True)
        if norm_var:
            var = np.mean(c * c, axis=axes, keepdims=True)
            c = c / (np.sqrt(var + eps) if inside else np.sqrt(var) + eps)
        np.copyto(o, c, casting="unsafe")

    return run


@kernel("cumsum")
def _cumsum(ins, outs, params):  # type: ignore[no-untyped-def]
    x, o = ins[0], outs[0]
    axis, exclusive, reverse = int(params[0]), bool(params[1]), bool(params[2])

    def run() -> None:
        v = np.flip(x, axis) if reverse else x
        c = np.cumsum(v, axis=axis, dtype=o.dtype)
        if exclusive:
            c = np.concatenate([np.zeros_like(np.take(c, [0], axis=axis)), np.delete(c, -1, axis=axis)], axis=axis)
        np.copyto(o, np.flip(c, axis) if reverse else c, casting="unsafe")

    return run


# ---------------------------------------------------------------- compressed weights

_FMT = {code: name for name, code in WEIGHT_FORMATS.items()}
#: f32 bytes of one decompressed weight tile (the DPU's weight buffer in CMX)
DQ_TILE_BYTES = 256 * 1024


def dequantize(
    fmt: int, q: np.ndarray, scale: np.ndarray | None, zp: np.ndarray | None, mul_f16: bool, k: int
) -> np.ndarray:
    """Rows of a compressed weight -> f32 [rows, k], rounding as the IR's decompression does.

    ``q`` is [rows, G, gs] (8-bit), [rows, G, gs/2] packed nibbles (4-bit, low nibble first) or
    [rows, k] f16; ``scale``/``zp`` are [rows, G, 1].
    """
    name = _FMT.get(fmt)
    if name is None:
        raise ExecutionError(f"unknown compressed weight format code {fmt}")
    rows = q.shape[0]
    if name == "f16":
        return q.reshape(rows, k).astype(np.float32)
    if name in ("u4", "i4"):
        b = q.view(np.uint8)
        v = np.empty((*b.shape[:-1], 2 * b.shape[-1]), np.uint8)
        np.bitwise_and(b, 0xF, out=v[..., 0::2])
        np.right_shift(b, 4, out=v[..., 1::2])
        vals: np.ndarray = (v.view(np.int8) ^ 8) - 8 if name == "i4" else v
    else:
        vals = q
    ct = np.float16 if mul_f16 else np.float32  # integer parts are exact in both
    x = vals.astype(ct)
    if zp is not None:
        x -= zp.astype(ct)
    if scale is None:
        raise ExecutionError("compressed weight without scale")
    x *= scale.astype(ct)
    return x.reshape(rows, k).astype(np.float32, copy=False)


#: f32 values of a byte's two 4-bit halves (low nibble first): one table lookup unpacks a byte
_NIBBLES_U4 = np.stack([np.arange(256) & 0xF, np.arange(256) >> 4], axis=1).astype(np.float32)
_NIBBLES_I4 = ((_NIBBLES_U4.astype(np.int32) ^ 8) - 8).astype(np.float32)


_TILE_SCRATCH = threading.local()


def _tile_scratch(name: str, n: int, dtype: type) -> np.ndarray:
    """A per-thread buffer of at least ``n`` items, shared by every matmul_dq task: a buffer per
    task would hold 0.25–0.6 MB for each of the hundreds of weights of an LLM."""
    bufs = _TILE_SCRATCH.__dict__.setdefault("bufs", {})
    buf = bufs.get(name)
    if buf is None or buf.size < n:
        buf = bufs[name] = np.empty(max(n, DQ_TILE_BYTES // 4), dtype)
    return buf[:n]


class TileDequantizer:
    """Decompresses row tiles of one compressed weight into a reused (per-thread) f32 buffer.

    Same values as :func:`dequantize` (the same f32 operations in the same order: values, minus
    zero point, times scale), with fewer whole-tile passes and no allocation per tile: 4-bit
    bytes go through a 256-entry table, f16 through the four-pass exact conversion, scales and
    zero points are converted per tile into scratch. Used by
    ``matmul_dq`` when the weight is not in the driver's cache, i.e. on every inference.
    """

    def __init__(
        self, fmt: int, q: np.ndarray, scale: np.ndarray | None, zp: np.ndarray | None, mul_f16: bool, k: int, tile: int
    ) -> None:
        self.name = _FMT.get(fmt)
        if self.name is None:
            raise ExecutionError(f"unknown compressed weight format code {fmt}")
        self.fmt, self.q, self.scale, self.zp, self.mul_f16, self.k = fmt, q, scale, zp, mul_f16, k
        self.fast = not mul_f16 and (self.name == "f16" or scale is not None)

    def rows(self, r0: int, r1: int) -> np.ndarray:
        """Rows [r0, r1) as f32 [r1 - r0, k] (a view of the thread's buffer, valid until the next
        call of any TileDequantizer on this thread)."""
        q = self.q[r0:r1]
        scale = None if self.scale is None else self.scale[r0:r1]
        zp = None if self.zp is None else self.zp[r0:r1]
        if not self.fast:
            return dequantize(self.fmt, q, scale, zp, self.mul_f16, self.k)
        n = (r1 - r0) * self.k
        out = _tile_scratch("dq", n, np.float32)
        if self.name == "f16":
            s16 = q.reshape(-1).view(np.int16)
            word, expo = _tile_scratch("dq_word", n, np.int32), _tile_scratch("dq_expo", n, np.uint16)
            np.copyto(word, s16)
            np.left_shift(word, 13, out=word)
            np.bitwise_and(word, _F16_SIGN_EM, out=word)
            np.bitwise_and(s16.view(np.uint16), 0x7C00, out=expo)
            if np.maximum.reduce(expo) == 0x7C00 or _F32_SUBNORMAL * _F16_REBIAS == 0:
                np.copyto(out, s16.view(np.float16), casting="unsafe")
            else:
                np.multiply(word.view(np.float32), _F16_REBIAS, out=out)
            return out.reshape(r1 - r0, self.k)
        shaped = out.reshape(*q.shape[:-1], -1)  # [rows, G, gs]
        if self.name in ("u4", "i4"):
            table = _NIBBLES_I4 if self.name == "i4" else _NIBBLES_U4
            np.take(table, q.view(np.uint8), axis=0, out=shaped.reshape(*q.shape, 2))
        else:
            np.copyto(shaped, q, casting="unsafe")
        # scales / zero points to f32 per tile, in scratch: f32 copies held per task would add
        # 1/gs of the weights' count × 4 bytes for every sub-model
        if zp is not None:
            zp32 = _tile_scratch("dq_zp", zp.size, np.float32).reshape(zp.shape)
            np.copyto(zp32, zp, casting="unsafe")
            np.subtract(shaped, zp32, out=shaped)
        sc32 = _tile_scratch("dq_scale", scale.size, np.float32).reshape(scale.shape)
        np.copyto(sc32, scale, casting="unsafe")
        np.multiply(shaped, sc32, out=shaped)
        return out.reshape(r1 - r0, self.k)


def _dq_operands(
    ins: Sequence[np.ndarray], first: int, has_zp: bool
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    q = ins[first]
    scale = ins[first + 1] if len(ins) > first + 1 else None
    zp = ins[first + 2] if has_zp and len(ins) > first + 2 else None
    return q, scale, zp


@kernel("matmul_dq")
def _matmul_dq(ins, outs, params):  # type: ignore[no-untyped-def]
    """MatMul against a compressed weight, decompressed tile by tile of output channels."""
    a = ins[0]
    o = outs[0]
    ta, tb = bool(params[0]), bool(params[1])
    fmt, has_zp, mul_f16, n, k = int(params[2]), bool(params[3]), bool(params[4]), int(params[5]), int(params[6])
    q, scale, zp = _dq_operands(ins, 1, has_zp)
    if q.shape[0] != n or (scale is not None and scale.shape[0] != n):
        raise ExecutionError(f"matmul_dq: weight rows {q.shape[0]} do not match N={n}")
    av = np.swapaxes(a, -1, -2) if ta and a.ndim > 1 else a
    tile = max(1, DQ_TILE_BYTES // (4 * k))
    a32 = np.empty(av.shape, np.float32) if av.dtype != np.float32 else None
    acc = np.empty(o.shape, np.float32) if o.dtype != np.float32 or not tb else None

    rows = TileDequantizer(fmt, q, scale, zp, mul_f16, k, tile).rows

    def run() -> None:
        x = av
        if a32 is not None:
            np.copyto(a32, av, casting="unsafe")
            x = a32
        dst = o if acc is None else acc
        if not tb:
            dst[...] = 0.0  # [.., N] @ [N, K]: tiles of the contraction dim accumulate
        for r0 in range(0, n, tile):
            r1 = min(n, r0 + tile)
            w = rows(r0, r1)
            if tb:
                dst[..., r0:r1] = np.matmul(x, w.T)
            else:
                dst += np.matmul(x[..., r0:r1], w)
        if acc is not None:
            np.copyto(o, acc, casting="unsafe")

    return run


@kernel("gather_dq")
def _gather_dq(ins, outs, params):  # type: ignore[no-untyped-def]
    """Embedding lookup in a compressed table: only the gathered rows are decompressed."""
    idx = ins[1]
    o = outs[0]
    fmt, has_zp, mul_f16, n, k = int(params[0]), bool(params[1]), bool(params[2]), int(params[3]), int(params[4])
    q = ins[0]
    scale = ins[2] if len(ins) > 2 else None
    zp = ins[3] if has_zp and len(ins) > 3 else None
    if q.shape[0] != n:
        raise ExecutionError(f"gather_dq: table rows {q.shape[0]} do not match N={n}")
    flat = o.reshape(-1, k)

    def run() -> None:
        r = idx.reshape(-1).astype(np.int64)
        r = np.where(r < 0, r + n, r)  # OpenVINO's negative indices
        w = dequantize(fmt, q[r], None if scale is None else scale[r], None if zp is None else zp[r], mul_f16, k)
        np.copyto(flat, w, casting="unsafe")

    return run
