"""Speculative decoding with both models on CPU: the real LLMPipeline runs its continuous-batching
pipeline (SpeculativeDecodingImpl), so does ours (genai_shim/continuous_batching/speculative.py).
Texts, scores, finish reasons and every counter of the three metric series are compared with
the real openvino_genai on the same folders (f32 hints on both models)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import pytest

import genai_shim
from ov_npu_emu.errors import ConfigError
from tests.genai_shim.conftest import F32
from tests.genai_shim.speculative_helpers import build_draft

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "optimum"
PROMPTS = ["Once upon a time", "Lily and Tom", "The cat"]


def _pipe(impl: Any, main: Path, draft: Path, **props: Any) -> Any:
    return impl.LLMPipeline(
        str(main), "CPU", draft_model=impl.draft_model(str(draft), "CPU", **F32), **F32, **props
    )


def sd_counters(res: Any) -> dict[str, Any]:
    """Everything the upstream sample prints but the timings, and more."""
    e = res.extended_perf_metrics
    main, draft = e.main_model_metrics, e.draft_model_metrics
    return {
        "texts": list(res.texts),
        "scores": [round(float(s), 4) for s in res.scores],
        "finish": [int(r) for r in res.finish_reasons],
        "batches": list(res.perf_metrics.raw_metrics.m_batch_sizes),
        "generated": res.perf_metrics.get_num_generated_tokens(),
        "input": res.perf_metrics.get_num_input_tokens(),
        "main_batches": list(main.raw_metrics.m_batch_sizes),
        "main_iterations": len(main.raw_metrics.m_durations),
        "main_generated": main.get_num_generated_tokens(),
        "draft_batches": list(draft.raw_metrics.m_batch_sizes),
        "draft_iterations": len(draft.raw_metrics.m_durations),
        "draft_generated": draft.get_num_generated_tokens(),
        "accepted": e.get_num_accepted_tokens(),
        "draft_tokens": e.get_num_draft_tokens(),
        "rejected": e.get_num_rejected_tokens(),
        "draft_processed": e.get_num_draft_processed_tokens(),
    }


@pytest.fixture(scope="module")
def tiny_draft(stories_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random tiny Llama with stories260K's tokenizer: its candidates are rejected."""
    return build_draft(tmp_path_factory.mktemp("cb_draft_tiny"), stories_dir, own_tokenizer=False)


@pytest.fixture(scope="module", params=["same_draft", "tiny_draft"])
def pair(request: pytest.FixtureRequest, stories_dir: Path, real_genai: Any) -> dict[str, Any]:
    """Our and the real pipeline on stories260K.  Both keep state across calls (the draft's
    last batch size leaks into the next call's counters in the real), so every test makes the
    same calls on both, in the same order."""
    draft = stories_dir if request.param == "same_draft" else request.getfixturevalue("tiny_draft")
    return {
        "draft": request.param,
        "ours": _pipe(genai_shim, stories_dir, draft),
        "real": _pipe(real_genai, stories_dir, draft),
        "real_module": real_genai,
    }


