"""Chat: ChatHistory and start_chat/finish_chat on "CPU", against the real pipeline."""

from __future__ import annotations

import pytest

import genai_shim
from genai_shim.llm.paged import PagedLLM
from ov_npu_emu.errors import ConfigError, UserInputError
from tests.genai_shim.conftest import F32

pytestmark = [
    pytest.mark.oracle,
    pytest.mark.filterwarnings("ignore:start_chat:DeprecationWarning"),
]

QUESTIONS = ["Who is Lily?", "What did she find?", "Where did they go?"]


def _history_chat(mod, folder, **props):
    pipe = mod.LLMPipeline(str(folder), "CPU", **props)
    history = mod.ChatHistory()
    history.append({"role": "system", "content": "Tell a story."})
    texts = []
    for q in QUESTIONS:
        history.append({"role": "user", "content": q})
        res = pipe.generate(history, max_new_tokens=30)
        texts.append(res.texts[0])
        history.append({"role": "assistant", "content": res.texts[0]})
    return texts


def test_three_turn_chat_history_matches_real_cpu(chat_dir, real_genai):
    ours = _history_chat(genai_shim, chat_dir, **F32)
    real = _history_chat(real_genai, chat_dir, ATTENTION_BACKEND="SDPA", **F32)
    assert ours == real
    assert len(set(ours)) == 3


def _start_chat(mod, folder, **props):
    pipe = mod.LLMPipeline(str(folder), "CPU", **props)
    pipe.start_chat("Tell a story.")
    out = [pipe.generate(q, max_new_tokens=30) for q in QUESTIONS]
    pipe.finish_chat()
    return out


def test_three_turn_start_chat_matches_real_cpu(chat_dir, real_genai):
    assert _start_chat(genai_shim, chat_dir, **F32) == _start_chat(
        real_genai, chat_dir, ATTENTION_BACKEND="SDPA", **F32
    )


def test_chat_runs_on_paged_backend_like_real_default(chat_dir, real_genai):
    """The real CPU default (continuous batching) runs chat too: ours on its paged backend,
    the stateful model never built, same turns as the real default pipeline (start_chat with
    beams: test_beam_search.py::test_chat_with_beams_matches_real[PA])."""
    pipe = genai_shim.LLMPipeline(str(chat_dir), "CPU", **F32)
    history = genai_shim.ChatHistory([{"role": "system", "content": "Tell a story."}])
    ours = []
    for q in QUESTIONS:
        history.append({"role": "user", "content": q})
        ours.append(pipe.generate(history, max_new_tokens=30).texts[0])
        history.append({"role": "assistant", "content": ours[-1]})
    assert ours == _history_chat(real_genai, chat_dir, **F32)
    assert isinstance(pipe._impl, PagedLLM)  # never fell back to the stateful model


def test_cpu_chat_reuses_kv_cache(chat_dir):
    """Stateful path: turn 2 feeds only the tokens after the common prefix with what the KV
    cache holds."""
    pipe = genai_shim.LLMPipeline(str(chat_dir), "CPU", ATTENTION_BACKEND="SDPA", **F32)
    fed = []
    orig = pipe._impl._infer

    def spy(ids, mask, pos, beam, perf):
        fed.append((ids.shape[1], mask.shape[1], int(pos[0, 0])))
        return orig(ids, mask, pos, beam, perf)

    pipe._impl._infer = spy
    h = genai_shim.ChatHistory([{"role": "user", "content": QUESTIONS[0]}])
    r = pipe.generate(h, max_new_tokens=5)
    first_prefill = fed[0]
    h.append({"role": "assistant", "content": r.texts[0]})
    h.append({"role": "user", "content": QUESTIONS[1]})
    fed.clear()
    pipe.generate(h, max_new_tokens=5)
    new_tokens, mask_len, first_pos = fed[0]
    assert first_pos > 0 and new_tokens < mask_len, (
        "second turn should continue from the cached prefix"
    )
    assert mask_len > first_prefill[1]


def test_chat_history_needs_template(stories_dir):
    pipe = genai_shim.LLMPipeline(str(stories_dir), "CPU", **F32)
    with pytest.raises(ConfigError, match="Chat template must not be empty when using ChatHistory"):
        pipe.generate(genai_shim.ChatHistory([{"role": "user", "content": "hi"}]))


