"""Greedy ids of our NPUW equal the real NPUW on CPU and the f32 CPU stateful model."""

from __future__ import annotations

import openvino as ov
import pytest

from tests.npuw._oracle import assert_matches_real, greedy, real_npuw_config

pytestmark = pytest.mark.oracle

# "Once upon a time, there was a little girl named Lily." (stories260K tokenizer)
SHORT = [1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426]
# the same story sentence pair repeated: 205 tokens, longer than three 64-token chunks
_SENT = [
    403,
    407,
    261,
    378,
    432,
    383,
    286,
    261,
    376,
    298,
    315,
    421,
    395,
    317,
    426,
    338,
    401,
    396,
    267,
    337,
    410,
    408,
    419,
    292,
    411,
    322,
    265,
    262,
    379,
    335,
    311,
    374,
    419,
    426,
]
LONG = ([1] + _SENT * 6)[:150]


def _ours(cfg: dict) -> dict:
    """Our NPUW with f32 KV (exact equality) and its default shared LM head (the oracle needs
    NPUW_LLM_SHARED_HEAD=NO for the real one; the runtime tests cover ours without a head)."""
    ours = {**cfg, "KV_CACHE_PRECISION": "f32"}
    ours.pop("NPUW_LLM_SHARED_HEAD", None)
    return ours


def _real(stories_model, cfg):
    return ov.Core().compile_model(stories_model, "NPU", cfg).create_infer_request()


KV_FULL = "KV-Cache is full: num_stored_tokens=127 capacity=127"

SCENARIOS = {
    # name: (config for both, our extra keys, prompt, new tokens, prefill calls, variant switches)
    "short": (real_npuw_config(64, 64), {}, SHORT, 64, 1, 0),
    "chunked": (real_npuw_config(256, 64, NPUW_LLM_PREFILL_CHUNK_SIZE=64), {}, LONG, 64, 3, 0),
    "static_long": (real_npuw_config(256, 64, NPUW_LLM_PREFILL_HINT="STATIC"), {}, LONG, 64, 1, 0),
    # variants 128/192/320: a 16-token prompt binds kv128 and migrates twice while generating
    "switch": (
        real_npuw_config(256, 64, NPUW_LLM_PREFILL_CHUNK_SIZE=64),
        {"NPUW_LLM_GENERATE_VARIANTS": "128,192"},
        SHORT,
        185,
        1,
        2,
    ),
    # generate until the largest KV is full: same count and text as the real one
    "kv_limit": (real_npuw_config(64, 64), {}, SHORT[:6], 1000, 1, 0),
}
_ORACLE: dict[tuple[str, str], tuple[list[int], str | None, list[int]]] = {}


def _oracle(llm, name: str) -> tuple[list[int], str | None, list[int]]:
    """(real NPUW ids, real error text, CPU ids) per model and scenario, computed once."""
    key = (llm[0], name)
    if key not in _ORACLE:
        cfg, _, prompt, n, _, _ = SCENARIOS[name]
        real, err = greedy(_real(llm[1], cfg), prompt, n)
        ref, _ = greedy(llm[2], prompt, len(real))
        _ORACLE[key] = (real, err, ref)
    return _ORACLE[key]


def _ladder_switches(impl, prompt_len: int) -> int:
    """Moves up the generate ladder (NPUW_LLM_GENERATE_LADDER, default on CPU): the conversation
    starts on the smallest rung holding the prompt and leaves every rung it outgrew."""
    rungs = impl._cm.generate_sizes[: -len(impl._cfg.variants)]
    return sum(1 for k in rungs if k - 2 >= prompt_len and impl.num_stored_tokens > k - 1)


@pytest.mark.parametrize("device", ["CPU", "NPU"])
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_greedy_matches_real_npuw_and_cpu(name, device, llm, emu_core):
    _, model, cpu_request = llm
    cfg, extra, prompt, n, calls, switches = SCENARIOS[name]
    cm = emu_core.compile_model(model, "NPU", _ours({**cfg, **extra, "NPUW_DEVICES": device}))
    req = cm.create_infer_request()
    ours, err = greedy(req, prompt, n)
    real, real_err, ref = _oracle(llm, name)
    ladder = _ladder_switches(req.impl, len(prompt))
    assert req.impl.prefill_calls == calls and req.impl.switches == switches + ladder
    if name == "kv_limit":
        assert real_err is not None and KV_FULL in real_err
        assert err == KV_FULL
        assert len(ours) == len(real) == 127 - len(prompt) + 1  # genai's capacity rule
    else:
        assert err is None and real_err is None and len(ours) == n
    assert ours == ref  # the f32 CPU stateful model, token for token
    assert_matches_real(ours, real, cpu_request, prompt)


