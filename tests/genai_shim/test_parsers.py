"""Output parsers side by side with the real openvino_genai 2026.4.1: the built-in parsers on
their own (dicts and error texts), the incremental ones over many splits of the same text, a
TextParserStreamer fed text and token ids (the deltas, the delta token ids a parser sees, the
accumulated message), and LLMPipeline.generate with a TextParserStreamer and
GenerationConfig.parsers on stories260K (CPU and NPU, f32): texts, ``parsed``, streamed
messages, finish reasons."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

import genai_shim
from ov_npu_emu.errors import ConfigError, UserInputError
from tests.genai_shim.conftest import F32, NPU_LENS, REAL_NPU

CONTENTS = [
    "<think>abc</think>rest",
    "pre<think>abc</think>rest",
    "abc</think>rest",
    "no tags",
    "</think>a<think>b</think>c",
    "<think>open only",
    "",
    "<think>\nOkay, 2 + 1.</think>\n\nThe answer is \\boxed{3}.",
]
JSON_CONTENTS = [
    'Calling: {"type": "function", "function": {"name": "f", "parameters": {"a": 1, "b": "x"}}}',
    "no json",
    "} {",
    'x{"a": [1, 2.5, true, null], "z": {"y": "é"}}y',
]
PYTHONIC_CONTENTS = [
    '[get_weather(location="New York, NY", unit="celsius")]<|eom_id|>',
    "[get_weather(location='New York, NY', unit='celsius')]",
    "no call",
    "[]",
    "[f()]",
    '[f(b="1", a="2"), g(c="3")]',
    'x [f(a = "1", b="q")] [g(c="3")]',
    "[noparen]",
    '[x="1"]',
    "[f(]",
    '[f(a=1)]',
    '[f(a="x\ny")]',
]


def _builtin(mod: Any, name: str, kwargs: dict[str, Any]) -> Any:
    return getattr(mod, name)(**kwargs)


def _core(err: BaseException) -> str:
    """The real's message without OpenVINO's 'Exception from <file>:<line>:' header."""
    return str(err).strip().splitlines()[-1]


def _outcome(fn: Any) -> tuple[str, Any]:
    try:
        return "ok", fn()
    except Exception as e:  # noqa: BLE001 - the outcome is compared
        return "error", e


def _same_outcome(ours: tuple[str, Any], real: tuple[str, Any]) -> None:
    assert ours[0] == real[0], (ours, real)
    if real[0] == "ok":
        assert ours[1] == real[1]
    else:
        assert isinstance(ours[1], RuntimeError) or isinstance(ours[1], TypeError)
        assert _core(real[1]) in str(ours[1]), (str(ours[1]), str(real[1]))


PARSERS = [
    ("ReasoningParser", {}),
    ("ReasoningParser", {"keep_original_content": False}),
    ("ReasoningParser", {"expect_open_tag": False, "keep_original_content": False}),
    ("ReasoningParser", {"open_tag": "<a>", "close_tag": "</a>", "keep_original_content": False}),
    ("DeepSeekR1ReasoningParser", {}),
    ("Phi4ReasoningParser", {}),
]


@pytest.mark.parametrize("name, kwargs", PARSERS)
def test_reasoning_parsers_match_real(real_genai, name, kwargs):
    for content in CONTENTS + ["x<a>yy</a>z", "yy</a>z"]:
        got = []
        for mod in (genai_shim, real_genai):
            message = {"content": content, "other": [1, 2], 5: "int key", "t": (1, 2)}
            got.append(_outcome(lambda m=message, mod=mod: (_builtin(mod, name, kwargs).parse(m), m)[1]))
        _same_outcome(*got)


@pytest.mark.parametrize(
    "name, contents",
    [("Llama3JsonToolParser", JSON_CONTENTS), ("Llama3PythonicToolParser", PYTHONIC_CONTENTS)],
)
def test_tool_parsers_match_real(real_genai, name, contents):
    for content in contents:
        ours = _outcome(lambda c=content: (lambda m: (getattr(genai_shim, name)().parse(m), m)[1])({"content": c}))
        real = _outcome(lambda c=content: (lambda m: (getattr(real_genai, name)().parse(m), m)[1])({"content": c}))
        _same_outcome(ours, real)
        if ours[0] == "ok":  # key order too (the pythonic call's keys are sorted in the real)
            assert [list(t) for t in ours[1].get("tool_calls", [])] == [list(t) for t in real[1].get("tool_calls", [])]


@pytest.mark.parametrize(
    "name, message",
    [
        ("ReasoningParser", {}),
        ("ReasoningParser", {"content": 1}),
        ("Llama3JsonToolParser", {}),
        ("Llama3PythonicToolParser", {"content": None}),
    ],
)
def test_parser_message_errors_match_real(real_genai, name, message):
    _same_outcome(
        _outcome(lambda: getattr(genai_shim, name)().parse(dict(message))),
        _outcome(lambda: getattr(real_genai, name)().parse(dict(message))),
    )
    with pytest.raises(UserInputError):
        getattr(genai_shim, name)().parse(dict(message))


def test_json_parser_bad_json_is_a_typed_error(real_genai):
    for mod in (genai_shim, real_genai):
        with pytest.raises(RuntimeError, match="Failed to construct JsonContainer from JSON string: "):
            mod.Llama3JsonToolParser().parse({"content": "{bad json}"})
    with pytest.raises(TypeError, match="not JSON serializable"):
        genai_shim.ReasoningParser().parse({"content": "x", "o": object()})


class _Tools:
    def extract_tool_calls(self, content: str, request: Any) -> Any:
        class Result:
            def model_dump_json(self) -> str:
                return json.dumps({"tools_called": True, "tool_calls": [], "content": content[:3]})

        return Result()


class _Reasoning:
    def extract_reasoning(self, content: str, request: Any) -> Any:
        return ("why", "what")


class _Both(_Tools, _Reasoning):
    pass


class _BadTools:
    def extract_tool_calls(self, content: str, request: Any) -> Any:
        return 5


class _BadReasoning:
    def extract_reasoning(self, content: str, request: Any) -> Any:
        return ["a", "b"]


@pytest.mark.parametrize("vllm", [_Tools, _Reasoning, _Both, _BadTools, _BadReasoning, object])
def test_vllm_wrapper_matches_real(real_genai, vllm):
    for message in ({"content": "hello", "keep": 1}, {}, {"content": 3}):
        _same_outcome(
            _outcome(lambda m=dict(message): (genai_shim.VLLMParserWrapper(vllm()).parse(m), m)[1]),
            _outcome(lambda m=dict(message): (real_genai.VLLMParserWrapper(vllm()).parse(m), m)[1]),
        )


def _splits(text: str, rng: random.Random, n: int) -> list[list[str]]:
    out = []
    for _ in range(n):
        cuts = sorted(rng.sample(range(1, len(text)), rng.randint(1, min(12, len(text) - 1))))
        out.append([text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)])
    return out


INCREMENTAL = [
    ("ReasoningIncrementalParser", {}),
    ("ReasoningIncrementalParser", {"keep_original_content": False}),
    ("ReasoningIncrementalParser", {"expect_open_tag": False, "keep_original_content": False}),
    ("DeepSeekR1ReasoningIncrementalParser", {}),
    ("Phi4ReasoningIncrementalParser", {}),
]
STREAMED = [
    "<think>\nOkay, the user is asking for 2 + 1.</think>\n\nThe answer is \\boxed{3}.",
    "pre <think>a</thi b</think> c </think> d",
    "First, I see.\n</think>\n\n**Solution**",
    "<th no tag at all </th",
]


@pytest.mark.parametrize("name, kwargs", INCREMENTAL)
def test_incremental_parsers_match_real_over_splits(real_genai, name, kwargs):
    rng = random.Random(7)
    for text in STREAMED:
        for pieces in [[text], list(text), *_splits(text, rng, 12)]:
            runs = []
            for mod in (genai_shim, real_genai):
                parser = _builtin(mod, name, kwargs)
                trace = []
                for piece in pieces:
                    delta = {"z": 1}
                    trace.append((parser.parse(delta, piece), delta))
                runs.append(trace)
            assert runs[0] == runs[1], pieces


def _recording_streamer(mod: Any) -> Any:
    class Recorder(mod.TextParserStreamer):
        def __init__(self, tokenizer: Any, parsers: list[Any]) -> None:
            super().__init__(tokenizer, parsers=parsers)
            self.log: list[Any] = []

        def write(self, message: dict) -> Any:
            self.log.append(message)
            return mod.StreamingStatus.RUNNING

    return Recorder


def _recording_parser(mod: Any, stop_after: int = 0, status: str = "TOOL_CALL_STOP") -> Any:
    class Recorder(mod.IncrementalParser):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[Any] = []

        def parse(self, delta_message: dict, delta_text: str, delta_tokens: Any = None) -> str:
            self.calls.append((dict(delta_message), delta_text, delta_tokens))
            delta_message["seen"] = "x"
            if stop_after and len(self.calls) >= stop_after:
                self.set_status(getattr(mod.StreamingStatus, status))
            return delta_text

        def reset(self) -> None:
            self.calls.append("reset")
            self.set_status(mod.StreamingStatus.RUNNING)

    return Recorder()


def test_text_parser_streamer_text_chunks_match_real(real_genai, stories_dir):
    rng = random.Random(3)
    tokenizers = {mod: mod.Tokenizer(str(stories_dir)) for mod in (genai_shim, real_genai)}
    for text in STREAMED:
        for pieces in _splits(text, rng, 6):
            runs = []
            for mod in (genai_shim, real_genai):
                streamer = _recording_streamer(mod)(
                    tokenizers[mod], [_recording_parser(mod), mod.Phi4ReasoningIncrementalParser()]
                )
                statuses = [streamer._write(p) for p in pieces]
                runs.append((streamer.log, streamer.get_parsed_message(), [int(s) for s in statuses]))
                streamer.reset()
                assert streamer.get_parsed_message() == {"content": ""}
            assert runs[0] == runs[1]


def test_text_parser_streamer_tokens_match_real(real_genai, stories_dir):
    """Token ids through TextStreamer's hold-back: the same deltas and the same delta tokens."""
    text = "Once upon a time, <think>there was\n a girl</think> named Lily.\nShe liked to play."
    runs = []
    for mod in (genai_shim, real_genai):
        tokenizer = mod.Tokenizer(str(stories_dir))
        ids = [int(t) for t in tokenizer.encode(text, add_special_tokens=False).input_ids.data[0]]
        recorder = _recording_parser(mod)
        streamer = _recording_streamer(mod)(tokenizer, [recorder, mod.ReasoningIncrementalParser()])
        for i in range(0, len(ids), 3):
            streamer._write(ids[i : i + 1] if i % 2 else ids[i : i + 3])
        streamer.end()
        runs.append((streamer.log, streamer.get_parsed_message(), recorder.calls))
    assert runs[0] == runs[1]
    assert any(call[2] for call in runs[0][2])  # the delta tokens were compared, not only []


