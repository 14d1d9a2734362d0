"""Compressed weights: dequantisation by tiles, matmul_dq and gather_dq."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np

from ov_npu_emu.errors import ExecutionError
from ov_npu_emu_npu.blob.format import WEIGHT_FORMATS
from ov_npu_emu_npu.blob.kernel_params import DQ_ACT_BLOCK, MatMulDqParams
from ov_npu_emu_npu.device.kernels.registry import Runner, kernel

#: f16 bits placed at bit 13 of an f32 are the value scaled by 2**-112 (both exponent fields end
#: at bit 23 of the shifted word); multiplying back is exact for normals, zeros and subnormals
_F16_REBIAS = np.float32(2.0**112)
_F16_SIGN_EM = np.int32(-0x70000001)  # 0x8FFFFFFF: sign bit, then exponent/mantissa at bits 13..27
_F32_SUBNORMAL = np.float32(1e-40)

_FMT = {code: name for name, code in WEIGHT_FORMATS.items()}
#: the most activation rows a matmul_dq reads its weight as stored for (kernels/gemv.py); above
#: it, the block kernel on decompressed weight blocks wins (kernels/gemm.py: each decompressed
#: block is reused by every row)
STORED_FORMAT_MAX_ROWS = 16
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
        assert scale is not None  # self.fast: f16 (above) or a scale
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


def quantize_activations(x: np.ndarray, block: int) -> None:
    """:func:`.act_quant.fake_quantize_rows` (numba, imported on first use as the kernels are)."""
    from ov_npu_emu_npu.device.kernels.act_quant import fake_quantize_rows

    fake_quantize_rows(x, block)


def _nothing() -> None:
    """The runner of a task with no rows to compute."""


def _dq_operands(
    ins: Sequence[np.ndarray], first: int, has_zp: bool
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    q = ins[first]
    scale = ins[first + 1] if len(ins) > first + 1 else None
    zp = ins[first + 2] if has_zp and len(ins) > first + 2 else None
    return q, scale, zp


def stored_format_matmul(ins: Sequence[np.ndarray], outs: Sequence[np.ndarray], params: MatMulDqParams,
                         prefill: bool = False):
    """matmul_dq for a decode-shaped activation (at most :data:`STORED_FORMAT_MAX_ROWS` rows, weight [N, K]
    as transpose_b): a runner reading the weight as stored (:mod:`.gemv`), or None when the
    operands need the decompress-then-BLAS path (more rows, batched/transposed operands, layouts
    the stored-format kernels do not read). Such a task needs no decompressed copy.

    ``prefill``: also take more rows, by blocks of decompressed output channels and a micro-kernel
    (:mod:`.gemm`: each weight decompressed once per run, by numba, into a per-thread buffer).
    An activation with no rows (a row tile wholly outside the token window) does nothing."""
    a, o = ins[0], outs[0]
    ta, tb = params.transpose_a, params.transpose_b
    fmt, has_zp, mul_f16, n, k = params.weight_format, params.has_zero_point, params.f16_rounding, params.n, params.k
    name = _FMT.get(fmt)
    if ta or not tb or name is None or a.ndim < 2 or a.shape[-1] != k or o.shape[-1] != n:
        return None
    m_rows = a.size // k
    if o.size != m_rows * n:
        return None
    if m_rows == 0:
        return _nothing
    if m_rows > STORED_FORMAT_MAX_ROWS and not prefill:
        return None
    # numba loads (slowly) on the first task that uses it, not with every import of the device
    runner: Callable[..., Runner | None]
    if m_rows > STORED_FORMAT_MAX_ROWS:
        from ov_npu_emu_npu.device.kernels.gemm import gemm_runner as runner
    else:
        from ov_npu_emu_npu.device.kernels.gemv import gemv_runner as runner
    q, scale, zp = _dq_operands(ins, 1, has_zp)
    # f32 C-contiguous views of the activation / result where they are such, else scratch
    # copied per run (views only: a reshape that copied would read stale data)
    direct_in = a.dtype == np.float32 and a.flags.c_contiguous
    direct_out = o.dtype == np.float32 and o.flags.c_contiguous
    x = a.reshape(m_rows, k) if direct_in else np.empty((m_rows, k), np.float32)
    y = o.reshape(m_rows, n) if direct_out else np.empty((m_rows, n), np.float32)
    run = None
    if params.act_block == DQ_ACT_BLOCK and m_rows == 1:  # the integer kernel quantizes the row itself
        run = runner(name, x, q, scale, zp, y, k, mul_f16, int8_activations=True)
    # other dynamic quantization: the float kernels on the rows' quantized values, in a copy
    quantize = bool(params.act_block) and run is None
    if quantize and direct_in:
        direct_in, x = False, np.empty((m_rows, k), np.float32)
    if run is None:
        run = runner(name, x, q, scale, zp, y, k, mul_f16)
    if run is None or (direct_in and direct_out):
        return run
    return with_copies(run, a, o, None if direct_in else x, None if direct_out else y,
                        params.act_block if quantize else 0)


def with_copies(run: Runner, a: np.ndarray, o: np.ndarray, x: np.ndarray | None, y: np.ndarray | None,
                 quantize: int) -> Runner:
    """``run`` (reading ``x``, writing ``y``) with the activation ``a`` copied into ``x`` first
    (then, with ``quantize``, its rows quantized per block of that many columns) and ``y`` copied
    into the result ``o`` after; None: ``run`` reads / writes the task's own view."""
    # f16 mode's rows: numba's exact widening / nearest-even rounding (numpy's bits, several times
    # faster than numpy's casts, kernels/f16.py); other types through numpy
    from ov_npu_emu_npu.device.kernels.f16 import narrow_runner, widen_runner

    widen = None if x is None else widen_runner(a, x)
    narrow = None if y is None else narrow_runner(y, o)

    def copying() -> None:
        if x is not None:
            if widen is not None:
                widen()
            else:
                np.copyto(x.reshape(a.shape), a, casting="unsafe")
            if quantize:
                quantize_activations(x, quantize)
        run()
        if y is not None:
            if narrow is not None:
                narrow()
            else:
                np.copyto(o, y.reshape(o.shape), casting="unsafe")

    return copying


