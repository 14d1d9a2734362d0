"""genai_shim: bad prompts, bad generation configs, broken model folders, misbehaving streamers."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import genai_shim as og
from ov_npu_emu.errors import ConfigError, IRReadError, NpuEmuError, PromptTooLongError, UserInputError

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module", params=["NPU", "CPU"])
def pipe(request: pytest.FixtureRequest, tiny_model_dir: Path) -> og.LLMPipeline:
    if request.param == "NPU":
        return og.LLMPipeline(tiny_model_dir, "NPU", MAX_PROMPT_LEN=32, MIN_RESPONSE_LEN=16)
    return og.LLMPipeline(tiny_model_dir, "CPU")


def _still_works(pipe: og.LLMPipeline) -> None:
    a = pipe.generate("Once upon a time", max_new_tokens=4)
    assert a == pipe.generate("Once upon a time", max_new_tokens=4) and isinstance(a, str)


@pytest.mark.parametrize("kwargs", [
    {"max_new_tokens": 0}, {"max_new_tokens": -1}, {"max_new_tokens": "5"}, {"max_new_tokens": 2.5},
    {"max_new_tokens": 3, "do_sample": True, "temperature": -1.0},
    {"max_new_tokens": 3, "do_sample": True, "top_p": 2.0},
    {"max_new_tokens": 3, "repetition_penalty": 0.0}, {"max_new_tokens": 3, "stop_token_ids": ["a"]},
    {"max_new_tokens": 3, "stop_strings": "ab"}, {"max_new_tokens": 3, "temperature": "hot"},
    {"max_new_tokens": 3, "eos_token_id": -5},
], ids=["zero", "negative", "str", "float", "temperature", "top_p", "repetition", "stop-ids",
        "stop-str", "temp-str", "eos"])
def test_invalid_generation_config_is_config_error(pipe: og.LLMPipeline, kwargs: dict) -> None:
    with pytest.raises(ConfigError):
        pipe.generate("hi", **kwargs)
    _still_works(pipe)


@pytest.mark.parametrize("inputs", [None, 5, b"hi", ["hi", 3], [], np.array([[["x"]]]),
                                    np.array([["a", "b"]]), np.array([[100000, 2]]), np.array([[-1, 2]]),
                                    np.zeros((1, 0), np.int64)],
                         ids=["none", "int", "bytes", "mixed-list", "empty-list", "3d-str", "str-ids",
                              "oov-ids", "negative-ids", "no-ids"])
def test_bad_inputs_are_user_input_errors(pipe: og.LLMPipeline, inputs: object) -> None:
    with pytest.raises(UserInputError):
        pipe.generate(inputs, max_new_tokens=2)
    _still_works(pipe)


def test_prompt_over_max_prompt_len_real_text(tiny_model_dir: Path) -> None:
    pipe = og.LLMPipeline(tiny_model_dir, "NPU", MAX_PROMPT_LEN=32, MIN_RESPONSE_LEN=16)
    with pytest.raises(PromptTooLongError, match="MAX_PROMPT_LEN"):
        pipe.generate("Once upon a time there was a little girl. " * 40, max_new_tokens=3)
    _still_works(pipe)


def test_empty_prompt_generates_as_the_real(tiny_model_dir: Path) -> None:
    """The real openvino_genai generates from an empty prompt (its special tokens) on CPU and on
    NPU (NPUW on CPU); so do we, the same text (f32 hints: exact tokens are the point)."""
    import openvino_genai as real

    f32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
    npu = {"MAX_PROMPT_LEN": 32, "MIN_RESPONSE_LEN": 16, **f32}
    want = real.LLMPipeline(str(tiny_model_dir), "CPU", **f32).generate("", max_new_tokens=3)
    real_npu = real.LLMPipeline(str(tiny_model_dir), "NPU", NPUW_DEVICES="CPU", NPUW_ONLINE_PIPELINE="NONE", **npu)
    assert real_npu.generate("", max_new_tokens=3) == want
    for pipe in (og.LLMPipeline(tiny_model_dir, "CPU", **f32), og.LLMPipeline(tiny_model_dir, "NPU", **npu)):
        assert pipe.generate("", max_new_tokens=3) == want
        _still_works(pipe)


def test_streamer_raising_does_not_break_the_pipeline(pipe: og.LLMPipeline) -> None:
    def boom(_: str) -> bool:
        raise ZeroDivisionError("boom")

    try:
        pipe.generate("hi", max_new_tokens=3, streamer=boom)
    except (ZeroDivisionError, NpuEmuError):
        pass
    _still_works(pipe)
    with pytest.raises(UserInputError, match="streamer"):
        pipe.generate("hi", max_new_tokens=3, streamer=5)


def test_generation_config_rejects_wrong_kinds_on_assignment() -> None:
    gc = og.GenerationConfig()
    with pytest.raises(ConfigError, match="max_new_tokens"):
        gc.max_new_tokens = "10"
    with pytest.raises(ConfigError, match="do_sample"):
        gc.do_sample = "yes"
    gc.temperature = 1  # ints are fine for float fields
    gc.max_new_tokens = np.int64(4)
    assert gc.max_new_tokens == 4 and isinstance(gc.max_new_tokens, int)


def test_folder_without_tokenizer_or_detokenizer(tiny_model_dir: Path, tmp_path: Path) -> None:
    for missing in ("openvino_tokenizer.xml", "openvino_detokenizer.xml"):
        d = tmp_path / missing.split(".")[0]
        shutil.copytree(tiny_model_dir, d)
        (d / missing).unlink()
        with pytest.raises(IRReadError, match=missing.replace(".", r"\.") + "|openvino_tokenizer"):
            og.LLMPipeline(d, "CPU").generate("hi", max_new_tokens=2)
    with pytest.raises(UserInputError, match="models_path"):
        og.LLMPipeline(None, "CPU")
    with pytest.raises(IRReadError, match="openvino_model.xml"):
        og.LLMPipeline(tmp_path / "nowhere", "CPU")


@pytest.mark.parametrize("tokens", ["abc", 5, None, ["a", "b"], [1.5], np.array(["a"])],
                         ids=["str", "int", "none", "str-list", "float-list", "str-array"])
def test_tokenizer_decode_rejects_non_ids(tiny_model_dir: Path, tokens: object) -> None:
    tok = og.Tokenizer(tiny_model_dir)
    with pytest.raises(UserInputError, match="decode"):
        tok.decode(tokens)
    assert isinstance(tok.decode([1, 2, 3]), str)
