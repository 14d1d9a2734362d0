"""genai_shim on "CPU" against the real openvino_genai on "CPU" (same folder, f32 hints)."""

from __future__ import annotations

import pytest

import genai_shim
from tests.genai_shim.conftest import F32

pytestmark = pytest.mark.oracle

PROMPTS = ["Once upon a time", "Lily and Tom"]


def _ids(pipe, tok_src, prompt, **kw):
    return pipe.generate(tok_src.encode(prompt), **kw).tokens[0]


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_100_tokens_match_real(pipelines, model_dir, real_genai, prompt):
    ours = pipelines("ours", model_dir, **F32)
    real = pipelines("real", model_dir, ATTENTION_BACKEND="SDPA", **F32)
    cfg = {"max_new_tokens": 100, "ignore_eos": True}
    assert _ids(ours, ours.get_tokenizer(), prompt, **cfg) == _ids(
        real, real.get_tokenizer(), prompt, **cfg
    )
    assert ours.generate(prompt, **cfg) == real.generate(prompt, **cfg)


def test_greedy_matches_real_default_backend(pipelines, stories_dir):
    """The real CPU default is the continuous-batching (paged attention) pipeline; same tokens."""
    ours = pipelines("ours", stories_dir, **F32)
    real = pipelines("real", stories_dir, **F32)
    assert ours.generate(PROMPTS[0], max_new_tokens=100) == real.generate(
        PROMPTS[0], max_new_tokens=100
    )


CASES = {
    "stop_token_ids": {"max_new_tokens": 40, "stop_token_ids": {426}},
    "eos_token_id": {"max_new_tokens": 40, "eos_token_id": 426},
    "min_new_tokens": {"max_new_tokens": 40, "stop_token_ids": {426}, "min_new_tokens": 20},
    "ignore_eos": {"max_new_tokens": 30, "stop_token_ids": {426}, "ignore_eos": True},
    "max_length": {"max_length": 12},
    "max_new_over_max_length": {"max_length": 10, "max_new_tokens": 3},
    "repetition_penalty_1.5": {"max_new_tokens": 40, "repetition_penalty": 1.5},
    "repetition_penalty_0.8": {"max_new_tokens": 40, "repetition_penalty": 0.8},
    "presence_penalty": {"max_new_tokens": 40, "presence_penalty": 2.0},
    "frequency_penalty": {"max_new_tokens": 40, "frequency_penalty": 2.0},
    "frequency_penalty_negative": {"max_new_tokens": 40, "frequency_penalty": -1.5},
}


@pytest.mark.parametrize("kw", list(CASES.values()), ids=list(CASES))
def test_encoded_cases_match_real(pipelines, stories_dir, kw):
    ours = pipelines("ours", stories_dir, **F32)
    real = pipelines("real", stories_dir, ATTENTION_BACKEND="SDPA", **F32)
    a = ours.generate(ours.get_tokenizer().encode(PROMPTS[0]), **kw)
    b = real.generate(real.get_tokenizer().encode(PROMPTS[0]), **kw)
    assert a.tokens == b.tokens
    assert [int(r) for r in a.finish_reasons] == [int(r) for r in b.finish_reasons]


@pytest.mark.parametrize("stop", ["Lily", "park.", "little girl", " she", "\n"])
@pytest.mark.parametrize("include", [False, True], ids=["exclude", "include"])
def test_stop_strings_match_real(pipelines, stories_dir, stop, include):
    ours = pipelines("ours", stories_dir, **F32)
    real = pipelines("real", stories_dir, ATTENTION_BACKEND="SDPA", **F32)
    kw = {"max_new_tokens": 60, "stop_strings": {stop}, "include_stop_str_in_output": include}
    a = ours.generate(ours.get_tokenizer().encode(PROMPTS[0]), **kw)
    b = real.generate(real.get_tokenizer().encode(PROMPTS[0]), **kw)
    assert a.tokens == b.tokens
    assert [int(r) for r in a.finish_reasons] == [int(r) for r in b.finish_reasons]
    assert ours.generate(PROMPTS[0], **kw) == real.generate(PROMPTS[0], **kw)


