"""GenerationConfig: defaults, JSON loading and validate() messages equal to the real ones."""

from __future__ import annotations

import json

import pytest

import genai_shim
from genai_shim.generation_config import SIZE_MAX
from ov_npu_emu.errors import ConfigError

BAD = {
    "nothing_defined": {},
    "max_new_tokens_0": {"max_new_tokens": 0},
    "min_gt_max": {"max_new_tokens": 10, "min_new_tokens": 20},
    "temperature_0": {"max_new_tokens": 10, "do_sample": True, "temperature": 0.0},
    "top_p_0": {"max_new_tokens": 10, "do_sample": True, "top_p": 0.0},
    "top_p_1.5": {"max_new_tokens": 10, "do_sample": True, "top_p": 1.5},
    "repetition_0": {"max_new_tokens": 10, "repetition_penalty": 0.0},
    "presence_3": {"max_new_tokens": 10, "presence_penalty": 3.0},
    "frequency_-3": {"max_new_tokens": 10, "frequency_penalty": -3.0},
    "n2_greedy": {"max_new_tokens": 10, "num_return_sequences": 2},
    "beams_lt_n": {"max_new_tokens": 10, "num_beams": 4, "num_return_sequences": 5},
    "negative_stop_id": {"max_new_tokens": 10, "stop_token_ids": {-1}},
    "ignore_eos_unbounded": {"ignore_eos": True},
    "min_p_1": {"max_new_tokens": 10, "do_sample": True, "min_p": 1.0},
    "min_p_-0.1": {"max_new_tokens": 10, "do_sample": True, "min_p": -0.1},
    "ngram_without_assistant": {"max_new_tokens": 10, "max_ngram_size": 3},
}
GOOD = [
    {"eos_token_id": 2},
    {"max_length": 10},
    {"ignore_eos": True, "max_new_tokens": 5},
    {"max_new_tokens": 3, "echo": True},
    {"max_new_tokens": 3, "min_p": 2.0},  # min_p is checked for sampling only
    {"max_new_tokens": 3, "max_ngram_size": 3, "num_assistant_tokens": 5},
]


def _message(mod, kw):
    cfg = mod.GenerationConfig()
    try:
        cfg.update_generation_config(**kw)
        cfg.validate()
    except RuntimeError as e:
        return str(e).strip().splitlines()[-1].strip()
    return None


@pytest.mark.parametrize("kw", list(BAD.values()), ids=list(BAD))
def test_validate_messages_match_real(real_genai, kw):
    real = _message(real_genai, kw)
    assert real is not None
    with pytest.raises(ConfigError):
        genai_shim.GenerationConfig(**kw).validate()
    assert _message(genai_shim, kw) == real


@pytest.mark.parametrize("kw", GOOD, ids=str)
def test_valid_configs(real_genai, kw):
    assert _message(real_genai, kw) is None
    assert _message(genai_shim, kw) is None


def test_defaults_match_real(real_genai):
    ours, real = genai_shim.GenerationConfig(), real_genai.GenerationConfig()
    for name in (
        "max_new_tokens",
        "max_length",
        "min_new_tokens",
        "ignore_eos",
        "echo",
        "eos_token_id",
        "stop_strings",
        "stop_token_ids",
        "include_stop_str_in_output",
        "repetition_penalty",
        "presence_penalty",
        "frequency_penalty",
        "num_beams",
        "num_return_sequences",
        "do_sample",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "rng_seed",
        "apply_chat_template",
        "logprobs",
    ):
        assert getattr(ours, name) == getattr(real, name), name
    assert ours.is_greedy_decoding() and not ours.is_multinomial() and not ours.is_beam_search()


def test_json_loading(tmp_path, stories_dir, real_genai):
    path = stories_dir / "generation_config.json"
    ours, real = genai_shim.GenerationConfig(str(path)), real_genai.GenerationConfig(str(path))
    assert (ours.eos_token_id, ours.stop_token_ids, ours.max_new_tokens) == (
        real.eos_token_id,
        real.stop_token_ids,
        real.max_new_tokens,
    )
    p = tmp_path / "generation_config.json"
    p.write_text(
        json.dumps({"eos_token_id": [2, 7], "max_new_tokens": 9, "do_sample": True, "top_k": 5})
    )
    cfg = genai_shim.GenerationConfig(str(p))
    assert (cfg.eos_token_id, cfg.stop_token_ids, cfg.max_new_tokens, cfg.do_sample, cfg.top_k) == (
        2,
        {2, 7},
        9,
        True,
        5,
    )
    with pytest.raises(ConfigError, match="does not exist"):
        genai_shim.GenerationConfig(str(tmp_path / "missing.json"))


def test_eos_and_max_length_rules():
    cfg = genai_shim.GenerationConfig()
    cfg.set_eos_token_id(5)
    assert cfg.eos_token_id == 5 and cfg.stop_token_ids == {5}
    assert cfg.get_max_new_tokens(4) == SIZE_MAX
    cfg.max_length = 10
    assert cfg.get_max_new_tokens(4) == 6
    cfg.max_new_tokens = 2
    assert cfg.get_max_new_tokens(4) == 2
    with pytest.raises(AttributeError):
        cfg.no_such_field = 1


def test_an_eos_set_as_an_attribute_must_be_a_stop_token(real_genai):
    """The real keeps eos_token_id and stop_token_ids apart on attribute assignment; validate()
    then asks for set_eos_token_id."""
    messages = []
    for mod in (real_genai, genai_shim):
        cfg = mod.GenerationConfig(max_new_tokens=5)
        cfg.eos_token_id = 7
        with pytest.raises(RuntimeError) as err:
            cfg.validate()
        messages.append(str(err.value).strip().splitlines()[-1])
        cfg.set_eos_token_id(7)
        cfg.validate()
    assert messages[0] == messages[1]
