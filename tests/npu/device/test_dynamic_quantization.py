"""NPU_COMPILER_DYNAMIC_QUANTIZATION: 4-bit-weight MatMuls on int8 activations.

The compiler marks each MatMul on a 4-bit weight (f16 mode, the key YES) with an activation
block of 32 columns; the device quantizes every activation row per block, symmetrically
(``s = max|x| / 127``, ``q = rint(x / s)``), and multiplies. One row (decode) runs the integer
kernel (vpmaddubsw: the weight's codes times the codes, exact integer sums, then the scales);
more rows, the float kernels on the rows' quantized values ``q * s``. Both are checked against
numpy on those values, within f32 summation bounds; the integer kernel's bits do not depend on
how output channels are cut; f32 mode stays exact.
"""

from __future__ import annotations

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops

from ov_npu_emu_npu.blob.kernel_params import DQ_ACT_BLOCK, MatMulDqParams
from tests.npu.conftest import cpu_reference

pytest.importorskip("numba")

DQ = {"NPU_COMPILER_DYNAMIC_QUANTIZATION": "YES"}


def _codes(rng, name: str, n: int, k: int, gs: int, zp: bool):
    """4-bit codes [n, G, gs/2] (two per byte, low nibble first), f16 scales, u4 zero points."""
    groups = k // gs
    q = rng.integers(0, 256, (n, groups, gs // 2), dtype=np.uint8)
    scale = (rng.random((n, groups, 1)) * 0.05 + 0.01).astype(np.float16)
    z = rng.integers(0, 16, (n, groups, 1)).astype(np.uint8) if zp else None
    return q, scale, z


def _reference(name, x_q, q, scale, zp, k):
    from ov_npu_emu_npu.blob.format import WEIGHT_FORMATS
    from ov_npu_emu_npu.device.kernels.dequant import dequantize

    w = dequantize(WEIGHT_FORMATS[name], q, scale, zp, False, k).astype(np.float64)
    x = x_q.astype(np.float64)
    with np.errstate(invalid="ignore"):  # inf * 0 in a row that is not finite
        return x @ w.T, np.abs(x) @ np.abs(w).T


def _quantized(x: np.ndarray) -> np.ndarray:
    from ov_npu_emu_npu.device.kernels.act_quant import fake_quantize_rows

    xq = np.array(x, np.float32)
    fake_quantize_rows(xq, DQ_ACT_BLOCK)
    return xq


def test_quantized_values_are_int8_codes_times_a_block_scale():
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((3, 100)) * 4).astype(np.float32)
    x[1, 40:64] = 0.0  # a zero block (columns 32..63 of row 1 hold 8 non-zeros, so only part of it)
    x[2, 64:96] = 0.0
    xq = _quantized(x)
    for r in range(3):
        for b0 in range(0, 100, DQ_ACT_BLOCK):
            blk, got = x[r, b0:b0 + DQ_ACT_BLOCK], xq[r, b0:b0 + DQ_ACT_BLOCK]
            s = np.float32(np.abs(blk).max() / np.float32(127))
            if s == 0:
                assert not got.any()
                continue
            codes = np.clip(np.rint(blk / s), -127, 127)
            np.testing.assert_array_equal(got, (codes * s).astype(np.float32))
            assert np.abs(codes).max() == 127  # the block's largest value takes the full range


def test_a_row_that_is_not_finite_is_not_quantized():
    x = np.linspace(0.013, 0.9, 128, dtype=np.float32).reshape(2, 64)
    x[1, 5] = np.inf
    xq = _quantized(x)
    np.testing.assert_array_equal(xq[1], x[1])
    assert not np.array_equal(xq[0], x[0])  # the finite row is quantized


@pytest.mark.parametrize(("name", "gs", "zp"), [("u4", 128, True), ("u4", 64, False), ("i4", 128, False),
                                                ("i4", 1024, False), ("u4", 1024, True)])
@pytest.mark.parametrize("n", [7, 4096])
def test_one_row_integer_kernel_against_numpy(name, gs, zp, n):
    """The one-row kernel (pool chunks for the large N) is the product of the quantized values
    within the f32 summation bound."""
    from ov_npu_emu_npu.device.kernels import gemv

    if not gemv.avx2():
        pytest.skip("numba does not target AVX2 here: the integer row is not used")
    rng = np.random.default_rng(5)
    k = 1024
    q, scale, z = _codes(rng, name, n, k, gs, zp and name == "u4")
    x = (rng.standard_normal((1, k)) * 2).astype(np.float32)
    out = np.full((1, n), np.nan, np.float32)
    run = gemv.gemv_runner(name, x, q, scale, z, out, k, int8_activations=True)
    assert run is not None
    run()
    ref, mag = _reference(name, _quantized(x), q, scale, z, k)
    assert np.all(np.abs(out - ref) <= 4 * k * np.finfo(np.float32).eps * mag + 1e-30)
    # the quantization is visible: the float product of the raw row is another number
    raw, _ = _reference(name, x, q, scale, z, k)
    assert np.abs(out - raw).max() > 1e3 * np.finfo(np.float32).eps * np.abs(raw).max()


def _integer_case(seed: int, name: str, n: int, k: int, zp: bool):
    """The gemv module (skipping where numba does not target AVX2), a weight and an activation row."""
    from ov_npu_emu_npu.device.kernels import gemv

    if not gemv.avx2():
        pytest.skip("numba does not target AVX2 here: the integer row is not used")
    rng = np.random.default_rng(seed)
    return gemv, _codes(rng, name, n, k, 128, zp), rng.standard_normal((1, k)).astype(np.float32)


def test_integer_kernel_bits_do_not_depend_on_the_cut():
    n, k = 203, 512
    gemv, (q, scale, z), x = _integer_case(6, "u4", n, k, True)
    whole = np.empty((1, n), np.float32)
    kern, args = gemv._gemv_kernel("u4", x, q, scale, z, whole, k, False, True)
    gemv._PREPARE[kern](x, args)
    row = np.empty(k, np.float32)
    kern(*args, whole, 0, n, row)
    pieces = np.empty((1, n), np.float32)
    for lo, hi in ((0, 3), (3, 70), (70, 71), (71, 203)):
        kern(*args, pieces, lo, hi, row)
    np.testing.assert_array_equal(pieces, whole)


def test_one_row_that_is_not_finite_multiplies_as_float():
    n, k = 40, 256
    gemv, (q, scale, z), x = _integer_case(7, "i4", n, k, False)
    x[0, 17] = np.inf
    out = np.empty((1, n), np.float32)
    gemv.gemv_runner("i4", x, q, scale, z, out, k, int8_activations=True)()
    ref, _ = _reference("i4", x, q, scale, z, k)
    np.testing.assert_array_equal(np.isposinf(out), np.isposinf(ref))
    np.testing.assert_array_equal(np.isneginf(out), np.isneginf(ref))


def _int4_matmul_model(rows: int, k: int, n: int, gs: int, seed: int = 3) -> tuple[ov.Model, np.ndarray]:
    """x [rows, k] @ W.T with W a grouped u4 weight (zero points), NNCF's decompression in f16;
    returns the model and W's f32 values."""
    rng = np.random.default_rng(seed)
    q = rng.integers(0, 16, (n, k // gs, gs)).astype(np.uint8)
    zp = rng.integers(6, 10, (n, k // gs, 1)).astype(np.uint8)
    sc = (rng.random((n, k // gs, 1)) * 0.05 + 0.01).astype(np.float16)
    w = ops.multiply(ops.subtract(ops.convert(ops.constant(q, dtype=ov.Type.u4), "f16"),
                                  ops.convert(ops.constant(zp, dtype=ov.Type.u4), "f16")), ops.constant(sc))
    w = ops.convert(ops.reshape(w, ops.constant(np.array([n, k], np.int64)), False), "f32")
    x = ops.parameter([rows, k], np.float32, name="x")
    model = ov.Model([ops.result(ops.matmul(x, w, False, True))], [x], "int4_matmul")
    values = ((q.astype(np.float32) - zp) * sc.astype(np.float32)).reshape(n, k)
    return model, values


@pytest.mark.parametrize("rows", [1, 5, 40])
@pytest.mark.parametrize("cache", ["YES", "NO"])
def test_compiled_matmul_multiplies_the_quantized_activation(npu_core_default, rows, cache, monkeypatch):
    """On the device, every path (one row: integer kernel; a few rows: float decode kernels;
    many: the prefill kernel; with and without the weights cache) gives the product of the
    quantized f16 activation, rounded to f16; without the key, the product of the activation."""
    from ov_npu_emu_npu.device.kernels import gemv

    integer_rows = []
    runner = gemv.gemv_runner

    def spy(*args, int8_activations=False, **kw):  # type: ignore[no-untyped-def]
        run = runner(*args, int8_activations=int8_activations, **kw)
        integer_rows.append(int8_activations and run is not None)
        return run

    monkeypatch.setattr(gemv, "gemv_runner", spy)
    k, n = 256, 96
    model, w = _int4_matmul_model(rows, k, n, 128)
    x = (np.random.default_rng(rows).standard_normal((rows, k)) * 3).astype(np.float32)
    cfg = {"NPU_EMU_WEIGHTS_CACHE": cache}
    got = npu_core_default.compile_model(model, "NPU", {**cfg, **DQ}).create_infer_request().infer({"x": x})[0]
    assert any(integer_rows) is (rows == 1 and gemv.avx2())
    plain = npu_core_default.compile_model(model, "NPU", cfg).create_infer_request().infer({"x": x})[0]
    x16 = x.astype(np.float16).astype(np.float32)  # f16 mode: the input is carried in f16
    for xin, out in ((_quantized(x16), got), (x16, plain)):
        ref = xin.astype(np.float64) @ w.T.astype(np.float64)
        np.testing.assert_allclose(out, ref, rtol=2e-3, atol=2e-3 * np.abs(ref).max())
    assert np.abs(got - plain).max() > 1e-3 * np.abs(plain).max()  # the quantization shows


def test_f32_mode_keeps_float_activations(npu_core):
    """INFERENCE_PRECISION_HINT=f32 is the exactness mode: the key changes nothing there."""
    model, _ = _int4_matmul_model(1, 256, 64, 128)
    x = np.random.default_rng(2).standard_normal((1, 256)).astype(np.float32)
    a = npu_core.compile_model(model, "NPU", DQ).create_infer_request().infer({"x": x})[0]
    b = npu_core.compile_model(model, "NPU").create_infer_request().infer({"x": x})[0]
    np.testing.assert_array_equal(a, b)
    ref = cpu_reference(model, {"x": x})[0]
    assert np.abs(a - ref).max() <= 1e-4 * np.abs(ref).max()


def _act_blocks(compiled) -> set[int]:
    """The activation block of each matmul_dq task, from the descriptors the driver decoded."""
    req = compiled.create_infer_request()
    req.infer({"x": np.ones((1, 256), np.float32)})
    return {MatMulDqParams.unpack(t.params, "matmul_dq").act_block
            for t in req.impl.command_list.schedule.tasks if t.kernel == "matmul_dq"}


def test_the_blob_records_the_block_only_for_4bit_weights_in_f16(npu_core_default):
    model, _ = _int4_matmul_model(1, 256, 64, 128)
    compile_ = npu_core_default.compile_model
    assert _act_blocks(compile_(model, "NPU", DQ)) == {DQ_ACT_BLOCK}
    assert _act_blocks(compile_(model, "NPU")) == {0}
    assert _act_blocks(compile_(model, "NPU", {**DQ, "INFERENCE_PRECISION_HINT": "f32"})) == {0}


def test_the_device_lists_the_capability_npuw_looks_for():
    import ov_npu_emu

    caps = ov_npu_emu.Core().get_property("NPU", "OPTIMIZATION_CAPABILITIES")
    assert "COMPILER_DYNAMIC_QUANTIZATION" in caps
