"""DPU kernels: MatMul and Convolution, and the (SHAVE) pooling kernels."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from ov_npu_emu_npu.blob.kernel_params import AvgPoolParams, MaxPoolParams
from ov_npu_emu_npu.device.kernels.dequant import STORED_FORMAT_MAX_ROWS
from ov_npu_emu_npu.device.kernels.registry import KERNELS, Maker, Runner, kernel


@kernel("matmul")
def _matmul(ins, outs, params):
    a, b = ins
    o = outs[0]
    ta, tb = params.transpose_a, params.transpose_b
    av = np.swapaxes(a, -1, -2) if ta and a.ndim > 1 else a
    bv = np.swapaxes(b, -1, -2) if tb and b.ndim > 1 else b
    if a.ndim == 1 or b.ndim == 1 or a.dtype != np.float32 or b.dtype != np.float32 or o.dtype != np.float32:
        return _f16_decode(a, b, o, ta, tb) or _f16_generic(a, b, o, ta, tb) or (lambda: np.copyto(
            o, np.matmul(av.astype(np.float32, copy=False), bv.astype(np.float32, copy=False)).reshape(o.shape),
            casting="unsafe"))
    return decode_shaped(a, b, o, ta, tb) or functools.partial(np.matmul, av, bv, out=o)


def _product_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """The shape of ``np.matmul`` of operands of these shapes (None when they do not multiply)."""
    if not a or not b:
        return None
    a2, b2 = (1, *a) if len(a) == 1 else a, (*b, 1) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        return None
    try:
        lead = np.broadcast_shapes(a2[:-2], b2[:-2])
    except ValueError:
        return None
    return (*lead, *((a2[-2],) if len(a) > 1 else ()), *((b2[-1],) if len(b) > 1 else ()))


def _f16_generic(a: np.ndarray, b: np.ndarray, o: np.ndarray, ta: bool, tb: bool) -> Runner | None:
    """f16 mode's other MatMuls (prefill rows, attention's activation x activation products,
    f16 weights): the generic path's steps -- each f16 operand widened to f32 (exact), numpy's
    f32 matmul, the product rounded to f16 -- with the widening and rounding in the numba loops
    of kernels/f16.py into buffers made once.  numpy's own f16 <-> f32 casts convert one element
    at a time on hosts without F16C in its baseline: 72 against 17 us per call at K=64, 475
    against 111 us at K=1152.  The f32 product is computed on the same layouts (a transposed
    operand stays a transposed view), so BLAS gets the same call and the bits are the generic
    path's.  None: other dtypes keep it."""
    if o.dtype != np.float16 or not o.flags.c_contiguous:
        return None
    if a.dtype not in (np.float16, np.float32) or b.dtype not in (np.float16, np.float32):
        return None

    from ov_npu_emu_npu.device.kernels.f16 import narrow_runner, widen_runner

    steps: list[Runner] = []

    def as_f32(x: np.ndarray, t: bool) -> np.ndarray:
        if x.dtype == np.float16:
            x32 = np.empty(x.shape, np.float32)
            widen = widen_runner(x, x32)
            steps.append(widen if widen is not None else functools.partial(np.copyto, x32, x))
            x = x32
        return np.swapaxes(x, -1, -2) if t and x.ndim > 1 else x

    av, bv = as_f32(a, ta), as_f32(b, tb)
    shape = _product_shape(av.shape, bv.shape)
    if shape is None or int(np.prod(shape)) != o.size:
        return None
    o32 = np.empty(shape, np.float32)
    narrow = narrow_runner(o32, o)
    if narrow is None:
        return None
    steps += [functools.partial(np.matmul, av, bv, out=o32), narrow]

    def run() -> None:
        for step in steps:
            step()

    return run


