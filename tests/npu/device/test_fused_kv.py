"""NPU_EMU_FUSE_KV: attention reading an f16 past KV as one sdpa_kv task has the unfused tasks' bits.

The fused kernel converts only the past rows the mask leaves open and proves the closed ones add
exact zeros (kernels/attention.py, ``_sdpa_kv``); whenever that proof fails (infinities or NaNs
anywhere, a row with no open column, an exact-zero output) it takes the unfused path for that
run.  Every case runs a sequence of inferences on one request (open windows growing, shrinking,
empty) with the fusion on and off and compares the outputs bit for bit, and with the CPU plugin.
"""

from __future__ import annotations

import numpy as np
import openvino as ov
import pytest

from tests.npu.conftest import cpu_reference, rel_err
from tests.npu.device.kv_models import kv_attention_model, kv_feed

#: open past slots per inference: growing, all, shrinking (rows the kernel holds are zeroed), none
WINDOWS = (0, 5, 30, 47, 12, 1, 0)


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    return a.view(np.uint16 if a.dtype == np.float16 else np.uint32)


def _assert_same_bits(a: np.ndarray, b: np.ndarray) -> None:
    """Equal bit for bit (the sign of zeros too); NaNs only where the other has a NaN."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    nan = np.isnan(a)
    np.testing.assert_array_equal(nan, np.isnan(b))
    np.testing.assert_array_equal(_bits(a)[~nan], _bits(b)[~nan])


def _requests(npu_core, model: ov.Model, config: dict | None = None):
    cfg = config or {}
    on = npu_core.compile_model(model, "NPU", {**cfg, "NPU_EMU_FUSE_KV": "YES"}).create_infer_request()
    off = npu_core.compile_model(model, "NPU", {**cfg, "NPU_EMU_FUSE_KV": "NO"}).create_infer_request()
    return on, off


def _run(req, feed: dict[str, np.ndarray]) -> np.ndarray:
    return np.array(req.infer(feed)[0])


@pytest.mark.parametrize("mask", ["min", "inf", "bool"])
@pytest.mark.parametrize(("heads", "hkv", "new", "expand"), [(8, 2, 1, True), (4, 4, 1, False), (8, 2, 3, True)],
                         ids=["gqa_decode", "mha_decode", "gqa_3_tokens"])
def test_fused_matches_unfused_over_windows(npu_core, mask, heads, hkv, new, expand):
    model = kv_attention_model(heads, hkv, 47, new, mask_type=ov.Type.boolean if mask == "bool" else ov.Type.f32,
                               expand=expand)
    on, off = _requests(npu_core, model)
    for i, used in enumerate(WINDOWS):
        feed = kv_feed(heads, hkv, 47, new, used=used, seed=i, mask=mask)
        a, b = _run(on, feed), _run(off, feed)
        _assert_same_bits(a, b)
        assert rel_err(a, cpu_reference(model, feed)[0]) <= 1e-5


@pytest.mark.parametrize("mask", ["min", "inf", "-1e4"])
def test_large_values_keep_the_bits(npu_core, mask):
    """K/V near f16's largest magnitude: the bound on the scores grows with max|K|; a closed
    column the proof can no longer shut (a -1e4 mask against scores of ~1e5) takes the
    unfused path, where the real K rows do reach the softmax."""
    model = kv_attention_model()
    on, off = _requests(npu_core, model)
    for i, used in enumerate(WINDOWS):
        feed = kv_feed(used=used, seed=10 + i, big=True, mask=mask)
        feed["q"] *= 1e4  # scores beyond f32's range: infinities and NaNs both ways
        _assert_same_bits(_run(on, feed), _run(off, feed))
        feed = kv_feed(used=used, seed=20 + i, big=True, mask=mask)
        _assert_same_bits(_run(on, feed), _run(off, feed))


@pytest.mark.parametrize("mask", ["min", "bool"])
@pytest.mark.parametrize("where", ["closed_k", "closed_v", "open", "new", "query"])
@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan])
def test_infinities_and_nans_take_the_unfused_path(npu_core, mask, where, value):
    """A closed row's infinity or NaN reaches the unfused result (q·inf, 0·inf): the fused
    kernel scans the closed rows it does not convert and takes the unfused path then."""
    model = kv_attention_model(mask_type=ov.Type.boolean if mask == "bool" else ov.Type.f32)
    on, off = _requests(npu_core, model)
    for i, used in enumerate((10, 3, 20)):
        feed = kv_feed(used=used, seed=30 + i, mask=mask)
        if where == "closed_k":
            feed["past_key"][0, 1, 40, 3] = value
        elif where == "closed_v":
            feed["past_value"][0, 0, 35, 7] = value
        elif where == "open":
            feed["past_value"][0, 1, 1, 2] = value
        elif where == "new":
            feed["new_key"][0, 0, 0, 5] = value
        else:
            feed["q"][0, 3, 0, 0] = value
        _assert_same_bits(_run(on, feed), _run(off, feed))
        # and back to finite data on the same request (the kernel's copy holds the rows it took)
        feed = kv_feed(used=used, seed=40 + i, mask=mask)
        _assert_same_bits(_run(on, feed), _run(off, feed))


def test_fully_masked_row_and_exact_zero_outputs(npu_core):
    model = kv_attention_model()
    on, off = _requests(npu_core, model)
    feed = kv_feed(used=8, seed=50)
    feed["mask"][...] = -np.inf  # every column closed: NaN rows on the unfused path
    _assert_same_bits(_run(on, feed), _run(off, feed))
    feed = kv_feed(used=8, seed=51)
    feed["past_value"][..., :8, :] = 0  # open V rows zero, closed ones negative: exact-zero outputs
    feed["past_value"][..., 8:, :] = -1
    feed["new_value"][...] = 0
    a = _run(on, feed)
    assert not a.any()
    _assert_same_bits(a, _run(off, feed))


@pytest.mark.parametrize(("mask", "with_mask", "heads", "hkv"),
                         [("min", True, 8, 2), ("bool", True, 8, 2), ("min", True, 4, 4), ("min", False, 8, 2)],
                         ids=["gqa", "gqa_bool", "mha", "no_mask"])
def test_f16_inference_keeps_the_bits(npu_core, mask, with_mask, heads, hkv):
    """f16 mode (an f16 query widened by the kernel): over windows, then with an infinity in a
    closed row and in the query (the unfused path, which reads the widened query too), then
    finite again on the same requests; GQA, MHA, boolean and no mask."""
    model = kv_attention_model(heads, hkv, with_mask=with_mask,
                               mask_type=ov.Type.boolean if mask == "bool" else ov.Type.f32)
    on, off = _requests(npu_core, model, {"INFERENCE_PRECISION_HINT": "f16"})

    def feed_of(**kw):
        feed = kv_feed(heads, hkv, mask=mask, **kw)
        return feed if with_mask else {k: v for k, v in feed.items() if k != "mask"}

    for i, used in enumerate(WINDOWS):
        feed = feed_of(used=used, seed=60 + i)
        _assert_same_bits(_run(on, feed), _run(off, feed))
    for i, where in enumerate(("past_key", "q")):
        feed = feed_of(used=12, seed=70 + i)
        feed[where][0, 1, -1 if where == "past_key" else 0, 3] = np.inf
        _assert_same_bits(_run(on, feed), _run(off, feed))
        feed = feed_of(used=5 + i, seed=80 + i)
        _assert_same_bits(_run(on, feed), _run(off, feed))


def test_f32_kv_is_not_fused_and_unchanged(npu_core):
    """The f32-exact setup (f32 hints: f32 compute and an f32 KV): no Convert, nothing to fuse;
    the outputs are the plain lowering's with the key either way."""
    model = kv_attention_model(past_type=ov.Type.f32)
    on, off = _requests(npu_core, model, {"INFERENCE_PRECISION_HINT": "f32"})
    for i, used in enumerate((3, 47, 0)):
        feed = kv_feed(used=used, seed=70 + i)
        feed["past_key"] = feed["past_key"].astype(np.float32)
        feed["past_value"] = feed["past_value"].astype(np.float32)
        a = _run(on, feed)
        _assert_same_bits(a, _run(off, feed))
        assert rel_err(a, cpu_reference(model, feed)[0]) <= 1e-5


