"""Speculative decoding (draft_model) side by side with the real openvino_genai on NPU (NPUW on
CPU) and CPU: texts, candidate counters, streaming, limits and error texts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import genai_shim
from ov_npu_emu.errors import ConfigError, UserInputError
from tests.genai_shim.conftest import F32, REAL_NPU, needs_npuw
from tests.genai_shim.speculative_helpers import build_draft, counters

pytestmark = needs_npuw

NPU_PROPS = {"MAX_PROMPT_LEN": 64, "MIN_RESPONSE_LEN": 256}
PROMPTS = ["Once upon a time", "Lily and Tom", "The cat"]
@pytest.fixture(scope="module")
def tiny_draft(stories_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A different model (random tiny Llama) with stories260K's tokenizer: few candidates pass."""
    return build_draft(tmp_path_factory.mktemp("draft_tiny"), stories_dir, own_tokenizer=False)


def _pipe(impl: Any, main: Path, draft: Path, device: str = "NPU", draft_device: str = "CPU",
          **kw: Any) -> Any:
    props = dict(F32, **(dict(REAL_NPU, **NPU_PROPS) if device == "NPU" else {}))
    dprops = dict(F32, **(dict(REAL_NPU, **NPU_PROPS) if draft_device == "NPU" else {}))
    props.update(kw)
    return impl.LLMPipeline(
        str(main), device, draft_model=impl.draft_model(str(draft), draft_device, **dprops),
        **props,
    )


def _reasons(res: Any) -> list[int]:
    return [int(r) for r in res.finish_reasons]


FIRST_CALL = {"max_new_tokens": 50, "num_assistant_tokens": 3}


@pytest.fixture(scope="module", params=["same_draft", "tiny_draft"])
def pair(request: pytest.FixtureRequest, stories_dir: Path, real_genai: Any) -> dict[str, Any]:
    """Our and the real NPU pipeline with the same draft, plus each one's first-call result (the
    real accumulates raw counters over calls on one pipeline, so counters are compared on the
    first call)."""
    draft = stories_dir if request.param == "same_draft" else request.getfixturevalue("tiny_draft")
    out: dict[str, Any] = {"draft": draft, "main": stories_dir}
    for name, impl in (("ours", genai_shim), ("real", real_genai)):
        pipe = _pipe(impl, stories_dir, draft)
        out[name] = pipe
        out[name + "_first"] = pipe.generate([PROMPTS[0]], **FIRST_CALL)
    return out


def test_first_call_texts_and_counters_equal_real(pair: dict[str, Any]) -> None:
    ours, real = pair["ours_first"], pair["real_first"]
    assert ours.texts == real.texts
    assert counters(ours) == counters(real)
    assert _reasons(ours) == _reasons(real)
    if pair["draft"].name == "stories260K":
        assert counters(ours)["rejected"] == 0  # the main model as its own draft: all accepted
    else:
        assert counters(ours)["accepted"] < counters(ours)["draft_tokens"]


@pytest.fixture(scope="module")
def plain(stories_dir: Path) -> Any:
    """Our NPU pipeline without a draft: the main model's own greedy answers."""
    return genai_shim.LLMPipeline(str(stories_dir), "NPU", **F32, **REAL_NPU, **NPU_PROPS)


@pytest.mark.parametrize("n", [1, 2, 5, 7])
def test_texts_equal_real_and_main_greedy(pair: dict[str, Any], plain: Any, n: int) -> None:
    for prompt in PROMPTS:
        ours = pair["ours"].generate(prompt, max_new_tokens=40, num_assistant_tokens=n)
        assert ours == pair["real"].generate(prompt, max_new_tokens=40, num_assistant_tokens=n)
        assert ours == plain.generate(prompt, max_new_tokens=40)


@pytest.mark.parametrize("max_new", [1, 2, 3, 4, 11])
def test_max_new_tokens_edges(pair: dict[str, Any], max_new: int) -> None:
    kw = {"max_new_tokens": max_new, "num_assistant_tokens": 4}
    ours = pair["ours"].generate([PROMPTS[0]], **kw)
    real = pair["real"].generate([PROMPTS[0]], **kw)
    assert ours.texts == real.texts
    assert ours.perf_metrics.get_num_generated_tokens() == max_new


