"""KV memory sharing, variant selection at run time, routing errors, properties and state."""

from __future__ import annotations

import tracemalloc

import numpy as np
import openvino as ov
import pytest

from ov_npu_emu.errors import (
    ConfigError,
    DeviceNotFoundError,
    PluginError,
    PromptTooLongError,
    UserInputError,
)
from tests.npuw._oracle import greedy, real_npuw_config

SHORT = [1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426]


@pytest.fixture(scope="module")
def small_cm(stories_model, emu_core):
    """MAX_PROMPT 192, MIN_RESPONSE 64, chunk 64, variants 128/192/256 (a scaled-down seed 000 pyramid)."""
    cfg = real_npuw_config(
        192, 64, NPUW_LLM_PREFILL_CHUNK_SIZE=64, NPUW_LLM_GENERATE_VARIANTS="128,192"
    )
    return emu_core.compile_model(stories_model, "NPU", cfg)


@pytest.mark.parametrize("prompt_len, variant", [(20, 128), (100, 192), (180, 256)])
def test_variant_selected_at_prefill(small_cm, prompt_len, variant):
    req = small_cm.create_infer_request()
    greedy(req, ([1] + SHORT[1:] * 20)[:prompt_len], 1)
    assert req.impl.variant == variant
    assert req.query_state()[0].state.data.tolist() == [prompt_len]


def test_smaller_variants_allocate_no_kv_memory(small_cm):
    # one throw-away request first: one-time lazy set-up (imports, memoised port tables) must not
    # count as the per-request allocation measured here
    small_cm.create_infer_request()
    tracemalloc.start(4)  # frames: the KV manager allocates through ov_npu_emu.runtime.pages
    before = tracemalloc.take_snapshot()
    req = small_cm.create_infer_request()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    diff = after.compare_to(before, "traceback")
    allocated = sum(d.size_diff for d in diff)
    by_kv_manager = sum(d.size_diff for d in diff if any(f.filename.endswith("kvcache.py") for f in d.traceback))
    impl = req.impl
    kv = impl.kv
    cm = small_cm.impl
    # one buffer sized for the largest variant (K=256 → 255 past slots), f16 by default
    assert kv.dtype == np.float16
    assert kv.nbytes == sum(h * (256 - 1) * d * 2 for h, d in zip(cm.kv.num_heads, cm.kv.head_dims, strict=False))
    # every variant's past (and the chunked-prefill past) is a view of the one buffer
    for k, sub in impl._gen.items():
        for i, name in enumerate(cm.kv.past_names):
            t = sub.get_tensor(name).data
            assert t.shape[2] == k - 1 and np.shares_memory(t, kv.flat[i])
    for i, name in enumerate(cm.kv.past_names):
        assert np.shares_memory(impl._prefill.get_tensor(name).data, kv.flat[i])
    # measured: the KV manager allocated exactly the one buffer (plus bookkeeping) ...
    assert kv.nbytes <= by_kv_manager < kv.nbytes + 16 * 1024
    # ... and nothing anywhere (NPUW staging, the device's requests) holds another copy of the
    # smaller variants' KV: that alone would add `per_variant` bytes
    per_variant = sum(
        h * (k - 1) * d * kv.dtype.itemsize
        for k in (128, 192)
        for h, d in zip(cm.kv.num_heads, cm.kv.head_dims, strict=False)
    )
    assert kv.nbytes <= allocated < kv.nbytes + per_variant


def test_prompt_too_long_has_the_real_text(small_cm):
    req = small_cm.create_infer_request()
    with pytest.raises(
        PromptTooLongError,
        match='longer than configured "NPUW_LLM_MAX_PROMPT_LEN": 192.\nPlease either setup bigger',
    ):
        greedy_raise(req, list(range(1, 194)))