def _f16_decode(a: np.ndarray, b: np.ndarray, o: np.ndarray, ta: bool, tb: bool) -> Runner | None:
    """f16 mode's decode-shaped MatMul (f16 activation rows, f32 [N, K] weight, f16 output): the
    rows widened into an f32 buffer, the f32 gemv kernel (f32 accumulation, as the f32 mode), the
    result rounded to f16; f32 rows (the LM head after an f32 RMSNorm) go to the gemv as they
    are.  Without it the generic path copied the whole f32 weight on every call (``astype``) and
    ran BLAS: f16 decode 1.6x slower than f32 on stories260K.  None: other operands keep the
    generic path."""
    if not (a.dtype in (np.float16, np.float32) and o.dtype == np.float16 and b.dtype == np.float32
            and a.ndim >= 2 and o.ndim >= 2):
        return None
    a32 = a if a.dtype == np.float32 else np.empty(a.shape, np.float32)  # f32 rows (an f32 norm's): as they are
    o32 = np.empty(o.shape, np.float32)
    inner = decode_shaped(a32, b, o32, ta, tb)
    if inner is None:
        return None

    from ov_npu_emu_npu.device.kernels.f16 import gemv_f16_rows, narrow_runner, widen_runner

    fused = gemv_f16_rows(a, a32, o32, o, inner) if a is not a32 else None
    if fused is not None:
        return fused
    # numpy's bits, faster (kernels/f16.py)
    widen, narrow = (widen_runner(a, a32) if a is not a32 else None), narrow_runner(o32, o)

    def run() -> None:
        if widen is not None:
            widen()
        elif a is not a32:
            np.copyto(a32, a)
        inner()
        if narrow is not None:
            narrow()
        else:
            np.copyto(o, o32, casting="unsafe")

    return run


def decode_shaped(a: np.ndarray, b: np.ndarray, o: np.ndarray, ta: bool, tb: bool) -> Runner | None:
    """``o = a @ b.T`` for a few activation rows and an f32 [N, K] weight ``b``: the gemv kernel
    (a decode step's MatMuls read every weight once, so their cost is the read; the kernel splits
    products of 2^20 weight elements or more over the cores, smaller ones run on this thread at
    about single-threaded BLAS speed). Its sums do not depend on where N is cut or on the
    operands' row pitch, so the host fusion's product over the whole weight has the tiles' bits.
    None: other shapes keep BLAS."""
    if ta or not tb or b.ndim != 2 or a.ndim < 2 or o.ndim < 2:
        return None
    n, k = b.shape
    rows = a.size // k if k else 0
    if a.shape[-1] != k or not 1 <= rows <= STORED_FORMAT_MAX_ROWS or o.size != rows * n or o.shape[-1] != n:
        return None
    if (a.ndim > 2 and not a.flags.c_contiguous) or (o.ndim > 2 and not o.flags.c_contiguous):
        return None  # leading batch dims: only as plain rows
    # numba loads (slowly) on the first task that uses it, not with every import of the device
    from ov_npu_emu_npu.device.kernels.gemv import gemv_runner

    return gemv_runner("f32", a.reshape(rows, k), b, None, None, o.reshape(rows, n), k)


#: the batch and channel axes, whole (spatial slices are appended to it)
_ALL2 = (slice(None), slice(None))


@kernel("conv")
def _conv(ins, outs, params):
    x, w = ins
    o = outs[0]
    groups, nd = params.groups, params.nd
    strides, dil, pb, pe = params.strides, params.dilations, params.pads_begin, params.pads_end
    ks = w.shape[-nd:]
    padded = np.zeros((*x.shape[:2], *[d + a + b for d, a, b in zip(x.shape[2:], pb, pe, strict=False)]), np.float32)
    inner = tuple(slice(a, a + d) for a, d in zip(pb, x.shape[2:], strict=False))
    win_shape = tuple((k - 1) * d + 1 for k, d in zip(ks, dil, strict=False))
    win = np.lib.stride_tricks.sliding_window_view(padded, win_shape, axis=tuple(range(2, 2 + nd)))
    sel = (slice(None), slice(None), *[slice(None, None, s) for s in strides], *[slice(None, None, d) for d in dil])
    win = win[sel]
    win = win[_ALL2 + tuple(slice(0, n) for n in o.shape[2:])]
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
        padded[_ALL2 + inner] = x
        r = np.einsum(eq, xv, wv, optimize=path)
        np.copyto(o, r.reshape(o.shape), casting="unsafe")

    return run


