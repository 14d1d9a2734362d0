"""genai_shim: bad prompts, bad generation configs, broken model folders, misbehaving streamers."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import genai_shim as og
from ov_npu_emu.errors import ConfigError, IRReadError, PromptTooLongError, UserInputError

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module", params=["NPU", "CPU"])
def pipe(request: pytest.FixtureRequest, tiny_model_dir: Path) -> og.LLMPipeline:
    if request.param == "NPU":
        return _fresh(og.LLMPipeline(tiny_model_dir, "NPU", MAX_PROMPT_LEN=32, MIN_RESPONSE_LEN=16))
    return _fresh(og.LLMPipeline(tiny_model_dir, "CPU"))


#: id(pipeline) -> its text for the probe prompt before any bad call
_BEFORE: dict[int, str] = {}


def _fresh(pipe: og.LLMPipeline) -> og.LLMPipeline:
    _BEFORE[id(pipe)] = pipe.generate("Once upon a time", max_new_tokens=4)
    return pipe


def _still_works(pipe: og.LLMPipeline) -> None:
    """The pipeline gives, after the bad call, the text it gave for the same prompt before any."""
    a = pipe.generate("Once upon a time", max_new_tokens=4)
    assert isinstance(a, str) and a == _BEFORE[id(pipe)]


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
    pipe = _fresh(og.LLMPipeline(tiny_model_dir, "NPU", MAX_PROMPT_LEN=32, MIN_RESPONSE_LEN=16))
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
    for pipe in (_fresh(og.LLMPipeline(tiny_model_dir, "CPU", **f32)),
                 _fresh(og.LLMPipeline(tiny_model_dir, "NPU", **npu))):
        assert pipe.generate("", max_new_tokens=3) == want
        _still_works(pipe)


def test_streamer_raising_does_as_the_real(tiny_model_dir: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Measured on the real openvino_genai (CPU and NPU with NPUW on CPU): a callable streamer that
    raises an Exception has it printed to stderr once per chunk and generation runs to the end,
    the same text as without a streamer. We do the same, on CPU and on the emulated NPU."""
    import openvino_genai as real

    f32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
    npu = {"MAX_PROMPT_LEN": 32, "MIN_RESPONSE_LEN": 16, **f32}
    marker = "[GenAI] Text streamer callback raised exception: ZeroDivisionError: boom"
    calls: list[str] = []

    def boom(text: str) -> bool:
        calls.append(text)
        raise ZeroDivisionError("boom")

    ref = real.LLMPipeline(str(tiny_model_dir), "CPU", **f32)
    want = ref.generate("hi", max_new_tokens=6)
    capfd.readouterr()
    assert ref.generate("hi", max_new_tokens=6, streamer=boom) == want
    want_calls, want_err = list(calls), capfd.readouterr().err.count(marker)
    assert want_err == len(want_calls) > 1
    for pipe in (_fresh(og.LLMPipeline(tiny_model_dir, "CPU", **f32)),
                 _fresh(og.LLMPipeline(tiny_model_dir, "NPU", **npu))):
        calls.clear()
        assert pipe.generate("hi", max_new_tokens=6, streamer=boom) == want
        assert calls == want_calls and capfd.readouterr().err.count(marker) == want_err
        _still_works(pipe)


def test_streamer_interrupt_and_streamer_base_errors_propagate(pipe: og.LLMPipeline) -> None:
    """Where we differ on purpose (measured): the real prints a KeyboardInterrupt raised in a
    callable streamer and carries on, so Ctrl-C cannot stop a generation; we let it through at the
    first chunk. An exception in a ``StreamerBase.write`` std::terminate()s the real process; we
    raise it unchanged. A streamer of the wrong kind is a UserInputError (the real: TypeError)."""
    calls: list[str] = []

    def interrupt(text: str) -> None:
        calls.append(text)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pipe.generate("hi", max_new_tokens=6, streamer=interrupt)
    assert len(calls) == 1

    class Writes(og.StreamerBase):
        def write(self, token: object) -> og.StreamingStatus:
            raise ValueError("write failed")

        def end(self) -> None:
            pass

    with pytest.raises(ValueError, match="^write failed$") as e:
        pipe.generate("hi", max_new_tokens=3, streamer=Writes())
    assert type(e.value) is ValueError
    _still_works(pipe)
    with pytest.raises(UserInputError, match="streamer must be a callable"):
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