def test_one_token_prompt_on_reused_request(llm_quick, emu_core):
    _, stories_model, cpu_request = llm_quick
    """A one-token prompt after another conversation is a new conversation (the real NPUW errs here)."""
    req = emu_core.compile_model(
        stories_model, "NPU", _ours(real_npuw_config(64, 64))
    ).create_infer_request()
    greedy(req, SHORT, 10)
    ours, _ = greedy(req, [1], 40, reset=False)  # no reset_state: routing must still see position 0
    ref, _ = greedy(cpu_request, [1], 40)
    assert ours == ref


@pytest.mark.parametrize("fixture", ["tiny_model_dir_f16", "tiny_model_dir_int8"])
def test_compressed_weights(fixture, request, emu_core):
    """f16 and int8 (u8 + zero point + f16 scale) weights go through the same transformation."""
    from pathlib import Path

    from ov_npu_emu.testing import CPU_EXACT_CONFIG

    model = ov.Core().read_model(Path(request.getfixturevalue(fixture)) / "openvino_model.xml")
    sub = {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}
    cfg = real_npuw_config(
        128,
        64,
        NPUW_LLM_PREFILL_CHUNK_SIZE=64,
        **{"++NPUW_LLM_PREFILL_CONFIG": sub, "++NPUW_LLM_GENERATE_CONFIG": sub},
    )
    cpu = ov.Core().compile_model(model, "CPU", CPU_EXACT_CONFIG).create_infer_request()
    ours, err = greedy(
        emu_core.compile_model(model, "NPU", _ours(cfg)).create_infer_request(), SHORT, 80
    )
    assert err is None
    assert ours == greedy(cpu, SHORT, 80)[0]
    assert_matches_real(ours, greedy(_real(model, cfg), SHORT, 80)[0], cpu, SHORT)


def test_v_transposed_layout(llm_quick, emu_core):
    """NPUW_LLM_OPTIMIZE_V_TENSORS=YES stores V as [1,H,D,K−1] (the real layout); ids do not change."""
    _, model, cpu = llm_quick
    cfg = real_npuw_config(
        128,
        64,
        NPUW_LLM_PREFILL_CHUNK_SIZE=32,
        NPUW_LLM_GENERATE_VARIANTS="128",
        NPUW_LLM_OPTIMIZE_V_TENSORS="YES",
    )
    req = emu_core.compile_model(model, "NPU", _ours(cfg)).create_infer_request()
    ours, err = greedy(req, LONG[:60], 100)  # two chunks, kv128, then a switch to kv192
    assert err is None and req.impl.prefill_calls == 2 and req.impl.switches == 1
    gen = req.impl._gen[128]
    h, d = req.impl.kv.num_heads[0], req.impl.kv.head_dims[0]
    assert list(gen.get_tensor("past_key_values.0.value").shape) == [1, h, d, 127]
    assert list(gen.get_tensor("past_key_values.0.key").shape) == [1, h, 127, d]
    assert ours == greedy(cpu, LONG[:60], 100)[0]


@pytest.mark.parametrize("name", ["short", "switch"])
def test_f16_kv_on_the_npu_reads_the_cache_in_the_fused_task(name, llm_quick, emu_core, monkeypatch):
    """The emulated NPU with NPUW's default f16 KV, as the real NPUW stores it: each generate
    layer's attention is one sdpa_kv task (NPU_EMU_FUSE_KV, docs/npu_device.md); its greedy ids
    equal the unfused tasks' and the real NPUW's."""
    from ov_npu_emu_npu.device.kernels import kvrows

    _, model, cpu_request = llm_quick
    cfg, extra, prompt, n, _, _ = SCENARIOS[name]
    cfg = {k: v for k, v in cfg.items() if k != "NPUW_LLM_SHARED_HEAD"}
    ids = {}
    row_passes: list[int] = []
    join = kvrows.join_rows
    monkeypatch.setattr(kvrows, "join_rows", lambda *a: (row_passes.append(1), join(*a))[1])
    for fuse in ("YES", "NO"):
        row_passes.clear()
        sub = {**cfg["++NPUW_LLM_GENERATE_CONFIG"], "NPU_EMU_FUSE_KV": fuse}
        cm = emu_core.compile_model(model, "NPU", {**cfg, **extra, "NPUW_DEVICES": "NPU",
                                                   "++NPUW_LLM_GENERATE_CONFIG": sub})
        ids[fuse], err = greedy(cm.create_infer_request(), prompt, n)
        assert err is None and len(ids[fuse]) == n
        assert bool(row_passes) == (fuse == "YES")  # the fused task ran (only) with the key on
    assert ids["YES"] == ids["NO"]
    real, _, _ = _oracle(llm_quick, name)
    assert_matches_real(ids["YES"], real, cpu_request, prompt)
