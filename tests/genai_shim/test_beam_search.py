"""Beam search on CPU against the real openvino_genai: texts, scores, order, errors, chat."""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import genai_shim
from ov_npu_emu.errors import ConfigError, UserInputError
from tests.genai_shim.conftest import F32

PROMPTS = ["Once upon a time", "Lily"]
#: five prompts of different lengths: rows of finished prompts leave the batch at different steps
FIVE = ["The cat sat on the mat and the dog", "Lily", "Once upon a time", "Tom", "A big red"]

_stop_cache: dict[str, set[int]] = {}


def _stop_ids(pipe: Any, folder: Path) -> set[int]:
    """Two tokens the model emits often (greedy), used as stop tokens so that beams finish
    early and the stop criteria / length penalty decide the result."""
    key = str(folder)
    if key not in _stop_cache:
        enc = pipe.get_tokenizer().encode(PROMPTS[0])
        tokens = pipe.generate(enc, max_new_tokens=40).tokens[0]
        _stop_cache[key] = {t for t, _ in Counter(tokens).most_common(2)}
    return _stop_cache[key]


def _kw(mod: Any, kw: dict[str, Any]) -> dict[str, Any]:
    out = dict(kw)
    if "stop_criteria" in out:
        out["stop_criteria"] = getattr(mod.StopCriteria, out["stop_criteria"])
    return out


def _same(a: Any, b: Any) -> None:
    assert a.texts == b.texts
    assert a.scores == pytest.approx(b.scores, abs=1e-4)
    assert [int(r) for r in a.finish_reasons] == [int(r) for r in b.finish_reasons]
    assert a.perf_metrics.get_num_generated_tokens() == b.perf_metrics.get_num_generated_tokens()
    assert a.perf_metrics.get_num_input_tokens() == b.perf_metrics.get_num_input_tokens()


CONFIGS = {
    "plain_4": {"num_beams": 4},
    "plain_4_n4": {"num_beams": 4, "num_return_sequences": 4},
    "groups_diversity": {
        "num_beams": 6,
        "num_beam_groups": 3,
        "diversity_penalty": 1.0,
        "num_return_sequences": 5,
    },
    "length_penalty_0.5": {"num_beams": 4, "length_penalty": 0.5, "num_return_sequences": 3},
    "length_penalty_-0.5": {"num_beams": 4, "length_penalty": -0.5, "num_return_sequences": 3},
    "no_repeat_ngram_2": {"num_beams": 4, "no_repeat_ngram_size": 2, "num_return_sequences": 2},
    "early": {"num_beams": 4, "stop_criteria": "EARLY", "num_return_sequences": 4},
    "heuristic": {"num_beams": 4, "stop_criteria": "HEURISTIC", "num_return_sequences": 4},
    "never": {"num_beams": 4, "stop_criteria": "NEVER", "num_return_sequences": 4},
    "never_lp2": {"num_beams": 4, "stop_criteria": "NEVER", "length_penalty": 2.0,
                  "num_return_sequences": 4},
}
#: configs whose beams should end on the model's frequent tokens
_WITH_STOPS = {"length_penalty_0.5", "length_penalty_-0.5", "early", "heuristic", "never",
               "never_lp2", "groups_diversity"}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_beam_search_matches_real(pipelines, model_dir, real_genai, name):
    ours = pipelines("ours", model_dir, **F32)
    real = pipelines("real", model_dir, **F32)
    kw = dict(CONFIGS[name], max_new_tokens=14)
    if name in _WITH_STOPS:
        kw["stop_token_ids"] = _stop_ids(ours, model_dir)
    a = ours.generate(PROMPTS, **_kw(genai_shim, kw))
    b = real.generate(PROMPTS, **_kw(real_genai, kw))
    _same(a, b)
    assert len(a.texts) == len(PROMPTS) * kw.get("num_return_sequences", 1)


