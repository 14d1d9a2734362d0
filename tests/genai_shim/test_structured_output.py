"""Structured output (StructuredOutputConfig + xgrammar) side by side with the real openvino_genai.

The fixture is the committed byte-level BPE export ``gpt2-fp32`` (a random model, so the text is
nonsense, but the constrained greedy paths are long and non-trivial: a JSON object whose string
value runs to max_new_tokens, a regex that ends in EOS after eight tokens, an EBNF whose free
``[a-z]+`` part runs on, structural tags).  Greedy ids must equal the real's on CPU (f32 hints)
and on NPU with NPUW_DEVICES=CPU (the real with NPUW_ONLINE_PIPELINE=NONE).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import pytest

import genai_shim
from genai_shim import structured_output
from ov_npu_emu.errors import ConfigError
from tests.genai_shim.conftest import F32, NPU_LENS, REAL_NPU

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "optimum"
GPT2 = FIXTURES / "gpt2-fp32"
LLAMA = FIXTURES / "llama-fp32"  # SentencePiece-style vocabulary (raw '▁' / <0xNN> strings)

SCHEMA = json.dumps(
    {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
    }
)
REGEX = r"[0-9]{3}-[a-z]+ (yes|no)"
EBNF = 'root ::= "The " ("cat" | "dog") " is " [a-z]+ "."'


def _constraints(S: Any) -> dict[str, Any]:
    """name -> StructuredOutputConfig built with module ``S`` (the real's or ours)."""
    return {
        "json_schema": S(json_schema=SCHEMA),
        "regex": S(regex=REGEX),
        "grammar": S(grammar=EBNF),
        "triggered_tags": S(
            structural_tags_config=S.TriggeredTags(
                triggers=["<f"],
                tags=[S.Tag(begin="<f>", content=S.JSONSchema('{"type":"integer"}'), end="</f>")],
                at_least_one=True,
            )
        ),
        "concat": S(
            structural_tags_config=S.Concat(S.ConstString("A:"), S.Regex("[a-z]+"), S.ConstString("!"))
        ),
        "union_operator": S(structural_tags_config=S.Regex("[0-9]+") | S.ConstString("hello")),
    }


def _inputs(mod: Any, folder: Path) -> Any:
    ids = json.loads((folder / "golden.json").read_text())["prompt_ids"]
    return mod.TokenizedInputs(
        ov.Tensor(np.array([ids], dtype=np.int64)), ov.Tensor(np.ones((1, len(ids)), dtype=np.int64))
    )


def _run(pipe: Any, mod: Any, folder: Path, so: Any, **kw: Any) -> Any:
    cfg = mod.GenerationConfig(max_new_tokens=kw.pop("max_new_tokens", 24), **kw)
    cfg.structured_output_config = so
    return pipe.generate(_inputs(mod, folder), cfg)


CASES = list(_constraints(genai_shim.StructuredOutputConfig))


@pytest.mark.oracle
@pytest.mark.parametrize("case", CASES)
def test_greedy_equals_real_cpu(pipelines, real_genai, case):
    ours = _run(pipelines("ours", GPT2, "CPU", **F32), genai_shim, GPT2,
                _constraints(genai_shim.StructuredOutputConfig)[case])
    real = _run(pipelines("real", GPT2, "CPU", **F32), real_genai, GPT2,
                _constraints(real_genai.StructuredOutputConfig)[case])
    assert ours.tokens == real.tokens
    assert len(set(ours.tokens[0])) > 3  # non-trivial
    assert [int(r) for r in ours.finish_reasons] == [int(r) for r in real.finish_reasons]


@pytest.mark.oracle
@pytest.mark.parametrize(
    "case, ours_props",
    [
        ("json_schema", {"NPUW_DEVICES": "CPU"}),
        ("regex", {"NPUW_DEVICES": "CPU"}),
        ("json_schema", {}),  # our NPUW on the emulated NPU device
    ],
    ids=["json_schema-npuw_cpu", "regex-npuw_cpu", "json_schema-emulated_npu"],
)
def test_greedy_equals_real_npu(pipelines, real_genai, case, ours_props):
    ours_pipe = pipelines("ours", GPT2, "NPU", **ours_props, **NPU_LENS, **F32)
    real_pipe = pipelines("real", GPT2, "NPU", **REAL_NPU, **NPU_LENS, **F32)
    ours = _run(ours_pipe, genai_shim, GPT2, _constraints(genai_shim.StructuredOutputConfig)[case])
    real = _run(real_pipe, real_genai, GPT2, _constraints(real_genai.StructuredOutputConfig)[case])
    assert ours.tokens == real.tokens


@pytest.mark.oracle
def test_text_regex_logprobs_and_penalties_equal_real(pipelines, real_genai):
    ours_pipe = pipelines("ours", GPT2, "CPU", **F32)
    real_pipe = pipelines("real", GPT2, "CPU", **F32)
    for kw in ({"logprobs": 1}, {"repetition_penalty": 1.3, "min_new_tokens": 5}):
        ours = _run(ours_pipe, genai_shim, GPT2, genai_shim.StructuredOutputConfig(regex=REGEX), **kw)
        real = _run(real_pipe, real_genai, GPT2, real_genai.StructuredOutputConfig(regex=REGEX), **kw)
        assert ours.tokens == real.tokens
        assert ours.scores == pytest.approx(real.scores, abs=2e-3)
    # str in, str out: the decoded text matches the (bounded) regex and the real's text
    bounded = r"[0-9]{3}-[a-z]{1,8} (yes|no)"
    cfg = genai_shim.GenerationConfig(max_new_tokens=24)
    cfg.structured_output_config = genai_shim.StructuredOutputConfig(regex=bounded)
    text = ours_pipe.generate("The weather", cfg)
    rcfg = real_genai.GenerationConfig(max_new_tokens=24)
    rcfg.structured_output_config = real_genai.StructuredOutputConfig(regex=bounded)
    assert text == real_pipe.generate("The weather", rcfg)
    assert re.fullmatch(bounded, text)


@pytest.mark.oracle
def test_sentencepiece_vocab_behaves_as_real(pipelines, real_genai, caplog):
    """The real hands xgrammar the raw VocabDecoder strings ('▁the', '<0x31>'), so a regex of
    digits allows no token of a SentencePiece vocabulary: every logit is masked and greedy
    picks token 0 — genai_shim does the same (and says so in a warning)."""
    ours = _run(pipelines("ours", LLAMA, "CPU", **F32), genai_shim, LLAMA,
                genai_shim.StructuredOutputConfig(regex="[0-9]{3}"), max_new_tokens=4)
    real = _run(pipelines("real", LLAMA, "CPU", **F32), real_genai, LLAMA,
                real_genai.StructuredOutputConfig(regex="[0-9]{3}"), max_new_tokens=4)
    assert ours.tokens == real.tokens == [[0, 0, 0, 0]]
    assert "allows no token of this vocabulary" in caplog.text


def test_multinomial_output_obeys_the_constraint(pipelines):
    pipe = pipelines("ours", GPT2, "CPU", **F32)
    for seed in range(3):
        cfg = genai_shim.GenerationConfig(max_new_tokens=24, do_sample=True, top_k=20, rng_seed=seed)
        cfg.structured_output_config = genai_shim.StructuredOutputConfig(regex=REGEX)
        res = pipe.generate(_inputs(genai_shim, GPT2), cfg)
        assert res.finish_reasons == [genai_shim.GenerationFinishReason.STOP]
        assert re.fullmatch(REGEX, pipe.get_tokenizer().decode(res.tokens[0]))


# -- configuration and validation --------------------------------------------------------------
def test_config_fields_and_repr_match_real(real_genai):
    S, R = genai_shim.StructuredOutputConfig, real_genai.StructuredOutputConfig
    for kw in ({}, {"regex": "a+"}, {"json_schema": "{}"}, {"grammar": 'root ::= "x"'}):
        assert repr(S(**kw)) == repr(R(**kw))
    assert repr(S(json_schema=5)) == repr(R(json_schema=5))  # the kwargs path stringifies
    for mk in (
        lambda M: M.Concat(M.Regex("a"), M.ConstString("b")) + M.JSONSchema("{}"),
        lambda M: M.Regex("a") | (M.EBNF('root ::= "b"') | M.AnyText()),
        lambda M: M.TriggeredTags(triggers=["<f"], tags=[M.Tag(begin="<f>", content=M.AnyText(), end="</f>")]),
        lambda M: M.TagsWithSeparator(tags=[M.Tag(begin="<a>", content=M.Regex("x"), end="</a>")], separator=","),
        lambda M: M.QwenXMLParametersFormat('{"type": "object"}'),
    ):
        assert repr(mk(S)) == repr(mk(R))
    assert repr(S(structural_tags_config=S.Regex("a+"))) == repr(R(structural_tags_config=R.Regex("a+")))
    public = {n for n in dir(R()) if not n.startswith("_")}
    assert public <= {n for n in dir(S()) if not n.startswith("_")}


def test_exactly_one_constraint(real_genai):
    with pytest.raises(RuntimeError, match="Only one of json, regex, grammar") as real:
        real_genai.StructuredOutputConfig(json_schema="{}", regex="a")
    with pytest.raises(ConfigError, match="Only one of json, regex, grammar") as ours:
        genai_shim.StructuredOutputConfig(json_schema="{}", regex="a")
    assert str(ours.value).splitlines()[-1] in str(real.value)
    cfg = genai_shim.GenerationConfig(max_new_tokens=4)
    cfg.structured_output_config = genai_shim.StructuredOutputConfig()  # empty: fails validate()
    with pytest.raises(ConfigError, match="Only one of"):
        cfg.validate()


def test_unknown_key_and_wrong_types_are_typed_errors():
    with pytest.raises(ConfigError, match="no field 'json'"):
        genai_shim.StructuredOutputConfig(json='{"type": "object"}')  # the real ignores it
    so = genai_shim.StructuredOutputConfig()
    with pytest.raises(ConfigError, match="regex must be a str"):
        so.regex = 5
    with pytest.raises(ConfigError, match="must be a StructuredOutputConfig"):
        genai_shim.GenerationConfig(structured_output_config='{"type": "object"}')
    with pytest.raises(ConfigError, match="at least two elements"):
        genai_shim.StructuredOutputConfig.Concat(genai_shim.StructuredOutputConfig.Regex("a"))
    with pytest.raises(ConfigError, match="not registered"):
        genai_shim.StructuredOutputConfig(regex="a", backend="llguidance")


@pytest.mark.oracle
@pytest.mark.parametrize(
    "kw, text",
    [
        ({"json_schema": "{bad"}, "Failed to parse JSON"),
        ({"json_schema": '{"type": "nonsense"}'}, 'Unsupported type "nonsense"'),
        ({"regex": "(ab"}, "Regex parsing error at position 4: The parenthesis is not closed."),
        ({"grammar": "root ::= foo"}, 'Rule "foo" is not defined'),
    ],
    ids=["json-syntax", "json-type", "regex", "ebnf"],
)
def test_bad_grammar_is_a_config_error_like_the_real(pipelines, real_genai, kw, text):
    cfg = real_genai.GenerationConfig(max_new_tokens=4)
    cfg.structured_output_config = real_genai.StructuredOutputConfig(**kw)
    with pytest.raises(RuntimeError, match=re.escape(text)):
        pipelines("real", GPT2, "CPU", **F32).generate("hi", cfg)
    cfg = genai_shim.GenerationConfig(max_new_tokens=4)
    cfg.structured_output_config = genai_shim.StructuredOutputConfig(**kw)
    with pytest.raises(ConfigError, match=re.escape(text)):
        pipelines("ours", GPT2, "CPU", **F32).generate("hi", cfg)


def test_beam_search_is_rejected_not_ignored(pipelines):
    """The real's beam search leaves the constraint out silently; genai_shim refuses."""
    cfg = genai_shim.GenerationConfig(max_new_tokens=4, num_beams=2)
    cfg.structured_output_config = genai_shim.StructuredOutputConfig(regex="a+")
    with pytest.raises(ConfigError, match="beam search"):
        pipelines("ours", GPT2, "CPU", **F32).generate("hi", cfg)


def test_missing_xgrammar_names_what_to_install(monkeypatch, pipelines):
    monkeypatch.setattr(structured_output, "_core_module", None)
    monkeypatch.delitem(sys.modules, "xgrammar.xgrammar_bindings", raising=False)
    monkeypatch.setattr(structured_output.importlib.util, "find_spec", lambda name: None)
    cfg = genai_shim.GenerationConfig(max_new_tokens=4)
    cfg.structured_output_config = genai_shim.StructuredOutputConfig(regex="a+")
    with pytest.raises(ConfigError, match=r"pip install --no-deps \"xgrammar==0\.1\.31\""):
        pipelines("ours", GPT2, "CPU", **F32).generate("hi", cfg)


@pytest.mark.oracle
def test_prompt_lookup_equals_real(pipelines, real_genai):
    """Candidates are verified through the same masked sampling, as in the real."""
    out = []
    for kind, mod in (("ours", genai_shim), ("real", real_genai)):
        pipe = pipelines(kind, GPT2, "CPU", prompt_lookup=True, **F32)
        so = mod.StructuredOutputConfig(regex=REGEX)
        out.append(_run(pipe, mod, GPT2, so, num_assistant_tokens=3, max_ngram_size=2).tokens)
    assert out[0] == out[1]


def test_speculative_decoding_is_rejected_not_ignored(stories_dir):
    pipe = genai_shim.LLMPipeline(
        str(stories_dir), "CPU", draft_model=genai_shim.draft_model(str(stories_dir), "CPU")
    )
    cfg = genai_shim.GenerationConfig(max_new_tokens=4)
    cfg.structured_output_config = genai_shim.StructuredOutputConfig(regex="a+")
    with pytest.raises(ConfigError, match="speculative decoding"):
        pipe.generate("Once upon a time", cfg)


@pytest.mark.oracle
@pytest.mark.parametrize("device", ["CPU", "NPU"])
def test_grammar_times_in_perf_metrics_as_the_real(pipelines, real_genai, device):
    """The real reports its xgrammar compiler's set-up time per backend (kept for every later
    generate of the pipeline) and one compile time per constrained request (cleared after each
    generate); PerfMetrics summarise them in ms and `+` keeps the init map."""
    props = {"NPUW_DEVICES": "CPU"} if device == "NPU" else {}
    shapes = []
    for kind, mod in (("real", real_genai), ("ours", genai_shim)):
        pipe = pipelines(kind, GPT2, device if kind == "ours" else "CPU", **(props if kind == "ours" else {}))
        first = _run(pipe, mod, GPT2, mod.StructuredOutputConfig(json_schema=SCHEMA)).perf_metrics
        second = _run(pipe, mod, GPT2, mod.StructuredOutputConfig(regex=REGEX)).perf_metrics
        plain = pipe.generate(_inputs(mod, GPT2), mod.GenerationConfig(max_new_tokens=2)).perf_metrics
        for pm in (first, second):
            init = pm.get_grammar_compiler_init_times()
            assert list(init) == ["xgrammar"] and init["xgrammar"] > 0
            raw = np.array(pm.raw_metrics.grammar_compile_times) / 1000
            stats = pm.get_grammar_compile_time()
            assert raw.size == 1 and np.isclose(stats.mean, raw.mean()) and np.isclose(stats.max, raw.max())
        assert second.get_grammar_compiler_init_times() == first.get_grammar_compiler_init_times()
        total = first + second
        assert len(total.raw_metrics.grammar_compile_times) == 2
        assert total.get_grammar_compiler_init_times() == first.get_grammar_compiler_init_times()
        shapes.append((len(plain.raw_metrics.grammar_compile_times), sorted(plain.get_grammar_compiler_init_times())))
    assert shapes[0] == shapes[1]
