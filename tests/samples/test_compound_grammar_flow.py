"""compound_grammar_generation.py's flow (openvino.genai samples/python/text_generation),
written here without pydantic (its two tool schemas as the sample's pydantic models produce them)
and run in-process side by side with the real openvino_genai on qwen2-fp32 (f32 hints; on NPU
the real is NPUW on CPU): a chat with tools (the real template engine writes them into the
system message), a yes/no structural-tag grammar streamed to a callable, then the tool-call
grammar streamed through a TextParserStreamer subclass with the sample's IncrementalParser.
Besides the sample's schema grammar (which the random model fills with whitespace), a constant
tool call makes the parser complete, so ``parsed[0]["tool_calls"]`` is compared too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import genai_shim
from tests.genai_shim.conftest import F32, REAL_NPU

QWEN2 = Path(__file__).resolve().parents[1] / "fixtures" / "optimum" / "qwen2-fp32"


def _tool(name: str, description: str, args: dict[str, str], with_description: bool) -> dict[str, Any]:
    arguments: dict[str, Any] = {"description": description} if with_description else {}
    arguments["properties"] = {
        k: ({"description": d, "type": "string"} if with_description else {"type": "string"}) for k, d in args.items()
    }
    arguments["required"] = list(args)
    arguments["type"] = "object"
    return {
        "type": "object",
        "properties": {"name": {"type": "string", "enum": [name]}, "arguments": arguments},
        "required": ["name", "arguments"],
    }


FLIGHT = ("book_flight_ticket", "booking flights", {
    "origin_airport_code": "The name of Departure airport code",
    "destination_airport_code": "The name of Destination airport code",
    "departure_date": "The date of outbound flight",
    "return_date": "The date of return flight",
})
HOTEL = ("book_hotel", "booking hotel", {
    "destination": "The name of the city",
    "check_in_date": "The date of check in",
    "checkout_date": "The date of check out",
})
SYSTEM = (
    "You are a helpful AI assistant.\nYou can answer yes or no to questions, or you can choose to "
    "call one or more of the provided functions.\n\n"
    "If you decide to call functions:\n"
    "    * prefix function calls with functools marker (no closing marker required)\n"
)
CALL = '[{"name": "book_hotel", "arguments": {"destination": "Paris"}}]'


def _sample_classes(mod: Any) -> tuple[Any, Any]:
    class CustomToolCallIncrementalParser(mod.IncrementalParser):
        """The sample's parser: stops generation once the text after 'functools' is JSON."""

        def __init__(self) -> None:
            super().__init__()
            self._content = ""

        def parse(self, msg: dict, delta_text: str, delta_tokens: Any = None) -> str:
            self._content += delta_text
            start = self._content.find("functools")
            if start == -1:
                return delta_text
            try:
                msg["tool_calls"] = json.loads(self._content[start + len("functools"):])
                self.set_status(mod.StreamingStatus.TOOL_CALL_STOP)
            except json.JSONDecodeError:
                pass
            return delta_text

        def reset(self) -> None:
            self.set_status(mod.StreamingStatus.RUNNING)
            self._content = ""

    class ContentStreamer(mod.TextParserStreamer):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.printed: list[str] = []

        def write(self, message: dict) -> Any:
            self.printed.append(message.get("content", ""))
            return mod.StreamingStatus.RUNNING

    return CustomToolCallIncrementalParser, ContentStreamer


def compound_flow(mod: Any, device: str, max_new_tokens: int) -> list[Any]:
    """The sample's calls; on NPU with the hotel tool only and without tools in the prompt (the
    sample's 2.4k-token prompt exceeds the real's default MAX_PROMPT_LEN; the real fails there)."""
    tools = [FLIGHT, HOTEL] if device == "CPU" else [HOTEL]
    props = dict(F32)
    if device == "NPU":
        props = {"INFERENCE_PRECISION_HINT": "f32", "MAX_PROMPT_LEN": 256, "MIN_RESPONSE_LEN": 128}
        if mod is not genai_shim:
            props.update(REAL_NPU)
    pipe = mod.LLMPipeline(str(QWEN2), device, **props)
    soc = mod.StructuredOutputConfig
    history = mod.ChatHistory()
    if device == "CPU":
        history.set_tools([_tool(*t, with_description=True) for t in tools])
    history.append({"role": "system", "content": SYSTEM})
    config = mod.GenerationConfig()
    config.max_new_tokens = max_new_tokens
    config.do_sample = False
    history.append({"role": "user", "content": "Do dolphins have fingers?"})
    config.structured_output_config = soc(structural_tags_config=soc.ConstString("yes") | soc.ConstString("no"))
    pieces: list[str] = []
    answer = pipe.generate(history, config, streamer=lambda s: pieces.append(s) or mod.StreamingStatus.RUNNING)
    out: list[Any] = [pieces, answer.texts, answer.parsed]
    history.append({"role": "assistant", "content": answer.texts[0]})
    history.append({"role": "user", "content": "book a hotel in Paris from 2025-12-04 to 2025-12-10"})
    schema = json.dumps({"type": "array", "items": {"anyOf": [_tool(*t, with_description=False) for t in tools]}})
    parser_class, streamer_class = _sample_classes(mod)
    for tail in (soc.JSONSchema(schema), soc.ConstString(CALL)):
        config.structured_output_config.structural_tags_config = soc.ConstString("functools") + tail
        streamer = streamer_class(pipe.get_tokenizer(), parsers=[parser_class()])
        answer = pipe.generate(history, config, streamer=streamer)
        out += [streamer.printed, answer.texts, answer.parsed, [int(r) for r in answer.finish_reasons]]
    return out


@pytest.mark.parametrize("device, max_new_tokens", [("CPU", 80), ("NPU", 80)])
def test_compound_grammar_flow(real_genai, device, max_new_tokens):
    ours = compound_flow(genai_shim, device, max_new_tokens)
    assert ours == compound_flow(real_genai, device, max_new_tokens)
    assert ours[1] in (["yes"], ["no"])
    assert ours[-2][0]["tool_calls"] == json.loads(CALL)  # the parser completed on the constant call