def test_stop_criteria_and_length_penalty_change_the_result(pipelines, stories_dir):
    """The configs above are not vacuous: with stop tokens the criteria pick different beams."""
    ours = pipelines("ours", stories_dir, **F32)
    stops = _stop_ids(ours, stories_dir)
    got = {
        name: ours.generate(PROMPTS, max_new_tokens=14, stop_token_ids=stops,
                            **_kw(genai_shim, CONFIGS[name])).texts
        for name in ("early", "heuristic", "never", "never_lp2")
    }
    assert got["early"] != got["never"] != got["never_lp2"]
    assert got["heuristic"] != got["never"]


def test_single_prompt_returns_str_or_results_like_real(pipelines, model_dir, real_genai):
    ours = pipelines("ours", model_dir, **F32)
    real = pipelines("real", model_dir, **F32)
    a = ours.generate(PROMPTS[0], max_new_tokens=12, num_beams=3)
    b = real.generate(PROMPTS[0], max_new_tokens=12, num_beams=3)
    assert isinstance(a, str) and a == b
    a2 = ours.generate(PROMPTS[0], max_new_tokens=12, num_beams=3, num_return_sequences=2)
    b2 = real.generate(PROMPTS[0], max_new_tokens=12, num_beams=3, num_return_sequences=2)
    assert isinstance(a2, genai_shim.DecodedResults)
    _same(a2, b2)
    assert str(a2).splitlines()[0].split(": ", 1)[1] == a2.texts[0]


def test_tensor_input_gives_encoded_results(pipelines, stories_dir):
    ours = pipelines("ours", stories_dir, **F32)
    real = pipelines("real", stories_dir, **F32)
    kw = {"max_new_tokens": 12, "num_beams": 4, "num_return_sequences": 3}
    a = ours.generate(ours.get_tokenizer().encode(PROMPTS[0]).input_ids, **kw)
    b = real.generate(real.get_tokenizer().encode(PROMPTS[0]).input_ids, **kw)
    assert isinstance(a, genai_shim.EncodedResults)
    assert a.tokens == b.tokens and len(a.tokens) == 3
    assert a.scores == pytest.approx(b.scores, abs=1e-4)
    assert a.scores == sorted(a.scores, reverse=True)


@pytest.mark.parametrize("backend", ["PA", "SDPA"])
def test_batch_of_five_prompts_like_each_real_backend(pipelines, stories_dir, real_genai, backend):
    """Prompts that finish at different steps: the paged (default) and the stateful (SDPA) real
    pipelines differ in which KV rows later prompts read and in what max_length counts from;
    genai_shim follows the one ATTENTION_BACKEND names."""
    ours = pipelines("ours", stories_dir, ATTENTION_BACKEND=backend, **F32)
    real = pipelines("real", stories_dir, ATTENTION_BACKEND=backend, **F32)
    stops = _stop_ids(ours, stories_dir)
    for kw in (
        {"max_new_tokens": 12, "num_beams": 3, "num_return_sequences": 2,
         "stop_token_ids": stops, "stop_criteria": "EARLY"},
        {"max_length": 18, "num_beams": 3, "num_return_sequences": 2},
    ):
        _same(ours.generate(FIVE, **_kw(genai_shim, kw)),
              real.generate(FIVE, **_kw(real_genai, kw)))


def test_backends_really_differ(pipelines, stories_dir):
    a = pipelines("ours", stories_dir, ATTENTION_BACKEND="PA", **F32)
    b = pipelines("ours", stories_dir, ATTENTION_BACKEND="SDPA", **F32)
    kw = {"max_length": 18, "num_beams": 3}
    assert a.generate(FIVE, **kw).texts != b.generate(FIVE, **kw).texts


def _chat(mod: Any, folder: Path, **props: Any) -> list[Any]:
    pipe = mod.LLMPipeline(str(folder), "CPU", **F32, **props)
    out: list[Any] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pipe.start_chat("Tell a story.")
        for q in ("Who is Lily?", "What did she find?"):
            out.append(pipe.generate(q, max_new_tokens=12, num_beams=4))
        r = pipe.generate("And then?", max_new_tokens=10, num_beams=3, num_return_sequences=2)
        out.append((r.texts, [round(s, 4) for s in r.scores]))
        out.append(pipe.generate("Greedy now", max_new_tokens=10))  # after beams: KV trimmed
        pipe.finish_chat()
    return out