def greedy_raise(req, prompt):
    n = len(prompt)
    req.infer(
        {
            "input_ids": np.array([prompt]),
            "attention_mask": np.ones((1, n), np.int64),
            "position_ids": np.arange(n)[None],
            "beam_idx": np.zeros(1, np.int32),
        }
    )


def test_generate_errors_and_state(small_cm):
    req = small_cm.create_infer_request()
    with pytest.raises(
        UserInputError, match="Logits tensor is not available. Please run inference first."
    ):
        req.get_tensor("logits")
    greedy(req, SHORT, 3)
    (state,) = req.query_state()
    assert state.name == "npuw_stored_tokens_state" and state.state.data.tolist() == [18]
    with pytest.raises(UserInputError, match="NPUW_LLM_MAX_GENERATION_TOKEN_LEN"):
        req.infer(
            {
                "input_ids": np.array([[5, 6]]),
                "attention_mask": np.ones((1, 20), np.int64),
                "position_ids": np.array([[18, 19]]),
                "beam_idx": np.zeros(1, np.int32),
            }
        )
    with pytest.raises(UserInputError, match="greater than total KV-Cache size"):
        state.state = ov.Tensor(np.array([10_000], np.int64))
    with pytest.raises(UserInputError, match="negative"):
        state.state = ov.Tensor(np.array([-1], np.int64))
    state.reset()
    assert state.state.data.tolist() == [0]


def test_rewind_through_position_ids(small_cm, cpu_request):
    """A generate call at an earlier position drops the later tokens (speculative-decoding rollback)."""
    req = small_cm.create_infer_request()
    full, _ = greedy(req, SHORT, 12)
    n = len(SHORT)
    # rewind to position n+5 and replay token 5: the following ids must repeat
    req.infer(
        {
            "input_ids": np.array([[full[5]]]),
            "attention_mask": np.ones((1, n + 6), np.int64),
            "position_ids": np.array([[n + 5]]),
            "beam_idx": np.zeros(1, np.int32),
        }
    )
    assert int(req.get_tensor("logits").data[0, -1].argmax()) == full[6]


def test_properties_read_back(small_cm):
    assert small_cm.get_property("NPUW_LLM_MAX_PROMPT_LEN") == 192
    assert small_cm.get_property("NPUW_LLM_MIN_RESPONSE_LEN") == 64
    assert small_cm.get_property("NPUW_LLM_PREFILL_CHUNK_SIZE") == 64
    assert small_cm.get_property("NPUW_DEVICES") == "CPU"
    with pytest.raises(ConfigError, match="write-only"):
        small_cm.get_property("NPUW_LLM_PREFILL_CONFIG")
    assert [p.any_name for p in small_cm.inputs] == [
        "input_ids",
        "attention_mask",
        "position_ids",
        "beam_idx",
    ]
    assert small_cm.inputs[0].partial_shape.is_dynamic


def test_missing_device_is_a_typed_error(stories_model, emu_core):
    with pytest.raises(DeviceNotFoundError):
        emu_core.compile_model(stories_model, "NPU", real_npuw_config(64, 64, NPUW_DEVICES="GPU"))
    if "NPU" not in emu_core.registry:
        with pytest.raises(PluginError, match="NPUW_DEVICES=CPU"):
            emu_core.compile_model(
                stories_model, "NPU", real_npuw_config(64, 64, NPUW_DEVICES="NPU")
            )


def test_not_an_llm_is_a_typed_error(emu_core):
    import openvino.opset13 as ops

    p = ops.parameter([1, 4], ov.Type.f32, name="x")
    model = ov.Model([ops.relu(p)], [p])
    with pytest.raises(UserInputError, match="input_ids"):
        emu_core.compile_model(model, "NPU", real_npuw_config(64, 64))