def test_switching_input_types_in_chat_errors(chat_dir):
    pipe = genai_shim.LLMPipeline(str(chat_dir), "CPU", **F32)
    pipe.start_chat()
    pipe.generate("Hi", max_new_tokens=3)
    with pytest.raises(UserInputError, match="switching between input types"):
        pipe.generate(genai_shim.ChatHistory([{"role": "user", "content": "hi"}]), max_new_tokens=3)
    pipe.finish_chat()
    assert isinstance(
        pipe.generate(
            genai_shim.ChatHistory([{"role": "user", "content": "hi"}]), max_new_tokens=3
        ),
        genai_shim.DecodedResults,
    )


def test_cancel_drops_turn_from_history(chat_dir):
    pipe = genai_shim.LLMPipeline(str(chat_dir), "CPU", **F32)
    pipe.start_chat()
    pipe.generate("Who is Lily?", max_new_tokens=5)
    assert [m["role"] for m in pipe._impl.chat.history] == ["user", "assistant"]
    pipe.generate(
        "Stop now", max_new_tokens=20, streamer=lambda s: genai_shim.StreamingStatus.CANCEL
    )
    assert [m["role"] for m in pipe._impl.chat.history] == ["user", "assistant"]
    pipe.generate(
        "Stop later", max_new_tokens=20, streamer=lambda s: genai_shim.StreamingStatus.STOP
    )
    assert [m["role"] for m in pipe._impl.chat.history] == ["user", "assistant", "user", "assistant"]


def test_chat_history_object_api():
    h = genai_shim.ChatHistory()
    h.append({"role": "user", "content": "a"})
    h.set_tools([{"name": "f"}])
    h.set_extra_context({"x": 1})
    assert len(h) == 1 and h.get_tools() == [{"name": "f"}] and h.get_extra_context() == {"x": 1}
    assert h.pop() == {"role": "user", "content": "a"} and not h
    with pytest.raises(UserInputError):
        h.pop()
    with pytest.raises(UserInputError):
        h.append("not a dict")


@pytest.mark.parametrize("apply", [True, False], ids=["templated", "raw"])
def test_string_prompt_uses_chat_template_like_real(chat_dir, real_genai, apply):
    ours = genai_shim.LLMPipeline(str(chat_dir), "CPU", **F32)
    real = real_genai.LLMPipeline(str(chat_dir), "CPU", ATTENTION_BACKEND="SDPA", **F32)
    kw = {"max_new_tokens": 25, "apply_chat_template": apply}
    a, b = ours.generate(QUESTIONS[0], **kw), real.generate(QUESTIONS[0], **kw)
    assert a == b
    a2, b2 = (
        ours.generate([QUESTIONS[0], QUESTIONS[1]], **kw),
        real.generate([QUESTIONS[0], QUESTIONS[1]], **kw),
    )
    assert a2.texts == b2.texts


def test_cpu_kv_trim_gives_same_answer_as_fresh_pipeline(chat_dir):
    """Editing an earlier message forces the KV cache to be trimmed to the common prefix; the
    answer must equal that of a pipeline that prefills everything from scratch (stateful path)."""
    pipe = genai_shim.LLMPipeline(str(chat_dir), "CPU", ATTENTION_BACKEND="SDPA", **F32)
    h = genai_shim.ChatHistory([{"role": "user", "content": QUESTIONS[0]}])
    h.append({"role": "assistant", "content": pipe.generate(h, max_new_tokens=15).texts[0]})
    h.append({"role": "user", "content": QUESTIONS[1]})
    pipe.generate(h, max_new_tokens=15)
    kv_before = len(pipe._impl._kv_tokens)
    trims = []
    orig_trim = pipe._impl.trim_kv
    pipe._impl.trim_kv = lambda keep: (trims.append(keep), orig_trim(keep))
    edited = genai_shim.ChatHistory(h.get_messages()[:1])
    edited.append({"role": "assistant", "content": "A girl who likes cats."})
    edited.append({"role": "user", "content": QUESTIONS[2]})
    reused = pipe.generate(edited, max_new_tokens=20).texts[0]
    assert trims and 0 < trims[0] < kv_before, "the cache was trimmed to the common prefix"
    fresh = genai_shim.LLMPipeline(str(chat_dir), "CPU", ATTENTION_BACKEND="SDPA", **F32)
    fresh = fresh.generate(edited, max_new_tokens=20)
    assert reused == fresh.texts[0]


