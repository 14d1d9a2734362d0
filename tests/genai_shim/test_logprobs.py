"""GenerationConfig.logprobs fills the scores as the real openvino_genai does (f32 hints).

Measured on openvino_genai 2026.4.1 (stories260K): with ``logprobs >= 1`` (1, 3, 5 give the
same) the score of a greedy or multinomial sequence is the sum over its kept tokens of
log_softmax(raw logits)[token] — before penalties, temperature and top-k/p; tokens a stop string
removes do not count, a stop token does.  ``logprobs = 0``: greedy scores 0.0, multinomial the
log-probabilities under the filtered distribution.  Beam search scores do not change.
"""

from __future__ import annotations

import numpy as np
import openvino as ov
import pytest

import genai_shim
from tests.genai_shim.conftest import F32, NPU_LENS, REAL_NPU

pytestmark = pytest.mark.oracle

PROMPT = "Once upon a time"
TOL = 2e-3


@pytest.fixture(scope="module")
def reference(stories_dir):
    """log_softmax of the raw logits of a prompt + answer, from openvino itself (f32)."""
    compiled = ov.Core().compile_model(str(stories_dir / "openvino_model.xml"), "CPU", F32)

    def logprobs(prompt: list[int], answer: list[int]) -> list[float]:
        ids = np.array([prompt + answer], dtype=np.int64)
        req = compiled.create_infer_request()
        out = req.infer(
            {
                "input_ids": ids,
                "attention_mask": np.ones_like(ids),
                "position_ids": np.arange(ids.shape[1], dtype=np.int64)[None],
                "beam_idx": np.zeros(1, dtype=np.int32),
            }
        )
        rows = np.asarray(out["logits"][0], dtype=np.float64)[len(prompt) - 1 : -1]
        top = rows.max(axis=1, keepdims=True)
        lsm = rows - top - np.log(np.exp(rows - top).sum(axis=1, keepdims=True))
        return [float(lsm[i, t]) for i, t in enumerate(answer)]

    return logprobs


def _prompt_ids(pipe) -> list[int]:
    return [int(t) for t in np.asarray(pipe.get_tokenizer().encode(PROMPT).input_ids.data)[0]]


GREEDY = {
    "lp1": {"max_new_tokens": 30, "logprobs": 1},
    "lp5": {"max_new_tokens": 30, "logprobs": 5},
    "lp0": {"max_new_tokens": 30, "logprobs": 0},
    "repetition_penalty": {"max_new_tokens": 30, "logprobs": 1, "repetition_penalty": 2.0},
    "presence_penalty": {"max_new_tokens": 30, "logprobs": 1, "presence_penalty": 1.5},
    "stop_token": {"max_new_tokens": 30, "logprobs": 1, "stop_token_ids": {298}},
    "stop_string": {"max_new_tokens": 30, "logprobs": 1, "stop_strings": {"girl"}},
    "stop_string_included": {
        "max_new_tokens": 30,
        "logprobs": 1,
        "stop_strings": {"girl"},
        "include_stop_str_in_output": True,
    },
    "long": {"max_new_tokens": 200, "logprobs": 1},
}


@pytest.mark.parametrize("backend", ["PA", "SDPA"])
@pytest.mark.parametrize("kw", list(GREEDY.values()), ids=list(GREEDY))
def test_greedy_logprobs_match_real_cpu(pipelines, stories_dir, backend, kw):
    props = dict(F32) if backend == "PA" else {**F32, "ATTENTION_BACKEND": "SDPA"}
    ours = pipelines("ours", stories_dir, "CPU", **props)
    real = pipelines("real", stories_dir, "CPU", **props)
    a = ours.generate(ours.get_tokenizer().encode(PROMPT), **kw)
    b = real.generate(real.get_tokenizer().encode(PROMPT), **kw)
    assert a.tokens == b.tokens
    assert a.scores == pytest.approx(b.scores, abs=TOL)
    if kw["logprobs"] == 0:
        assert a.scores == [0.0] == b.scores
    else:
        assert a.scores[0] < 0
    # DecodedResults carry the same score.
    da, db = ours.generate([PROMPT], **kw), real.generate([PROMPT], **kw)
    assert da.texts == db.texts and da.scores == pytest.approx(db.scores, abs=TOL)


def test_greedy_logprobs_are_raw_log_softmax(pipelines, stories_dir, reference):
    ours = pipelines("ours", stories_dir, "CPU", **F32)
    prompt = _prompt_ids(ours)
    for kw in GREEDY.values():
        if kw["logprobs"]:
            r = ours.generate(ours.get_tokenizer().encode(PROMPT), **kw)
            assert r.scores[0] == pytest.approx(sum(reference(prompt, r.tokens[0])), abs=1e-4)


def test_batch_logprobs_match_real(pipelines, stories_dir):
    for props in (F32, {**F32, "ATTENTION_BACKEND": "SDPA"}):
        ours = pipelines("ours", stories_dir, "CPU", **props)
        real = pipelines("real", stories_dir, "CPU", **props)
        kw = {"max_new_tokens": 8, "logprobs": 1}
        a, b = ours.generate([PROMPT, "Tom and"], **kw), real.generate([PROMPT, "Tom and"], **kw)
        assert a.texts == b.texts
        assert a.scores == pytest.approx(b.scores, abs=TOL)