def test_batch_matches_real(pipelines, stories_dir):
    ours = pipelines("ours", stories_dir, **F32)
    real = pipelines("real", stories_dir, ATTENTION_BACKEND="SDPA", **F32)
    prompts = ["Hi", "Once upon a time", "Tom had a dog. The dog"]
    kw = {"max_new_tokens": 25, "stop_token_ids": {426}}
    a, b = ours.generate(prompts, **kw), real.generate(prompts, **kw)
    assert isinstance(a, genai_shim.DecodedResults)
    assert a.texts == b.texts
    assert [int(r) for r in a.finish_reasons] == [int(r) for r in b.finish_reasons]


def test_result_types_like_real(pipelines, stories_dir):
    ours = pipelines("ours", stories_dir, **F32)
    assert isinstance(ours.generate("Hi", max_new_tokens=3), str)
    assert isinstance(ours("Hi", max_new_tokens=3), str)
    d = ours.generate(["Hi"], max_new_tokens=3)
    assert isinstance(d, genai_shim.DecodedResults) and len(d.texts) == 1 and str(d) == d.texts[0]
    e = ours.generate(ours.get_tokenizer().encode("Hi"), max_new_tokens=3)
    assert isinstance(e, genai_shim.EncodedResults) and len(e.tokens[0]) == 3
    assert e.finish_reasons == [genai_shim.GenerationFinishReason.LENGTH]


def test_generation_config_object_and_kwargs(pipelines, stories_dir):
    ours = pipelines("ours", stories_dir, **F32)
    cfg = genai_shim.GenerationConfig()
    cfg.max_new_tokens = 7
    tok = ours.get_tokenizer()
    assert len(ours.generate(tok.encode("Hi"), cfg).tokens[0]) == 7
    assert len(ours.generate(tok.encode("Hi"), cfg, max_new_tokens=4).tokens[0]) == 4
    assert ours.get_generation_config().eos_token_id == 2


def test_seeded_multinomial_reproducible(pipelines, stories_dir):
    ours = pipelines("ours", stories_dir, **F32)
    kw = {
        "max_new_tokens": 40,
        "do_sample": True,
        "top_p": 0.9,
        "top_k": 30,
        "temperature": 0.8,
        "rng_seed": 42,
    }
    first = ours.generate(PROMPTS[0], **kw)
    assert ours.generate(PROMPTS[0], **kw) == first
    other = genai_shim.LLMPipeline(str(stories_dir), "CPU", **F32)
    assert other.generate(PROMPTS[0], **kw) == first
    texts = {ours.generate(PROMPTS[0], **{**kw, "rng_seed": s}) for s in range(3)}
    assert len(texts) > 1, "different seeds should give different samples"
    greedy = ours.generate(PROMPTS[0], max_new_tokens=40)
    assert first != greedy


def test_multinomial_scores_are_log_probs(pipelines, stories_dir):
    ours = pipelines("ours", stories_dir, **F32)
    r = ours.generate(
        ours.get_tokenizer().encode(PROMPTS[0]), max_new_tokens=10, do_sample=True, rng_seed=1
    )
    assert r.scores[0] < 0.0
    assert ours.generate(ours.get_tokenizer().encode(PROMPTS[0]), max_new_tokens=10).scores == [0.0]


def test_invalid_config_raises_real_message(pipelines, stories_dir):
    ours = pipelines("ours", stories_dir, **F32)
    with pytest.raises(RuntimeError, match="min_new_tokens must be less or equal max_new_tokens"):
        ours.generate("Hi", max_new_tokens=2, min_new_tokens=5)
    sdpa = pipelines("ours", stories_dir, ATTENTION_BACKEND="SDPA", **F32)
    with pytest.raises(RuntimeError, match="Echo is not supported in the stateful pipeline"):
        sdpa.generate("Hi", max_new_tokens=2, echo=True)  # the paged default echoes (below)
    with pytest.raises(genai_shim.pipeline.UserInputError, match="generate\\(\\) takes"):
        ours.generate(42)