def _pipe(mod: Any, folder: Any, device: str, SDPA: bool = False) -> Any:  # noqa: N803
    if device == "NPU":
        props = {"INFERENCE_PRECISION_HINT": "f32", **NPU_LENS}
        if mod is not genai_shim:
            props.update(REAL_NPU)
        return mod.LLMPipeline(str(folder), "NPU", **props)
    return mod.LLMPipeline(str(folder), "CPU", **F32, **({"ATTENTION_BACKEND": "SDPA"} if SDPA else {}))


def _upper_parser(mod: Any) -> Any:
    class Upper(mod.Parser):
        def parse(self, message: dict) -> None:
            message["seen"] = 1
            message["content"] = message["content"].upper()

    return Upper()


@pytest.mark.parametrize("device", ["CPU", "NPU"])
def test_generate_with_parsers_matches_real(real_genai, stories_dir, device):
    runs = []
    for mod in (genai_shim, real_genai):
        pipe = _pipe(mod, stories_dir, device)
        tokenizer = pipe.get_tokenizer()
        out = []
        recorder = _recording_parser(mod)
        streamer = _recording_streamer(mod)(tokenizer, [recorder, mod.DeepSeekR1ReasoningIncrementalParser()])
        res = pipe.generate(["Once upon a time"], max_new_tokens=24, streamer=streamer)
        out.append((res.texts, res.parsed, streamer.log, recorder.calls, [int(r) for r in res.finish_reasons]))
        # the streamer is reset per call; str input returns str (its parsers still run)
        text = pipe.generate("Once upon a time", max_new_tokens=24, streamer=streamer)
        out.append((text, streamer.get_parsed_message()))
        upper = _upper_parser(mod)  # the real finds a Python parser's parse() only while it is alive
        config = mod.GenerationConfig(max_new_tokens=12, parsers=[upper, mod.ReasoningParser()])
        res = pipe.generate(["Lily went"], config)
        out.append((res.texts, res.parsed))
        res = pipe.generate(["Lily went"], max_new_tokens=12, parsers=[mod.ReasoningParser(expect_open_tag=False)],
                            streamer=_recording_streamer(mod)(tokenizer, [mod.ReasoningIncrementalParser()]))
        out.append((res.texts, res.parsed))
        res = pipe.generate(["Lily went"], max_new_tokens=6)
        out.append((res.texts, res.parsed))
        # The real's paged backend streams from another thread and stops a token later than
        # asked (for any streamer; genai_shim's paged backend stops at once), so stops are
        # compared on the stateful pipeline
        stateful = pipe if device == "NPU" else _pipe(mod, stories_dir, device, SDPA=True)
        for status in ("TOOL_CALL_STOP", "CANCEL", "STOP"):
            stopper = _recording_parser(mod, stop_after=3, status=status)
            res = stateful.generate(["Once upon a time"], max_new_tokens=30,
                                    streamer=_recording_streamer(mod)(tokenizer, [stopper]))
            out.append((res.texts, res.parsed, [int(r) for r in res.finish_reasons]))
        runs.append(out)
    assert runs[0] == runs[1]
    assert runs[0][0][1][0]["reasoning_content"]  # DeepSeek: all of it is reasoning
    assert [r[2] for r in runs[0][5:]] == [[3], [0], [1]]  # TOOL_CALL, NONE, STOP


