"""Prompt lookup decoding (``LLMPipeline(path, device, prompt_lookup=True)``) against the real
openvino_genai on the same folder (f32 hints).

Measured on openvino_genai 2026.4.1 with stories260K: on CPU the real runs its continuous-batching
PromptLookupImpl — greedy texts equal plain decoding's, ``m_batch_sizes`` holds the tokens each
step sampled (accepted candidates + 1), ``extended_perf_metrics`` is None, an accepted candidate
scores 0 with logprobs, a StreamerBase gets one ``write(list)`` per step and ``end()`` twice; a
config without ``num_assistant_tokens`` and ``max_ngram_size`` fails at generate().  On NPU the
property has no effect: plain token-by-token decoding, every batch size 1.
"""

from __future__ import annotations

import pytest

import genai_shim
from ov_npu_emu.errors import ConfigError
from tests.genai_shim.conftest import F32, NPU_LENS, REAL_NPU

pytestmark = pytest.mark.oracle

PROMPT = "Once upon a time, there was a little girl named Lily. She loved to play"
PL = {"num_assistant_tokens": 5, "max_ngram_size": 3}


@pytest.fixture(scope="module")
def pl_pipes(stories_dir, real_genai):
    return {
        "ours": genai_shim.LLMPipeline(str(stories_dir), "CPU", prompt_lookup=True, **F32),
        "real": real_genai.LLMPipeline(str(stories_dir), "CPU", prompt_lookup=True, **F32),
    }


def _summary(res):
    pm = res.perf_metrics
    raw = pm.raw_metrics
    return (
        res.texts,
        [int(f) for f in res.finish_reasons],
        list(raw.m_batch_sizes),
        pm.get_num_generated_tokens(),
        pm.get_num_input_tokens(),
        len(raw.m_durations),
        len(raw.m_new_token_times),
        res.extended_perf_metrics is None,
    )


CASES = {
    "40": {"max_new_tokens": 40},
    "300": {"max_new_tokens": 300},
    "max_length": {"max_length": 40},
    "stop_token_first": {"max_new_tokens": 40, "stop_token_ids": {410}},
    "stop_token": {"max_new_tokens": 100, "stop_token_ids": {426}},
    "stop_string": {"max_new_tokens": 60, "stop_strings": {"ball"}},
    "stop_string_included": {"max_new_tokens": 60, "stop_strings": {"ball"}, "include_stop_str_in_output": True},
    "repetition_penalty": {"max_new_tokens": 60, "repetition_penalty": 1.5},
    "ngram1_k2": {"max_new_tokens": 100, "num_assistant_tokens": 2, "max_ngram_size": 1},
    "ngram4_k8": {"max_new_tokens": 120, "num_assistant_tokens": 8, "max_ngram_size": 4},
}


@pytest.mark.parametrize("kw", list(CASES.values()), ids=list(CASES))
def test_prompt_lookup_matches_real_cpu(pl_pipes, kw):
    kw = {**PL, **kw}
    a = pl_pipes["ours"].generate([PROMPT], **kw)
    b = pl_pipes["real"].generate([PROMPT], **kw)
    assert _summary(a) == _summary(b)
    # tokens and logprobs (accepted candidates score 0)
    ta = pl_pipes["ours"].generate(pl_pipes["ours"].get_tokenizer().encode(PROMPT), logprobs=1, **kw)
    tb = pl_pipes["real"].generate(pl_pipes["real"].get_tokenizer().encode(PROMPT), logprobs=1, **kw)
    assert ta.tokens == tb.tokens
    assert ta.scores == pytest.approx(tb.scores, abs=2e-3)


BATCHES = {
    "two": ([PROMPT, "Tom and"], {"max_new_tokens": 60}),
    "two_swapped_logprobs": (["Tom and", PROMPT], {"max_new_tokens": 60, "logprobs": 1}),
    "three_stop_tokens": (
        [PROMPT, "Tom and", "Lily"], {"max_new_tokens": 45, "stop_token_ids": {2, 426}, "logprobs": 1}
    ),
    "max_length": ([PROMPT, "Tom and"], {"max_length": 40}),
    "stop_strings": ([PROMPT, "Tom and"], {"max_new_tokens": 60, "stop_strings": {"ball", "park"}}),
}