def test_plain_npu_still_needs_the_device(stories_model, monkeypatch):
    """Only NPUW LLM configs are claimed; anything else on an unregistered "NPU" is DeviceNotFoundError."""
    from ov_npu_emu import Core
    from ov_npu_emu.plugin_manager import DISABLE_ENV

    monkeypatch.setenv(DISABLE_ENV, "npu")
    emu_core = Core()
    assert "NPU" not in emu_core.registry
    with pytest.raises(DeviceNotFoundError):
        emu_core.compile_model(stories_model, "NPU", {"NPU_USE_NPUW": "YES"})
    with pytest.raises(DeviceNotFoundError):
        emu_core.import_model(b"not a blob", "NPU")


def test_bad_config_through_core_is_a_config_error(emu_core, stories_model):
    with pytest.raises(ConfigError, match="not power of 2"):
        emu_core.compile_model(
            stories_model, "NPU", real_npuw_config(256, 64, NPUW_LLM_PREFILL_CHUNK_SIZE=96)
        )


def test_compile_reports_progress_per_sub_model(emu_core, stories_model, caplog):
    import logging

    cfg = real_npuw_config(
        128, 64, NPUW_LLM_PREFILL_CHUNK_SIZE=64, NPUW_LLM_GENERATE_VARIANTS="128"
    )
    with caplog.at_level(logging.INFO, logger="ov_npu_emu_npuw"):
        emu_core.compile_model(stories_model, "NPU", cfg)
    lines = [r.getMessage() for r in caplog.records if "compiled" in r.getMessage()]
    assert [ln.split(" on ")[0] for ln in lines] == [
        "[1/3] compiled Model0_kv128",
        "[2/3] compiled Model0_kv192",
        "[3/3] compiled Model0_prefill",
    ]


@pytest.fixture(scope="module", params=["DYNAMIC", "STATIC"])
def exact_cm(request, stories_model, emu_core):
    cfg = real_npuw_config(
        192,
        64,
        NPUW_LLM_PREFILL_CHUNK_SIZE=64,
        NPUW_LLM_PREFILL_HINT=request.param,
        KV_CACHE_PRECISION="f32",
        NPUW_LLM_GENERATE_VARIANTS="128,192",
    )
    return request.param, emu_core.compile_model(stories_model, "NPU", cfg)


def test_prompt_length_edges(exact_cm, cpu_request):
    """Chunk and prompt boundaries (1, C−1, C, C+1, 2C, 2C+1, P−1, P) against the CPU model."""
    hint, cm = exact_cm
    req = cm.create_infer_request()
    text = ([1] + SHORT[1:] * 20)[:192]
    for n, calls, variant in [
        (1, 1, 128),
        (2, 1, 128),
        (63, 1, 128),
        (64, 1, 128),
        (65, 2, 192),
        (128, 2, 192),
        (129, 3, 256),
        (191, 3, 256),
        (192, 3, 256),
    ]:
        ours, err = greedy(req, text[:n], 12)
        assert err is None and ours == greedy(cpu_request, text[:n], 12)[0], n
        assert req.impl.variant == variant
        assert req.impl.prefill_calls == (calls if hint == "DYNAMIC" else 1)


def test_seed_variants_at_full_scale(stories_model, emu_core):
    """Seed 000 at its own scale: variants 256/512/1024/1152; prompts of 20, 400 and 1000 tokens."""
    cfg = real_npuw_config(1024, 128, NPUW_LLM_GENERATE_VARIANTS="256,512,1024")
    cm = emu_core.compile_model(stories_model, "NPU", cfg)
    assert cm.get_property("NPUW_LLM_GENERATE_VARIANTS") == "256,512,1024,1152"
    req = cm.create_infer_request()
    for n, variant in [(20, 256), (400, 1024), (1000, 1152)]:  # 148 → 256, 528 → 1024, 1128 → 1152
        _, err = greedy(req, ([1] + SHORT[1:] * 70)[:n], 2)
        assert err is None and req.impl.variant == variant
    kv = req.impl.kv
    assert kv.nbytes == sum(h * 1151 * d * 2 for h, d in zip(kv.num_heads, kv.head_dims, strict=False))