def test_generate_parsers_on_batches_and_beams_matches_real(real_genai, stories_dir):
    runs = []
    for mod in (genai_shim, real_genai):
        pipe = _pipe(mod, stories_dir, "CPU")
        upper = _upper_parser(mod)
        parsers = [mod.ReasoningParser(expect_open_tag=False), upper]
        a = pipe.generate(["Once upon", "Lily"], max_new_tokens=6, parsers=parsers)
        b = pipe.generate(["Once"], max_new_tokens=5, num_beams=2, num_return_sequences=2, parsers=parsers)
        runs.append((a.texts, a.parsed, b.texts, b.parsed))
    assert runs[0] == runs[1]


def test_parser_api_errors(real_genai, stories_dir):
    config = genai_shim.GenerationConfig()
    assert config.parsers == [] == real_genai.GenerationConfig().parsers
    parser = genai_shim.ReasoningParser()
    config.parsers = [parser]
    assert config.copy().parsers[0] is parser  # shared, as the real's shared_ptr
    with pytest.raises(ConfigError, match='Incorrect value in "parsers". Expected Parser.') as err:
        genai_shim.GenerationConfig(parsers=[1])
    assert err.value.key == "parsers"
    with pytest.raises(ConfigError, match="isn't supported for argument parsers"):
        genai_shim.GenerationConfig(parsers=genai_shim.ReasoningParser())
    with pytest.raises(ConfigError, match='Expected Parser'):  # an IncrementalParser is not a Parser
        genai_shim.GenerationConfig(parsers=[genai_shim.ReasoningIncrementalParser()])
    with pytest.raises(UserInputError, match="parse method not implemented in Python subclass"):
        genai_shim.Parser().parse({"content": "x"})
    with pytest.raises(UserInputError, match="parse method not implemented in Python subclass"):
        genai_shim.IncrementalParser().parse({}, "x")
    with pytest.raises(UserInputError, match='Tried to call pure virtual function "IncrementalParser::reset"'):
        genai_shim.IncrementalParser().reset()
    with pytest.raises(AttributeError):
        genai_shim.DecodedResults().parsed = []  # read-only, as the real

    class NoReset(genai_shim.IncrementalParser):
        def parse(self, delta_message: dict, delta_text: str, delta_tokens: Any = None) -> str:
            return delta_text

    pipe = _pipe(genai_shim, stories_dir, "CPU")
    streamer = _recording_streamer(genai_shim)(pipe.get_tokenizer(), [NoReset()])
    with pytest.raises(UserInputError, match="IncrementalParser::reset"):  # the real raises it too
        pipe.generate(["Once"], max_new_tokens=3, streamer=streamer)

    class Bare(genai_shim.TextParserStreamer):
        pass

    with pytest.raises(UserInputError, match="must implement write"):  # the real crashes
        pipe.generate(["Once upon a time"], max_new_tokens=8, streamer=Bare(pipe.get_tokenizer()))

    class Mixed(genai_shim.IncrementalParser):
        def parse(self, delta_message: dict, delta_text: str, delta_tokens: Any = None) -> str:
            delta_message["k"] = 1
            return delta_text

        def reset(self) -> None:
            pass

    streamer = _recording_streamer(genai_shim)(pipe.get_tokenizer(), [Mixed()])
    with pytest.raises(UserInputError, match="concatenate type mismatch for key 'k'"):  # the real aborts
        pipe.generate(["Once upon a time"], max_new_tokens=8, streamer=streamer)
    with pytest.raises(ConfigError, match="GenerationConfig.parsers="):  # not run by this pipeline
        genai_shim.ContinuousBatchingPipeline(str(stories_dir), genai_shim.SchedulerConfig(), "CPU").generate(
            ["Once"], [genai_shim.GenerationConfig(max_new_tokens=2, parsers=[parser])]
        )
