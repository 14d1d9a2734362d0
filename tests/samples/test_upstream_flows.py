"""The flows of the upstream openvino.genai text-generation samples that no other test runs,
written here and run in-process side by side with the real openvino_genai (f32 hints; on NPU the
real is NPUW on CPU). docs/genai_shim.md "Upstream samples walk" has the whole table.

Covered elsewhere: greedy / chat / multinomial / benchmark (test_samples.py), beam search and
speculative decoding (their own files here), encrypted_model_causal_lm (tests/genai_shim/
test_in_memory.py), prompt_lookup_decoding_lm (tests/genai_shim/test_prompt_lookup.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import genai_shim
from tests.genai_shim.conftest import F32, NPU_LENS, REAL_NPU

QWEN2 = Path(__file__).resolve().parents[1] / "fixtures" / "optimum" / "qwen2-fp32"


def _pipe(mod: Any, folder: Path, device: str, max_prompt: int = 64) -> Any:
    props = dict(F32)
    if device == "NPU":
        props = {"INFERENCE_PRECISION_HINT": "f32", **NPU_LENS, "MAX_PROMPT_LEN": max_prompt}
        if mod is not genai_shim:
            props.update(REAL_NPU)
    return mod.LLMPipeline(str(folder), device, **props)


def _streamed(mod: Any) -> tuple[list[str], Any]:
    pieces: list[str] = []

    def streamer(subword: str) -> Any:
        pieces.append(subword)
        return mod.StreamingStatus.RUNNING

    return pieces, streamer


def react_flow(mod: Any, folder: Path, device: str) -> str:
    """react_sample.py's planning step: a ReAct prompt listing two tools goes through the chat
    template; the pipeline's own config (the sample's 256 new tokens, 32 here to keep the test
    short) generates with a callable streamer. A
    reply with ``Action:`` / ``Action Input:`` would call a tool (a web service), so the flow
    stops at the first reply (stories260K never writes one: asserted by the caller)."""
    pipe = _pipe(mod, folder, device, max_prompt=256)
    config = mod.GenerationConfig()
    config.max_new_tokens = 32
    pipe.set_generation_config(config)
    tools = "weather: the current weather of a city.\n\npicture: draws a picture from a text."
    question = (
        "Answer the question with these tools:\n\n" + tools + "\n\nUse the format\n"
        "Thought: ...\nAction: one of [weather, picture]\nAction Input: ...\nObservation: ...\n"
        "Final Answer: ...\n\nQuestion: what is the weather in London?"
    )
    messages = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": question}]
    prompt = pipe.get_tokenizer().apply_chat_template(messages, add_generation_prompt=True)
    pieces, streamer = _streamed(mod)
    out = pipe.generate(prompt, pipe.get_generation_config(), streamer)
    assert "".join(pieces) == str(out)
    return str(out)


@pytest.mark.parametrize("device", ["CPU", "NPU"])
def test_react_sample_flow(chat_dir, real_genai, device):
    ours = react_flow(genai_shim, chat_dir, device)
    assert ours == react_flow(real_genai, chat_dir, device)
    assert len(ours.split()) > 10 and "\nAction:" not in ours


PERSON_COUNT = {
    "type": "object",
    "properties": {"person": {"type": "integer", "minimum": 0, "maximum": 100}},
    "required": ["person"],
}
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Z][a-z]{1,20}$"},
        "city": {"enum": ["Dublin", "Dubai", "Munich"], "type": "string"},
    },
    "required": ["name", "city"],
}


def structured_flow(mod: Any, folder: Path, device: str) -> list[str]:
    """structured_output_generation.py: a system message and the user's request in a ChatHistory;
    a JSON schema for the item counts (greedy), then one per item (the sample samples those, which
    no two RNGs agree on, so here they are greedy too)."""
    pipe = _pipe(mod, folder, device)
    config = mod.GenerationConfig()
    config.max_new_tokens = 24
    config.do_sample = False
    history = mod.ChatHistory()
    history.append({"role": "system", "content": "You write JSON objects."})
    history.append({"role": "user", "content": "Please generate jsons for 2 persons."})
    out = []
    for schema in (PERSON_COUNT, PERSON):
        config.structured_output_config = mod.StructuredOutputConfig(json_schema=json.dumps(schema))
        out.append(pipe.generate(history, config).texts[0])
    return out


@pytest.mark.parametrize("device", ["CPU", "NPU"])
def test_structured_output_sample_flow(real_genai, device):
    ours = structured_flow(genai_shim, QWEN2, device)
    assert ours == structured_flow(real_genai, QWEN2, device)
    # the random export fills its budget with whitespace inside the object: only its start is fixed
    assert all(text.startswith("{") for text in ours)


def structural_tags_flow(mod: Any, folder: Path, device: str) -> str:
    """structural_tags_generation.py with tags: tool calls may only be ``<function="name">`` +
    arguments matching the tool's JSON schema + ``</function>``, triggered by ``<function=``
    (greedy here, the sample samples; ``at_least_one`` because the random export never writes
    the trigger by itself, so the tag's grammar really runs)."""
    S = mod.StructuredOutputConfig
    weather = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "date": {"type": "string", "pattern": r"2\d\d\d-[0-1]\d-[0-3]\d"}},
        "required": ["city", "date"],
    }
    pipe = _pipe(mod, folder, device, max_prompt=128)
    history = mod.ChatHistory()
    history.append({"role": "system", "content": 'Call tools as <function="get_weather">{...}</function>.'})
    history.append({"role": "user", "content": "What is the weather in London today?"})
    config = mod.GenerationConfig()
    config.max_new_tokens = 40
    config.structured_output_config = S(
        structural_tags_config=S.TriggeredTags(
            triggers=["<function="],
            tags=[
                S.Tag(begin='<function="get_weather">', content=S.JSONSchema(json.dumps(weather)), end="</function>")
            ],
            at_least_one=True,
        )
    )
    pieces, streamer = _streamed(mod)
    res = pipe.generate(history, config, streamer=streamer)
    assert "".join(pieces) == res.texts[0]
    return res.texts[0]


@pytest.mark.parametrize("device", ["CPU", "NPU"])
def test_structural_tags_sample_flow(real_genai, device):
    ours = structural_tags_flow(genai_shim, QWEN2, device)
    assert ours == structural_tags_flow(real_genai, QWEN2, device)
    assert ours.startswith('<function="get_weather">{')