@pytest.mark.parametrize("props", [{}, {"ATTENTION_BACKEND": "SDPA"}], ids=["pa", "sdpa"])
def test_start_chat_without_template_fails_as_the_real(stories_dir, real_genai, props):
    """2026.4.1 refuses a start_chat() string turn when the model has no chat template (it no
    longer feeds the bare prompt); the failed turn leaves the history empty."""
    real = real_genai.LLMPipeline(str(stories_dir), "CPU", **props)
    real.start_chat()
    with pytest.raises(RuntimeError) as real_err:
        real.generate("Once upon a time", max_new_tokens=3)
    ours = genai_shim.LLMPipeline(str(stories_dir), "CPU", **props)
    ours.start_chat()
    with pytest.raises(ConfigError) as ours_err:
        ours.generate("Once upon a time", max_new_tokens=3)
    assert str(ours_err.value) in str(real_err.value)
    assert ours._impl.chat.history == []


def test_enums_print_as_the_real(real_genai):
    """str() / format() of every enum give "Class.MEMBER" as the real's bindings do (a Python
    IntEnum prints its number), with the same members and values."""
    pairs = [
        (genai_shim.GenerationFinishReason, real_genai.GenerationFinishReason),
        (genai_shim.GenerationStatus, real_genai.GenerationStatus),
        (genai_shim.StopCriteria, real_genai.StopCriteria),
        (genai_shim.StreamingStatus, real_genai.StreamingStatus),
        (genai_shim.AdapterConfig.Mode, real_genai.AdapterConfig.Mode),
    ]
    for ours, real in pairs:
        assert {k: int(v) for k, v in ours.__members__.items()} == {
            k: int(v) for k, v in real.__members__.items()
        }
        for name, member in real.__members__.items():
            mine = getattr(ours, name)
            assert (str(mine), f"{mine}", repr(mine)) == (str(member), f"{member}", repr(member))


def _with_recurrent_state(src, dst):
    """``src``'s model plus a state that cannot drop positions, as LFM2's convolution state: a
    [batch, 1, vocab] ReadValue (rank 3, one dynamic axis) summing the one-hot ids fed so far,
    added to the logits, so the answer depends on every token the state has seen."""
    import numpy as np
    import openvino as ov
    import openvino.opset13 as ops
    from openvino.op.util import Variable, VariableInfo

    for f in src.iterdir():
        if f.is_file() and not f.name.startswith("openvino_model."):
            (dst / f.name).symlink_to(f.resolve())
    model = ov.Core().read_model(src / "openvino_model.xml")
    ids = model.input("input_ids")
    result = model.outputs[0].get_node()  # the logits Result
    logits = result.input_value(0)
    vocab = logits.get_partial_shape()[2].get_length()
    info = VariableInfo()
    info.variable_id, info.data_type = "conv_state", ov.Type.f32
    info.data_shape = ov.PartialShape([-1, 1, vocab])
    var = Variable(info)
    batch = ops.gather(ops.shape_of(ids), ops.constant(np.array([0], np.int64)), ops.constant(np.int64(0)))
    init = ops.broadcast(ops.constant(np.float32(0.0)),
                         ops.concat([batch, ops.constant(np.array([1, vocab], np.int64))], 0))
    past = ov.op.read_value(init, var)
    seen = ops.reduce_sum(ops.one_hot(ids, np.int64(vocab), np.float32(1.0), np.float32(0.0), -1),
                          ops.constant(np.array([1], np.int64)), keep_dims=True)
    state = ops.add(past, ops.multiply(seen, ops.constant(np.float32(3.0))))
    model.add_sinks([ov.op.assign(state, var)])
    result.input(0).replace_source_output(ops.add(logits, state).output(0))
    ov.save_model(model, dst / "openvino_model.xml", compress_to_fp16=False)
    return dst