def test_max_length_counts_as_max_new_tokens(pair: dict[str, Any]) -> None:
    """The stateful speculative pipeline calls get_max_new_tokens() without the prompt length."""
    ours = pair["ours"].generate([PROMPTS[0]], max_length=10)
    assert ours.texts == pair["real"].generate([PROMPTS[0]], max_length=10).texts
    assert ours.perf_metrics.get_num_generated_tokens() == 10  # not 10 - prompt length


@pytest.mark.parametrize(
    "kw",
    [
        {"stop_strings": {"park"}},
        {"stop_strings": {"park"}, "include_stop_str_in_output": True},
        {"stop_token_ids": {13}},
        {"repetition_penalty": 1.5},
        {"min_new_tokens": 30},
        {"ignore_eos": True},
    ],
    ids=["stop_str", "stop_str_incl", "stop_token", "rep_penalty", "min_new", "ignore_eos"],
)
def test_sampler_options_as_real(pair: dict[str, Any], kw: dict[str, Any]) -> None:
    """The real NPU pipeline samples plain argmax (penalties and stop strings have no effect)
    and checks EOS / stop_token_ids on the last token of the main model's last call."""
    ours = pair["ours"].generate([PROMPTS[1]], max_new_tokens=60, **kw)
    real = pair["real"].generate([PROMPTS[1]], max_new_tokens=60, **kw)
    assert ours.texts == real.texts
    assert _reasons(ours) == _reasons(real)


def test_encoded_inputs(pair: dict[str, Any]) -> None:
    ids = pair["ours"].get_tokenizer().encode(PROMPTS[2])
    ours = pair["ours"].generate(ids, max_new_tokens=12)
    real = pair["real"].generate(pair["real"].get_tokenizer().encode(PROMPTS[2]), max_new_tokens=12)
    assert ours.tokens == real.tokens


def test_callback_streamer_chunks_and_stop(pair: dict[str, Any], real_genai: Any) -> None:
    got: dict[str, list[str]] = {"ours": [], "real": []}
    results = {}
    for name in ("ours", "real"):
        chunks = got[name]

        def cb(text: str, chunks: list[str] = chunks) -> bool:
            chunks.append(text)
            return len(chunks) >= 3  # STOP after the third chunk

        results[name] = pair[name].generate([PROMPTS[0]], max_new_tokens=30, streamer=cb)
    assert got["ours"] == got["real"] and len(got["ours"]) >= 3
    assert results["ours"].texts == results["real"].texts
    assert _reasons(results["ours"]) == _reasons(results["real"])


def test_streamer_base_gets_validated_lists_and_cancel(
    pair: dict[str, Any], real_genai: Any
) -> None:
    writes: dict[str, list[Any]] = {}
    reasons = {}
    for name, impl in (("ours", genai_shim), ("real", real_genai)):
        seen: list[Any] = []

        class Recorder(impl.StreamerBase):  # type: ignore[name-defined,misc]
            def write(self, token: Any) -> Any:
                seen.append(list(token) if isinstance(token, list) else token)  # noqa: B023 - called within this iteration
                cancel = len(seen) == 4  # noqa: B023 - called within this iteration
                return impl.StreamingStatus.CANCEL if cancel else impl.StreamingStatus.RUNNING  # noqa: B023 - called within this iteration

            def end(self) -> None:
                seen.append("end")  # noqa: B023 - called within this iteration

        res = pair[name].generate([PROMPTS[0]], max_new_tokens=25, num_assistant_tokens=3,
                                  streamer=Recorder())
        writes[name], reasons[name] = seen, res.finish_reasons
    assert writes["ours"] == writes["real"]
    assert [int(r) for r in reasons["ours"]] == [int(r) for r in reasons["real"]]


def test_candidates_beyond_compiled_window_error_as_real(pair: dict[str, Any]) -> None:
    """The main model is compiled for 2 * num_assistant_tokens + 1 tokens per call (default 5
    → 11 → 16 aligned); 10 candidates grow past it only when they are accepted."""
    if pair["draft"].name != "stories260K":
        pytest.skip("needs accepted candidates")
    with pytest.raises(UserInputError, match='NPUW_LLM_MAX_GENERATION_TOKEN_LEN": 16'):
        pair["ours"].generate(PROMPTS[0], max_new_tokens=60, num_assistant_tokens=10)
    # The state is reset after the error (the real pipeline is unusable afterwards).
    assert pair["ours"].generate(PROMPTS[0], max_new_tokens=5) == ", there was a little"