def _both(pair: dict[str, Any], prompts: Any, **kw: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    return (sd_counters(pair["ours"].generate(prompts, **kw)),
            sd_counters(pair["real"].generate(prompts, **kw)))


@pytest.mark.parametrize(
    "kw",
    [
        {"max_new_tokens": 100, "num_assistant_tokens": 4},  # the upstream sample's call
        {"max_new_tokens": 40},  # the default: 5 candidates
        {"max_new_tokens": 30, "num_assistant_tokens": 1},
        {"max_new_tokens": 2, "num_assistant_tokens": 3},
        {"max_length": 30, "num_assistant_tokens": 3},
        {"max_new_tokens": 20, "assistant_confidence_threshold": 0.4},
        {"max_new_tokens": 20, "assistant_confidence_threshold": 0.4, "logprobs": 1},
        {"max_new_tokens": 80, "num_assistant_tokens": 4, "stop_token_ids": {13}},
        {"max_new_tokens": 60, "num_assistant_tokens": 3, "stop_strings": {"park"}},
        {"max_new_tokens": 60, "num_assistant_tokens": 3, "stop_strings": {"park"},
         "include_stop_str_in_output": True},
        {"max_new_tokens": 30, "num_assistant_tokens": 3, "repetition_penalty": 1.5},
        {"max_new_tokens": 30, "num_assistant_tokens": 3, "logprobs": 2},
        # speculative sampling with certain draws: the ratio test passes every candidate
        {"max_new_tokens": 30, "num_assistant_tokens": 3, "do_sample": True, "top_k": 1},
    ],
    ids=["sample", "default", "n1", "max_new_2", "max_length", "threshold", "threshold_logprobs",
         "stop_token", "stop_string", "stop_string_incl", "rep_penalty", "logprobs", "do_sample_top_k_1"],
)
def test_texts_and_counters_equal_real(pair: dict[str, Any], kw: dict[str, Any]) -> None:
    ours, real = _both(pair, [PROMPTS[0]], **kw)
    assert ours == real
    if pair["draft"] == "same_draft" or kw.get("do_sample"):
        assert ours["rejected"] == 0  # the main model as its own draft: every candidate passes
    elif ours["draft_tokens"]:
        assert ours["accepted"] < ours["draft_tokens"]


def test_batch_of_prompts_equal_real(pair: dict[str, Any]) -> None:
    ours, real = _both(pair, PROMPTS, max_new_tokens=25, num_assistant_tokens=3, stop_token_ids={13})
    assert ours == real and len(ours["texts"]) == 3


def test_texts_are_the_main_models_greedy_answers(pair: dict[str, Any], stories_dir: Path) -> None:
    plain = genai_shim.LLMPipeline(str(stories_dir), "CPU", **F32)
    for prompt in PROMPTS:
        want = plain.generate(prompt, max_new_tokens=40)
        # both of the pair, the same calls: their state carries into later tests' counters
        for name in ("ours", "real"):
            assert pair[name].generate(prompt, max_new_tokens=40, num_assistant_tokens=3) == want, name


def test_callback_streamer_and_stop_equal_real(pair: dict[str, Any]) -> None:
    got: dict[str, list[str]] = {"ours": [], "real": []}
    results = {}
    for name in ("ours", "real"):
        chunks = got[name]

        def cb(text: str, chunks: list[str] = chunks) -> bool:
            chunks.append(text)
            return len(chunks) >= 6  # STOP after the sixth chunk

        results[name] = pair[name].generate([PROMPTS[1]], max_new_tokens=40, num_assistant_tokens=3, streamer=cb)
    assert "".join(got["ours"]) == "".join(got["real"])
    assert results["ours"].texts[0].startswith("".join(got["ours"]))


def test_optimum_export_equal_real(real_genai: Any) -> None:
    """A real optimum-cli export (tiny random Llama, fp32) as main model and its int8 export as
    draft (same tokenizer, other weights: some candidates pass, some do not)."""
    main, draft = FIXTURES / "llama-fp32", FIXTURES / "llama-int8"
    ours = _pipe(genai_shim, main, draft)
    real = _pipe(real_genai, main, draft)
    accepted = drafted = 0
    # two prompts: which candidates the int8 draft gets right depends on the host's kernels
    # (an Intel host rejected one of the first prompt's 24, an AMD EPYC two of the second's)
    for prompt, kw in itertools.product(
        ([5, 17, 99, 300, 7], [400, 12, 7, 7, 300]),
        ({"max_new_tokens": 32, "num_assistant_tokens": 4}, {"max_new_tokens": 24}),
    ):
        ids = ov.Tensor(np.asarray([prompt], dtype=np.int64))
        a, b = ours.generate(ids, **kw), real.generate(ids, **kw)
        assert a.tokens == b.tokens
        ea, eb = a.extended_perf_metrics, b.extended_perf_metrics
        assert ea.get_num_accepted_tokens() == eb.get_num_accepted_tokens()
        assert ea.get_num_draft_tokens() == eb.get_num_draft_tokens()
        assert list(ea.draft_model_metrics.raw_metrics.m_batch_sizes) == list(
            eb.draft_model_metrics.raw_metrics.m_batch_sizes)
        assert list(a.perf_metrics.raw_metrics.m_batch_sizes) == list(b.perf_metrics.raw_metrics.m_batch_sizes)
        accepted += ea.get_num_accepted_tokens()
        drafted += ea.get_num_draft_tokens()
    assert 0 < accepted < drafted  # candidates both pass and fail


def test_sdpa_backend_refused_as_real(stories_dir: Path, real_genai: Any) -> None:
    with pytest.raises(RuntimeError, match="only supported for Gemma4 MTP model pairs"):
        _pipe(real_genai, stories_dir, stories_dir, ATTENTION_BACKEND="SDPA")
    with pytest.raises(ConfigError, match="only supported for Gemma4 MTP model pairs"):
        _pipe(genai_shim, stories_dir, stories_dir, ATTENTION_BACKEND="SDPA")


def _cb_pipe_run(pipe: Any, config: Any, prompts: list[str]) -> list[Any]:
    handles = [pipe.add_request(i, p, config) for i, p in enumerate(prompts)]
    while pipe.has_non_finished_requests():
        pipe.step()
    return [[(list(o.generated_ids), int(o.finish_reason)) for o in h.read_all()] for h in handles]


@pytest.mark.parametrize("kw", [{"num_assistant_tokens": 3}, {"assistant_confidence_threshold": 0.9}],
                         ids=["fixed", "threshold"])
def test_sampling_with_top_k_1_equals_real(stories_dir: Path, real_genai: Any, tiny_draft: Path,
                                           kw: dict[str, Any]) -> None:
    """Speculative sampling (do_sample) with top_k=1: every draw is certain, so the ids can
    equal the real's.  Both probabilities of the real's ratio test are then 1, so every draft
    candidate passes, also where the main model would draw another token: the answer is not
    the main model's greedy one."""
    got = {}
    for name, impl in (("ours", genai_shim), ("real", real_genai)):
        pipe = _cb_pipe(impl, stories_dir, tiny_draft)
        got[name] = _cb_pipe_run(pipe, impl.GenerationConfig(do_sample=True, top_k=1, max_new_tokens=30, **kw),
                                 PROMPTS[:2])
    assert got["ours"] == got["real"]
    plain = genai_shim.LLMPipeline(str(stories_dir), "CPU", **F32)
    greedy = plain.generate(PROMPTS[0], max_new_tokens=30)
    assert plain.get_tokenizer().decode(got["ours"][0][0][0]) != greedy


def test_sampling_runs_like_real(stories_dir: Path, tiny_draft: Path, real_genai: Any) -> None:
    """The upstream health check's config (temperature 0.7, threshold 0.9): both finish every
    request by length or stop; ours repeats itself for one rng_seed (its stream is numpy's,
    not the real's std::mt19937, so the texts differ from the real's) and rejects some
    candidates by the ratio test."""
    cfg = {"do_sample": True, "temperature": 0.7, "max_new_tokens": 20, "assistant_confidence_threshold": 0.9}
    runs = {}
    for name, impl in (("ours", genai_shim), ("real", real_genai)):
        runs[name] = _cb_pipe_run(_cb_pipe(impl, stories_dir, tiny_draft), impl.GenerationConfig(**cfg), PROMPTS)
    for name, outs in runs.items():
        assert all(f in (1, 2) for out in outs for _, f in out), name  # STOP or LENGTH
    again = _cb_pipe_run(_cb_pipe(genai_shim, stories_dir, tiny_draft), genai_shim.GenerationConfig(**cfg), PROMPTS)
    assert again == runs["ours"]
    pipe = _pipe(genai_shim, stories_dir, tiny_draft)
    res = pipe.generate([PROMPTS[0]], max_new_tokens=40, do_sample=True, top_k=5, num_assistant_tokens=3)
    e = res.extended_perf_metrics
    assert 0 < e.get_num_accepted_tokens() < e.get_num_draft_tokens()


def _cb_pipe(impl: Any, main: Path, draft: Path, **sc_fields: Any) -> Any:
    sc = impl.SchedulerConfig()
    for k, v in sc_fields.items():
        setattr(sc, k, v)
    return impl.ContinuousBatchingPipeline(
        str(main), sc, "CPU", dict(F32, draft_model=impl.draft_model(str(draft), "CPU", **F32))
    )


@pytest.mark.parametrize("draft_kind", ["same_draft", "tiny_draft"])
def test_continuous_batching_pipeline_with_draft_equal_real(
    draft_kind: str, stories_dir: Path, real_genai: Any, request: pytest.FixtureRequest
) -> None:
    """ContinuousBatchingPipeline(..., {"draft_model": ...}): one config per prompt (fixed
    candidates for one, a confidence threshold for the other), a fixed cache of 64 blocks."""
    draft = stories_dir if draft_kind == "same_draft" else request.getfixturevalue("tiny_draft")
    got = {}
    for name, impl in (("ours", genai_shim), ("real", real_genai)):
        pipe = _cb_pipe(impl, stories_dir, draft, num_kv_blocks=64)
        c1, c2 = impl.GenerationConfig(), impl.GenerationConfig()
        c1.max_new_tokens, c1.num_assistant_tokens = 30, 3
        c2.max_new_tokens, c2.assistant_confidence_threshold, c2.logprobs = 15, 0.3, 1
        results = pipe.generate(["Lily and Tom went to the big park to play", "The cat"], [c1, c2])
        got[name] = [
            (r.m_generation_ids, [round(float(x), 4) for x in r.m_scores], int(r.m_status),
             r.perf_metrics.get_num_input_tokens())
            for r in results
        ]
        e = results[0].extended_perf_metrics
        got[name].append((list(e.raw_metrics.m_batch_sizes), list(e.draft_model_metrics.raw_metrics.m_batch_sizes),
                          e.get_num_accepted_tokens(), e.get_num_draft_tokens()))
    assert got["ours"] == got["real"]


def test_continuous_batching_pipeline_refuses_split_steps(stories_dir: Path) -> None:
    """The real cuts prompts / candidates at max_num_batched_tokens (and then answers
    differently, garbled on 2026.4.1); genai_shim refuses instead."""
    pipe = _cb_pipe(genai_shim, stories_dir, stories_dir, max_num_batched_tokens=4)
    cfg = genai_shim.GenerationConfig()
    cfg.max_new_tokens = 10
    with pytest.raises(ConfigError, match="max_num_batched_tokens"):
        pipe.generate(["Lily and Tom went to the big park to play"], [cfg])
    assert not pipe.has_non_finished_requests()


def test_continuous_batching_pipeline_add_request_and_step_equal_real(
    stories_dir: Path, real_genai: Any, tiny_draft: Path
) -> None:
    """Two requests added, stepped to the end with incremental reads (one read per step: the
    validated tokens of that step), then a third one stopped by its handle."""
    got = {}
    for name, impl in (("ours", genai_shim), ("real", real_genai)):
        pipe = _cb_pipe(impl, stories_dir, tiny_draft)
        c1, c2 = impl.GenerationConfig(), impl.GenerationConfig()
        c1.max_new_tokens, c1.num_assistant_tokens = 20, 3
        c2.max_new_tokens, c2.num_assistant_tokens, c2.stop_token_ids = 12, 2, {13}
        h1, h2 = pipe.add_request(1, "Once upon a time", c1), pipe.add_request(2, "The cat", c2)
        reads, steps = [], 0
        while pipe.has_non_finished_requests():
            pipe.step()
            steps += 1
            if h1.can_read():
                reads.append(h1.read()[0].generated_ids)
        h3 = pipe.add_request(3, "Lily", c1)
        pipe.step()
        pipe.step()
        h3.stop()
        got[name] = (steps, reads, [o.generated_ids for o in h2.read_all()], int(h1.get_status()),
                     int(h3.get_status()), pipe.has_non_finished_requests())
        with pytest.raises(RuntimeError, match="cannot be used after it is stopped"):
            h3.read_all()
        pipe.step()
        assert not pipe.has_non_finished_requests()
    assert got["ours"] == got["real"]
    assert len(got["ours"][1]) > 1 and got["ours"][4] == int(genai_shim.GenerationStatus.STOP)


def test_streamer_base_writes_equal_real(pair: dict[str, Any]) -> None:
    """One write(list) per step with the step's new tokens, end() twice (measured)."""
    writes = {}
    for name, impl in (("ours", genai_shim), ("real", pair["real_module"])):
        seen: list[Any] = []

        class Recorder(impl.StreamerBase):  # type: ignore[name-defined,misc]
            def write(self, token: Any) -> Any:
                seen.append(list(token) if isinstance(token, list) else token)  # noqa: B023 - called within this iteration
                return impl.StreamingStatus.RUNNING  # noqa: B023 - called within this iteration

            def end(self) -> None:
                seen.append("end")  # noqa: B023 - called within this iteration

        pair[name].generate([PROMPTS[0]], max_new_tokens=12, num_assistant_tokens=3, streamer=Recorder())
        writes[name] = seen
    assert writes["ours"] == writes["real"] and writes["ours"][-2:] == ["end", "end"]


def test_chat_turns_equal_real(stories_dir: Path, real_genai: Any) -> None:
    """ChatHistory (3 turns: the whole templated history each turn) and start_chat: texts and
    per-turn counters equal the real's."""
    from tests.genai_shim.conftest import CHAT_TEMPLATE

    got: dict[str, list[Any]] = {"ours": [], "real": []}
    for name, impl in (("ours", genai_shim), ("real", real_genai)):
        pipe = _pipe(impl, stories_dir, stories_dir)
        pipe.get_tokenizer().set_chat_template(CHAT_TEMPLATE)
        history = impl.ChatHistory()
        for question in ("Who is Lily?", "What did she find?", "Where?"):
            history.append({"role": "user", "content": question})
            res = pipe.generate(history, max_new_tokens=16, num_assistant_tokens=3)
            history.append({"role": "assistant", "content": res.texts[0]})
            got[name].append(sd_counters(res))
        with pytest.warns(DeprecationWarning):
            pipe.start_chat()
        got[name] += [pipe.generate(q, max_new_tokens=16, num_assistant_tokens=3) for q in ("Who is Lily?", "Why?")]
        with pytest.warns(DeprecationWarning):
            pipe.finish_chat()
    assert got["ours"] == got["real"]
    assert got["ours"][1]["input"] > got["ours"][0]["input"]  # the history grows


def test_full_cache_ends_requests_ignored_like_real(stories_dir: Path, real_genai: Any) -> None:
    """A fixed cache of 2 blocks that the answer outgrows: the request ends IGNORED with what
    it generated after as many steps as the real's.  The real's output then also holds the
    draft's candidates of the step that never ran (unchecked tokens, a real bug): ours stops at
    the checked ones.  Several requests in 3 blocks end IGNORED too, none raises."""
    got = {}
    for name, impl in (("ours", genai_shim), ("real", real_genai)):
        pipe = _cb_pipe(impl, stories_dir, stories_dir, num_kv_blocks=2)
        config = impl.GenerationConfig(max_new_tokens=100, ignore_eos=True, num_assistant_tokens=5)
        h = pipe.add_request(0, PROMPTS[0], config)
        steps = 0
        while pipe.has_non_finished_requests():
            pipe.step()
            steps += 1
        out = h.read_all()[0]
        got[name] = (steps, str(h.get_status()).rsplit(".", 1)[-1], list(out.generated_ids), int(out.finish_reason))
    (steps, status, ids, finish), real = got["ours"], got["real"]
    assert (steps, status, finish) == (real[0], "IGNORED", real[3]) == (real[0], real[1], 0)
    assert ids == real[2][: len(ids)] and 0 <= len(real[2]) - len(ids) <= 5
    pipe = _cb_pipe(genai_shim, stories_dir, stories_dir, num_kv_blocks=3)
    config = genai_shim.GenerationConfig(max_new_tokens=100, ignore_eos=True, num_assistant_tokens=5)
    res = pipe.generate(PROMPTS, [config] * 3)
    assert [r.m_status for r in res] == [genai_shim.GenerationStatus.IGNORED] * 3


def test_add_request_without_candidates_fails_like_real(stories_dir: Path, real_genai: Any) -> None:
    """generate() gives a config without num_assistant_tokens / a threshold 5 candidates;
    add_request does not: the real's step() fails, ours add_request, with the real's text."""
    config = {"max_new_tokens": 5}
    with pytest.raises(ConfigError, match="should have initialized options"):
        _cb_pipe(genai_shim, stories_dir, stories_dir).add_request(0, PROMPTS[0], genai_shim.GenerationConfig(**config))
    pipe = _cb_pipe(real_genai, stories_dir, stories_dir)
    pipe.add_request(0, PROMPTS[0], real_genai.GenerationConfig(**config))
    with pytest.raises(RuntimeError, match="should have initialized options"):
        pipe.step()
