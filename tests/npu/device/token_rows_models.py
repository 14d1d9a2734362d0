"""Models and a runner shared by the token-row window tests (test_token_rows.py, test_blas_threads.py)."""

from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset13 as ops

#: prompt rows, vocabulary, embedding width, output channels of the small window models
P, V, E, F = 256, 48, 32, 40


def run_cmx(emu_core, model: ov.Model, cmx: int, first: int, skip: bool):
    """``model`` ([1, L] input_ids and attention_mask, output "out") compiled with a ``cmx``-byte
    CMX, run once on padding rows before ``first`` (window on or off): (request, out).  f32 mode:
    the tests' row-tile geometry counts 4-byte activations."""
    length = model.input("input_ids").get_partial_shape()[1].get_length()
    cm = emu_core.compile_model(model, "NPU", {"NPU_EMU_CMX_SIZE": cmx, "INFERENCE_PRECISION_HINT": "f32",
                                               "NPU_EMU_SKIP_PADDED_ROWS": "YES" if skip else "NO"})
    req = cm.create_infer_request()
    ids = np.r_[np.full(first, 3), np.arange(5, 5 + length - first) % V].astype(np.int64)[None]
    req.infer({"input_ids": ids, "attention_mask": (np.arange(length) >= first).astype(np.int64)[None]})
    return req, np.array(req.get_tensor("out").data)


def int8_matmul_model(rows: int) -> ov.Model:
    """Embedding -> MatMul with an int8 weight (NNCF's u8 pattern: matmul_dq reads it from DDR
    while only the activation rows are staged through CMX, in row tiles)."""
    rng = np.random.default_rng(2)
    ids = ops.parameter([1, rows], ov.Type.i64, name="input_ids")
    am = ops.parameter([1, rows], ov.Type.i64, name="attention_mask")
    for p, n in ((ids, "input_ids"), (am, "attention_mask")):
        p.output(0).set_names({n})
    x = ops.gather(ops.constant(rng.standard_normal((V, E)).astype(np.float32)), ids, 0)
    q = ops.convert(ops.constant(rng.integers(0, 256, (F, E)).astype(np.uint8)), ov.Type.f32)
    zp = ops.convert(ops.constant(rng.integers(100, 156, (F, 1)).astype(np.uint8)), ov.Type.f32)
    w = ops.multiply(ops.subtract(q, zp), ops.constant((rng.random((F, 1)) * 0.02).astype(np.float32)))
    out = ops.matmul(x, w, False, True)
    out.output(0).set_names({"out"})
    mask_out = ops.convert(am, ov.Type.f32)
    mask_out.output(0).set_names({"mask_out"})
    return ov.Model([out, mask_out], [ids, am], "int8_rows")
