"""Token-row windows (NPU_EMU_SKIP_PADDED_ROWS): the compiler's token-axis analysis marks the
row-wise tasks, and the device runs them on the real rows only with the full run's results.

The oracle is the same blob run without the hint (every row computed); the real rows of every
output must be bit-identical, and the row counters prove the window was applied.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest

from ov_npu_emu_npu.blob.reader import BlobReader
from ov_npu_emu_npu.compiler.pipeline import compile_to_blob
from tests.npu.conftest import padded_attention_model
from tests.npu.device.token_rows_models import E, F, P, V
from tests.npu.device.token_rows_models import int8_matmul_model as _int8_matmul_model
from tests.npu.device.token_rows_models import run_cmx as _run_cmx

FIRST = 193  # real rows start here: 63 of them and one padding row, the window is rows [192, 256)
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "optimum"

#: the row-tile geometry of these tests counts f32 (4-byte) activations
F32 = {"INFERENCE_PRECISION_HINT": "f32"}


@pytest.fixture(scope="module")
def emu_core():
    from ov_npu_emu import Core

    return Core()


def _model(token_mixing: bool = False, last_rows: int = 0) -> ov.Model:
    """Embedding -> RMS norm -> MatMul -> SiLU * MatMul (an LLM's row-wise part) on [1, P] ids.

    ``token_mixing``: also add the mean over the token axis to every row (a row-mixing op
    reading windowed values: the analysis must then mark nothing).  ``last_rows``: output only
    the last rows through a Slice (read from row P - last_rows on: the driver re-runs without
    the window when the window starts later)."""
    rng = np.random.default_rng(0)
    ids = ops.parameter([1, P], ov.Type.i64, name="input_ids")
    am = ops.parameter([1, P], ov.Type.i64, name="attention_mask")
    pos = ops.parameter([1, P], ov.Type.i64, name="position_ids")
    for p, n in ((ids, "input_ids"), (am, "attention_mask"), (pos, "position_ids")):
        p.output(0).set_names({n})
    x = ops.gather(ops.constant(rng.standard_normal((V, E)).astype(np.float32)), ids, 0)
    x = ops.add(x, ops.unsqueeze(ops.convert(pos, ov.Type.f32), ops.constant(-1)))
    ms = ops.reduce_mean(ops.multiply(x, x), ops.constant([-1]), True)
    x = ops.multiply(x, ops.divide(ops.constant(np.float32(1)), ops.sqrt(ops.add(ms, ops.constant(np.float32(1e-6))))))
    if token_mixing:
        x = ops.add(x, ops.reduce_mean(x, ops.constant([1]), True))
    w1 = ops.constant(rng.standard_normal((E, F)).astype(np.float32))
    w2 = ops.constant(rng.standard_normal((F, E)).astype(np.float32))
    h = ops.matmul(ops.swish(ops.matmul(x, w1, False, False)), w2, False, False)
    out = ops.add(h, x)
    if last_rows:
        out = ops.slice(out, ops.constant([-last_rows]), ops.constant([2**62]), ops.constant([1]), ops.constant([1]))
    out.output(0).set_names({"out"})
    mask_out = ops.convert(am, ov.Type.f32)
    mask_out.output(0).set_names({"mask_out"})
    return ov.Model([out, mask_out], [ids, am, pos], "rows")


def _rows_meta(model: ov.Model) -> list[dict | None]:
    meta = BlobReader(compile_to_blob(model, {})).meta
    return [t.get("rows") for t in meta["tasks"]]


def test_analysis_marks_the_row_wise_tasks():
    rows = _rows_meta(_model())
    marked = [r for r in rows if r is not None]
    assert marked and all(r["L"] == P for r in marked)
    # every DPU/SHAVE task of the row-wise chain is marked (the mask chain has no token input)
    meta = BlobReader(compile_to_blob(_model(), {})).meta
    kinds = {t["kernel"] for t in meta["tasks"] if t.get("rows")}
    assert {"gather", "reduce_mean", "matmul", "swish", "add"} <= kinds
    # a mean over the token axis reads the padding rows: nothing may be windowed
    assert all(r is None for r in _rows_meta(_model(token_mixing=True)))


def _run(emu_core, model: ov.Model, skip: bool):
    cm = emu_core.compile_model(model, "NPU", {"NPU_EMU_SKIP_PADDED_ROWS": "YES" if skip else "NO"})
    req = cm.create_infer_request()
    ids = np.r_[np.full(FIRST, 3), np.arange(5, 5 + P - FIRST)].astype(np.int64)[None]
    pos = np.r_[np.zeros(FIRST), np.arange(P - FIRST)].astype(np.int64)[None]
    req.infer({"input_ids": ids, "attention_mask": (np.arange(P) >= FIRST).astype(np.int64)[None],
               "position_ids": pos})
    return req, np.array(req.get_tensor("out").data)


def test_window_gives_the_full_runs_real_rows_and_counts_rows(emu_core):
    model = _model()
    _, full = _run(emu_core, model, False)
    req, ours = _run(emu_core, model, True)
    assert np.array_equal(ours[:, FIRST:], full[:, FIRST:])  # bit for bit
    w = req.impl.window
    assert req.impl.counters["windowed_inferences"] == 1 and req.impl.counters["window_reruns"] == 0
    # rows [192, 256) of 256 (the real rows from 193 and a padding row)
    assert w.windowed_tasks > 5 and w.rows_computed * 4 == w.rows_full


def test_window_reaches_back_to_a_slice_of_last_rows(emu_core):
    """The output Slice reads rows from 56 on, before the real rows: the driver starts the
    window there (it knows every last-rows Slice from the blob), so nothing runs twice; a
    driver that did not know it would see the violation and re-run without the window."""
    model = _model(last_rows=200)
    _, full = _run(emu_core, model, False)
    req, ours = _run(emu_core, model, True)
    assert req.impl.counters["window_reruns"] == 0 and req.impl.counters["windowed_inferences"] == 1
    assert req.impl.window.start == P - 200
    assert np.array_equal(ours, full)
    # the safety net: a window past the Slice's first row is caught and the inference re-run
    cm = emu_core.compile_model(model, "NPU", {"NPU_EMU_SKIP_PADDED_ROWS": "YES"})
    cm.impl.latest_window_start.clear()
    blind = cm.create_infer_request()
    ids = np.r_[np.full(FIRST, 3), np.arange(5, 5 + P - FIRST)].astype(np.int64)[None]
    pos = np.r_[np.zeros(FIRST), np.arange(P - FIRST)].astype(np.int64)[None]
    blind.infer({"input_ids": ids, "attention_mask": (np.arange(P) >= FIRST).astype(np.int64)[None],
                 "position_ids": pos})
    assert blind.impl.counters["window_reruns"] == 1
    assert np.array_equal(np.array(blind.get_tensor("out").data), full)
    # a Slice within the window keeps the window where the real rows put it
    model = _model(last_rows=50)  # rows from 206 on: real rows, inside the window
    _, full = _run(emu_core, model, False)
    req, ours = _run(emu_core, model, True)
    assert req.impl.counters["window_reruns"] == 0 and req.impl.counters["windowed_inferences"] == 1
    assert req.impl.window.start == 192
    assert np.array_equal(ours, full)


#: the per-head lowering below: a staged MatMul's row tile is (CMX / 2) // (row bytes in + out)
#: rows; with D = 32 f32 columns and a 64 KiB CMX that is 128 = L rows, one head per tile (the
#: llama-3.2-3b-shape prefill at 1024 tokens: D = 128 and the default 2 MiB CMX give 1024 = L)
HL, HH, HD, HCMX = 128, 3, 32, 64 * 1024


def _head_blocks_model() -> ov.Model:
    """Embedding -> [1, H, L, D] heads -> MatMul with a constant [D, D] (the builder's rotate-half
    as a MatMul) -> back to [1, L, H * D] + the embedding."""
    rng = np.random.default_rng(1)
    ids = ops.parameter([1, HL], ov.Type.i64, name="input_ids")
    am = ops.parameter([1, HL], ov.Type.i64, name="attention_mask")
    for p, n in ((ids, "input_ids"), (am, "attention_mask")):
        p.output(0).set_names({n})
    x = ops.gather(ops.constant(rng.standard_normal((V, HH * HD)).astype(np.float32)), ids, 0)
    q = ops.transpose(ops.reshape(x, ops.constant([1, HL, HH, HD]), False), ops.constant([0, 2, 1, 3]))
    q = ops.matmul(q, ops.constant(rng.standard_normal((HD, HD)).astype(np.float32)), False, False)
    out = ops.add(ops.reshape(ops.transpose(q, ops.constant([0, 2, 1, 3])), ops.constant([1, HL, HH * HD]), False), x)
    out.output(0).set_names({"out"})
    mask_out = ops.convert(am, ov.Type.f32)
    mask_out.output(0).set_names({"mask_out"})
    return ov.Model([out, mask_out], [ids, am], "head_blocks")


def test_per_head_block_dmas_keep_their_token_rows(emu_core):
    """A MatMul over [1, H, L, D] staged one head per row tile: each tile's result goes back by
    one DMA of a whole [L, D] block into its head's slot.  Those DMAs mark blocks of L token rows
    (read as row tiles at offset -h*L, the marks conflicted and the whole blob lost its windows,
    as the 3B-shape prefill did at 1024 tokens); window vs full run bit for bit."""
    model = _head_blocks_model()
    tasks = BlobReader(compile_to_blob(model, {"NPU_EMU_CMX_SIZE": HCMX, **F32})).meta["tasks"]
    heads = [t for t in tasks if t["kernel"] == "matmul"]
    assert len(heads) == HH  # the per-head lowering this test is about
    assert all(t.get("rows") and t["rows"]["n"] == HL and t["rows"]["off"] == 0 for t in heads)
    # the tasks after the per-head join are marked too: the transpose back and the residual add
    assert {"gather", "transpose", "add"} <= {t["kernel"] for t in tasks if t.get("rows")}

    first = 90  # real rows from here: the window is rows [64, 128)

    _, full = _run_cmx(emu_core, model, HCMX, first, False)
    req, ours = _run_cmx(emu_core, model, HCMX, first, True)
    assert req.impl.counters["windowed_inferences"] == 1 and req.impl.counters["window_reruns"] == 0
    w = req.impl.window
    assert w.windowed_tasks >= HH and w.rows_computed < w.rows_full
    assert np.array_equal(ours[:, first:], full[:, first:])


@pytest.mark.parametrize("fixture", ["llama-int4-sym-g128"])
def test_optimum_export_prefill_is_identical(emu_core, fixture):
    """A real optimum-cli export (int4 weights: matmul_dq and gather_dq) through NPUW on the
    emulated NPU: greedy ids and the prompt's KV identical with and without the window (the
    same compiled model, its prefill request told that no window fits: one compilation)."""
    from tests.npuw._oracle import F32_SUB, greedy

    base = {"NPU_USE_NPUW": "YES", "NPUW_LLM": "YES", "NPUW_LLM_MIN_RESPONSE_LEN": 64,
            "KV_CACHE_PRECISION": "f32", **F32_SUB}

    model = ov.Core().read_model(FIXTURES / fixture / "openvino_model.xml")
    prompt = json.loads((FIXTURES / fixture / "golden.json").read_text())["prompt_ids"]
    cm = emu_core.compile_model(model, "NPU", {**base, "NPUW_DEVICES": "NPU", "NPUW_LLM_MAX_PROMPT_LEN": P})
    req = cm.create_infer_request()
    impl = req.impl

    def state():
        ids, err = greedy(req, prompt, 3)
        assert err is None
        greedy(req, prompt, 2)  # prefill + one step: the prefill KV is in the buffer
        return ids, [impl.kv.seq(i, impl.variant - 1)[:, :, : len(prompt) + 1].copy() for i in range(len(impl.kv))]

    ids, kv = state()
    dev = impl._prefill.impl
    assert dev.counters["windowed_inferences"] == 2 and dev.counters["window_reruns"] == 0
    assert dev.window.windowed_tasks > 0 and dev.window.rows_computed < dev.window.rows_full * 0.75
    dev.window.unusable = True  # every row from now on
    ids_full, kv_full = state()
    assert dev.counters["windowed_inferences"] == 2 and dev.window.rows_full == 0
    assert ids == ids_full
    for a, b in zip(kv, kv_full, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)  # bit for bit


def test_attention_window_at_bench_small_shapes_is_exact():
    """bench-small's attention shapes (4 K/V heads, 2 query heads each, head 64, 1024 rows): the
    window rows are the full kernel's bit for bit.  V's rows before the window hold garbage
    (uncomputed by the row-wise tasks): they must not matter."""
    from ov_npu_emu_npu.device.kernels import RowWindow, make_kernel

    rng = np.random.default_rng(2)
    L, w0, D = 1024, 896, 64
    q = rng.standard_normal((1, 8, L, D)).astype(np.float32)
    k = rng.standard_normal((1, 4, L, D)).astype(np.float32)
    v = rng.standard_normal((1, 4, L, D)).astype(np.float32)
    allowed = np.tril(np.ones((L, L), bool))
    allowed[w0 + 3 :, : w0 + 3] = False
    allowed[: w0 + 3] = np.eye(L, dtype=bool)[: w0 + 3]
    mask = np.where(allowed, 0.0, np.finfo(np.float16).min).astype(np.float32)[None, None]
    params = np.array([0, 1, 0, 2], np.float64)
    full = np.zeros_like(q)
    make_kernel("sdpa", [q, k, v, mask], [full], params)()
    v_garbage = v.copy()
    v_garbage[..., :w0, :] = 1e30
    out = np.zeros_like(q)
    window = RowWindow()
    run = make_kernel("sdpa", [q, k, v_garbage, mask], [out], params, window)
    window.size, window.start = L, w0
    run()
    assert window.used == 1 and not window.violated
    assert np.array_equal(out[..., w0 + 3 :, :], full[..., w0 + 3 :, :])


def test_attention_mask_chain_gets_windows_from_its_readers():
    """The mask's element-wise chain has no token input, but a windowed attention reads only its
    window rows: the selects computing it are windowed along the query axis (the device-level
    window-vs-full check of this model is tests/npuw/test_npuw_prefill_ladder.py's
    test_npu_driver_window_or_rerun)."""

    meta = BlobReader(compile_to_blob(padded_attention_model(256, True), {})).meta
    # the [1,1,P,P] ops (the [1,1,1,P] padding select has no query rows to skip)
    square = [t for t in meta["tasks"] if t["kernel"] in ("select", "logical_and", "add") and t.get("rows")]
    assert {t["kernel"] for t in square} == {"select", "logical_and", "add"}
    assert all(t["rows"]["axes"][-1] == 2 and t["rows"]["off"] == 0 for t in square)


def test_compressed_weight_row_tiles_end_on_the_last_row(emu_core):
    """NPUW right-aligns a prompt in its padded prefill, so matmul_dq's row tiles end on the last
    row and the short remainder tile comes first, over padding: a window of up to one tile's
    rows runs in one tile (one product, each weight decompressed once), bit for bit the full
    run's rows."""
    cmx = 32 * 1024  # (CMX / 2) // ((E + F) * 4 bytes) = 56 rows a tile: 256 = 32 + 4 * 56
    model = _int8_matmul_model(P)
    tasks = BlobReader(compile_to_blob(model, {"NPU_EMU_CMX_SIZE": cmx, **F32})).meta["tasks"]
    tiles = sorted((t["rows"]["off"], t["rows"]["n"]) for t in tasks if t["kernel"] == "matmul_dq")
    assert tiles == [(0, 32), *((o, 56) for o in range(32, P, 56))]

    first = 210  # real rows from here: the window is rows [208, 256), inside the last tile

    _, full = _run_cmx(emu_core, model, cmx, first, False)
    req, ours = _run_cmx(emu_core, model, cmx, first, True)
    assert req.impl.counters["windowed_inferences"] == 1 and req.impl.counters["window_reruns"] == 0
    assert np.array_equal(ours[:, first:], full[:, first:])
    w = req.impl.window  # gather, tile loads, products, stores: the window's rows of each
    assert w.windowed_tasks > 0 and w.rows_computed < w.rows_full / 4, (w.rows_computed, w.rows_full)