@pytest.mark.parametrize(("prompts", "kw"), list(BATCHES.values()), ids=list(BATCHES))
def test_prompt_lookup_batch_matches_real(pl_pipes, prompts, kw):
    """Batches run in lockstep: per step the batch size is the sum of every prompt's sampled
    tokens, ``num_input_tokens`` the first prompt's length (measured)."""
    a = pl_pipes["ours"].generate(prompts, **PL, **kw)
    b = pl_pipes["real"].generate(prompts, **PL, **kw)
    assert _summary(a) == _summary(b)
    assert a.scores == pytest.approx(b.scores, abs=2e-3)


def test_prompt_lookup_accepts_candidates_and_equals_plain(pl_pipes, pipelines, stories_dir):
    res = pl_pipes["ours"].generate([PROMPT], max_new_tokens=300, **PL)
    sizes = list(res.perf_metrics.raw_metrics.m_batch_sizes)
    assert max(sizes) == PL["num_assistant_tokens"] + 1 and sum(sizes) == 300
    plain = pipelines("ours", stories_dir, "CPU", **F32)
    assert plain.generate([PROMPT], max_new_tokens=300).texts == res.texts


def test_prompt_lookup_sample_flow_like_real(pl_pipes):
    """prompt_lookup_decoding_lm.py: GenerationConfig with max_new_tokens 100,
    num_assistant_tokens 5, max_ngram_size 3, a printing callback streamer."""
    got = []
    for kind in ("ours", "real"):
        pipe = pl_pipes[kind]
        config = pipe.get_generation_config()
        config.max_new_tokens = 100
        config.num_assistant_tokens = 5
        config.max_ngram_size = 3
        chunks: list[str] = []
        pipe.generate(PROMPT, config, lambda s, chunks=chunks: chunks.append(s))
        got.append(chunks)
    assert got[0] == got[1]


def test_prompt_lookup_streamer_base_like_real(pl_pipes, real_genai):
    got = []
    for kind, mod in (("ours", genai_shim), ("real", real_genai)):

        class Recorder(mod.StreamerBase):
            def __init__(self, stop_after=None):
                super().__init__()
                self.calls = []
                self.stop_after = stop_after

            def write(self, token):
                self.calls.append(list(token))
                if self.stop_after and len(self.calls) >= self.stop_after:
                    return mod.StreamingStatus.STOP  # noqa: B023 - called within this iteration
                return mod.StreamingStatus.RUNNING  # noqa: B023 - called within this iteration

            def end(self):
                self.calls.append("end")

        row = []
        for stop in (None, 3):
            rec = Recorder(stop)
            res = pl_pipes[kind].generate([PROMPT], max_new_tokens=40, streamer=rec, **PL)
            row.append((rec.calls, res.texts, [int(f) for f in res.finish_reasons]))
        got.append(row)
    assert got[0][0] == got[1][0]
    assert any(len(c) > 1 for c in got[0][0][0] if c != "end")  # a step wrote several tokens
    # STOP after the third write: the same writes and finish reason; the real's threaded
    # streamer lets its loop run one more step before it sees the STOP ("outsid": one token
    # more, not streamed), genai_shim stops at once ("outs") — as its plain CPU pipeline does.
    (calls_a, texts_a, fin_a), (calls_b, texts_b, fin_b) = got[0][1], got[1][1]
    assert calls_a == calls_b and fin_a == fin_b
    assert texts_b[0].startswith(texts_a[0])


