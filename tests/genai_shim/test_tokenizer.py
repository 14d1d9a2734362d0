"""Tokenizer over openvino_tokenizers IR, compared with the real openvino_genai.Tokenizer."""

from __future__ import annotations

import numpy as np
import pytest

import genai_shim
from ov_npu_emu.errors import ConfigError, IRReadError, UserInputError

TEXTS = [
    "Once upon a time",
    "Hi",
    "Lily's mom said, \"Don't worry.\"\nThe end",
    "héllo wörld ✓",
    "",
]


@pytest.fixture(scope="module")
def toks(stories_dir, real_genai):
    return genai_shim.Tokenizer(str(stories_dir)), real_genai.Tokenizer(str(stories_dir))


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("special", [True, False], ids=["special", "no_special"])
def test_encode_matches_real(toks, text, special):
    ours, real = toks
    a, b = (
        ours.encode(text, add_special_tokens=special),
        real.encode(text, add_special_tokens=special),
    )
    np.testing.assert_array_equal(a.input_ids.data, b.input_ids.data)
    np.testing.assert_array_equal(a.attention_mask.data, b.attention_mask.data)


def test_batch_encode_matches_real(toks):
    ours, real = toks
    a, b = ours.encode(TEXTS[:3]), real.encode(TEXTS[:3])
    np.testing.assert_array_equal(a.input_ids.data, b.input_ids.data)
    np.testing.assert_array_equal(a.attention_mask.data, b.attention_mask.data)


@pytest.mark.parametrize("skip", [True, False], ids=["skip_special", "keep_special"])
def test_decode_matches_real(toks, skip):
    ours, real = toks
    ids = [1, 403, 407, 261, 378, 2, 13, 300, 0, 511]
    assert ours.decode(ids, skip_special_tokens=skip) == real.decode(ids, skip_special_tokens=skip)
    batch = [[1, 403, 407], [432, 383, 286, 261]]
    assert ours.decode(batch, skip_special_tokens=skip) == real.decode(
        batch, skip_special_tokens=skip
    )


def test_round_trip_and_tensor_decode(toks):
    ours, _ = toks
    enc = ours.encode(TEXTS[2])
    assert ours.decode(enc.input_ids.data[0].tolist()) == TEXTS[2]
    assert ours.decode(enc.input_ids) == [TEXTS[2]]


def test_special_tokens_and_vocab_match_real(toks):
    ours, real = toks
    for name in (
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "bos_token",
        "eos_token",
        "pad_token",
    ):
        assert getattr(ours, f"get_{name}")() == getattr(real, f"get_{name}")(), name
    assert ours.get_vocab() == real.get_vocab()
    assert ours.get_vocab_vector() == real.get_vocab_vector()


def test_chat_template_matches_real(chat_dir, real_genai):
    ours, real = genai_shim.Tokenizer(str(chat_dir)), real_genai.Tokenizer(str(chat_dir))
    history = [
        {"role": "system", "content": "You tell stories."},
        {"role": "user", "content": "Who is Lily?"},
        {"role": "assistant", "content": "A girl."},
        {"role": "user", "content": "What does she like?"},
    ]
    for gen in (True, False):
        assert ours.apply_chat_template(
            history, add_generation_prompt=gen
        ) == real.apply_chat_template(history, add_generation_prompt=gen)
    assert ours.chat_template == real.chat_template
    ch = genai_shim.ChatHistory(history)
    assert ours.apply_chat_template(ch, add_generation_prompt=True) == real.apply_chat_template(
        history, add_generation_prompt=True
    )


def test_generation_block_renders_its_body_as_the_real(stories_dir, real_genai):
    """HF training templates (Phi-4-reasoning's among them) wrap the assistant's turn in
    {% generation %}...{% endgeneration %}; the real renders the body."""
    template = (
        "{% for m in messages %}{% if m['role'] == 'assistant' %}{% generation %}A: {{ m['content'] }}"
        "{% endgeneration %}{% else %}U: {{ m['content'] }}{% endif %}\n{% endfor %}"
        "{% if add_generation_prompt %}A:{% endif %}"
    )
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    ours, real = genai_shim.Tokenizer(str(stories_dir)), real_genai.Tokenizer(str(stories_dir))
    got = ours.apply_chat_template(history, add_generation_prompt=True, chat_template=template)
    assert got == real.apply_chat_template(history, add_generation_prompt=True, chat_template=template)
    assert "A: yo" in got


def test_chat_template_errors(stories_dir, chat_dir):
    ours = genai_shim.Tokenizer(str(stories_dir))
    with pytest.raises(ConfigError, match="Chat template wasn't found"):
        ours.apply_chat_template([{"role": "user", "content": "x"}], add_generation_prompt=True)
    chat = genai_shim.Tokenizer(str(chat_dir))
    with pytest.raises(ConfigError, match="unknown role narrator"):
        chat.apply_chat_template([{"role": "narrator", "content": "x"}], add_generation_prompt=True)
    # a "tool" turn the template cannot render becomes a user turn holding JSON, as in the real
    assert chat.apply_chat_template([{"role": "tool", "content": "x"}], add_generation_prompt=True) == (
        '<s>Question: {\n  "tool_response": {\n    "content": "x"\n  }\n}\nAnswer:'
    )
    chat.set_chat_template("{{ messages[0]['content'] | upper }}")
    assert (
        chat.apply_chat_template([{"role": "user", "content": "x"}], add_generation_prompt=True)
        == "X"
    )
    # as the real (measured, 2026.4.1): set_chat_template() replaces the original one too
    assert chat.get_original_chat_template() == chat.chat_template


PADDING = {
    "max_length_alone": ("Once upon a time", {"max_length": 3}),
    "truncation": ("Once upon a time", {"max_length": 3, "truncation": True}),
    "pad_to_8": ("Once upon a time", {"max_length": 8, "pad_to_max_length": True}),
    "pad_shorter_than_text": ("Once upon a time", {"max_length": 3, "pad_to_max_length": True}),
    "pad_right_batch": (
        ["Hi", "Once upon a time"],
        {"max_length": 8, "pad_to_max_length": True, "padding_side": "right"},
    ),
    "right_batch": (["Hi", "Once upon a time"], {"padding_side": "right"}),
    "truncate_batch": (["Hi", "Once upon a time"], {"max_length": 3, "truncation": True}),
    "pad_to_model_max_length": ("Once upon a time", {"pad_to_max_length": True}),
}


@pytest.mark.parametrize(("text", "kw"), list(PADDING.values()), ids=list(PADDING))
def test_padding_and_truncation_match_real(toks, text, kw):
    ours, real = toks
    a, b = ours.encode(text, **kw), real.encode(text, **kw)
    np.testing.assert_array_equal(a.input_ids.data, b.input_ids.data)
    np.testing.assert_array_equal(a.attention_mask.data, b.attention_mask.data)


def test_bad_inputs(tmp_path, toks):
    ours, _ = toks
    with pytest.raises(IRReadError, match="openvino_tokenizer.xml"):
        genai_shim.Tokenizer(str(tmp_path))
    with pytest.raises(UserInputError, match="a str, a list of str"):
        ours.encode(123)
    with pytest.raises(UserInputError, match="padding_side"):
        ours.encode("x", padding_side="middle")
