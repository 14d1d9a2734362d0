"""Token-proportional prefill (NPUW_LLM_PREFILL_LADDER): results identical to the full static prefill.

With the real defaults (MAX_PROMPT_LEN 1024) a short prompt runs, on NPUW_DEVICES=CPU, on the
smallest static prefill rung (64, 128, …) that holds it; on the emulated NPU the one static
prefill runs with the device skipping the padded rows.  Either way the greedy ids and the KV
contents after the prefill must be bit-for-bit those of the unoptimised path (the key set to NO),
and the ids those of the real NPUW on CPU.
"""

from __future__ import annotations

import numpy as np
import openvino as ov
import pytest

from ov_npu_emu.errors import ConfigError
from ov_npu_emu_npuw.config import ladder_sizes, parse_config
from tests.npu.conftest import padded_attention_model
from tests.npuw._oracle import F32_SUB, greedy, real_npuw_config

# "Once upon a time, there was a little girl named Lily." (stories260K tokenizer)
SHORT = [1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426]
# MAX_PROMPT_LEN 256 keeps the unoptimised prefill cheap; the bench runs the real default 1024
P, R = 256, 64
BASE = {
    "NPU_USE_NPUW": "YES",
    "NPUW_LLM": "YES",
    "NPUW_LLM_MAX_PROMPT_LEN": P,
    "NPUW_LLM_MIN_RESPONSE_LEN": R,
    "KV_CACHE_PRECISION": "f32",
    **F32_SUB,
}
_COMPILED: dict[tuple, object] = {}


def _compiled(emu_core, llm, device: str, ladder: str, **extra):
    key = (llm[0], device, ladder, tuple(sorted(extra.items())))
    if key not in _COMPILED:
        cfg = {**BASE, "NPUW_DEVICES": device, "NPUW_LLM_PREFILL_LADDER": ladder, **extra}
        if device == "NPU":
            # stories260K's attention (8 columns of V) has no exact 128-row window at 256 rows
            # (BLAS's small-product kernel, see _window_rows): 512
            cfg["NPUW_LLM_MAX_PROMPT_LEN"] = 2 * P
        _COMPILED[key] = emu_core.compile_model(llm[1], "NPU", cfg)
    return _COMPILED[key]


def _prefill_state(cm, prompt: list[int]):
    """(greedy ids, KV rows of the prompt + first generated token, prefill size it ran at,
    the request)."""
    req = cm.create_infer_request()
    ids, err = greedy(req, prompt, 4)
    assert err is None
    impl = req.impl
    size = impl.prefill_size
    greedy(req, prompt, 2)  # prefill + one step: the prefill KV is in the buffer (copy_kvcache)
    slots = impl.variant - 1
    kv = [impl.kv.seq(i, slots)[:, :, : len(prompt) + 1].copy() for i in range(len(impl.kv))]
    return ids, kv, size, req


def _assert_same(a, b) -> None:
    assert a[0] == b[0]
    assert len(a[1]) == len(b[1])
    for x, y in zip(a[1], b[1], strict=False):
        assert x.dtype == y.dtype and np.array_equal(x, y)  # bit for bit, not allclose


def test_cpu_ladder_is_exact_and_matches_real(llm_quick, emu_core):
    """stories260K and a builder model: rung 64 instead of 256, same ids and KV; real NPUW agrees."""
    prompt = SHORT if llm_quick[0] == "stories260K" else [1, *range(40, 60)]
    on = _prefill_state(_compiled(emu_core, llm_quick, "CPU", "YES"), prompt)
    off = _prefill_state(_compiled(emu_core, llm_quick, "CPU", "NO"), prompt)
    assert (on[2], off[2]) == (64, P)
    _assert_same(on, off)
    real = ov.Core().compile_model(
        llm_quick[1], "NPU", real_npuw_config(P, R)
    ).create_infer_request()
    assert greedy(real, prompt, 4)[0] == on[0]


def test_cpu_ladder_picks_the_smallest_rung(llm_quick, emu_core):
    if llm_quick[0] != "stories260K":
        pytest.skip("one model is enough for the rung choice")
    # a model of its own (not _compiled's shared one): which rungs exist depends on the prompts
    # it has run, whatever tests ran before this one
    cm = emu_core.compile_model(llm_quick[1], "NPU", {**BASE, "NPUW_DEVICES": "CPU", "NPUW_LLM_PREFILL_LADDER": "YES"})
    assert sorted(cm.impl.subs.prefill_ladder) == []  # compiled on first use only
    assert _prefill_state(cm, SHORT)[2] == 64
    long = ([1] + SHORT[1:] * 10)[:100]  # 100 tokens: rung 128
    on = _prefill_state(cm, long)
    assert on[2] == 128
    _assert_same(on, _prefill_state(_compiled(emu_core, llm_quick, "CPU", "NO"), long))
    assert sorted(cm.impl.subs.prefill_ladder) == [64, 128]


