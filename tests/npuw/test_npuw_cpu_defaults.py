"""NPUW's default generate sub-config on the CPU device: single-threaded for small per-step work."""

from __future__ import annotations

import numpy as np
import openvino as ov
import pytest

from ov_npu_emu.testing import CPU_EXACT_CONFIG
from ov_npu_emu_npuw.compiled_model import CPU_SINGLE_THREAD_STEP_BYTES, generate_default_config
from ov_npu_emu_npuw.model_io import KVLayout

BASE = {
    "NPU_USE_NPUW": "YES",
    "NPUW_LLM": "YES",
    "NPUW_DEVICES": "CPU",
    "NPUW_LLM_MAX_PROMPT_LEN": 64,
    "NPUW_LLM_MIN_RESPONSE_LEN": 64,
    "NPUW_LLM_GENERATE_VARIANTS": "128",
    "INFERENCE_PRECISION_HINT": "f32",
}


def _const_model(n_floats: int) -> ov.Model:
    from openvino import opset13 as ops

    p = ops.parameter([1, 1], ov.Type.f32)
    w = ops.constant(np.zeros((1, n_floats), np.float32))
    return ov.Model([ops.multiply(p, w)], [p])


def test_threshold_counts_constants_and_the_kv_window():
    kv = KVLayout(("k", "v"), ("pk", "pv"), (4, 4), (8, 8))
    small = _const_model(1024)
    assert generate_default_config("CPU", small, {}) == {"INFERENCE_NUM_THREADS": 1}
    assert generate_default_config("NPU", small, {}) == {}, "only the CPU device gets it"
    assert generate_default_config("CPU", small, {"INFERENCE_NUM_THREADS": 2}) == {}
    # a KV window big enough to cross the threshold (4 bytes × slots × Σ heads·dims)
    slots = CPU_SINGLE_THREAD_STEP_BYTES // (4 * 64) + 1
    assert generate_default_config("CPU", small, {}, kv, 64) == {"INFERENCE_NUM_THREADS": 1}
    assert generate_default_config("CPU", small, {}, kv, slots) == {}
    big = _const_model(CPU_SINGLE_THREAD_STEP_BYTES // 4 + 1)
    assert generate_default_config("CPU", big, {}) == {}


def _threads(cm) -> dict[int, int]:
    gen = cm.impl.subs.generate
    return {k: int(g.get_property("INFERENCE_NUM_THREADS")) for k, g in gen.items()}


def test_tiny_model_generate_variants_run_single_threaded_and_user_overrides(
    emu_core, tiny_model_dir
):
    model = ov.Core().read_model(tiny_model_dir / "openvino_model.xml")
    cm = emu_core.compile_model(model, "NPU", BASE)
    added = cm.get_property("NPUW_EMU_GENERATE_DEFAULT_CONFIG")
    assert added["kv128"] == {"INFERENCE_NUM_THREADS": 1}
    assert set(_threads(cm).values()) == {1}
    # kept across export/import: a CPU blob does not carry the thread count
    back = emu_core.import_model(cm.export_model(), "NPU", {})
    assert set(_threads(back).values()) == {1}
    for key in ("++NPUW_LLM_GENERATE_CONFIG", "NPUW_LLM_GENERATE_CONFIG"):
        over = emu_core.compile_model(model, "NPU", {**BASE, key: {"INFERENCE_NUM_THREADS": 2}})
        assert set(_threads(over).values()) == {2}, key
        assert over.get_property("NPUW_EMU_GENERATE_DEFAULT_CONFIG")["kv128"] == {}


def _greedy(req, n: int = 8) -> list[int]:
    ids = [1, 5, 9, 17, 3]
    req.reset_state()
    req.infer(
        {
            "input_ids": np.array([ids], np.int64),
            "attention_mask": np.ones((1, len(ids)), np.int64),
            "position_ids": np.arange(len(ids), dtype=np.int64)[None],
            "beam_idx": np.zeros(1, np.int32),
        }
    )
    out = []
    for i in range(n):
        tok = int(np.asarray(req.get_tensor("logits").data)[0, -1].argmax())
        out.append(tok)
        cur = len(ids) + i + 1
        req.infer(
            {
                "input_ids": np.array([[tok]], np.int64),
                "attention_mask": np.ones((1, cur), np.int64),
                "position_ids": np.array([[cur - 1]], np.int64),
                "beam_idx": np.zeros(1, np.int32),
            }
        )
    return out


@pytest.mark.parametrize("threads", [None, 0])
def test_single_threaded_default_keeps_greedy_ids(emu_core, tiny_model_dir, threads):
    """Greedy ids equal the real CPU plugin's with the default and without it (``0`` = auto)."""
    model = ov.Core().read_model(tiny_model_dir / "openvino_model.xml")
    cfg = {**BASE, "KV_CACHE_PRECISION": "f32"}
    if threads is not None:
        cfg["++NPUW_LLM_GENERATE_CONFIG"] = {"INFERENCE_NUM_THREADS": threads}
    cm = emu_core.compile_model(model, "NPU", cfg)
    if threads is None:
        assert set(_threads(cm).values()) == {1}
    ref = ov.Core().compile_model(model, "CPU", CPU_EXACT_CONFIG).create_infer_request()
    assert _greedy(cm.create_infer_request()) == _greedy(ref)


def _head_props(cm) -> dict:
    head = cm.impl.subs.lm_head
    return {k: head.get_property(k) for k in ("INFERENCE_NUM_THREADS", "INFERENCE_PRECISION_HINT")}


def test_shared_head_gets_the_generate_config_without_the_thread_default(emu_core, tiny_model_dir):
    """The head runs in line after a variant: one thread there measured 85 µs vs 29 µs (docs)."""
    model = ov.Core().read_model(tiny_model_dir / "openvino_model.xml")
    cm = emu_core.compile_model(model, "NPU", BASE)
    props = _head_props(cm)
    assert int(props["INFERENCE_NUM_THREADS"]) != 1
    assert props["INFERENCE_PRECISION_HINT"] == ov.Type.f32  # from the generate sub-config
    assert cm.get_property("NPUW_EMU_GENERATE_DEFAULT_CONFIG")["lm_head"] == {}


@pytest.mark.parametrize(
    "key, value, threads, precision",
    [
        ("++NPUW_LLM_SHARED_HEAD_CONFIG", {"INFERENCE_NUM_THREADS": 1}, 1, "f32"),  # merged
        ("NPUW_LLM_SHARED_HEAD_CONFIG", {"INFERENCE_NUM_THREADS": 1}, 1, None),  # replaces
    ],
)
def test_shared_head_config_keys(emu_core, tiny_model_dir, key, value, threads, precision):
    model = ov.Core().read_model(tiny_model_dir / "openvino_model.xml")
    cm = emu_core.compile_model(model, "NPU", {**BASE, key: value})
    props = _head_props(cm)
    assert int(props["INFERENCE_NUM_THREADS"]) == threads
    if precision == "f32":
        assert props["INFERENCE_PRECISION_HINT"] == ov.Type.f32
    elif "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
        # the generate sub-config's f32 hint is gone: the plugin's own default (bf16 here)
        assert props["INFERENCE_PRECISION_HINT"] != ov.Type.f32
    # write-only, like the real key
    with pytest.raises(Exception, match="write-only"):
        cm.get_property("NPUW_LLM_SHARED_HEAD_CONFIG")
