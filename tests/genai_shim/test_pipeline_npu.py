"""genai_shim on "NPU" against the real openvino_genai on "NPU" (real NPUW with NPUW_DEVICES=CPU)."""

from __future__ import annotations

import pytest

import genai_shim
from tests.genai_shim.conftest import F32, NPU_LENS, REAL_NPU

pytestmark = pytest.mark.oracle

PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def real_npu(stories_dir, real_genai):
    return real_genai.LLMPipeline(str(stories_dir), "NPU", **REAL_NPU, **NPU_LENS, **F32)


@pytest.fixture
def ours_npu(stories_dir, npu_one):
    return genai_shim.LLMPipeline(str(stories_dir), "NPU", **npu_one["props"], **NPU_LENS)


CASES = {
    "greedy_100": {"max_new_tokens": 100},
    "stop_token_ids": {"max_new_tokens": 60, "stop_token_ids": {426}},
    "min_new_tokens": {"max_new_tokens": 60, "stop_token_ids": {426}, "min_new_tokens": 20},
    "stop_strings": {"max_new_tokens": 60, "stop_strings": {"park."}},
    "stop_strings_included": {
        "max_new_tokens": 60,
        "stop_strings": {"little girl"},
        "include_stop_str_in_output": True,
    },
    "repetition_penalty": {"max_new_tokens": 60, "repetition_penalty": 1.3},
    "kv_capacity": {"max_new_tokens": 1000, "ignore_eos": True},
}


@pytest.mark.parametrize("kw", list(CASES.values()), ids=list(CASES))
def test_npu_matches_real_npu(ours_npu, real_npu, kw):
    a = ours_npu.generate(ours_npu.get_tokenizer().encode(PROMPT), **kw)
    b = real_npu.generate(real_npu.get_tokenizer().encode(PROMPT), **kw)
    assert a.tokens == b.tokens
    assert [int(r) for r in a.finish_reasons] == [int(r) for r in b.finish_reasons]
    assert ours_npu.generate(PROMPT, **kw) == real_npu.generate(PROMPT, **kw)


def test_npu_streamer_stop_matches_real(ours_npu, real_npu):
    got = []
    for pipe in (ours_npu, real_npu):
        calls = []
        r = pipe.generate(
            [PROMPT],
            max_new_tokens=30,
            streamer=lambda s, calls=calls: calls.append(s) or len(calls) >= 5,
        )
        got.append((calls, r.texts, [int(f) for f in r.finish_reasons]))
    assert got[0] == got[1]


def test_npu_prompt_limit_message_matches_real(ours_npu, real_npu):
    long_prompt = "Once upon a time there was a girl. " * 12
    msgs = []
    for pipe in (ours_npu, real_npu):
        with pytest.raises(RuntimeError) as e:
            pipe.generate(long_prompt, max_new_tokens=3)
        msgs.append(str(e.value))
    assert msgs[1].endswith(msgs[0]) or msgs[0] in msgs[1]


def _three_turns(pipe, mod):
    history = mod.ChatHistory()
    texts = []
    for q in ["Who is Lily?", "What did she find?", "Where did they go?"]:
        history.append({"role": "user", "content": q})
        r = pipe.generate(history, max_new_tokens=12)
        texts.append(r.texts[0])
        history.append({"role": "assistant", "content": r.texts[0]})
    return texts


def test_three_turn_chat_matches_real_npu(chat_dir, npu_one, real_genai):
    ours = genai_shim.LLMPipeline(
        str(chat_dir), "NPU", **npu_one["props"], MAX_PROMPT_LEN=128, MIN_RESPONSE_LEN=64
    )
    real = real_genai.LLMPipeline(
        str(chat_dir), "NPU", **REAL_NPU, **F32, MAX_PROMPT_LEN=128, MIN_RESPONSE_LEN=64
    )
    a, b = _three_turns(ours, genai_shim), _three_turns(real, real_genai)
    assert a == b
    assert len(set(a)) == 3


def test_chat_history_over_limit_matches_real_message(chat_dir, npu_one, real_genai):
    ours = genai_shim.LLMPipeline(str(chat_dir), "NPU", **npu_one["props"], **NPU_LENS)
    real = real_genai.LLMPipeline(str(chat_dir), "NPU", **REAL_NPU, **F32, **NPU_LENS)
    msgs = []
    for pipe, mod in ((ours, genai_shim), (real, real_genai)):
        history = mod.ChatHistory()
        with pytest.raises(RuntimeError) as e:
            for _ in range(10):
                history.append(
                    {"role": "user", "content": "And then what happened to Lily and her friends?"}
                )
                history.append(
                    {
                        "role": "assistant",
                        "content": pipe.generate(history, max_new_tokens=8).texts[0],
                    }
                )
        msgs.append(str(e.value))
    assert "may only process prompts or hold chat history up to 64 tokens" in msgs[0]
    assert msgs[0] in msgs[1]


