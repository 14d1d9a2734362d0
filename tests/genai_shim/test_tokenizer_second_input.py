"""``Tokenizer(path, add_second_input=True)`` against the real openvino_genai: a one-input
tokenizer IR gets a second (paired) input at load; paired and single prompts encode as the
real's with every encode option; the property's accepted values and the refusal of an IR the
transformation cannot extend."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import openvino_tokenizers  # noqa: F401  (registers the tokenizer ops for read_model)
import pytest
from openvino_tokenizers.tokenizer_transformations import add_second_input

import genai_shim
from ov_npu_emu.errors import ConfigError

OPTIMUM = Path(__file__).parents[1] / "fixtures" / "optimum"
#: BOS before each sequence (llama, gemma), nothing added (gpt2), segment ids 0/1 (qwen2)
FAMILIES = ["llama-fp32", "gemma-fp32", "gpt2-fp32", "qwen2-fp32"]

PAIRS = [
    ["hi", "sun in yellow"],
    ["Eng... test, string?!" * 30, "Multiline\nstring!\nWow!"],
    ["hi" * 20, "buy" * 90],
    ["long " * 50, ""],
]
OPTIONS = {
    "default": {},
    "no_special_tokens": {"add_special_tokens": False},
    "truncate_16": {"max_length": 16, "truncation": True},
    "pad_to_40": {"max_length": 40, "pad_to_max_length": True},
    "left": {"padding_side": "left"},
    "truncate_5_no_special": {"max_length": 5, "truncation": True, "add_special_tokens": False},
}
CALLS = {
    "pairs": lambda tok, kw: tok.encode(PAIRS, **kw),
    "broadcast_second": lambda tok, kw: tok.encode([p[0] for p in PAIRS], [PAIRS[0][1]], **kw),
    "broadcast_first": lambda tok, kw: tok.encode(["a b c"], [p[1] for p in PAIRS], **kw),
    "single": lambda tok, kw: tok.encode("single prompt here " * 9, **kw),
    "batch": lambda tok, kw: tok.encode(["one", "two three"], **kw),
}


@pytest.fixture(scope="module", params=FAMILIES)
def paired(request: pytest.FixtureRequest, real_genai: Any) -> tuple[Any, Any]:
    folder = str(OPTIMUM / request.param)
    ours = genai_shim.Tokenizer(folder, add_second_input=True)
    real = real_genai.Tokenizer(folder, add_second_input=True)
    return ours, real


@pytest.mark.parametrize("kw", list(OPTIONS.values()), ids=list(OPTIONS))
@pytest.mark.parametrize("call", list(CALLS.values()), ids=list(CALLS))
def test_encode_as_real(paired, call, kw):
    ours, real = paired
    assert ours.supports_paired_input() and real.supports_paired_input()
    a, b = call(ours, kw), call(real, kw)
    np.testing.assert_array_equal(a.input_ids.data, b.input_ids.data)
    np.testing.assert_array_equal(a.attention_mask.data, b.attention_mask.data)


def test_properties_dict_is_deprecated_as_real(real_genai):
    folder = str(OPTIMUM / "gpt2-fp32")
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((folder, {}), {}),
        ((folder, {"add_second_input": False}), {}),
        ((folder,), {"properties": {"add_second_input": False}}),
        ((folder,), {"add_second_input": False}),
    ]
    got = []
    for mod in (genai_shim, real_genai):
        for args, kw in calls:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")  # the same text from one line is shown once
                mod.Tokenizer(*args, **kw)
            got.append([str(w.message) for w in caught if w.category is DeprecationWarning])
    assert got[:4] == got[4:]
    text = "'properties' parameters is deprecated, please use kwargs to pass config properties instead."
    assert got[:4] == [[], [text], [text], []]


def test_without_the_property_pairs_are_refused(real_genai):
    folder = str(OPTIMUM / "llama-fp32")
    assert not genai_shim.Tokenizer(folder).supports_paired_input()
    assert not real_genai.Tokenizer(folder).supports_paired_input()


@pytest.mark.parametrize("value", [True, False, "YES", "no", "true", "False", "1", "0", ""])
def test_property_values_as_real(real_genai, value):
    folder = str(OPTIMUM / "gpt2-fp32")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the real's for a properties dict
        real = real_genai.Tokenizer(folder, {"add_second_input": value}).supports_paired_input()
    with pytest.warns(DeprecationWarning, match="'properties' parameters is deprecated"):
        assert genai_shim.Tokenizer(folder, {"add_second_input": value}).supports_paired_input() == real
    assert genai_shim.Tokenizer(folder, add_second_input=value).supports_paired_input() == real


@pytest.mark.parametrize("value", [1, 1.0, None, "maybe"])
def test_bad_property_values(real_genai, value):
    folder = str(OPTIMUM / "gpt2-fp32")
    with pytest.raises(RuntimeError):
        real_genai.Tokenizer(folder, add_second_input=value)
    with pytest.raises(ConfigError) as err:
        genai_shim.Tokenizer(folder, add_second_input=value)
    assert err.value.key == "add_second_input"


def _copy(src: Path, dst: Path, edit: Any) -> Path:
    for p in src.glob("openvino_*tokenizer.*"):
        shutil.copy(p, dst / p.name)
    model = ov.Core().read_model(src / "openvino_tokenizer.xml")
    edit(model)
    ov.save_model(model, dst / "tmp.xml")
    (dst / "tmp.xml").replace(dst / "openvino_tokenizer.xml")
    (dst / "tmp.bin").replace(dst / "openvino_tokenizer.bin")
    return dst


def test_two_input_ir_is_kept(tmp_path, real_genai):
    """An IR converted with number_of_inputs=2 (the same transformation, at conversion)."""
    folder = str(_copy(OPTIMUM / "llama-fp32", tmp_path, add_second_input))
    for prop in (True, False):
        ours = genai_shim.Tokenizer(folder, add_second_input=prop)
        real = real_genai.Tokenizer(folder, add_second_input=prop)
        assert ours.supports_paired_input() and real.supports_paired_input()
        a, b = ours.encode(PAIRS), real.encode(PAIRS)
        np.testing.assert_array_equal(a.input_ids.data, b.input_ids.data)


def test_ir_without_pair_template_is_refused(tmp_path, real_genai):
    def drop(model: ov.Model) -> None:
        del model.get_rt_info()["processed_post_processor_template"]

    folder = str(_copy(OPTIMUM / "llama-fp32", tmp_path, drop))
    with pytest.raises(RuntimeError, match="Post processor is not present"):
        real_genai.Tokenizer(folder, add_second_input=True)
    with pytest.raises(ConfigError, match="AddSecondInputPass failed with .*Post processor is not present"):
        genai_shim.Tokenizer(folder, add_second_input=True)
    assert not genai_shim.Tokenizer(folder).supports_paired_input()


def test_in_memory_tokenizer_takes_the_property(real_genai):
    """The real 2026.4.1 fails here ("Null shared object or symbol name.": its pass needs the
    openvino_tokenizers library, loaded only for a folder); ours adds the input as for a folder."""
    src = OPTIMUM / "gpt2-fp32"
    parts: list[Any] = []
    for name in ("openvino_tokenizer", "openvino_detokenizer"):
        weights = np.frombuffer((src / f"{name}.bin").read_bytes(), dtype=np.uint8).copy()
        parts += [(src / f"{name}.xml").read_text(), ov.Tensor(weights)]
    with pytest.raises(ValueError, match="Null shared object"):
        real_genai.Tokenizer(*parts, add_second_input=True)
    ours = genai_shim.Tokenizer(*parts, add_second_input=True)
    real = real_genai.Tokenizer(str(src), add_second_input=True)
    assert ours.supports_paired_input()
    np.testing.assert_array_equal(ours.encode(PAIRS).input_ids.data, real.encode(PAIRS).input_ids.data)