def test_ladder_config():
    cfg = parse_config({})
    assert cfg.prefill_ladder and cfg.ladder == (64, 128, 256, 512) == ladder_sizes(1024)
    assert cfg.properties()["NPUW_LLM_PREFILL_LADDER"] is True
    assert parse_config({"NPUW_LLM_PREFILL_LADDER": "NO"}).ladder == ()
    assert parse_config({"NPUW_LLM_MAX_PROMPT_LEN": 64}).ladder == ()
    # chunked prefill has its own small models: no ladder
    assert parse_config({"NPUW_LLM_PREFILL_CHUNK_SIZE": 64}).ladder == ()
    with pytest.raises(ConfigError, match="NPUW_LLM_PREFILL_LADDER"):
        parse_config({"NPUW_LLM_PREFILL_LADDER": "maybe"})


def test_npu_padded_rows_window_is_exact(llm_quick, emu_core):
    """Emulated NPU: one static prefill, attention on the real-row window, same ids and KV."""
    prompt = SHORT if llm_quick[0] == "stories260K" else [1, *range(40, 60)]
    cm_on = _compiled(emu_core, llm_quick, "NPU", "YES")
    on = _prefill_state(cm_on, prompt)
    off = _prefill_state(_compiled(emu_core, llm_quick, "NPU", "NO"), prompt)
    assert on[2] == off[2] == 2 * P  # the blob keeps its static shape
    _assert_same(on, off)
    dev = on[3].impl._prefill.impl  # the prefill's NPU request (two prefills ran on it)
    assert dev.counters["windowed_inferences"] == 2 and dev.counters["window_reruns"] == 0
    assert dev.window.used > 0
    # the weight MatMuls, norms and elementwise ops ran on the window's rows too (device/windowed.py)
    w = dev.window
    assert w.windowed_tasks > 0 and 0 < w.rows_computed < w.rows_full / 2
    assert cm_on.impl.subs.prefill.get_property("NPU_EMU_SKIP_PADDED_ROWS") == "YES"
    # an exported NPUW model keeps it on import
    back = emu_core.import_model(cm_on.export_model(), "NPU")
    assert back.impl.subs.prefill.get_property("NPU_EMU_SKIP_PADDED_ROWS") == "YES"



def _attention_case(groups: int, boolean: bool, seed: int = 0, L: int = 256, D: int = 16, w0: int = 128):
    rng = np.random.default_rng(seed)
    hkv = 2
    q = rng.standard_normal((1, hkv * groups, L, D)).astype(np.float32)
    k = rng.standard_normal((1, hkv, L, D)).astype(np.float32)
    v = rng.standard_normal((1, hkv, L, D)).astype(np.float32)
    allowed = np.tril(np.ones((L, L), bool))
    allowed[w0 + 5 :, : w0 + 5] = False  # real rows from w0 + 5 on never see the padding
    allowed[: w0 + 5] = np.eye(L, dtype=bool)[: w0 + 5]  # padding rows attend themselves
    if boolean:
        mask = allowed[None, None]
    else:
        mask = np.where(allowed, 0.0, np.finfo(np.float16).min).astype(np.float32)[None, None]
    return q, k, v, mask, w0


@pytest.mark.parametrize(
    ("groups", "boolean", "L", "D", "w0", "dtype"),
    [
        (1, False, 256, 16, 128, np.float32),
        (2, False, 256, 16, 128, np.float32),
        (1, True, 256, 16, 128, np.float32),
        (2, True, 256, 16, 128, np.float32),
        # a window inside one row block, L no multiple of the block (a short block first), f16
        # operands (the f32 copies), three query heads per K/V head
        (3, False, 200, 32, 170, np.float32),
        (2, False, 256, 16, 100, np.float16),
    ],
)
@pytest.mark.parametrize("split", [False, True])
def test_sdpa_window_rows_equal_full(groups, boolean, L, D, w0, dtype, split, monkeypatch):
    """The window's rows are the full run's bit for bit, on any host: both make the same BLAS
    calls (row_blocks) on the rows they share.  K and V rows before the window hold garbage
    (left uncomputed by the row-wise tasks): they must not matter.  ``split``: the window's K/V
    heads cut between two threads (as on a 2-core host for an LLM's layer), the same bits."""
    from ov_npu_emu_npu.device.kernels import RowWindow, attention, make_kernel

    if split:
        monkeypatch.setattr(attention, "_SPLIT_SCORES", 0)
        monkeypatch.setattr(attention, "_cores", lambda: 2)
        calls = []
        real = attention._window_products
        monkeypatch.setattr(attention, "_window_products", lambda *a: calls.append(a[0].shape) or real(*a))

    q, k, v, mask, w0 = _attention_case(groups, boolean, L=L, D=D, w0=w0)
    q, k, v = (x.astype(dtype) for x in (q, k, v))
    params = np.array([0, 1, 0, groups], np.float64)
    full, part = np.zeros((*q.shape[:-1], D), np.float32), np.full((*q.shape[:-1], D), np.nan, np.float32)
    make_kernel("sdpa", [q, k, v, mask], [full], params)()
    kg, vg = k.copy(), v.copy()
    kg[..., :w0, :] = np.finfo(dtype).max
    vg[..., :w0, :] = np.nan
    window = RowWindow()
    run = make_kernel("sdpa", [q, kg, vg, mask], [part], params, window)
    window.size, window.start = q.shape[-2], w0
    run()
    assert window.used == 1 and not window.violated
    assert np.array_equal(part[..., w0:, :], full[..., w0:, :])  # bit for bit
    assert not part[..., :w0, :].any()  # padding rows zeroed (finite)
    if split:
        assert len(calls) == 2 and all(c[-4] == 1 for c in calls)  # one K/V head per thread


