"""Byte-level BPE tokenizer/detokenizer IR built with openvino_tokenizers only (no transformers)."""

from __future__ import annotations

import itertools
import json
import string
from collections.abc import Iterator
from dataclasses import dataclass

import openvino as ov

from ov_npu_emu.errors import ConfigError

__all__ = [
    "BOS_ID",
    "CHAT_TEMPLATE",
    "EOS_ID",
    "MIN_VOCAB_SIZE",
    "NUM_BYTE_TOKENS",
    "PAD_ID",
    "SPECIAL_TOKENS",
    "UNK_ID",
    "ByteLevelVocab",
    "build_tokenizer",
    "build_vocab",
]

SPECIAL_TOKENS: tuple[str, ...] = ("<unk>", "<s>", "</s>")
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2
PAD_ID = UNK_ID  # Llama has no pad token; pad with <unk> (id 0), which is skipped on decode
NUM_BYTE_TOKENS = 256
#: Specials + one token per byte: the smallest vocabulary that still round-trips any text.
MIN_VOCAB_SIZE = len(SPECIAL_TOKENS) + NUM_BYTE_TOKENS

#: HF-style (Zephyr-like) chat template; openvino_genai reads it from the tokenizer's rt_info.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' + message['content'] + eos_token + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)

# Common English words, most frequent first; each becomes " word" (and later "word", " Word")
# pieces so ASCII prose tokenizes into word-sized tokens.  Written for this project.
_WORDS = """
the a and to was he she it of in his her they that with for on said you had but there one
day is be at as her him so not all up out then were big very little time once upon what
will can have this we my me do no go come like saw happy play friend mom dad wanted from
new looked went are when your into could see about by an would who get would their them its
over back made make good love loved tree dog cat ball park sun fun help helped run ran toy
box bird fish red blue green girl boy named lily tim ben sue sam sky home house room water
food car say says asked again too now down just how know feel felt some more after did way
thing things very much many man woman old young first last long great little own other our
out because before think thought find found give gave take took tell told look try tried
want
""".split()  # noqa: SIM905 - a word list reads better as text


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable char map (the alphabet of byte-level BPE vocabs)."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("\xa1"), ord("\xac") + 1))
        + list(range(ord("\xae"), ord("\xff") + 1))
    )
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars, strict=False)}


_B2U = _bytes_to_unicode()
_U2B = {c: b for b, c in _B2U.items()}


def _to_chars(text: str) -> str:
    return "".join(_B2U[b] for b in text.encode("utf-8"))