@kernel("matmul_dq")
def _matmul_dq(ins, outs, params):
    """MatMul against a compressed weight, read as stored (:func:`stored_format_matmul`: decode
    and prefill shapes); other layouts decompress it tile by tile of output channels (numpy)."""
    a = ins[0]
    o = outs[0]
    ta, tb = params.transpose_a, params.transpose_b
    fmt, has_zp, mul_f16, n, k = params.weight_format, params.has_zero_point, params.f16_rounding, params.n, params.k
    q, scale, zp = _dq_operands(ins, 1, has_zp)
    if q.shape[0] != n or (scale is not None and scale.shape[0] != n):
        raise ExecutionError(f"matmul_dq: weight rows {q.shape[0]} do not match N={n}")
    fast = stored_format_matmul(ins, outs, params, prefill=True)
    if fast is not None:
        return fast
    av = np.swapaxes(a, -1, -2) if ta and a.ndim > 1 else a
    tile = max(1, DQ_TILE_BYTES // (4 * k))
    block = params.act_block if tb else 0  # dynamic quantization: the contracted rows quantized
    a32 = np.empty(av.shape, np.float32) if av.dtype != np.float32 or block else None
    acc = np.empty(o.shape, np.float32) if o.dtype != np.float32 or not tb else None

    rows = TileDequantizer(fmt, q, scale, zp, mul_f16, k, tile).rows

    def run() -> None:
        x = av
        if a32 is not None:
            np.copyto(a32, av, casting="unsafe")
            if block:
                quantize_activations(a32.reshape(-1, k), block)
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
def _gather_dq(ins, outs, params):
    """Embedding lookup in a compressed table: only the gathered rows are decompressed."""
    idx = ins[1]
    o = outs[0]
    fmt, has_zp, mul_f16, n, k = params.weight_format, params.has_zero_point, params.f16_rounding, params.n, params.k
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
