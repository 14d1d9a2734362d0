"""matmul_dq reads the weight as stored: decode shapes by kernels/gemv.py, prefill shapes (more
rows) by kernels/gemm.py (blocks of decompressed output channels and BLAS). Each weight format
against the CPU plugin, the row limit of the gemv path, and the kernels against numpy on the
decompressed weight (specials, NNCF's f16 multiply, signed zero points).

Tolerances: the kernels decompress to the same f32 (or f16-rounded) weight values as the IR
and only sum in another order (one activation row times an 8-/4-bit weight applies each group's
scale to its sum of x * (q - zp): one more rounding per group), so any order's bound applies:
|err| <= K * eps32 * (|x| @ |W|.T) (numpy checks); against the CPU plugin the suite's F32_TOL
(1e-4 of the output scale)."""

from __future__ import annotations

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops

from ov_npu_emu_npu.blob.format import WEIGHT_FORMATS
from ov_npu_emu_npu.blob.kernel_params import MatMulDqParams
from ov_npu_emu_npu.device.kernels.dequant import STORED_FORMAT_MAX_ROWS as MAX_ROWS
from ov_npu_emu_npu.device.kernels.dequant import dequantize, stored_format_matmul
from ov_npu_emu_npu.device.kernels.gemm import GEMM_BLOCK_BYTES, gemm_runner
from ov_npu_emu_npu.device.kernels.gemv import gemv_runner
from tests.npu.conftest import F32_TOL, compressed_weight, cpu_reference, rel_err

EPS32 = float(np.finfo(np.float32).eps)