def test_row_tiles_before_the_window_are_never_bound(emu_core, monkeypatch):
    """A row-wise task's kernel is bound when it first runs (device/windowed.py LazyRunner): a
    windowed inference binds the one matmul_dq tile it runs, a full one all five; same rows.

    A bind over a whole tile's rows is that tile's full-run kernel. A windowed tile may also bind
    one over the window's rows only (where the probe finds BLAS's trailing rows exact on this
    host): that is the same tile, not one before the window."""
    from ov_npu_emu_npu.device import engines

    model, cmx, first = _int8_matmul_model(P), 32 * 1024, 210
    tasks = BlobReader(compile_to_blob(model, {"NPU_EMU_CMX_SIZE": cmx, **F32})).meta["tasks"]
    tile_rows = {t["rows"]["n"] for t in tasks if t["kernel"] == "matmul_dq"}
    rows: list[int] = []
    cached = engines._bind_cached_dq
    monkeypatch.setattr(engines, "_bind_cached_dq",
                        lambda views, *a: (rows.append(views[0].size // E), cached(views, *a))[1])
    # the window's first use of a shape may bind the kernel on scratch operands too (windowed.py
    # _probe; its verdict is remembered process-wide): settle it first, so the test counts the
    # request's own binds whichever tests ran before it
    _run_cmx(emu_core, model, cmx, first, True)
    outs = {}
    for skip in (True, False):
        rows.clear()
        outs[skip] = _run_cmx(emu_core, model, cmx, first, skip)[1]
        whole = [r for r in rows if r in tile_rows]
        assert len(whole) == (1 if skip else 5), rows
        assert all(r < P - first + 8 for r in rows if r not in tile_rows), rows  # the window's rows
    assert np.array_equal(outs[True][:, first:], outs[False][:, first:])


def test_a_lazily_bound_tile_that_cannot_bind_fails_its_inference(emu_core, monkeypatch):
    """A kernel rejecting its operands is a corrupt descriptor: with lazy binding the inference
    that first runs the tile raises ExecutionError naming the task (not a bare numpy error)."""
    from ov_npu_emu.errors import ExecutionError
    from ov_npu_emu_npu.device import engines

    def reject(*_a, **_k):
        raise ValueError("operand shape does not fit")

    make = engines.make_kernel
    monkeypatch.setattr(engines, "_bind_cached_dq", reject)
    monkeypatch.setattr(engines, "make_kernel", lambda name, *a, **k: (
        reject() if name == "matmul_dq" else make(name, *a, **k)))
    with pytest.raises(ExecutionError, match=r"task \d+ \(matmul_dq\): cannot bind operands"):
        _run_cmx(emu_core, _int8_matmul_model(P), 32 * 1024, 210, True)