def test_export_import_round_trip_runs_the_fused_task(npu_core):
    model = kv_attention_model()
    cm = npu_core.compile_model(model, "NPU")
    blob = cm.export_model()
    again = npu_core.import_model(blob, "NPU").create_infer_request()
    req = cm.create_infer_request()
    for i, used in enumerate((4, 40, 2)):
        feed = kv_feed(used=used, seed=80 + i)
        _assert_same_bits(_run(req, feed), _run(again, feed))


def test_rows_that_close_are_cleared_in_the_kernels_copy(npu_core):
    """Rows converted by an earlier run (here huge values) and closed now must not reach the
    scores: the kernel zeroes them, its bound covering only the rows it holds."""
    model = kv_attention_model()
    on, off = _requests(npu_core, model)
    feed = kv_feed(used=47, seed=90, big=True, mask="-1e4")
    _assert_same_bits(_run(on, feed), _run(off, feed))
    for i, used in enumerate((5, 0, 20)):
        feed = kv_feed(used=used, seed=91 + i, mask="-1e4")
        a = _run(on, feed)
        _assert_same_bits(a, _run(off, feed))
        assert rel_err(a, cpu_reference(model, feed)[0]) <= 1e-5


@pytest.mark.parametrize("mask", ["min", "inf", "-1e4"])
@pytest.mark.parametrize(("heads", "hkv"), [(8, 2), (4, 4)], ids=["gqa", "mha"])
def test_products_over_the_open_columns_keep_the_bits(npu_core, monkeypatch, mask, heads, hkv):
    """A long window with a few columns open: QK^T, softmax and exp() run over the open columns
    only (rounded up to a probed width), the row sums and PV over the full row; windows growing
    past the compact share and shrinking back (the copy's moved new rows are cleared)."""
    from ov_npu_emu_npu.device.kernels import attention

    used_compact: list[int] = []
    run = attention._CompactProducts.__call__
    monkeypatch.setattr(attention._CompactProducts, "__call__",
                        lambda self, wp, past: (used_compact.append(wp), run(self, wp, past))[1])
    past = 383
    model = kv_attention_model(heads, hkv, past, expand=heads != hkv)
    on, off = _requests(npu_core, model)
    for i, used in enumerate((0, 5, 30, 100, 170, 250, 383, 60, 3, 0, 130)):
        feed = kv_feed(heads, hkv, past, used=used, seed=100 + i, mask=mask)
        a = _run(on, feed)
        _assert_same_bits(a, _run(off, feed))
        assert rel_err(a, cpu_reference(model, feed)[0]) <= 1e-5
    assert sorted(set(used_compact)) == [3, 67, 131]  # 0 / 64 / 128 past columns, each row's place kept mod 4


def test_new_rows_moved_for_the_compact_products_are_cleared_later(npu_core):
    """The compact products put the new K rows right after the open prefix of the kernel's copy;
    a later run that attends over all columns (an open column far out) must not see them."""
    past = 383
    model = kv_attention_model(8, 2, past)
    on, off = _requests(npu_core, model)
    feed = kv_feed(8, 2, past, used=5, seed=120, mask="-1e4")
    feed["q"] *= 1e-3  # a small query: the bound still shuts the closed columns
    feed["new_key"][...] = 1e4  # row 67 of the copy holds these after this run
    _assert_same_bits(_run(on, feed), _run(off, feed))
    feed = kv_feed(8, 2, past, used=5, seed=121, mask="-1e4")
    feed["q"][...] = 0.25  # against a stale 1e4 row: a score of 0, as high as the open ones'
    feed["mask"][..., 300] = 0.0  # open far out: the full products, row 67 closed
    a = _run(on, feed)
    _assert_same_bits(a, _run(off, feed))
    assert rel_err(a, cpu_reference(model, feed)[0]) <= 1e-5
