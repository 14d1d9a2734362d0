"""WhisperGenerationConfig against the real: fields, defaults, generation_config.json, validate()."""

from __future__ import annotations

import json

import pytest

import genai_shim
from ov_npu_emu.errors import ConfigError

WHISPER_FIELDS = [
    "alignment_heads", "begin_suppress_tokens", "decoder_start_token_id", "hotwords", "initial_prompt",
    "is_multilingual", "lang_to_id", "language", "max_initial_timestamp_index", "no_timestamps_token_id",
    "pad_token_id", "prev_sot_token_id", "return_timestamps", "suppress_tokens", "task",
    "transcribe_token_id", "translate_token_id", "word_timestamps",
]
SHARED = ["max_new_tokens", "max_length", "eos_token_id", "stop_token_ids", "apply_chat_template", "num_beams"]


def _fields(cfg):
    return {f: getattr(cfg, f) for f in WHISPER_FIELDS + SHARED}


def test_defaults_match_the_real(real_genai):
    assert _fields(genai_shim.WhisperGenerationConfig()) == _fields(real_genai.WhisperGenerationConfig())
    assert isinstance(genai_shim.WhisperGenerationConfig(), genai_shim.GenerationConfig)


def test_generation_config_json_reads_as_the_real(real_genai, tmp_path):
    data = {
        "is_multilingual": True, "task_to_id": {"transcribe": 7, "translate": 8},
        "lang_to_id": {"<|en|>": 1, "<|de|>": 2}, "alignment_heads": [[1, 2], [3, 4]],
        "suppress_tokens": [1, 2], "begin_suppress_tokens": [220], "max_length": 448,
        "eos_token_id": 50257, "decoder_start_token_id": 9, "no_timestamps_token_id": 11,
        "max_initial_timestamp_index": 40, "prev_sot_token_id": 12, "pad_token_id": 13,
    }
    path = tmp_path / "generation_config.json"
    path.write_text(json.dumps(data))
    ours, real = genai_shim.WhisperGenerationConfig(path), real_genai.WhisperGenerationConfig(str(path))
    assert _fields(ours) == _fields(real)
    assert ours.transcribe_token_id == 7 and ours.alignment_heads == [(1, 2), (3, 4)]


@pytest.mark.parametrize("language", ["en", "<|en|>", "de"])
def test_language_in_either_form_validates(language):
    cfg = genai_shim.WhisperGenerationConfig(lang_to_id={"<|en|>": 1, "<|de|>": 2}, max_new_tokens=4)
    cfg.language = language
    cfg.validate()
    assert cfg.language == language


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "lang_to_id"),
        ({"lang_to_id": {"<|en|>": 1}, "language": "xx"}, "'language' xx"),
        ({"lang_to_id": {"<|en|>": 1}, "task": "summarize"}, "'task'"),
        ({"is_multilingual": False, "language": "en"}, "not multilingual"),
        ({"is_multilingual": False, "task": "transcribe"}, "not multilingual"),
        ({"is_multilingual": False, "num_return_sequences": 2, "num_beams": 2}, "num_return_sequences"),
        ({"is_multilingual": False, "num_assistant_tokens": 3}, "Assisted"),
        ({"is_multilingual": False, "word_timestamps": True}, "alignment_heads"),
    ],
)
def test_validate_refuses_what_the_real_refuses(real_genai, kwargs, message):
    kwargs = {"max_new_tokens": 4, **kwargs}
    with pytest.raises(RuntimeError):
        real_genai.WhisperGenerationConfig(**kwargs).validate()
    with pytest.raises(ConfigError, match=message):
        genai_shim.WhisperGenerationConfig(**kwargs).validate()


def test_bad_field_values_are_typed_errors():
    cfg = genai_shim.WhisperGenerationConfig()
    with pytest.raises(ConfigError):
        cfg.language = 5
    with pytest.raises(ConfigError):
        cfg.alignment_heads = [(1,)]
    with pytest.raises(AttributeError):
        cfg.no_such_field = 1
