"""Speculative decoding in chat (ChatHistory and start_chat/finish_chat) side by side with the real
openvino_genai: texts and per-turn counters on a templated copy of stories260K."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import genai_shim
from tests.genai_shim.conftest import F32, REAL_NPU, needs_npuw
from tests.genai_shim.speculative_helpers import build_draft, counters

pytestmark = [needs_npuw, pytest.mark.filterwarnings("ignore:start_chat:DeprecationWarning")]

# The history of turn 3 is 104 tokens: the prompt window must hold it (the real checks it too).
NPU_PROPS = {"MAX_PROMPT_LEN": 256, "MIN_RESPONSE_LEN": 64}
GEN = {"max_new_tokens": 16, "num_assistant_tokens": 3}
QUESTIONS = ["Who is Lily?", "What did she do?", "Why?"]
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}"
    "Question: {{ m['content'] }}\n"
    "{% else %}Answer: {{ m['content'] }}{{ eos_token }}\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}Answer:{% endif %}"
)
#: per-call counters on every turn; the real accumulates the batch-size series and the pipeline's
#: generated count over the calls on one pipeline and keeps the first call's main / draft model
#: counts (compared separately below)
PER_CALL = ("accepted", "draft_tokens", "rejected", "input")


@pytest.fixture(scope="module")
def templated(stories_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """stories260K with a Question/Answer chat template (symlinks + its own tokenizer_config)."""
    out = tmp_path_factory.mktemp("stories_chat")
    cfg_path = stories_dir / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text()) if cfg_path.is_file() else {}
    for f in stories_dir.iterdir():
        if f.is_file() and f.name != "tokenizer_config.json":
            (out / f.name).symlink_to(f)
    cfg["chat_template"] = TEMPLATE
    (out / "tokenizer_config.json").write_text(json.dumps(cfg))
    return out


@pytest.fixture(scope="module", params=["same_draft", "tiny_draft"])
def draft(request: pytest.FixtureRequest, templated: Path, stories_dir: Path,
          tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The main model as its own draft (all accepted) or a random tiny Llama (few accepted)."""
    if request.param == "same_draft":
        return templated
    return build_draft(tmp_path_factory.mktemp("draft_tiny"), stories_dir, own_tokenizer=False)


def _pipe(impl: Any, main: Path, draft: Path, draft_device: str) -> Any:
    dprops = dict(F32, **(dict(REAL_NPU, **NPU_PROPS) if draft_device == "NPU" else {}))
    return impl.LLMPipeline(
        str(main), "NPU", draft_model=impl.draft_model(str(draft), draft_device, **dprops),
        **F32, **REAL_NPU, **NPU_PROPS,
    )


def _history_chat(impl: Any, pipe: Any, **gen: Any) -> list[Any]:
    history = impl.ChatHistory()
    out = []
    for q in QUESTIONS:
        history.append({"role": "user", "content": q})
        res = pipe.generate(history, **(gen or GEN))
        history.append({"role": "assistant", "content": res.texts[0]})
        out.append(res)
    return out


def _start_chat(pipe: Any) -> list[Any]:
    pipe.start_chat()
    try:
        return [pipe.generate([q], **GEN) for q in QUESTIONS]
    finally:
        pipe.finish_chat()


@pytest.fixture(scope="module")
def history_runs(templated: Path, draft: Path, real_genai: Any) -> dict[str, list[Any]]:
    """Each implementation's three ChatHistory turns on a fresh pipeline, draft on CPU."""
    return {
        name: _history_chat(impl, _pipe(impl, templated, draft, "CPU"))
        for name, impl in (("ours", genai_shim), ("real", real_genai))
    }


@pytest.fixture(scope="module")
def plain_texts(templated: Path) -> list[list[str]]:
    """Our NPU pipeline without a draft: the main model's own greedy chat answers."""
    pipe = genai_shim.LLMPipeline(str(templated), "NPU", **F32, **REAL_NPU, **NPU_PROPS)
    return [r.texts for r in _history_chat(genai_shim, pipe, max_new_tokens=GEN["max_new_tokens"])]