@kernel("deconv")
def _deconv(ins, outs, params):
    """Transposed convolution: each kernel position scatters x · w[..., position] into a strided
    slice of the uncropped output, which is then cropped by pads_begin to the output's size."""
    x, w = ins
    o = outs[0]
    g, strides, dil, pb = params.groups, params.strides, params.dilations, params.pads_begin
    n, cin = x.shape[:2]
    cout = o.shape[1]
    spatial = x.shape[2:]
    full = [max((i - 1) * s + (k - 1) * d + 1, b + m)
            for i, s, k, d, b, m in zip(spatial, strides, w.shape[3:], dil, pb, o.shape[2:], strict=True)]
    buf = np.zeros((n, g, cout // g, *full), np.float32)
    wf = w.astype(np.float32)
    crop = (slice(None), slice(None), *(slice(b, b + m) for b, m in zip(pb, o.shape[2:], strict=True)))
    places = [(kp, tuple(slice(k * d, k * d + (i - 1) * s + 1, s)
                         for k, d, i, s in zip(kp, dil, spatial, strides, strict=True)))
              for kp in np.ndindex(*w.shape[3:])]
    all3 = (slice(None),) * 3

    def run() -> None:
        xg = x.reshape(n, g, cin // g, *spatial).astype(np.float32, copy=False)
        buf.fill(0)
        for kp, sl in places:
            buf[all3 + sl] += np.einsum("ngc...,gco->ngo...", xg, wf[all3 + kp])
        np.copyto(o, buf.reshape(n, cout, *full)[crop], casting="unsafe")

    return run


def _make_pool(kind: str) -> Maker:
    def maker(ins: Sequence[np.ndarray], outs: Sequence[np.ndarray], params: MaxPoolParams | AvgPoolParams) -> Runner:
        x, o = ins[0], outs[0]
        nd = params.nd
        ks, st, dl = params.kernel, params.strides, params.dilations
        pb, pe = params.pads_begin, params.pads_end
        fill = -np.inf if kind == "max" else 0.0
        padded = np.full(
            (*x.shape[:2], *[d + a + b for d, a, b in zip(x.shape[2:], pb, pe, strict=False)]), fill, np.float32
        )
        inner = tuple(slice(a, a + d) for a, d in zip(pb, x.shape[2:], strict=False))
        axes = tuple(range(2, 2 + nd))
        wshape = tuple((k - 1) * d + 1 for k, d in zip(ks, dl, strict=False))

        def windows(arr: np.ndarray) -> np.ndarray:
            w = np.lib.stride_tricks.sliding_window_view(arr, wshape, axis=axes)
            w = w[_ALL2 + tuple(slice(None, None, s) for s in st) + tuple(slice(None, None, d) for d in dl)]
            return w[_ALL2 + tuple(slice(0, n) for n in o.shape[2:])]

        win = windows(padded)
        red = tuple(range(2 + nd, 2 + 2 * nd))
        if kind == "max":

            def run() -> None:
                padded[_ALL2 + inner] = x
                np.copyto(o, win.max(axis=red), casting="unsafe")

            return run
        assert isinstance(params, AvgPoolParams)
        excl = params.exclude_pad
        real_pe = params.node_pads_end
        ones = np.zeros(padded.shape, np.float32)
        # exclude_pad counts only real elements; otherwise explicit pads count but ceil overhang does not
        if excl:
            ones[_ALL2 + inner] = 1
        else:
            ones[_ALL2 + tuple(slice(0, a + d + r) for a, d, r in zip(pb, x.shape[2:], real_pe, strict=False))] = 1
        counts = windows(ones).sum(axis=red)

        def run_avg() -> None:
            padded[_ALL2 + inner] = x
            np.copyto(o, win.sum(axis=red) / counts, casting="unsafe")

        return run_avg

    return maker


KERNELS["maxpool"] = _make_pool("max")
KERNELS["avgpool"] = _make_pool("avg")