@dataclass(frozen=True)
class ByteLevelVocab:
    """The vocabulary in byte-level alphabet (``tokens[i]`` is token id i) plus BPE merges."""

    tokens: tuple[str, ...]  # byte-level chars; specials as plain text
    merges: tuple[tuple[str, str], ...]  # rank order

    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes a token decodes to (specials: their text)."""
        tok = self.tokens[token_id]
        if token_id < len(SPECIAL_TOKENS):
            return tok.encode("utf-8")
        return bytes(_U2B[ch] for ch in tok)

    def __len__(self) -> int:
        return len(self.tokens)


def _candidates() -> Iterator[str]:
    """Pieces in priority order: words (spaced, bare, capitalised), then letter n-grams."""
    for w in _WORDS:
        yield " " + w
    for w in _WORDS:
        yield w
        yield " " + w.capitalize()
        yield w.capitalize()
    for p in ".,!?'\"":
        yield p + " "
    letters = string.ascii_lowercase
    # Unbounded n-gram fill so any vocabulary size (up to 151936 and beyond) can be produced.
    for n in itertools.count(1):
        for combo in itertools.product(letters, repeat=n):
            piece = "".join(combo)
            yield " " + piece
            yield piece


def build_vocab(vocab_size: int) -> ByteLevelVocab:
    """A deterministic byte-level BPE vocabulary of exactly ``vocab_size`` tokens.

    Ids: 0 ``<unk>``, 1 ``<s>`` (bos), 2 ``</s>`` (eos), 3..258 the 256 bytes (id = 3 + byte),
    then word pieces.  Each piece ``t`` is added with the merge ``(t[:-1], t[-1])`` after all
    its prefixes, so every merge's parts exist and any UTF-8 text round-trips.
    """
    if vocab_size < MIN_VOCAB_SIZE:
        raise ConfigError(
            f"vocab_size {vocab_size} is too small for the byte-level tokenizer "
            f"(need >= {MIN_VOCAB_SIZE})",
            key="vocab_size",
        )
    tokens: list[str] = list(SPECIAL_TOKENS) + [_B2U[b] for b in range(256)]
    known = set(tokens[len(SPECIAL_TOKENS) :])
    merges: list[tuple[str, str]] = []
    for piece in _candidates():
        if len(tokens) >= vocab_size:
            break
        chars = _to_chars(piece)
        for end in range(2, len(chars) + 1):
            if len(tokens) >= vocab_size:
                break
            prefix = chars[:end]
            if prefix not in known:
                merges.append((prefix[:-1], prefix[-1]))
                tokens.append(prefix)
                known.add(prefix)
    return ByteLevelVocab(tuple(tokens), tuple(merges))


def _rt_info(chat_template: str) -> dict[str, str]:
    import openvino_tokenizers

    post = {
        "single": {"ids": [BOS_ID, -1], "type_ids": [0, 0]},
        "pair": {"ids": [BOS_ID, -1, BOS_ID, -2], "type_ids": [0, 0, 1, 1]},
    }
    return {
        "add_attention_mask": "True",
        "add_special_tokens": "True",
        "bos_token_id": str(BOS_ID),
        "eos_token_id": str(EOS_ID),
        "pad_token_id": str(PAD_ID),
        "chat_template": chat_template,
        "clean_up_tokenization_spaces": "False",
        "skip_special_tokens": "True",
        "detokenizer_input_type": "i64",
        "tokenizer_output_type": "i64",
        "number_of_inputs": "1",
        "original_tokenizer_class": "ov_npu_emu.modelbuilder.tokenizer.ByteLevelVocab",
        "processed_post_processor_template": json.dumps(post),
        "openvino_tokenizers_version": str(getattr(openvino_tokenizers, "__version__", "")),
        "openvino_version": ov.get_version(),
        "utf8_replace_mode": "replace",
    }


def build_tokenizer(
    vocab_size: int, chat_template: str = CHAT_TEMPLATE, model_max_length: int = 2048
) -> tuple[ov.Model, ov.Model]:
    """``(tokenizer, detokenizer)`` ov.Models for :func:`build_vocab` (``vocab_size``).

    The tokenizer maps a string batch to ``input_ids`` and ``attention_mask`` (i64 [B, S]) and
    prepends ``<s>``; special-token text (``<s>``, ``</s>``, ``<unk>``) in the input becomes the
    special id.  The detokenizer maps i64 [B, S] ids to strings, skipping specials by default.
    Both carry the bos/eos/pad ids and ``chat_template`` in rt_info, where openvino_genai looks.
    """
    # Imported lazily: openvino_tokenizers registers its extension ops on import.
    from openvino_tokenizers.constants import UTF8ReplaceMode
    from openvino_tokenizers.tokenizer_pipeline import (
        AddToken,
        BPETokenizationStep,
        BytesToCharsStep,
        CharsToBytesStep,
        CombineSegmentsStep,
        PaddingStep,
        RegexSplitStep,
        Sequence,
        SpecialTokensSplit,
        TokenizerPipeline,
        TruncationStep,
        UTF8ValidateStep,
        VocabDecoderStep,
    )
    from openvino_tokenizers.utils import change_inputs_type, change_outputs_type

    vocab = build_vocab(vocab_size)
    pipeline = TokenizerPipeline()
    pipeline.add_steps(SpecialTokensSplit.from_string_iter(SPECIAL_TOKENS))
    # GPT-2 pre-tokenization: words keep their leading space, digits and punctuation split off.
    pipeline.add_steps(RegexSplitStep.byte_level_splitter())
    pipeline.add_steps(BytesToCharsStep())
    pipeline.add_steps(
        BPETokenizationStep(
            vocab=list(vocab.tokens),
            merges=list(vocab.merges),
            added_tokens={tok: i for i, tok in enumerate(SPECIAL_TOKENS)},
        )
    )
    pipeline.vocab = pipeline[-1].vocab
    # Truncation (off by default, switched on by openvino_genai's max_length/truncation); genai
    # also expects this op in front of CombineSegments to toggle add_special_tokens.
    pipeline.add_steps(TruncationStep(max_length=model_max_length - 1))
    pipeline.add_steps(
        CombineSegmentsStep([AddToken(token=SPECIAL_TOKENS[BOS_ID], _token_id=BOS_ID), Sequence()])
    )
    pipeline.add_steps(PaddingStep(token=SPECIAL_TOKENS[PAD_ID], _token_id=PAD_ID))
    pipeline.add_steps(
        VocabDecoderStep(
            vocab=[vocab.token_bytes(i) for i in range(len(vocab))],
            skip_tokens=list(range(len(SPECIAL_TOKENS))),
        )
    )
    pipeline.add_steps(CharsToBytesStep())
    pipeline.add_steps(UTF8ValidateStep(mode=UTF8ReplaceMode.REPLACE))

    raw = pipeline.get_tokenizer_ov_subgraph()
    # Keep input_ids + attention_mask (drop token_type_ids), as convert_tokenizer does.
    wanted = [
        next(o for o in raw.outputs if name in o.get_names())
        for name in ("input_ids", "attention_mask")
    ]
    tokenizer = ov.Model(wanted, raw.get_parameters(), "tokenizer")
    tokenizer.add_sinks(raw.get_sinks())
    detokenizer = pipeline.get_detokenizer_ov_subgraph()
    change_outputs_type(tokenizer, ov.Type.i64)
    change_inputs_type(detokenizer, ov.Type.i64)
    for model in (tokenizer, detokenizer):
        for key, value in _rt_info(chat_template).items():
            model.set_rt_info(value, key)
    return tokenizer, detokenizer