def _recording_streamer(mod):
    class Writes(mod.StreamerBase):
        def __init__(self):
            super().__init__()
            self.writes = []

        def write(self, token):
            self.writes.append(list(token))
            return mod.StreamingStatus.RUNNING

        def end(self):
            pass

    return Writes()


def _echo_calls(mod, pipe):
    ids = pipe.get_tokenizer().encode(PROMPTS[0])
    out = []
    for kw in ({}, {"num_beams": 2, "num_return_sequences": 2}, {"max_new_tokens": 0},
               {"max_new_tokens": 0, "num_beams": 2}):
        r = pipe.generate(ids, **{"max_new_tokens": 4, **kw, "echo": True})
        out.append(([list(t) for t in r.tokens], r.scores, [int(f.value) for f in r.finish_reasons]))
        out.append(pipe.generate([PROMPTS[1]], **{"max_new_tokens": 4, **kw, "echo": True}).texts)
    pieces = []
    out.append((pipe.generate(PROMPTS[0], max_new_tokens=3, echo=True, streamer=pieces.append), pieces))
    writes = _recording_streamer(mod)
    pipe.generate(ids, max_new_tokens=3, echo=True, streamer=writes)
    out.append(writes.writes)
    return out, list(ids.input_ids.data[0])


def test_echo_on_the_paged_default_matches_real(pipelines, stories_dir, real_genai):
    """echo on CPU (the real's continuous-batching adapter): the prompt's ids precede every
    returned sequence's, scores and finish reasons are the generated tokens' (an empty beam
    scores NaN), the first streamer write carries the prompt with the first token;
    max_new_tokens=0 returns the prompt alone (our beam search never finished before)."""
    ours, prompt = _echo_calls(genai_shim, pipelines("ours", stories_dir, **F32))
    real, _ = _echo_calls(real_genai, pipelines("real", stories_dir, **F32))
    assert repr(ours) == repr(real)  # repr: NaN == NaN
    assert ours[0][0][0][: len(prompt)] == prompt and len(ours[0][0][0]) == len(prompt) + 4
    assert ours[4][0] == [prompt] and ours[-1][0] == [*prompt, ours[0][0][0][len(prompt)]]


def test_cb_echo_streams_the_prompt_and_stops_without_new_tokens(stories_dir):
    """ContinuousBatchingPipeline with echo, as the real: the streamer gets the prompt with the
    first token; max_new_tokens=0 finishes at once (greedy used to generate a token, beam
    search to loop for ever) with the prompt, score 0 / NaN, the prompt streamed in one piece."""
    cb = genai_shim.ContinuousBatchingPipeline(str(stories_dir), genai_shim.SchedulerConfig(), "CPU", **F32)
    pieces = []
    (res,) = cb.generate(["Once upon"], [genai_shim.GenerationConfig(max_new_tokens=3, echo=True)], pieces.append)
    assert res.m_generation_ids == ["Once upon a time,"] and pieces == ["Once", " upon", " a", " time,"]
    pieces = []
    (res,) = cb.generate(["Once upon"], [genai_shim.GenerationConfig(max_new_tokens=0, echo=True)], pieces.append)
    assert res.m_generation_ids == ["Once upon"] and pieces == ["Once upon"]
    for beams, score in ((1, "0.0"), (2, "nan")):
        cfg = genai_shim.GenerationConfig(max_new_tokens=0, echo=True, num_beams=beams)
        (res,) = cb.generate([PROMPTS[0]], [cfg])
        assert res.m_generation_ids == [PROMPTS[0]] and repr(res.m_scores) == f"[{score}]"