def test_prompt_lookup_multinomial_runs(pl_pipes):
    """The real samples with prompt lookup too; the random streams differ, so only the shape."""
    res = pl_pipes["ours"].generate([PROMPT], max_new_tokens=40, do_sample=True, rng_seed=7, **PL)
    assert res.perf_metrics.get_num_generated_tokens() == 40
    again = pl_pipes["ours"].generate([PROMPT], max_new_tokens=40, do_sample=True, rng_seed=7, **PL)
    assert again.texts == res.texts and res.scores[0] < 0


def test_prompt_lookup_errors(pl_pipes, stories_dir, tiny_model_dir, real_genai):
    # the real: RuntimeError "`max_ngram_size` && `num_assistant_tokens` should be specified ..."
    for kw in ({}, {"max_ngram_size": 3}, {"num_assistant_tokens": 3}):
        with pytest.raises(ConfigError, match="should be specified for `prompt lookup decoding`"):
            pl_pipes["ours"].generate(PROMPT, max_new_tokens=4, **kw)
        with pytest.raises(RuntimeError, match="should be specified for `prompt lookup decoding`"):
            pl_pipes["real"].generate(PROMPT, max_new_tokens=4, **kw)
    for kind in ("ours", "real"):  # GenerationConfig.validate, real text
        with pytest.raises(RuntimeError, match="not compatible with assistant generation"):
            pl_pipes[kind].generate(PROMPT, max_new_tokens=4, num_beams=2, **PL)
    for kind in ("ours", "real"):
        with pytest.raises(RuntimeError, match="streaming is possible only with batch size=1"):
            pl_pipes[kind].generate([PROMPT, "Tom and"], max_new_tokens=4, streamer=print, **PL)
    for mod in (genai_shim, real_genai):
        with pytest.raises(RuntimeError, match="requires PagedAttention backend"):
            mod.LLMPipeline(str(stories_dir), "CPU", prompt_lookup=True, ATTENTION_BACKEND="SDPA")
    with pytest.raises(ConfigError, match="prompt_lookup must be a bool"):
        genai_shim.LLMPipeline(str(stories_dir), "CPU", prompt_lookup="yes")
    with pytest.raises(ConfigError, match="draft_model"):
        genai_shim.LLMPipeline(
            str(stories_dir), "CPU", prompt_lookup=True,
            draft_model=genai_shim.draft_model(str(tiny_model_dir), "CPU"),
        )


def test_prompt_lookup_on_npu_decodes_token_by_token_like_real(stories_dir, real_genai, npu_one, caplog):
    real = real_genai.LLMPipeline(
        str(stories_dir), "NPU", prompt_lookup=True, **REAL_NPU, **NPU_LENS, **F32
    )
    with caplog.at_level("WARNING", logger="genai_shim.pipeline"):
        ours = genai_shim.LLMPipeline(
            str(stories_dir), "NPU", prompt_lookup=True, **npu_one["props"], **NPU_LENS
        )
    assert "prompt_lookup has no effect on NPU" in caplog.text
    for kw in ({"max_new_tokens": 40}, {"max_new_tokens": 40, **PL}):
        a, b = ours.generate([PROMPT], **kw), real.generate([PROMPT], **kw)
        assert a.texts == b.texts
        assert (
            list(a.perf_metrics.raw_metrics.m_batch_sizes) == list(b.perf_metrics.raw_metrics.m_batch_sizes) == [1] * 40
        )


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_prompt_lookup_chat_like_real(chat_dir, real_genai):
    """start_chat turns and a ChatHistory (templated stories260K) give the real's answers."""
    kw = {**PL, "max_new_tokens": 30}
    got = []
    for mod in (genai_shim, real_genai):
        pipe = mod.LLMPipeline(str(chat_dir), "CPU", prompt_lookup=True, **F32)
        pipe.start_chat()
        answers = [pipe.generate(q, **kw) for q in ("Who is Lily?", "What did she find?")]
        pipe.finish_chat()
        history = mod.ChatHistory()
        history.append({"role": "user", "content": "Who is Lily?"})
        res = pipe.generate(history, **kw)
        got.append((answers, res.texts, list(res.perf_metrics.raw_metrics.m_batch_sizes)))
    assert got[0] == got[1]