def _raises_like_real(ours: Any, real: Any, fn: Any, error: type[Exception]) -> str:
    with pytest.raises(RuntimeError) as real_err:
        fn(real)
    with pytest.raises(error) as our_err:
        fn(ours)
    expected = str(real_err.value).strip().splitlines()[-1].split(" (")[0]
    assert expected[:40] in str(our_err.value)
    return str(our_err.value)


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda p: p.generate("Hi", max_new_tokens=5, do_sample=True), UserInputError),
        (
            lambda p: p.generate("Hi", max_new_tokens=5, assistant_confidence_threshold=0.4),
            ConfigError,
        ),
        (lambda p: p.generate("Hi", max_new_tokens=5, num_beams=2), ConfigError),
        (lambda p: p.generate(["Hi", "There"], max_new_tokens=5), UserInputError),
        (lambda p: p.generate("Hi", max_new_tokens=0), ConfigError),
        (lambda p: p.generate("Once upon a time " * 20, max_new_tokens=5), UserInputError),
    ],
    ids=["multinomial", "threshold_and_n", "beam", "batch2", "max_new_0", "prompt_too_long"],
)
def test_config_errors_as_real(pair: dict[str, Any], call: Any, error: type[Exception]) -> None:
    if pair["draft"].name != "stories260K":
        pytest.skip("one draft is enough")
    _raises_like_real(pair["ours"], pair["real"], call, error)
    assert pair["ours"].generate(PROMPTS[0], max_new_tokens=5) == ", there was a little"


def test_threshold_only_error_as_real(pair: dict[str, Any], real_genai: Any) -> None:
    if pair["draft"].name != "stories260K":
        pytest.skip("one draft is enough")
    for name, impl in (("ours", genai_shim), ("real", real_genai)):
        cfg = impl.GenerationConfig()
        cfg.max_new_tokens, cfg.assistant_confidence_threshold = 5, 0.4
        err = ConfigError if name == "ours" else RuntimeError
        with pytest.raises(err, match="only supports num_assistant_tokens"):
            pair[name].generate("Hi", cfg)


def test_default_num_assistant_tokens(pair: dict[str, Any]) -> None:
    ours = pair["ours"].get_generation_config()
    real = pair["real"].get_generation_config()
    assert ours.num_assistant_tokens == real.num_assistant_tokens == 5


def test_perf_metrics_usable(pair: dict[str, Any]) -> None:
    res = pair["ours"].generate([PROMPTS[0]], max_new_tokens=20)
    pm = res.perf_metrics
    assert pm.get_ttft().mean > 0 and pm.get_tpot().mean > 0 and pm.get_throughput().mean > 0
    assert pm.get_generate_duration().mean >= pm.get_ttft().mean
    assert pm.get_num_generated_tokens() == 20 and pm.get_load_time() > 0
    e = res.extended_perf_metrics
    assert e.main_model_metrics.get_ttft().mean > 0 and e.draft_model_metrics.get_ttst().mean > 0
    rate = e.get_draft_acceptance_rate()
    assert 0.0 <= rate <= 1.0
    assert e.get_draft_to_main_inference_duration_ratio() > 0


def test_draft_with_other_tokenizer_rejected(stories_dir: Path, real_genai: Any,
                                            tmp_path: Path) -> None:
    other = build_draft(tmp_path / "own", stories_dir, own_tokenizer=True)
    with pytest.raises(RuntimeError, match="Tokenizers for draft and main models are different!"):
        _pipe(real_genai, stories_dir, other)
    with pytest.raises(ConfigError, match="Tokenizers for draft and main models are different!"):
        _pipe(genai_shim, stories_dir, other)