@pytest.mark.parametrize(
    "kw",
    [
        {"do_sample": True, "top_k": 1},
        {"do_sample": True, "top_p": 0.01, "temperature": 0.7},
        {"do_sample": True, "top_k": 1, "repetition_penalty": 1.3, "presence_penalty": 0.5},
    ],
    ids=["top_k_1", "top_p_tiny", "top_k_1_penalties"],
)
def test_degenerate_multinomial_matches_real(pipelines, stories_dir, kw):
    """Sampling that leaves one candidate is deterministic, so the real one is an oracle for the
    multinomial path (filters, penalties, scores) despite its different random stream."""
    ours = pipelines("ours", stories_dir, **F32)
    real = pipelines("real", stories_dir, ATTENTION_BACKEND="SDPA", **F32)
    a = ours.generate(ours.get_tokenizer().encode(PROMPTS[0]), max_new_tokens=40, rng_seed=5, **kw)
    b = real.generate(real.get_tokenizer().encode(PROMPTS[0]), max_new_tokens=40, rng_seed=5, **kw)
    assert a.tokens == b.tokens
    assert a.scores == pytest.approx(b.scores, abs=1e-4)


def test_batch_str_and_counts_like_real(pipelines, stories_dir):
    # Token counts of a batch differ between the real backends; genai_shim follows the one named.
    ours = pipelines("ours", stories_dir, ATTENTION_BACKEND="SDPA", **F32)
    real = pipelines("real", stories_dir, ATTENTION_BACKEND="SDPA", **F32)
    a = ours.generate(["Hi", PROMPTS[0]], max_new_tokens=5)
    b = real.generate(["Hi", PROMPTS[0]], max_new_tokens=5)
    assert str(a) == str(b)
    assert a.perf_metrics.get_num_input_tokens() == b.perf_metrics.get_num_input_tokens()
    assert a.perf_metrics.get_num_generated_tokens() == b.perf_metrics.get_num_generated_tokens()


def test_parallel_sampling_like_real(pipelines, stories_dir):
    """num_return_sequences > 1 with multinomial: n sequences per prompt; with top_k=1 they are
    deterministic and must equal the real ones."""
    ours = pipelines("ours", stories_dir, **F32)
    real = pipelines("real", stories_dir, ATTENTION_BACKEND="SDPA", **F32)
    kw = {"max_new_tokens": 12, "do_sample": True, "top_k": 1, "num_return_sequences": 2}
    a = ours.generate(ours.get_tokenizer().encode(PROMPTS[0]), **kw)
    b = real.generate(real.get_tokenizer().encode(PROMPTS[0]), **kw)
    assert a.tokens == b.tokens and len(a.tokens) == 2
    kw = {"max_new_tokens": 6, "do_sample": True, "num_return_sequences": 3, "rng_seed": 2}
    a2 = ours.generate(["Hi", PROMPTS[0]], **kw)
    b2 = real.generate(["Hi", PROMPTS[0]], **kw)
    assert len(a2.texts) == len(b2.texts) == 6
    assert len(set(a2.texts[3:])) > 1, "independent samples for one prompt"


def test_set_generation_config_like_real(stories_dir, real_genai):
    results = []
    for mod, extra in ((genai_shim, {}), (real_genai, {"ATTENTION_BACKEND": "SDPA"})):
        pipe = mod.LLMPipeline(str(stories_dir), "CPU", **F32, **extra)
        cfg = mod.GenerationConfig()
        cfg.max_new_tokens = 6
        pipe.set_generation_config(cfg)
        got = pipe.get_generation_config()
        results.append((got.max_new_tokens, got.eos_token_id, pipe.generate(PROMPTS[0])))
    assert results[0] == results[1]
    assert results[0][:2] == (6, 2)


def test_tensor_input_like_real(pipelines, stories_dir):
    ours = pipelines("ours", stories_dir, **F32)
    real = pipelines("real", stories_dir, ATTENTION_BACKEND="SDPA", **F32)
    ids = ours.get_tokenizer().encode(PROMPTS[0]).input_ids
    a = ours.generate(ids, max_new_tokens=10)
    b = real.generate(real.get_tokenizer().encode(PROMPTS[0]).input_ids, max_new_tokens=10)
    assert isinstance(a, genai_shim.EncodedResults) and a.tokens == b.tokens