def test_recurrent_state_chat_restarts_when_history_is_cut(chat_dir, real_genai, tmp_path):
    """A model with a recurrent state (LFM2-like): a ChatHistory shortened by its last answer
    does not extend the cached conversation, and such a state cannot be trimmed, so the real
    prefills the whole history again and repeats the popped answer; ours too."""
    from genai_shim.llm.stateful import has_linear_states

    folder = _with_recurrent_state(chat_dir, tmp_path)
    import openvino as ov

    assert has_linear_states(ov.Core().read_model(folder / "openvino_model.xml"))
    assert not has_linear_states(ov.Core().read_model(chat_dir / "openvino_model.xml"))
    out = {}
    for name, mod in (("ours", genai_shim), ("real", real_genai)):
        pipe = mod.LLMPipeline(str(folder), "CPU", ATTENTION_BACKEND="SDPA", **F32)
        history = mod.ChatHistory()
        texts = []
        for q in QUESTIONS[:2]:
            history.append({"role": "user", "content": q})
            texts.append(pipe.generate(history, max_new_tokens=20).texts[0])
            history.append({"role": "assistant", "content": texts[-1]})
        history.pop()
        texts.append(pipe.generate(history, max_new_tokens=20).texts[0])
        out[name] = texts
    assert out["ours"] == out["real"]
    assert out["ours"][2] == out["ours"][1]


def test_prompt_lookup_refuses_recurrent_states(chat_dir, tmp_path):
    """Prompt lookup cuts rejected candidates from the states: not with a recurrent one."""
    folder = _with_recurrent_state(chat_dir, tmp_path)
    with pytest.raises(ConfigError, match="recurrent"):
        genai_shim.LLMPipeline(str(folder), "CPU", prompt_lookup=True, **F32)


def _encoded_chat(mod, folder, **props):
    """start_chat, then each turn as TokenizedInputs of only the ids past what the previous turns
    fed and answered (the upstream test_chat_scenario's ENCODED_INPUTS flow)."""
    import numpy as np
    import openvino as ov

    pipe = mod.LLMPipeline(str(folder), "CPU", **props)
    tok = pipe.get_tokenizer()
    pipe.start_chat()
    history, seen, out = [], 0, []
    for q in QUESTIONS:
        history.append({"role": "user", "content": q})
        ids = tok.encode(tok.apply_chat_template(history, add_generation_prompt=True),
                         add_special_tokens=False).input_ids.data[0]
        new = np.asarray([ids[seen:]], np.int64)
        res = pipe.generate(mod.TokenizedInputs(ov.Tensor(new), ov.Tensor(np.ones_like(new))), max_new_tokens=12)
        answer = [int(t) for t in res.tokens[0]]
        out.append((answer, res.perf_metrics.get_num_input_tokens()))
        history.append({"role": "assistant", "content": tok.decode(answer, skip_special_tokens=True)})
        seen = len(ids) + len(answer)
    pipe.finish_chat()
    return out


def test_encoded_inputs_chat_matches_real(chat_dir, real_genai):
    """A chat fed token ids turn by turn keeps the whole conversation in the model (ours fed each
    turn alone before): the ids and the input token counts are the real stateful pipeline's."""
    ours = _encoded_chat(genai_shim, chat_dir, ATTENTION_BACKEND="SDPA", **F32)
    assert ours == _encoded_chat(real_genai, chat_dir, ATTENTION_BACKEND="SDPA", **F32)
    assert len({tuple(a) for a, _ in ours}) > 1


def test_encoded_inputs_chat_refuses_another_input_kind(chat_dir):
    import numpy as np
    import openvino as ov

    pipe = genai_shim.LLMPipeline(str(chat_dir), "CPU", ATTENTION_BACKEND="SDPA", **F32)
    pipe.start_chat()
    ids = np.asarray([[1, 2, 3]], np.int64)
    pipe.generate(genai_shim.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids))), max_new_tokens=2)
    with pytest.raises(UserInputError, match="continue using StringInputs or restart the chat"):
        pipe.generate("Hello", max_new_tokens=2)
