"""DPU MatMul that accumulates into its output: the K-split partial sums of a tiled MatMul."""

from __future__ import annotations

import numpy as np

from ov_npu_emu_npu.device.kernels.linear import decode_shaped
from ov_npu_emu_npu.device.kernels.registry import kernel


@kernel("matmul_acc")
def _matmul_acc(ins, outs, params):
    """``o += a @ b`` (``b`` transposed when ``params.transpose_b``): one K chunk added to the CMX accumulator.

    The first chunk of a tile is a plain ``matmul`` (it overwrites), the others add here, so
    the sum over chunks is the whole row times column product.
    """
    a, b = ins
    o = outs[0]
    bv = np.swapaxes(b, -1, -2) if params.transpose_b and b.ndim > 1 else b
    part = np.empty(o.shape, np.float32)  # allocated once per command-list build, not per run
    if a.dtype == b.dtype == o.dtype == np.float32:
        product = decode_shaped(a, b, part, params.transpose_a, params.transpose_b)  # as the tiles' first chunk does
        if product is not None:
            def run_decode() -> None:
                product()
                np.add(o, part, out=o)
            return run_decode

        def run() -> None:
            np.matmul(a, bv, out=part)
            np.add(o, part, out=o)
    else:
        def run() -> None:
            np.matmul(a.astype(np.float32), bv.astype(np.float32), out=part)
            np.copyto(o, o.astype(np.float32) + part, casting="unsafe")
    return run
