"""SHAVE data-movement kernels: transpose, broadcast, slice, take, gather, top-k, scatter, pad."""

from __future__ import annotations

import functools
from typing import Literal

import numpy as np

from ov_npu_emu_npu.blob.format import SLICE_NONE
from ov_npu_emu_npu.device.kernels.registry import kernel


@kernel("transpose")
def _transpose(ins, outs, params):
    x, o = ins[0], outs[0]
    xt = x.transpose(params.perm)
    return functools.partial(np.copyto, o, xt, casting="unsafe")


@kernel("broadcast")
def _broadcast(ins, outs, params):
    x, o = ins[0], outs[0]
    return functools.partial(np.copyto, o, x, casting="unsafe")


@kernel("slice")
def _slice(ins, outs, params):
    x, o = ins[0], outs[0]
    sl = tuple(slice(start, None if stop == SLICE_NONE else stop, step) for start, stop, step in params.bounds)
    view = x[sl]
    return lambda: np.copyto(o, view, casting="unsafe")


@kernel("take")
def _take(ins, outs, params):
    x, idx = ins
    o = outs[0]
    flat = x.reshape(-1)
    if o.dtype == x.dtype:
        return lambda: np.take(flat, idx, out=o, mode="wrap")
    return lambda: np.copyto(o, flat[idx], casting="unsafe")


@kernel("gather")
def _gather(ins, outs, params):
    data, idx = ins
    o = outs[0]
    axis, bd = params.axis, params.batch_dims
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
def _gather_elements(ins, outs, params):
    data, idx = ins
    o = outs[0]
    axis = params.axis
    dim = data.shape[axis]

    def run() -> None:
        # negative indices count from the end; wrapped like the gather kernel's mode="wrap"
        np.copyto(o, np.take_along_axis(data, np.mod(idx, dim), axis=axis), casting="unsafe")

    return run


@kernel("topk")
def _topk(ins, outs, params):
    x = ins[0]
    values, indices = outs
    axis, k = params.axis, params.k
    largest, by_index = params.largest, params.sort_by_index

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
def _scatter_elements(ins, outs, params):
    data, idx, upd = ins
    o = outs[0]
    axis = params.axis

    def run() -> None:
        np.copyto(o, data, casting="unsafe")
        np.put_along_axis(o, _wrapped(idx, data.shape[axis]).astype(np.intp), upd.astype(o.dtype), axis=axis)

    return run


@kernel("scatter_update")
def _scatter_update(ins, outs, params):
    data, idx, upd = ins
    o = outs[0]
    axis = params.axis

    def run() -> None:
        np.copyto(o, data, casting="unsafe")
        # updates are [data.shape[:axis], idx.shape, data.shape[axis+1:]]
        flat = _wrapped(idx, data.shape[axis]).reshape(-1)
        u = upd.reshape((*data.shape[:axis], flat.size, *data.shape[axis + 1 :]))
        sel = (slice(None),) * axis
        for j, i in enumerate(flat):
            o[sel + (int(i),)] = u[sel + (j,)]

    return run


@kernel("scatter_nd")
def _scatter_nd(ins, outs, params):
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



_PadMode = Literal["constant", "edge", "reflect", "symmetric"]
#: PadParams.mode -> numpy.pad mode
_PAD_MODES: tuple[_PadMode, ...] = ("constant", "edge", "reflect", "symmetric")


@kernel("pad")
def _pad(ins, outs, params):
    x, o = ins[0], outs[0]
    mode, value = params.mode, params.value
    pb, pe = params.pads_begin, params.pads_end
    width = list(zip(pb, pe, strict=False))
    name = _PAD_MODES[mode]
    if name == "constant":
        inner = o[tuple(slice(b, b + d) for b, d in zip(pb, x.shape, strict=False))]

        def run() -> None:
            o.fill(value)
            np.copyto(inner, x, casting="unsafe")

        return run
    return lambda: np.copyto(o, np.pad(x, width, mode=name), casting="unsafe")
