"""Byte-level BPE tokenizer IR: vocabulary rules, round trips in openvino_tokenizers and genai."""

from __future__ import annotations

import numpy as np
import openvino as ov
import pytest

from ov_npu_emu.errors import ConfigError
from ov_npu_emu.modelbuilder import build_tokenizer, build_vocab
from ov_npu_emu.modelbuilder.tokenizer import CHAT_TEMPLATE, MIN_VOCAB_SIZE, SPECIAL_TOKENS

TEXTS = [
    "Once upon a time, there was a little girl named Lily.",
    "She liked to play with her ball in the park!",
    "Héllo wörld — ünïcødé, 日本語 and emoji 🙂",
    "  leading spaces\n\nnew lines\tand tabs  ",
    "numbers 12345 and punctuation: (a) [b] {c} 'quoted' \"double\"",
    "",
]


def test_vocab_layout_and_merges_are_consistent():
    vocab = build_vocab(512)
    assert len(vocab) == 512 and len(set(vocab.tokens)) == 512
    assert vocab.tokens[:3] == SPECIAL_TOKENS
    assert [vocab.token_bytes(3 + b) for b in range(256)] == [bytes([b]) for b in range(256)]
    known = set(vocab.tokens[:MIN_VOCAB_SIZE])
    for (left, right), token in zip(vocab.merges, vocab.tokens[MIN_VOCAB_SIZE:], strict=False):
        assert left in known and right in known and left + right == token
        known.add(token)
    assert build_vocab(512) == vocab  # deterministic


def test_vocab_scales_to_qwen_size():
    vocab = build_vocab(151936)
    assert len(vocab) == 151936 and len(set(vocab.tokens)) == 151936


def test_vocab_too_small_is_a_config_error():
    with pytest.raises(ConfigError, match="need >= 259"):
        build_vocab(100)


@pytest.fixture(scope="module")
def compiled_tokenizer():
    tok, detok = build_tokenizer(512)
    core = ov.Core()
    return core.compile_model(tok, "CPU"), core.compile_model(detok, "CPU")


def test_tokenizer_interface(compiled_tokenizer):
    tok, detok = compiled_tokenizer
    assert sorted(o.get_any_name() for o in tok.outputs) == ["attention_mask", "input_ids"]
    assert all(o.get_element_type() == ov.Type.i64 for o in tok.outputs)
    assert detok.inputs[0].get_element_type() == ov.Type.i64


@pytest.mark.parametrize("text", TEXTS, ids=range(len(TEXTS)))
def test_openvino_tokenizers_round_trip(compiled_tokenizer, text):
    tok, detok = compiled_tokenizer
    out = tok([text])
    ids = out["input_ids"]
    assert ids[0, 0] == 1  # <s> prepended
    assert np.all(out["attention_mask"] == 1)
    assert detok(ids)[0][0] == text


def test_ascii_prose_uses_word_pieces(compiled_tokenizer):
    tok, _ = compiled_tokenizer
    text = "Once upon a time, there was a little girl named Lily."
    ids = tok([text])["input_ids"][0]
    assert len(ids) < len(text) / 2  # common words are single tokens, not bytes
    assert 2 not in ids and 0 not in ids


def test_special_token_text_maps_to_special_ids(compiled_tokenizer):
    tok, _ = compiled_tokenizer
    ids = tok(["a</s>b<s>"])["input_ids"][0].tolist()
    assert ids == [1, 3 + ord("a"), 2, 3 + ord("b"), 1]


@pytest.fixture(scope="module")
def genai_tokenizer(tiny_model_dir):
    import openvino_genai as ov_genai
    return ov_genai.Tokenizer(str(tiny_model_dir))


@pytest.mark.oracle
def test_genai_tokenizer_loads_and_round_trips(genai_tokenizer):
    t = genai_tokenizer
    assert (t.get_bos_token_id(), t.get_eos_token_id(), t.get_pad_token_id()) == (1, 2, 0)
    assert (t.get_bos_token(), t.get_eos_token()) == ("<s>", "</s>")
    for text in TEXTS[:-1]:
        ids = t.encode(text).input_ids.data[0].tolist()
        assert ids[0] == 1
        assert t.decode(ids) == text
    no_bos = t.encode("the cat", add_special_tokens=False).input_ids.data[0].tolist()
    assert no_bos and no_bos[0] != 1
    assert t.decode([1, 3 + ord("x"), 2], skip_special_tokens=False) == "<s>x</s>"


@pytest.mark.oracle
def test_genai_chat_template(genai_tokenizer):
    assert genai_tokenizer.chat_template == CHAT_TEMPLATE
    assert genai_tokenizer.get_original_chat_template() == CHAT_TEMPLATE
    prompt = genai_tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        add_generation_prompt=True,
    )
    assert prompt == "<s><|system|>\nBe brief.</s>\n<|user|>\nHi</s>\n<|assistant|>\n"