@pytest.mark.parametrize("device", ["CPU", "NPU"])
def test_rules_match_real_on_every_model(model_dir, npu_one, real_genai, device):
    """Greedy 100 tokens, then stop_token_ids, min_new_tokens and stop_strings picked from that
    output, on the builder's tiny model and stories260K, on CPU and NPU."""
    if device == "NPU":
        lens = {"MAX_PROMPT_LEN": 64, "MIN_RESPONSE_LEN": 128}
        ours = genai_shim.LLMPipeline(str(model_dir), "NPU", **npu_one["props"], **lens)
        real = real_genai.LLMPipeline(str(model_dir), "NPU", **REAL_NPU, **F32, **lens)
    else:
        ours = genai_shim.LLMPipeline(str(model_dir), "CPU", **F32)
        real = real_genai.LLMPipeline(str(model_dir), "CPU", ATTENTION_BACKEND="SDPA", **F32)
    ids_a, ids_b = ours.get_tokenizer().encode(PROMPT), real.get_tokenizer().encode(PROMPT)
    first = ours.generate(ids_a, max_new_tokens=100, ignore_eos=True)
    assert first.tokens == real.generate(ids_b, max_new_tokens=100, ignore_eos=True).tokens
    assert ours.generate(PROMPT, max_new_tokens=100) == real.generate(PROMPT, max_new_tokens=100)
    stop = first.tokens[0][10]
    text = ours.get_tokenizer().decode(first.tokens[0])
    needle = text[len(text) // 3 : len(text) // 3 + 4]
    cases = [
        {"stop_token_ids": {stop}},
        {"stop_token_ids": {stop}, "min_new_tokens": 15},
        {"stop_strings": {needle}},
        {"stop_strings": {needle}, "include_stop_str_in_output": True},
    ]
    for kw in cases:
        a = ours.generate(ids_a, max_new_tokens=60, **kw)
        b = real.generate(ids_b, max_new_tokens=60, **kw)
        assert a.tokens == b.tokens, kw
        assert [int(r) for r in a.finish_reasons] == [int(r) for r in b.finish_reasons], kw
        if "stop_strings" in kw:
            assert a.finish_reasons == [genai_shim.GenerationFinishReason.STOP], "the string hit"


@pytest.mark.filterwarnings("ignore:start_chat:DeprecationWarning")
def test_start_chat_matches_real_npu(chat_dir, npu_one, real_genai):
    outs = []
    for pipe in (
        genai_shim.LLMPipeline(
            str(chat_dir), "NPU", **npu_one["props"], MAX_PROMPT_LEN=128, MIN_RESPONSE_LEN=64
        ),
        real_genai.LLMPipeline(
            str(chat_dir), "NPU", **REAL_NPU, **F32, MAX_PROMPT_LEN=128, MIN_RESPONSE_LEN=64
        ),
    ):
        pipe.start_chat("Tell a story.")
        outs.append(
            [
                pipe.generate(q, max_new_tokens=12)
                for q in ("Who is Lily?", "What did she find?", "Where?")
            ]
        )
        pipe.finish_chat()
    assert outs[0] == outs[1]


def _emulated_npu_available() -> bool:
    from ov_npu_emu import Core

    pm = Core().plugin_manager
    return pm.get_plugin("npuw") is not None and pm.get_plugin("npu") is not None


def test_full_stack_on_emulated_npu(stories_dir):
    """genai_shim → NPUW → emulated NPU (NPUW_DEVICES left at its default): greedy text equals
    the f32 CPU reference."""
    assert _emulated_npu_available(), "the built-in NPUW plugin and NPU device must be registered"
    pipe = genai_shim.LLMPipeline(
        str(stories_dir), "NPU", MAX_PROMPT_LEN=64, MIN_RESPONSE_LEN=64, KV_CACHE_PRECISION="f32"
    )
    ref = genai_shim.LLMPipeline(str(stories_dir), "CPU", **F32)
    assert pipe.generate(PROMPT, max_new_tokens=40) == ref.generate(PROMPT, max_new_tokens=40)
