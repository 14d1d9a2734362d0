"""Tokenizer folder loading against the real openvino_genai: special tokens from config.json,
special_tokens_map.json, tokenizer_config.json and the IR's rt_info, chat templates from
tokenizer_config.json, processor_config.json, chat_template.json, chat_template.jinja and rt_info,
the real's replacement of templates it cannot render, and the real's failures (typed here)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import openvino_tokenizers  # noqa: F401  (registers the tokenizer ops for read_model)
import pytest

import genai_shim
from genai_shim.tokenizer_files import FALLBACK_TEMPLATES
from ov_npu_emu.errors import ConfigError

FIXTURE = Path(__file__).parents[1] / "fixtures" / "optimum" / "llama-fp32"
IRS = ("openvino_tokenizer", "openvino_detokenizer")
RT_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id", "chat_template")

QWEN2_VL = next(k for k in FALLBACK_TEMPLATES if "vision_start" in k)


def folder(
    tmp_path: Path,
    files: dict[str, Any],
    keep_rt: bool = False,
    rt: dict[str, str] | None = None,
    tokenizer: bool = True,
) -> Path:
    """A copy of the llama export's IRs (rt_info ids and template dropped unless ``keep_rt``,
    ``rt`` set on both) with ``files`` written beside them (dicts as JSON, str as is)."""
    core = ov.Core()
    for name in IRS if tokenizer else IRS[1:]:
        model = core.read_model(FIXTURE / f"{name}.xml")
        info = model.get_rt_info()
        for key in () if keep_rt else RT_KEYS:
            if key in info:
                del info[key]
        for key, value in (rt or {}).items():
            model.set_rt_info(value, key)
        ov.save_model(model, tmp_path / f"{name}.xml")
    for name, content in files.items():
        (tmp_path / name).write_text(content if isinstance(content, str) else json.dumps(content))
    return tmp_path


def state(mod: Any, path: Path) -> tuple[Any, ...]:
    tok = mod.Tokenizer(str(path))
    return (
        tok.get_bos_token_id(),
        tok.get_eos_token_id(),
        tok.get_pad_token_id(),
        tok.get_bos_token(),
        tok.get_eos_token(),
        tok.get_pad_token(),
        tok.chat_template,
        tok.get_original_chat_template(),
    )


IDS = {"pad_token_id": 422, "bos_token_id": 42, "eos_token_id": 37}
TOKENIZER_CONFIG = {
    "added_tokens_decoder": {
        "422": {"content": "<pad>"},
        "37": {"content": "<s>"},
        "42": {"content": "</s>"},
    },
    "pad_token": "<pad>",
    "bos_token": "<s>",
    "eos_token": "</s>",
}
CUSTOM = {
    "pad_token": {"content": "<custom_pad>"},
    "bos_token": {"content": "<custom_bos>"},
    "eos_token": {"content": "<custom_eos>"},
}

SPECIAL_TOKENS = {
    "nothing": {},
    # ids only: the strings are the detokenized ids (special tokens kept)
    "config_json": {"config.json": IDS},
    "config_json_list_and_null": {
        "config.json": {"bos_token_id": 1, "eos_token_id": [2, 3], "pad_token_id": None}
    },
    "special_tokens_map_content": {"special_tokens_map.json": CUSTOM},
    # plain strings in special_tokens_map.json are not read; ids are not inferred from strings
    "special_tokens_map_plain": {"special_tokens_map.json": {"bos_token": "<s>", "eos_token": "</s>"}},
    "special_tokens_map_in_vocab": {
        "special_tokens_map.json": {"bos_token": {"content": "<s>"}, "eos_token": {"content": "</s>"}}
    },
    "tokenizer_config": {"tokenizer_config.json": TOKENIZER_CONFIG},
    "tokenizer_config_and_config": {
        "tokenizer_config.json": {
            **TOKENIZER_CONFIG,
            "added_tokens_decoder": {
                "777": {"content": "<pad>"},
                "888": {"content": "<s>"},
                "656": {"content": "</s>"},
            },
        },
        "config.json": IDS,
    },
    # pad falls back to EOS (string and id) in tokenizer_config.json's step only
    "tokenizer_config_no_pad": {
        "tokenizer_config.json": {
            "added_tokens_decoder": {"1": {"content": "<s>"}, "2": {"content": "</s>"}},
            "bos_token": "<s>",
            "eos_token": "</s>",
        }
    },
    "tokenizer_config_strings_only": {
        "tokenizer_config.json": {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<unk>"}
    },
    "special_tokens_map_before_tokenizer_config": {
        "special_tokens_map.json": {"bos_token": {"content": "<a>"}},
        "tokenizer_config.json": {
            "bos_token": "<s>",
            "eos_token": "</s>",
            "added_tokens_decoder": {
                "1": {"content": "<s>"},
                "2": {"content": "</s>"},
                "9": {"content": "<a>"},
            },
        },
    },
    # the same content twice: the first key in lexicographic order wins
    "added_tokens_decoder_order": {
        "tokenizer_config.json": {
            "eos_token": "</s>",
            "added_tokens_decoder": {"9": {"content": "</s>"}, "10": {"content": "</s>"}},
        }
    },
    # generation_config.json is not the tokenizer's
    "generation_config_ignored": {"generation_config.json": {"bos_token_id": 5, "eos_token_id": 6}},
}


@pytest.mark.parametrize("files", list(SPECIAL_TOKENS.values()), ids=list(SPECIAL_TOKENS))
def test_special_tokens_as_real(tmp_path, real_genai, files):
    path = folder(tmp_path, files)
    assert state(genai_shim, path) == state(real_genai, path)


def test_rt_info_wins_over_files(tmp_path, real_genai):
    path = folder(
        tmp_path, {"config.json": IDS, "tokenizer_config.json": {"chat_template": "TC"}}, keep_rt=True
    )
    ours = state(genai_shim, path)
    assert ours == state(real_genai, path)
    assert ours[:3] == (1, 2, 0)


def test_detokenizer_only_folder_reads_no_rt_info(tmp_path, real_genai):
    path = folder(
        tmp_path,
        {"config.json": {"bos_token_id": 5}},
        keep_rt=True,
        rt={"chat_template": QWEN2_VL},
        tokenizer=False,
    )
    assert state(genai_shim, path) == state(real_genai, path)


TEMPLATES = {
    "each_file_in_order": {
        "tokenizer_config.json": {"chat_template": "TC"},
        "processor_config.json": {"chat_template": "PC"},
        "chat_template.json": {"chat_template": "CJ"},
        "chat_template.jinja": "JJ",
    },
    "a_later_empty_string_wins": {
        "tokenizer_config.json": {"chat_template": "TC"},
        "processor_config.json": {"chat_template": ""},
    },
    "null_is_skipped": {
        "tokenizer_config.json": {"chat_template": None},
        "processor_config.json": {"chat_template": "PC"},
    },
    "named_list_default": {
        "tokenizer_config.json": {
            "chat_template": [{"name": "x", "template": "X"}, {"name": "default", "template": "D"}]
        }
    },
    "named_list_without_default": {
        "tokenizer_config.json": {"chat_template": [{"name": "x", "template": "X"}]}
    },
    "known_template_replaced": {"chat_template.json": {"chat_template": QWEN2_VL}},
}


@pytest.mark.parametrize("files", list(TEMPLATES.values()), ids=list(TEMPLATES))
def test_chat_template_sources_as_real(tmp_path, real_genai, files):
    path = folder(tmp_path, files)
    assert state(genai_shim, path) == state(real_genai, path)


@pytest.mark.parametrize("rt_template", ["", "RT", QWEN2_VL], ids=["empty", "plain", "known"])
def test_rt_info_chat_template_wins(tmp_path, real_genai, rt_template):
    path = folder(
        tmp_path,
        {"tokenizer_config.json": {"chat_template": "TC"}, "chat_template.jinja": "JJ"},
        rt={"chat_template": rt_template},
    )
    ours = state(genai_shim, path)
    assert ours == state(real_genai, path)
    assert ours[-1] == rt_template


def test_set_and_apply_known_template_as_real(tmp_path, real_genai):
    path = folder(tmp_path, {"tokenizer_config.json": {"chat_template": "TC"}})
    messages = [{"role": "user", "content": "hi"}]
    got = []
    for mod in (genai_shim, real_genai):
        tok = mod.Tokenizer(str(path))
        tok.set_chat_template(QWEN2_VL)
        row: list[Any] = [tok.chat_template, tok.get_original_chat_template()]
        row.append(tok.apply_chat_template(messages, False, chat_template=QWEN2_VL))
        tok.chat_template = "Y"
        row += [tok.chat_template, tok.get_original_chat_template()]
        got.append(row)
    assert got[0] == got[1]
    assert got[0][0] == FALLBACK_TEMPLATES[QWEN2_VL]


def test_empty_render_raises_as_real(tmp_path, real_genai):
    path = folder(tmp_path, {})
    messages = [{"role": "user", "content": "hi"}]
    template = QWEN2_VL + "\n"  # not the known text: rendered as is, to nothing
    with pytest.raises(RuntimeError, match="resulted in an empty string"):
        real_genai.Tokenizer(str(path)).apply_chat_template(messages, False, chat_template=template)
    with pytest.raises(ConfigError, match="resulted in an empty string"):
        genai_shim.Tokenizer(str(path)).apply_chat_template(messages, False, chat_template=template)


REFUSED = {
    "token_object_in_tokenizer_config": (
        {"tokenizer_config.json": {"bos_token": {"content": "<s>"}}},
        "bos_token",
    ),
    "string_id_in_config": ({"config.json": {"bos_token_id": "1"}}, "bos_token_id"),
    "config_not_json": ({"config.json": "{not json"}, "config.json"),
    "special_tokens_map_not_json": ({"special_tokens_map.json": "{not json"}, "special_tokens_map.json"),
    "processor_config_not_json": ({"processor_config.json": "{not json"}, "processor_config.json"),
}


@pytest.mark.parametrize(("files", "key"), list(REFUSED.values()), ids=list(REFUSED))
def test_files_the_real_refuses(tmp_path, real_genai, files, key):
    path = folder(tmp_path, files)
    with pytest.raises(RuntimeError, match="json.exception"):
        real_genai.Tokenizer(str(path))
    with pytest.raises(ConfigError) as err:
        genai_shim.Tokenizer(str(path))
    assert err.value.key == key


def test_in_memory_tokenizer_reads_rt_info_only(tmp_path, real_genai):
    shutil.copytree(FIXTURE, tmp_path / "src", ignore=shutil.ignore_patterns("openvino_model.*"))
    src = tmp_path / "src"
    got = []
    for mod in (genai_shim, real_genai):
        parts = []
        for name in IRS:
            weights = (src / f"{name}.bin").read_bytes()
            parts += [
                (src / f"{name}.xml").read_text(),
                ov.Tensor(np.frombuffer(weights, dtype=np.uint8).copy()),
            ]
        tok = mod.Tokenizer(*parts)
        got.append(
            (
                tok.get_bos_token_id(),
                tok.get_eos_token_id(),
                tok.get_pad_token_id(),
                tok.get_pad_token(),
                tok.chat_template,
            )
        )
    assert got[0] == got[1]