def test_draft_on_npu(stories_dir: Path, tiny_draft: Path, real_genai: Any) -> None:
    ours = _pipe(genai_shim, stories_dir, tiny_draft, draft_device="NPU")
    real = _pipe(real_genai, stories_dir, tiny_draft, draft_device="NPU")
    kw = {"max_new_tokens": 30, "num_assistant_tokens": 3}
    a, b = ours.generate([PROMPTS[0]], **kw), real.generate([PROMPTS[0]], **kw)
    assert a.texts == b.texts and counters(a) == counters(b)


def test_kv_capacity_ends_quietly(stories_dir: Path) -> None:
    """At the KV capacity our pipeline stops (the real one fails inside NPUW: see docs)."""
    pipe = _pipe(genai_shim, stories_dir, stories_dir, MIN_RESPONSE_LEN=64)
    plain = genai_shim.LLMPipeline(str(stories_dir), "NPU", **F32, **REAL_NPU, MAX_PROMPT_LEN=64,
                                   MIN_RESPONSE_LEN=64)
    res = pipe.generate([PROMPTS[0]], max_new_tokens=300)
    full = plain.generate(PROMPTS[0], max_new_tokens=300)
    assert full.startswith(res.texts[0]) and len(res.texts[0]) > 200
    assert res.perf_metrics.get_num_generated_tokens() < 300
    assert pipe.generate(PROMPTS[0], max_new_tokens=5) == ", there was a little"


def test_bad_draft_arguments(stories_dir: Path, tmp_path: Path) -> None:
    from ov_npu_emu.errors import IRReadError

    with pytest.raises(IRReadError, match="draft_model"):
        genai_shim.draft_model(tmp_path, "CPU")
    with pytest.raises(UserInputError, match="draft_model must be"):
        genai_shim.LLMPipeline(str(stories_dir), "NPU", draft_model=str(stories_dir))


def test_cpu_main_with_npu_draft_is_the_stateful_pipeline(
    stories_dir: Path, tiny_draft: Path, real_genai: Any
) -> None:
    """One model on NPU is enough for the real stateful pipeline: its stop-token rule applies."""
    kw = {"max_new_tokens": 60, "num_assistant_tokens": 3, "stop_token_ids": {13}}
    res = {}
    for name, impl in (("ours", genai_shim), ("real", real_genai)):
        pipe = _pipe(impl, stories_dir, tiny_draft, device="CPU", draft_device="NPU")
        res[name] = pipe.generate([PROMPTS[0]], **kw)
    assert res["ours"].texts == res["real"].texts
    assert counters(res["ours"]) == counters(res["real"])
    assert res["ours"].perf_metrics.get_num_generated_tokens() == 60  # past the "\n" (id 13)


def test_generation_config_json_sets_the_compiled_window(
    stories_dir: Path, real_genai: Any, tmp_path: Path
) -> None:
    """num_assistant_tokens from generation_config.json (8) sizes the main model's window
    (2 × 8 + 1 → 24 tokens per call), so 10 candidates growing to 20 fit (16 would not)."""
    folder = tmp_path / "stories_n8"
    shutil.copytree(stories_dir, folder)
    config = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps(dict(config, num_assistant_tokens=8)))
    got = {}
    for name, impl in (("ours", genai_shim), ("real", real_genai)):
        pipe = _pipe(impl, folder, folder)
        assert pipe.get_generation_config().num_assistant_tokens == 8
        res = pipe.generate([PROMPTS[0]], max_new_tokens=60, num_assistant_tokens=10)
        got[name] = counters(res)
    assert got["ours"] == got["real"]
    assert max(got["ours"]["main_batches"]) > 16


def test_full_stack_on_emulated_npu(stories_dir: Path) -> None:
    """genai_shim → NPUW → the emulated NPU (NPUW_DEVICES at its default), draft on CPU."""
    pipe = genai_shim.LLMPipeline(
        str(stories_dir), "NPU", draft_model=genai_shim.draft_model(str(stories_dir), "CPU"),
        MAX_PROMPT_LEN=64, MIN_RESPONSE_LEN=64,
    )
    res = pipe.generate([PROMPTS[0]], max_new_tokens=30, num_assistant_tokens=3)
    cpu = genai_shim.LLMPipeline(str(stories_dir), "CPU", **F32)
    assert res.texts[0] == cpu.generate(PROMPTS[0], max_new_tokens=30)
    assert res.extended_perf_metrics.get_num_accepted_tokens() > 10