MULTINOMIAL = {
    "t2": {"do_sample": True, "temperature": 2.0, "rng_seed": 5},
    "top_k": {"do_sample": True, "temperature": 0.5, "top_k": 3, "rng_seed": 5},
    "n3": {"do_sample": True, "num_return_sequences": 3, "rng_seed": 1},
}


@pytest.mark.parametrize("kw", list(MULTINOMIAL.values()), ids=list(MULTINOMIAL))
def test_multinomial_logprobs_rule_of_real(pipelines, stories_dir, reference, kw):
    """Our random stream differs from the real one, so each library is checked against the
    rule on its own tokens: raw log-softmax with logprobs, filtered log-probs without."""
    prompt = None
    for kind in ("ours", "real"):
        pipe = pipelines(kind, stories_dir, "CPU", **F32)
        prompt = prompt or _prompt_ids(pipe)
        with_lp = pipe.generate(pipe.get_tokenizer().encode(PROMPT), max_new_tokens=10, logprobs=1, **kw)
        for toks, score in zip(with_lp.tokens, with_lp.scores, strict=False):
            assert score == pytest.approx(sum(reference(prompt, list(toks))), abs=TOL), kind
        without = pipe.generate(pipe.get_tokenizer().encode(PROMPT), max_new_tokens=10, **kw)
        for _toks, score in zip(without.tokens, without.scores, strict=False):
            # the filtered distribution is sharper or equal: its log-probs are not below zero
            # and differ from the raw ones unless the filter is neutral
            assert score <= 0.0, kind


def test_beam_scores_unchanged_by_logprobs(pipelines, stories_dir):
    ours = pipelines("ours", stories_dir, "CPU", **F32)
    real = pipelines("real", stories_dir, "CPU", **F32)
    kw = {"max_new_tokens": 10, "num_beams": 2, "num_return_sequences": 2}
    for lp in (0, 2):
        a, b = ours.generate([PROMPT], logprobs=lp, **kw), real.generate([PROMPT], logprobs=lp, **kw)
        assert a.texts == b.texts
        assert a.scores == pytest.approx(b.scores, abs=1e-4)
    assert ours.generate([PROMPT], logprobs=2, **kw).scores == ours.generate([PROMPT], **kw).scores


@pytest.fixture(scope="module")
def real_npu(stories_dir, real_genai):
    return real_genai.LLMPipeline(str(stories_dir), "NPU", **REAL_NPU, **NPU_LENS, **F32)


@pytest.mark.parametrize(
    "kw", [GREEDY["lp1"], GREEDY["lp0"], GREEDY["stop_string"], GREEDY["repetition_penalty"]],
    ids=["lp1", "lp0", "stop_string", "repetition_penalty"],
)
def test_logprobs_match_real_npu(stories_dir, npu_one, real_npu, kw):
    """10 tokens: the real NPUW's own log-probs drift from the CPU plugin's by about 1e-4 per
    token (30 tokens with repetition_penalty 2: real NPU -30.9227, CPU and ours -30.9259)."""
    kw = {**kw, "max_new_tokens": 10}
    ours = genai_shim.LLMPipeline(str(stories_dir), "NPU", **npu_one["props"], **NPU_LENS)
    a = ours.generate(ours.get_tokenizer().encode(PROMPT), **kw)
    b = real_npu.generate(real_npu.get_tokenizer().encode(PROMPT), **kw)
    assert a.tokens == b.tokens
    assert a.scores == pytest.approx(b.scores, abs=TOL)
    # multinomial on NPU: the same rule as on CPU
    m = ours.generate(ours.get_tokenizer().encode(PROMPT), max_new_tokens=10, logprobs=1, do_sample=True, rng_seed=3)
    r = real_npu.generate(
        real_npu.get_tokenizer().encode(PROMPT), max_new_tokens=10, logprobs=1, do_sample=True, rng_seed=3
    )
    assert m.scores[0] < 0 and r.scores[0] < 0


def test_speculative_npu_scores_stay_zero_like_real(stories_dir, real_genai, npu_one):
    """The real stateful speculative pipeline (NPU main model) returns 0.0 with logprobs too
    (measured); genai_shim's does the same.  With both models on CPU (continuous batching) the
    scores are the main model's log-probabilities (test_speculative_cb)."""
    kw = {"max_new_tokens": 10, "logprobs": 1}
    real = real_genai.LLMPipeline(
        str(stories_dir),
        "NPU",
        draft_model=real_genai.draft_model(str(stories_dir), "CPU", **F32),
        **REAL_NPU,
        **NPU_LENS,
        **F32,
    )
    ours = genai_shim.LLMPipeline(
        str(stories_dir),
        "NPU",
        draft_model=genai_shim.draft_model(str(stories_dir), "CPU", **F32),
        **npu_one["props"],
        **NPU_LENS,
    )
    a, b = ours.generate([PROMPT], **kw), real.generate([PROMPT], **kw)
    assert a.texts == b.texts and a.scores == b.scores == [0.0]
