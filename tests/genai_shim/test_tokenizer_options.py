"""encode()'s options (truncation, max_length, padding, sides) against the real openvino_genai on
tokenizers of several families: each IR carries its own padding and truncation side, pad id and
model_max_length. The committed exports all pad and truncate on the left (optimum's choice for
LLMs); hub tokenizers often do both on the right, so each family runs a second time with its IR
turned to the right."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

import genai_shim
from genai_shim.tokenizer import _core
from ov_npu_emu.errors import UserInputError

OPTIMUM = Path(__file__).resolve().parents[1] / "fixtures" / "optimum"
FAMILIES = ["llama-fp32", "gpt2-fp32", "gemma-fp32", "phi3-fp32", "qwen2-fp32", "bloom-fp32"]
PROMPTS = [["Hello world, this is a longer sentence to test things", "hi"], "single prompt here"]


def _grid():
    for prompts, pad, max_length, side, truncation, special in itertools.product(
        PROMPTS, [False, True], [None, 1, 3, 40], [None, "left", "right"], [False, True], [True, False]
    ):
        if truncation and max_length == 1 and special:
            continue  # below the special tokens' count: the real crashes (test below)
        kw = {"add_special_tokens": special, "pad_to_max_length": pad, "truncation": truncation}
        if max_length is not None:
            kw["max_length"] = max_length
        if side is not None:
            kw["padding_side"] = side
        yield prompts, kw


def _right_handed(src: Path, dst: Path) -> Path:
    """A copy of a tokenizer folder whose IR pads and truncates on the right."""
    import openvino as ov
    from openvino import opset13 as ops

    core = _core()
    model = core.read_model(src / "openvino_tokenizer.xml")
    (trunc,) = [op for op in model.get_ordered_ops() if op.get_type_name() == "Truncate"]
    side = 3 * int(trunc.get_attributes()["m_num_inputs"]) + 1  # after the length: the side
    trunc.input(side).replace_source_output(ops.constant(np.frombuffer(b"right", np.uint8)).output(0))
    dst.mkdir()
    ov.save_model(model, dst / "openvino_tokenizer.xml", compress_to_fp16=False)
    xml = dst / "openvino_tokenizer.xml"
    assert 'pad_right="false"' in xml.read_text()
    xml.write_text(xml.read_text().replace('pad_right="false"', 'pad_right="true"'))
    for name in ("openvino_detokenizer.xml", "openvino_detokenizer.bin", "tokenizer_config.json"):
        if (src / name).exists():
            (dst / name).write_bytes((src / name).read_bytes())
    return dst


@pytest.mark.parametrize("hand", ["as_exported", "right"])
@pytest.mark.parametrize("family", FAMILIES)
def test_options_match_the_real(family, hand, real_genai, tmp_path):
    folder = OPTIMUM / family if hand == "as_exported" else _right_handed(OPTIMUM / family, tmp_path / family)
    ours, real = genai_shim.Tokenizer(folder), real_genai.Tokenizer(str(folder))
    differ = []
    cases = list(_grid())
    for prompts, kw in cases:
        a, b = ours.encode(prompts, **kw), real.encode(prompts, **kw)
        if not (np.array_equal(a.input_ids.data, b.input_ids.data)
                and np.array_equal(a.attention_mask.data, b.attention_mask.data)):
            differ.append(f"{prompts!r} {kw}: ours {a.input_ids.data.tolist()} real {b.input_ids.data.tolist()}")
    assert len(cases) > 150
    assert not differ, "\n".join(differ[:10])


def test_the_right_handed_copy_pads_and_truncates_on_the_right(tmp_path):
    """The grid above covers both sides only if the copy really turned."""
    left = genai_shim.Tokenizer(OPTIMUM / "gpt2-fp32")
    right = genai_shim.Tokenizer(_right_handed(OPTIMUM / "gpt2-fp32", tmp_path / "r"))
    full = left.encode("a b c d").input_ids.data[0].tolist()
    assert left.encode(["a b c d", "a"]).attention_mask.data[1].tolist()[0] == 0
    assert right.encode(["a b c d", "a"]).attention_mask.data[1].tolist()[0] == 1
    assert left.encode("a b c d", max_length=2, truncation=True).input_ids.data[0].tolist() == full[-2:]
    assert right.encode("a b c d", max_length=2, truncation=True).input_ids.data[0].tolist() == full[:2]


def test_max_length_below_the_special_tokens_keeps_only_them():
    """The real openvino_genai 2026.4.1 segfaults here (a negative length reaches Truncate);
    ours keeps no prompt token: the special tokens alone, as HF does."""
    tok = genai_shim.Tokenizer(OPTIMUM / "llama-fp32")
    bos = tok.get_bos_token_id()
    out = tok.encode(["Hello world", "hi"], max_length=0, truncation=True)
    assert out.input_ids.data.tolist() == [[bos], [bos]]


def test_the_real_overloads_by_name(real_genai):
    ours = genai_shim.Tokenizer(OPTIMUM / "gpt2-fp32")
    real = real_genai.Tokenizer(str(OPTIMUM / "gpt2-fp32"))
    for kw in ({"prompt": "one prompt"}, {"prompts": ["one", "two prompts"]}):
        np.testing.assert_array_equal(ours.encode(**kw).input_ids.data, real.encode(**kw).input_ids.data)
    np.testing.assert_array_equal(ours.encode("x y", False, True, 5, "left").input_ids.data,
                                  real.encode("x y", False, True, 5, "left").input_ids.data)


def test_bad_calls_get_typed_errors():
    tok = genai_shim.Tokenizer(OPTIMUM / "gpt2-fp32")
    assert not tok.supports_paired_input()
    with pytest.raises(UserInputError, match="supports_paired_input"):
        tok.encode(["a"], ["b"])
    with pytest.raises(UserInputError, match="supports_paired_input"):
        tok.encode([["a", "b"]])
    with pytest.raises(UserInputError, match="unexpected keyword"):
        tok.encode("a", pad_side="left")
    with pytest.raises(UserInputError, match="twice"):
        tok.encode("a", prompt="b")
    with pytest.raises(UserInputError, match="max_length"):
        tok.encode("a", max_length=-1)