@pytest.mark.parametrize("props", [{}, {"ATTENTION_BACKEND": "SDPA"}], ids=["PA", "SDPA"])
def test_chat_with_beams_matches_real(chat_dir, real_genai, props):
    assert _chat(genai_shim, chat_dir, **props) == _chat(real_genai, chat_dir, **props)


def test_streamer_is_rejected_like_real(pipelines, stories_dir):
    ours = pipelines("ours", stories_dir, **F32)
    real = pipelines("real", stories_dir, **F32)
    msg = ("Currently streaming is possible only with batch size=1 and only for greedy or "
           "multinomial decoding")
    with pytest.raises(RuntimeError, match=msg):
        real.generate("Hi", max_new_tokens=4, num_beams=2, streamer=lambda t: False)
    with pytest.raises(UserInputError, match=msg):
        ours.generate("Hi", max_new_tokens=4, num_beams=2, streamer=lambda t: False)


BAD = {
    "groups_not_divisor": ({"num_beams": 4, "num_beam_groups": 3, "diversity_penalty": 1.0},
                           "'num_beams' (4) should be divisible by 'num_beam_groups' (3)"),
    "n_gt_beams": ({"num_beams": 2, "num_return_sequences": 3},
                   "'num_beams' (2) must be greater equal than 'num_return_sequences' (3)"),
    "sampling": ({"num_beams": 2, "do_sample": True}, "Beam search with sampling is not supported"),
    "no_diversity": ({"num_beams": 4, "num_beam_groups": 2},
                     "For grouped beam search 'diversity_penalty' should not be zero"),
    "diversity_one_group": ({"num_beams": 4, "diversity_penalty": 1.0},
                            "'diversity_penalty' is applicable only when grouped beam search"),
    "ngram_0": ({"num_beams": 2, "no_repeat_ngram_size": 0},
                "'no_repeat_ngram_size' must be positive"),
    "repetition": ({"num_beams": 2, "repetition_penalty": 1.2},
                   "'repetition_penalty' is not currently supported by beam search"),
    "presence": ({"num_beams": 2, "presence_penalty": 0.5},
                 "'presence_penalty' is not currently supported by beam search"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_invalid_beam_configs_raise_real_messages(pipelines, stories_dir, name):
    kw, msg = BAD[name]
    ours = pipelines("ours", stories_dir, **F32)
    real = pipelines("real", stories_dir, **F32)
    with pytest.raises(RuntimeError) as real_err:
        real.generate("Hi", max_new_tokens=4, **kw)
    with pytest.raises(ConfigError) as our_err:
        ours.generate("Hi", max_new_tokens=4, **kw)
    assert msg in str(real_err.value) and msg in str(our_err.value)


@pytest.mark.parametrize("backend", ["PA", "SDPA"])
def test_max_length_not_above_prompt_is_an_error(stories_dir, real_genai, backend):
    kw = {"max_length": 3, "num_beams": 2}
    real = real_genai.LLMPipeline(str(stories_dir), "CPU", ATTENTION_BACKEND=backend, **F32)
    ours = genai_shim.LLMPipeline(str(stories_dir), "CPU", ATTENTION_BACKEND=backend, **F32)
    with pytest.raises(RuntimeError) as real_err:
        real.generate(PROMPTS[0], **kw)
    with pytest.raises(ConfigError) as our_err:
        ours.generate(PROMPTS[0], **kw)
    assert str(our_err.value) in str(real_err.value)


@pytest.mark.parametrize(
    "kw, ours_msg",
    [
        ({"stop_strings": {"the"}}, "Cannot remove more tokens than has been generated"),
        ({"num_beams": 2, "num_beam_groups": 2, "diversity_penalty": 2.0, "stop_criteria": "EARLY",
          "stop_token_ids": "first"}, "Failed to remove sequence with specified ID"),
    ],
    ids=["stop_string_at_beam_start", "group_done_at_first_step"],
)
def test_cases_where_the_real_beam_search_fails(stories_dir, real_genai, kw, ours_msg):
    """Two inputs the real GroupBeamSearcher cannot handle (its internal checks fail); genai_shim
    fails at the same point with a typed error that says what to change."""
    kw = dict({"num_beams": 4, "max_new_tokens": 20}, **kw)
    ours = genai_shim.LLMPipeline(str(stories_dir), "CPU", **F32)
    if kw.get("stop_token_ids") == "first":  # the first greedy token stops every group at once
        first = ours.generate(ours.get_tokenizer().encode(PROMPTS[0]), max_new_tokens=1)
        kw["stop_token_ids"] = {first.tokens[0][0]}
    real = real_genai.LLMPipeline(str(stories_dir), "CPU", **F32)  # fresh: it keeps bad state
    with pytest.raises(RuntimeError) as real_err:
        real.generate(PROMPTS[0], **_kw(real_genai, kw))
    with pytest.raises(UserInputError, match=ours_msg):
        ours.generate(PROMPTS[0], **_kw(genai_shim, kw))
    assert ours_msg in str(real_err.value)
    # and the pipeline still works afterwards
    assert ours.generate(PROMPTS[0], max_new_tokens=3, num_beams=2)


def test_npu_still_rejects_beams_with_real_message(stories_dir, npu_one):
    pipe = genai_shim.LLMPipeline(str(stories_dir), "NPU", **npu_one["props"])
    with pytest.raises(UserInputError, match="Currently only greedy and multinomial decoding are "
                       "supported for NPU device!"):
        pipe.generate(PROMPTS[0], max_new_tokens=4, num_beams=2)


def test_beam_rows_follow_parents(stories_dir):
    """Stateful path: each step feeds one row per running beam and beam_idx names a row of the
    previous step."""
    pipe = genai_shim.LLMPipeline(str(stories_dir), "CPU", ATTENTION_BACKEND="SDPA", **F32)
    calls: list[tuple[int, np.ndarray]] = []
    infer = pipe._impl._infer

    def spy(ids, mask, pos, beam, perf):
        calls.append((ids.shape[0], np.array(beam)))
        return infer(ids, mask, pos, beam, perf)

    pipe._impl._infer = spy  # type: ignore[method-assign]
    pipe.generate(PROMPTS, max_new_tokens=6, num_beams=3)
    assert [n for n, _ in calls] == [2] + [6] * 5
    for (prev_rows, _), (_, beam) in zip(calls, calls[1:], strict=False):
        assert beam.min() >= 0 and beam.max() < prev_rows
    assert set(calls[1][1][:3]) == {0} and set(calls[1][1][3:]) == {1}


@pytest.mark.parametrize("backend", ["PA", "SDPA"])
def test_greedy_batch_counts_and_max_length_like_each_real_backend(
    pipelines, stories_dir, backend
):
    """What max_length counts from and how many input tokens a batch reports differ between
    the real paged and stateful pipelines (greedy as well as beams)."""
    ours = pipelines("ours", stories_dir, ATTENTION_BACKEND=backend, **F32)
    real = pipelines("real", stories_dir, ATTENTION_BACKEND=backend, **F32)
    _same(ours.generate(FIVE, max_length=18), real.generate(FIVE, max_length=18))


def test_top_tokens_is_a_stable_argsort_prefix():
    """The O(vocab) candidate pick equals a full stable sort, ties and -inf included."""
    from genai_shim.beam_search import _top_tokens

    rng = np.random.default_rng(0)
    for _ in range(500):
        lp = rng.integers(-5, 3, size=int(rng.integers(1, 40))).astype(np.float32)
        lp[rng.integers(0, lp.size, size=2)] = -np.inf
        k = int(rng.integers(1, 10))
        assert _top_tokens(lp, k).tolist() == np.argsort(-lp, kind="stable")[:k].tolist()