def test_sdpa_window_refusals():
    """A mask that lets a window row see a padding column: no window (the driver re-runs the
    inference without it); a square attention too small for the row-block path: the hint stops."""
    from ov_npu_emu_npu.device.kernels import RowWindow, make_kernel

    q, k, v, mask, w0 = _attention_case(2, False)
    mask[..., w0 + 10, 3] = 0.0  # a real row attends a padding column
    out = np.full_like(q, 7.0)
    window = RowWindow()
    run = make_kernel("sdpa", [q, k, v, mask], [out], np.array([0, 1, 0, 2], np.float64), window)
    window.size, window.start = q.shape[-2], w0
    run()
    assert window.violated and not window.unusable and (out == 7.0).all()

    rng = np.random.default_rng(1)
    L = 4  # fewer than 8 query rows: the decode-shaped products, no row blocks
    q, k, v = (rng.standard_normal((1, 2, L, 8)).astype(np.float32) for _ in range(3))
    mask = np.where(np.tril(np.ones((L, L), bool)), 0.0, -65504.0).astype(np.float32)[None, None]
    out = np.full_like(q, 7.0)
    window = RowWindow()
    run = make_kernel("sdpa", [q, k, v, mask], [out], np.array([0, 1, 0, 1], np.float64), window)
    window.size, window.start = L, 2
    run()
    assert window.violated and window.unusable and (out == 7.0).all()


def test_sdpa_window_refuses_open_padding():
    """A real row that still sees a padding column: no window, the driver must re-run."""
    from ov_npu_emu_npu.device.kernels import RowWindow, make_kernel

    q, k, v, mask, w0 = _attention_case(1, False)
    mask[..., -1, 3] = 0.0  # the last real row attends padding column 3
    out = np.full_like(q, 7.0)
    window = RowWindow()
    run = make_kernel("sdpa", [q, k, v, mask], [out], np.array([0, 1, 0, 1], np.float64), window)
    window.size, window.start = q.shape[-2], w0
    run()
    assert window.violated and window.used == 0 and (out == 7.0).all()  # nothing written


@pytest.mark.parametrize("shut", [True, False])
def test_npu_driver_window_or_rerun(shut, emu_core):
    """Device level: a provable window gives the full run's real rows; an open padding column
    makes the driver re-run without the hint (every row then the full run's)."""
    P, first = 256, 200
    ids = np.r_[np.zeros(first), np.arange(5, 5 + P - first)].astype(np.int64)[None]
    feed = {"input_ids": ids, "attention_mask": (ids > 0).astype(np.int64)}
    ref = emu_core.compile_model(padded_attention_model(P, shut), "NPU").create_infer_request()
    ref.infer(feed)
    cm = emu_core.compile_model(padded_attention_model(P, shut), "NPU", {"NPU_EMU_SKIP_PADDED_ROWS": "YES"})
    req = cm.create_infer_request()
    req.infer(feed)
    full, ours = ref.get_tensor("out").data, req.get_tensor("out").data
    assert np.array_equal(ours[..., first:, :], full[..., first:, :])
    counters = req.impl.counters
    if shut:
        assert (counters["windowed_inferences"], counters["window_reruns"]) == (1, 0)
    else:
        assert (counters["windowed_inferences"], counters["window_reruns"]) == (0, 1)
        assert np.array_equal(ours, full)
    # mixed padding tokens: the driver cannot vouch for the padding rows, no window at all
    feed["input_ids"] = feed["input_ids"].copy()
    feed["input_ids"][0, 3] = 7
    feed["attention_mask"] = np.r_[np.zeros(first), np.ones(P - first)].astype(np.int64)[None]
    before = dict(counters)
    req.infer(feed)
    assert counters["inferences"] == before["inferences"] + 1
    assert counters["windowed_inferences"] == before["windowed_inferences"]
    assert counters["window_reruns"] == before["window_reruns"]