def _grouped(rng, kind: str, n: int, k: int) -> ov.Output:
    """Grouped 4-bit layouts beyond test_compressed_weights' set (f16 math as NNCF, f32 scales)."""
    if kind == "i4-sym-g32":  # NNCF int4 --sym: i4 [N,G,gs] -> f16 × f16 scale -> Reshape -> f32
        q = rng.integers(-8, 8, (n, k // 32, 32)).astype(np.int8)
        sc = (rng.random((n, k // 32, 1)) * 0.05).astype(np.float16)
        y = ops.multiply(ops.convert(ops.constant(q, dtype=ov.Type.i4), "f16"), ops.constant(sc))
    else:  # "u4-asym-g64-f32": u4 with a u4 zero point per group, f32 math and f32 scales
        q = rng.integers(0, 16, (n, k // 64, 64)).astype(np.uint8)
        zp = rng.integers(0, 16, (n, k // 64, 1)).astype(np.uint8)
        sc = (rng.random((n, k // 64, 1)) * 0.05).astype(np.float32)
        y = ops.multiply(ops.subtract(ops.convert(ops.constant(q, dtype=ov.Type.u4), "f32"),
                                      ops.convert(ops.constant(zp, dtype=ov.Type.u4), "f32")), ops.constant(sc))
    return ops.convert(ops.reshape(y, ops.constant(np.array([n, k], np.int64)), False), "f32").output(0)


KINDS = ["f16", "u8-asym", "i8-sym", "u4-asym-g8", "i4-cw", "i4-sym-g32", "u4-asym-g64-f32"]


@pytest.mark.parametrize("kind", KINDS)
def test_each_weight_format_matches_cpu(npu_core, kind):
    """1 and 16 rows against the CPU plugin, on a small weight (one thread) and one big enough
    to be split over the cores; none of them takes a decompressed-weights cache entry."""
    rng = np.random.default_rng(11)
    k = 256
    grouped = kind in ("i4-sym-g32", "u4-asym-g64-f32")
    make = _grouped if grouped else (lambda r, kd, n, kk: compressed_weight(r, kd, n, kk)[0])
    small, big = make(rng, kind, 48, k), make(rng, kind, 1024, k)  # big: 1024*256 = 2**18 elements
    xs = [ops.parameter([1, m, k], np.float32, name=f"x{m}") for m in (1, MAX_ROWS)]
    outs = [ops.result(ops.matmul(x, w, False, True)) for x in xs for w in (small, big)]
    m = ov.Model(outs, xs, "gemv")
    feed = {f"x{m_}": rng.standard_normal((1, m_, k)).astype(np.float32) for m_ in (1, MAX_ROWS)}
    cm = npu_core.compile_model(m, "NPU", {"NPU_EMU_WEIGHTS_CACHE": "YES"})
    assert sum(t["kernel"] == "matmul_dq" for t in cm.impl.parsed.meta["tasks"]) == 4
    got = cm.create_infer_request().infer(feed)
    for i, ref in enumerate(cpu_reference(m, feed)):
        assert rel_err(np.array(got[i]), ref) <= F32_TOL, f"output {i}"
    assert len(cm.impl.parsed.weights_cache) == 0  # read as stored: nothing decompressed


def test_more_rows_take_the_decompressing_path(npu_core):
    """MAX_ROWS + 1 rows: BLAS on the decompressed (cached) weight, same values."""
    rng = np.random.default_rng(5)
    w, _ = compressed_weight(rng, "u8-asym", 64, 128)
    x = ops.parameter([1, MAX_ROWS + 1, 128], np.float32, name="x")
    m = ov.Model([ops.result(ops.matmul(x, w, False, True))], [x], "prefill")
    feed = {"x": rng.standard_normal((1, MAX_ROWS + 1, 128)).astype(np.float32)}
    cm = npu_core.compile_model(m, "NPU", {"NPU_EMU_WEIGHTS_CACHE": "YES"})
    out = np.array(cm.create_infer_request().infer(feed)[0])
    assert rel_err(out, cpu_reference(m, feed)[0]) <= F32_TOL
    assert len(cm.impl.parsed.weights_cache) == 1


def _random_codes(rng, name: str, signed_zp: bool, n: int, k: int, gs: int):
    """Random u8/i8/u4/i4 codes [n, k // gs, gs (or gs / 2 bytes)] with zero points (i8 when
    ``signed_zp``) and f32 scales that are not f16-exact, in one fixed draw order."""
    four = name.endswith("4")
    vals = rng.integers(0, 16 if four else 256, (n, k // gs, gs)).astype(np.uint8)
    q = (vals[..., 0::2] | (vals[..., 1::2] << 4)).astype(np.uint8) if four else vals
    if name == "i8":
        q = q.view(np.int8)
    lim = 8 if four else 100
    zp = rng.integers(-lim if signed_zp else 0, lim, (n, k // gs, 1)).astype(np.int8 if signed_zp else np.uint8)
    scale = (rng.random((n, k // gs, 1)) * 0.037 + 1e-3).astype(np.float32)
    return q, scale, zp


def _check(name, x, q, scale, zp, mul_f16=False):
    n, k = q.shape[0], x.shape[1]
    out = np.full((x.shape[0], n), np.nan, np.float32)
    run = gemv_runner(name, x, q, scale, zp, out, k, mul_f16)
    assert run is not None
    run()
    w = (q if name == "f32" else dequantize(WEIGHT_FORMATS[name], q, scale, zp, mul_f16, k)).astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        ref = x.astype(np.float64) @ w.T
        bound = k * EPS32 * (np.abs(x.astype(np.float64)) @ np.abs(w).T)
    finite = np.isfinite(ref)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    np.testing.assert_array_equal(out[~finite & ~np.isnan(ref)], ref[~finite & ~np.isnan(ref)])
    assert np.all(np.abs(out[finite] - ref[finite]) <= bound[finite] + 1e-30)
    return out


@pytest.mark.parametrize("rows", [1, 3])
def test_f16_specials_convert_exactly(rows):
    """Subnormal, inf and NaN halves: the kernel's conversion is the exact one (numpy's)."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((40, 64)).astype(np.float16)
    w[0, :8] = np.float16(6e-8)  # subnormal
    w[1, 3], w[2, 5], w[3, 0] = np.inf, -np.inf, np.nan
    x = np.abs(rng.standard_normal((rows, 64))).astype(np.float32)
    out = _check("f16", x, w, None, None)
    assert np.isnan(out[:, 3]).all() and (out[:, 1] == np.inf).all() and (out[:, 2] == -np.inf).all()
    # the subnormal row: 6e-8 survives as f32 (a flush to zero would drop 8 terms)
    ref0 = x.astype(np.float64) @ w[0].astype(np.float64)
    assert np.allclose(out[:, 0], ref0, rtol=1e-5)


@pytest.mark.parametrize("rows", [1, 4])
@pytest.mark.parametrize(("name", "signed_zp"), [("u8", False), ("i8", True), ("u4", False), ("i4", True)])
def test_integer_formats_with_f16_math_and_signed_zero_points(rows, name, signed_zp):
    """NNCF's f16 multiply (scale rounded to f16, product rounded to f16) and i8 zero points, in
    the one-row (fused) and multi-row (decompressed row) loops."""
    rng = np.random.default_rng(1)
    n, k, gs = 24, 128, 32
    q, scale, zp = _random_codes(rng, name, signed_zp, n, k, gs)
    x = rng.standard_normal((rows, k)).astype(np.float32)
    exact = _check(name, x, q, scale, zp, mul_f16=False)
    rounded = _check(name, x, q, scale, zp, mul_f16=True)
    assert not np.array_equal(exact, rounded)  # the f16 rounding is applied, not ignored


def test_shapes_the_path_does_not_take():
    x = np.ones((1, 64), np.float32)
    q = np.zeros((8, 2, 16), np.uint8)  # u4: 2 groups of 32 nibbles
    scale = np.ones((8, 2, 1), np.float16)
    assert gemv_runner("u4", x, q, scale, None, np.empty((1, 8), np.float32), 64) is not None
    assert gemv_runner("u4", x, q, None, None, np.empty((1, 8), np.float32), 64) is None  # no scale
    assert gemv_runner("u4", x, q, scale[:, :1], None, np.empty((1, 8), np.float32), 64) is None  # odd scale
    many = np.ones((MAX_ROWS + 1, 64), np.float32)
    assert gemv_runner("u4", many, q, scale, None, np.empty((MAX_ROWS + 1, 8), np.float32), 64) is None


@pytest.mark.parametrize("kind", KINDS)
def test_prefill_rows_each_weight_format_match_cpu(npu_core, kind, monkeypatch):
    """More rows than the gemv path takes, with no decompressed-weights cache (a model over its
    budget): blocks of decompressed output channels through BLAS, against the CPU plugin, on a
    small weight (one thread) and one split over the cores."""
    from ov_npu_emu_npu.device.kernels import gemm

    made = []
    monkeypatch.setattr(gemm, "gemm_runner", lambda *a, **kw: made.append(a[0]) or gemm_runner(*a, **kw))
    rng = np.random.default_rng(12)
    k, rows = 256, 3 * MAX_ROWS
    grouped = kind in ("i4-sym-g32", "u4-asym-g64-f32")
    make = _grouped if grouped else (lambda r, kd, n, kk: compressed_weight(r, kd, n, kk)[0])
    small, big = make(rng, kind, 48, k), make(rng, kind, 1024, k)
    x = ops.parameter([1, rows, k], np.float32, name="x")
    m = ov.Model([ops.result(ops.matmul(x, w, False, True)) for w in (small, big)], [x], "gemm")
    feed = {"x": rng.standard_normal((1, rows, k)).astype(np.float32)}
    cm = npu_core.compile_model(m, "NPU", {"NPU_EMU_WEIGHTS_CACHE": "NO"})
    got = cm.create_infer_request().infer(feed)
    assert len(made) == 2  # both products took the block kernel
    for i, ref in enumerate(cpu_reference(m, feed)):
        assert rel_err(np.array(got[i]), ref) <= F32_TOL, f"output {i}"


@pytest.mark.parametrize("mul_f16", [False, True])
@pytest.mark.parametrize(("name", "signed_zp"), [("f16", False), ("u8", False), ("i8", True), ("u4", False),
                                                 ("i4", True)])
def test_gemm_matches_numpy_on_the_decompressed_weight(name, signed_zp, mul_f16):
    """The block kernel decompresses to dequantize()'s values (NNCF's f16 multiply, signed zero
    points) and BLAS sums them: within any summation order's bound of the exact product (BLAS
    on a block of N may sum in another order than on the whole weight at the edges). N spans
    several blocks and a partial one, on the split path."""
    rng = np.random.default_rng(2)
    k, gs, rows = 512, 64, MAX_ROWS + 5
    n = 3 * (GEMM_BLOCK_BYTES // (4 * k)) + 7
    scale = zp = None
    if name == "f16":
        q = rng.standard_normal((n, k)).astype(np.float16)
    else:
        q, scale, zp = _random_codes(rng, name, signed_zp, n, k, gs)
    x = rng.standard_normal((rows, k)).astype(np.float32)
    out = np.full((rows, n), np.nan, np.float32)
    run = gemm_runner(name, x, q, scale, zp, out, k, mul_f16)
    assert run is not None
    run()
    w = dequantize(WEIGHT_FORMATS[name], q, scale, zp, mul_f16, k).astype(np.float64)
    ref = x.astype(np.float64) @ w.T
    bound = k * EPS32 * (np.abs(x.astype(np.float64)) @ np.abs(w).T)
    assert np.all(np.abs(out - ref) <= bound)
    if mul_f16 and name != "f16":  # the f16 rounding is applied, not ignored
        w32 = dequantize(WEIGHT_FORMATS[name], q, scale, zp, False, k).astype(np.float64)
        assert not np.all(np.abs(out - x.astype(np.float64) @ w32.T) <= bound)


def test_a_row_tile_outside_the_token_window_computes_nothing():
    """A prefill row tile left of the real tokens is bound with no rows: its runner neither
    decompresses nor writes (it used to decompress the whole weight for nothing)."""
    k, n = 64, 8
    q = np.zeros((n, 2, 16), np.uint8)
    scale = np.ones((n, 2, 1), np.float16)
    params = MatMulDqParams(False, True, WEIGHT_FORMATS["u4"], False, False, n, k)
    out = np.full((1, 0, n), 7.0, np.float32)
    run = stored_format_matmul([np.zeros((1, 0, k), np.float32), q, scale], [out], params)
    assert run is not None and run() is None
    assert gemm_runner("u4", np.zeros((0, k), np.float32), q, scale, None, np.empty((0, n), np.float32), k) is None


@pytest.mark.parametrize("parallel", [True, False], ids=["numba_threads", "thread_pool"])
@pytest.mark.parametrize("rows", [1, 3])
def test_f32_gemv_bits_do_not_depend_on_the_column_cut_or_row_pitch(rows, parallel, monkeypatch):
    """The f32 format (the matmul kernel's decode path): within any summation order's bound of
    the exact product, and every output column bit for bit the same whether the weight is whole
    (split over the cores by numba's parallel loop, or by the thread pool where that layer is
    missing), cut into tiles, or a column slice of a wider array (K-split chunks): the host
    fusion's product relies on it to have the tiles' bits."""
    from ov_npu_emu_npu.device.kernels import gemv

    if parallel and not gemv.parallel_loops():
        pytest.skip("numba's TBB threading layer is not available here (or one core)")
    monkeypatch.setattr(gemv, "_PARALLEL", parallel)
    rng = np.random.default_rng(4)
    n, k = 3500, 300  # 1.05M elements: the whole product is split over the cores (_PAR_MIN_ELEMENTS, _POOL_MIN_F32)
    wide_w = rng.standard_normal((n, k + 40)).astype(np.float32)
    wide_x = rng.standard_normal((rows, k + 40)).astype(np.float32)
    w, x = np.ascontiguousarray(wide_w[:, 17:17 + k]), np.ascontiguousarray(wide_x[:, 17:17 + k])
    whole = _check("f32", x, w, None, None)
    split = gemv.gemv_runner("f32", x, w, None, None, np.empty_like(whole), k)
    assert getattr(split, "func", None) is (gemv._gemv_f32_par if parallel else None)
    tiled = np.full_like(whole, np.nan)
    for n0 in range(0, n, 86):  # tiles of 86 columns, as the compiler's CMX tiles
        run = gemv_runner("f32", x, w[n0:n0 + 86], None, None, tiled[:, n0:n0 + 86], k)
        assert run is not None
        run()
    strided = np.full((rows, n + 5), np.nan, np.float32)
    run = gemv_runner("f32", wide_x[:, 17:17 + k], wide_w[:, 17:17 + k], None, None, strided[:, 5:], k)
    assert run is not None
    run()
    np.testing.assert_array_equal(tiled, whole)
    np.testing.assert_array_equal(strided[:, 5:], whole)


@pytest.mark.parametrize("gs", [64, 128])
@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("name", ["f16", "u8", "i8", "u4", "i4"])
def test_numba_threads_give_the_one_thread_bits(name, rows, gs, monkeypatch):
    """Each stored format split over numba's threads (blocks of _PAR_BLOCK channels, a partial
    last one) gives the bits of the whole product on one thread, in both the one-row and the
    multi-row loops (groups of 64 and 128: the 8- and 16-lane one-row loops on AVX-512)."""
    from ov_npu_emu_npu.device.kernels import gemv

    if not gemv.parallel_loops():
        pytest.skip("numba's TBB threading layer is not available here (or one core)")
    rng = np.random.default_rng(8)
    n, k = 1000, 256  # 256k elements: over _PAR_MIN_ELEMENTS and _PAR_MIN_GROUPED
    if name == "f16":
        q, scale, zp = rng.standard_normal((n, k)).astype(np.float16), None, None
    else:
        q, scale, zp = _random_codes(rng, name, name == "i8", n, k, gs)
    x = rng.standard_normal((rows, k)).astype(np.float32)
    out = np.full((rows, n), np.nan, np.float32)
    run = gemv_runner(name, x, q, scale, zp, out, k)
    kern = gemv._gemv_kernel(name, x, q, scale, zp, out, k, False)[0]
    if kern not in gemv._PREPARE:  # (else a closure: it copies the activation for the kernel first)
        assert run.func is gemv._PARALLEL_OF[kern]
    run()
    monkeypatch.setattr(gemv, "_PARALLEL", False)
    monkeypatch.setattr(gemv, "_SPLIT_MIN_ELEMENTS", 1 << 40)  # the pool off too: one thread
    one = np.full_like(out, np.nan)
    gemv_runner(name, x, q, scale, zp, one, k)()
    np.testing.assert_array_equal(out, one)


@pytest.mark.parametrize("rows", [1, MAX_ROWS])
def test_f32_decode_matmul_takes_gemv_and_matches_cpu(npu_core, rows, monkeypatch):
    """An f32 weight MatMul with few rows runs the gemv kernel (both the tiles and the fused
    product), against the CPU plugin; more rows keep BLAS."""
    from ov_npu_emu_npu.device.kernels import gemv

    taken = []
    real = gemv.gemv_runner
    monkeypatch.setattr(gemv, "gemv_runner", lambda name, *a, **kw: taken.append(name) or real(name, *a, **kw))
    rng = np.random.default_rng(6)
    k, n = 320, 1024
    x = ops.parameter([1, rows, k], np.float32, name="x")
    w = ops.constant(rng.standard_normal((n, k)).astype(np.float32))
    m = ov.Model([ops.result(ops.matmul(x, w, False, True))], [x], "f32gemv")
    feed = {"x": rng.standard_normal((1, rows, k)).astype(np.float32)}
    got = np.array(npu_core.compile_model(m, "NPU").create_infer_request().infer(feed)[0])
    assert rel_err(got, cpu_reference(m, feed)[0]) <= F32_TOL
    assert taken and set(taken) == {"f32"}
    taken.clear()
    x_more = ops.parameter([1, MAX_ROWS + 1, k], np.float32, name="x")
    more = ov.Model([ops.result(ops.matmul(x_more, w, False, True))], [x_more], "f32gemm")
    npu_core.compile_model(more, "NPU").create_infer_request()
    assert taken == []


def test_requests_on_several_host_threads_give_the_one_thread_bits(npu_core, monkeypatch):
    """Decode products split over numba's threads, launched from four host threads at once
    (four requests of one compiled model, f32 and f16 weights): every result is the one a lone
    request gives, bit for bit (the TBB layer takes concurrent launches; no shared scratch)."""
    import threading

    from ov_npu_emu_npu.device.kernels import gemv

    runners = []
    real = gemv.gemv_runner
    monkeypatch.setattr(gemv, "gemv_runner", lambda *a, **kw: runners.append(real(*a, **kw)) or runners[-1])
    rng = np.random.default_rng(12)
    k, n = 320, 1024  # 327k weight elements: over _PAR_MIN_ELEMENTS
    x = ops.parameter([1, 1, k], np.float32, name="x")
    w32 = ops.constant(rng.standard_normal((n, k)).astype(np.float32))
    w16 = ops.convert(ops.constant(rng.standard_normal((k, n)).astype(np.float16)), "f32")
    h = ops.matmul(x, w32, False, True)  # [1, 1, n]
    m = ov.Model([ops.result(ops.matmul(h, w16, False, True))], [x], "threads")  # [1, 1, k]
    cm = npu_core.compile_model(m, "NPU")
    feeds = [{"x": rng.standard_normal((1, 1, k)).astype(np.float32)} for _ in range(4)]
    alone = [np.array(cm.create_infer_request().infer(f)[0]) for f in feeds]
    if gemv.parallel_loops():  # both weights' products run on numba's threads
        par = {getattr(r, "func", None) for r in runners}
        assert {gemv._gemv_f32_par, gemv._gemv_f16_par} <= par
    got: list[list[np.ndarray]] = [[] for _ in feeds]

    def work(i: int) -> None:
        req = cm.create_infer_request()
        for _ in range(25):
            got[i].append(np.array(req.infer(feeds[i])[0]))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(feeds))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, ref in enumerate(alone):
        assert len(got[i]) == 25
        for r in got[i]:
            np.testing.assert_array_equal(r, ref)


@pytest.mark.parametrize("layer", ["workqueue", "omp"])
def test_other_threading_layers_keep_the_thread_pool(layer, monkeypatch):
    """numba's workqueue layer aborts the process on concurrent launches and GNU OpenMP in a
    forked child: on either, products are split by the thread pool (the same bits)."""
    import numba

    from ov_npu_emu_npu.device.kernels import gemv

    monkeypatch.setattr(gemv, "_PARALLEL", None)
    monkeypatch.setattr(numba, "threading_layer", lambda: layer)
    assert gemv.parallel_loops() is False
    rng = np.random.default_rng(13)
    w = rng.standard_normal((2048, 256)).astype(np.float16)  # 2^19 elements: the pool splits it
    x = rng.standard_normal((1, 256)).astype(np.float32)
    run = gemv_runner("f16", x, w, None, None, np.empty((1, 2048), np.float32), 256)
    assert getattr(run, "func", None) is None  # the pool's closure, not a numba parallel twin
    _check("f16", x, w, None, None)


@pytest.mark.parametrize(("name", "gs"), [("u4", 32), ("i4", 128), ("u4", 256), ("i4", 64)])
def test_one_row_4bit_takes_the_vector_ir_row_and_stays_in_bound(name, gs, monkeypatch):
    """Without AVX-512, one activation row times a 4-bit weight runs a vector IR row: groups of
    a multiple of 64 codes :func:`gemv._q4_dword_row_dot` (nibbles in 32-bit lanes), others
    of a multiple of 2 x Q4_ROW_STEP codes :func:`gemv._q4_row_dot` (byte lanes).  The
    kernel's outputs are that function's bits, row by row, and within the order-free bound of
    the exact product."""
    from numba import njit

    from ov_npu_emu_npu.device.kernels import gemv

    monkeypatch.setattr(gemv, "avx512", lambda: False)
    rng = np.random.default_rng(11)
    n, k = 40, 512
    q, scale, zp = _random_codes(rng, name, False, n, k, gs)
    if name == "i4":
        zp = None
    x = rng.standard_normal((1, k)).astype(np.float32)
    out = _check(name, x, q, scale, zp)  # the runner, against the bound

    @njit
    def rows(x_split, qb, s_rows, z_rows, gh, flip):  # type: ignore[no-untyped-def]
        res = np.empty(qb.shape[0], np.float32)
        half = x_split.shape[1] // 2
        xs8 = gemv._lane_sums(x_split[0, :half], x_split[0, half:], qb.shape[1], gh)
        for r in range(qb.shape[0]):
            res[r] = gemv._q4_row_dot(x_split[0, :half], x_split[0, half:], xs8, qb[r], s_rows[r], z_rows[r], gh,
                                      flip)
        return res

    @njit
    def dword_rows(x_perm, qb, s_rows, z_rows, gh, flip):  # type: ignore[no-untyped-def]
        res = np.empty(qb.shape[0], np.float32)
        xs8 = gemv._block_lane_sums(x_perm[0], qb.shape[1], 2 * gh)
        for r in range(qb.shape[0]):
            res[r] = gemv._q4_dword_row_dot(x_perm[0], xs8, qb[r], s_rows[r], z_rows[r], gh, flip)
        return res

    z = np.full((n, k // gs), 8.0 if name == "i4" else 0.0, np.float32)
    if zp is not None:
        z += zp[..., 0]
    flip = np.uint8(0x88 if name == "i4" else 0)
    operands = (q.view(np.uint8), np.ascontiguousarray(scale[..., 0]), z, gs // 2, flip)
    x_in = np.empty_like(x)
    if (gs // 2) % gemv.Q4_DWORD_STEP == 0:
        gemv._permute_block_columns(x, x_in)
        got = dword_rows(x_in, *operands)
    else:
        gemv._split_columns(x, x_in)
        got = rows(x_in, *operands)
    np.testing.assert_array_equal(out[0], got)


def _needs_avx512() -> None:
    from ov_npu_emu_npu.device.kernels import gemv

    if not gemv.avx512():
        pytest.skip("numba does not target AVX-512 here: the 16-lane rows are not used")


@pytest.mark.parametrize("mul_f16", [False, True])
@pytest.mark.parametrize(("name", "gs", "with_zp"), [("u4", 128, True), ("i4", 128, False), ("u4", 256, False),
                                                     ("i4", 512, True)])
def test_one_row_4bit_takes_the_table_row_and_stays_in_bound(name, gs, with_zp, mul_f16):
    """On AVX-512, one activation row times a 4-bit weight whose group is a multiple of 128
    codes runs :func:`gemv._q4_lut_row_dot` (each group's 16-entry table of decompressed
    weights): the kernel's outputs are that function's bits row by row, within the order-free
    bound of the exact product, with and without zero points and NNCF's f16 multiply."""
    from numba import njit

    from ov_npu_emu_npu.device.kernels import gemv

    _needs_avx512()
    rng = np.random.default_rng(12)
    n, k = 40, 1024
    q, scale, zp = _random_codes(rng, name, False, n, k, gs)
    zp = zp if with_zp else None
    x = rng.standard_normal((1, k)).astype(np.float32)
    out = np.empty((1, n), np.float32)
    assert gemv._gemv_kernel(name, x, q, scale, zp, out, k, mul_f16)[0] is gemv._gemv_q4_lut
    out = _check(name, x, q, scale, zp, mul_f16)

    @njit
    def rows(xp, qb, s_rows, z_rows, codes, rounded):  # type: ignore[no-untyped-def]
        res = np.empty(qb.shape[0], np.float32)
        for r in range(qb.shape[0]):
            if rounded:
                res[r] = gemv._q4_lut_row_dot(xp, qb[r], s_rows[r], z_rows[r], codes, True)
            else:
                res[r] = gemv._q4_lut_row_dot(xp, qb[r], s_rows[r], z_rows[r], codes, False)
        return res

    xp = np.empty_like(x)
    gemv._permute_columns(x, xp)
    flip = 8 if name == "i4" else 0
    z = np.full((n, k // gs), float(flip), np.float32)
    if zp is not None:
        z += zp[..., 0]
    s = scale[..., 0].astype(np.float16).astype(np.float32) if mul_f16 else np.ascontiguousarray(scale[..., 0])
    codes = (np.arange(16) ^ flip).astype(np.float32)
    np.testing.assert_array_equal(out[0], rows(xp[0], q.view(np.uint8), s, z, codes, mul_f16))


@pytest.mark.parametrize("mul_f16", [False, True])
@pytest.mark.parametrize(("name", "signed_zp", "gs"), [("u8", False, 64), ("i8", True, 128), ("i8", False, 512),
                                                       ("u8", True, 1024)])
def test_one_row_8bit_takes_the_16_lane_row_and_stays_in_bound(name, signed_zp, gs, mul_f16):
    """On AVX-512, one activation row times an 8-bit weight whose group is a multiple of 64
    runs :func:`gemv._gemv_q8_lanes`, within the order-free bound of the exact product (u8 and
    i8 codes, u8 and i8 zero points, channel-wise and grouped, NNCF's f16 multiply)."""
    from ov_npu_emu_npu.device.kernels import gemv

    _needs_avx512()
    rng = np.random.default_rng(13)
    n, k = 300, 1024
    q, scale, zp = _random_codes(rng, name, signed_zp, n, k, gs)
    x = rng.standard_normal((1, k)).astype(np.float32)
    assert gemv._gemv_kernel(name, x, q, scale, zp, np.empty((1, n), np.float32), k, mul_f16)[0] is gemv._gemv_q8_lanes
    exact = _check(name, x, q, scale, zp, mul_f16)
    if name == "i8":
        _check(name, x, q, scale, None, mul_f16)
    if mul_f16:  # the same weights, each summed in another order
        assert not np.array_equal(exact, _check(name, x, q, scale, zp, False))


@pytest.mark.parametrize("features", ["+avx2,+fma,-avx512f", "+avx2,+avx512f,+avx512bw"])
def test_16_lane_loops_follow_the_features_numba_compiles_for(features, monkeypatch, request):
    """NUMBA_CPU_FEATURES (numba's own setting) decides: without +avx512f the one-row 4- and
    8-bit products keep the 8-lane loops, with it they take the 16-lane ones."""
    from numba.core import config

    from ov_npu_emu_npu.device.kernels import gemv

    monkeypatch.setattr(config, "CPU_FEATURES", features, raising=False)
    gemv._jit_features.cache_clear()
    request.addfinalizer(gemv._jit_features.cache_clear)  # the host's features again after the test
    wide = "+avx512f" in features.split(",")
    assert gemv.avx512() is wide
    rng = np.random.default_rng(14)
    x = rng.standard_normal((1, 256)).astype(np.float32)
    out = np.empty((1, 8), np.float32)
    for name, lanes, narrow in (("u4", gemv._gemv_q4_lut, gemv._gemv_q4_dw),
                                ("u8", gemv._gemv_q8_lanes, gemv._gemv_q8)):
        q, scale, zp = _random_codes(rng, name, False, 8, 256, 128)
        assert gemv._gemv_kernel(name, x, q, scale, zp, out, 256, False)[0] is (lanes if wide else narrow)


def test_activation_copies_start_on_a_line():
    """The 16-lane loops' activation copies start on a 64-byte line (no split loads)."""
    from ov_npu_emu_npu.device.kernels import gemv

    for shape in ((1, 7), (1, 2048), (3, 100)):
        a = gemv._line_aligned(shape)
        assert a.shape == shape and a.dtype == np.float32 and a.ctypes.data % gemv.LANE_BYTES == 0


@pytest.mark.parametrize(("name", "gs"), [("u4", 32), ("i4", 128), ("u4", 256)])
@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan])
@pytest.mark.parametrize("n", [40, 4096])
def test_one_row_4bit_non_finite_activation(name, gs, value, n, monkeypatch):
    """The vector IR rows take the zero point out of the sum (``x * code - z * sum(x)``); an
    infinite or NaN activation would make that inf - inf, so such a row runs the per-weight
    loop: the exact product's infinities and NaNs, on one thread and on the parallel path."""
    from ov_npu_emu_npu.device.kernels import gemv

    monkeypatch.setattr(gemv, "avx512", lambda: False)
    rng = np.random.default_rng(12)
    k = 512
    q, scale, zp = _random_codes(rng, name, False, n, k, gs)
    if name == "i4":
        zp = None
    x = rng.standard_normal((1, k)).astype(np.float32)
    x[0, 77] = value
    _check(name, x, q, scale, zp)