def test_chat_history_texts_and_counters_equal_real(
    history_runs: dict[str, list[Any]], plain_texts: list[list[str]]
) -> None:
    ours, real = history_runs["ours"], history_runs["real"]
    assert [r.texts for r in ours] == [r.texts for r in real] == plain_texts
    assert len({r.texts[0] for r in ours}) == 3  # three different answers, not one repeated
    assert counters(ours[0]) == counters(real[0])
    for o, r in zip(ours, real, strict=False):
        co, cr = counters(o), counters(r)
        assert {k: co[k] for k in PER_CALL} == {k: cr[k] for k in PER_CALL}
        # The real's per-model counts stay at the first call's values (evaluated once).
        assert (cr["draft_processed"], cr["main_generated"]) == (
            counters(real[0])["draft_processed"], counters(real[0])["main_generated"]
        )
        draft_raw = o.extended_perf_metrics.draft_model_metrics.raw_metrics
        assert co["draft_processed"] == sum(draft_raw.m_batch_sizes)
    # Both prefill the whole templated history each turn: the prompt grows by the last answer.
    inputs = [counters(o)["input"] for o in ours]
    assert inputs[0] < inputs[1] < inputs[2]
    # The real's series run on from turn to turn; ours restart, and concatenate to the real's.
    series: list[int] = []
    for turn, (o, r) in enumerate(zip(ours, real, strict=False), 1):
        series += counters(o)["batches"]
        assert counters(r)["batches"] == series
        assert counters(r)["main_batches"] == series
        assert counters(r)["generated"] == sum(series) == turn * GEN["max_new_tokens"]
        assert counters(o)["generated"] == GEN["max_new_tokens"]


def test_start_chat_equals_real_with_npu_draft(
    templated: Path, draft: Path, real_genai: Any, history_runs: dict[str, list[Any]]
) -> None:
    ours = _start_chat(_pipe(genai_shim, templated, draft, "NPU"))
    real = _start_chat(_pipe(real_genai, templated, draft, "NPU"))
    texts = [r.texts for r in history_runs["ours"]]
    assert [r.texts for r in ours] == [r.texts for r in real] == texts
    assert counters(ours[0]) == counters(real[0])
    # With an EOS inside the prompt (the template closes every answer with one) the real's NPU
    # draft proposes other candidates than its CPU draft and ours (measured, see docs): the
    # candidate counters of later turns agree only when every candidate passes.
    later = range(1, 3) if draft.name.startswith("stories_chat") else range(0)
    for i in later:
        co, cr = counters(ours[i]), counters(real[i])
        assert {k: co[k] for k in PER_CALL} == {k: cr[k] for k in PER_CALL}


def test_start_chat_with_cpu_draft_works_where_the_real_fails(
    templated: Path, draft: Path, real_genai: Any, history_runs: dict[str, list[Any]]
) -> None:
    """The real's start_chat path keeps the models' states between turns and prefills the whole
    history again: NPUW restarts at every prefill, the stateful CPU draft does not, so the real's
    turn 2 fails inside the CPU plugin. Ours resets both models every turn (documented
    difference); if the real stops failing here, compare its texts instead."""
    pipe = _pipe(genai_shim, templated, draft, "CPU")
    pipe.start_chat()
    answers = [pipe.generate(q, **GEN) for q in QUESTIONS]
    pipe.finish_chat()
    assert answers == [r.texts[0] for r in history_runs["real"]]
    real = _pipe(real_genai, templated, draft, "CPU")
    real.start_chat()
    assert real.generate(QUESTIONS[0], **GEN) == answers[0]
    with pytest.raises(RuntimeError, match="Eltwise shape infer"):
        real.generate(QUESTIONS[1], **GEN)
    real.finish_chat()
