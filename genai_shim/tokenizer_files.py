"""What openvino_genai's Tokenizer reads beside the IRs: special tokens and the chat template.

openvino_genai 2026.4.1 (``tokenizer_impl.cpp``, ``setup_tokenizer``) loads a folder in this
order, each step filling only what is still unknown unless said otherwise:

1. ``config.json``: ``pad_token_id``, ``bos_token_id``, ``eos_token_id`` (numbers; a list or
   null is ignored, a string is an error).
2. ``special_tokens_map.json``: ``pad_token`` / ``bos_token`` / ``eos_token`` as
   ``{"content": "..."}`` only (a plain string there is ignored).
3. ``tokenizer_config.json``, read only while an id or a string is missing: the token strings
   as plain strings (an ``{"content": ...}`` object there is an error), the pad string falls
   back to the EOS string, then, while an id is missing, ``added_tokens_decoder`` maps the
   strings to ids (keys in lexicographic order, the first match wins) and the pad id falls
   back to the EOS id.
4. The chat template from ``tokenizer_config.json``, ``processor_config.json``,
   ``chat_template.json`` (a ``chat_template`` string, or the ``"default"`` entry of a list of
   named templates) and ``chat_template.jinja`` (the whole file), the later overriding the
   earlier, an empty string included.
5. The tokenizer IR's rt_info (not the detokenizer's): ``pad_token_id``, ``bos_token_id``,
   ``eos_token_id`` and ``chat_template`` override all of the above when present.
6. A template the real's engine cannot render is replaced by a simplified one
   (:data:`FALLBACK_TEMPLATES`); ``get_original_chat_template()`` keeps the unreplaced text.
7. A string still empty whose id is known is the detokenized id (special tokens kept).

Ids are never inferred by encoding the strings (the real has the function but does not call
it: measured, a folder with only ``special_tokens_map.json`` reports ids -1). A file that is
not valid JSON, or a value of a type the real refuses, is a ``ConfigError`` naming the file and
the key, where the real fails with nlohmann's exception.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openvino as ov

from ov_npu_emu.errors import ConfigError

__all__ = [
    "CHAT_TEMPLATE_FILES",
    "FALLBACK_TEMPLATES",
    "SpecialTokens",
    "read_chat_template",
    "read_special_tokens",
    "remap_template",
    "rt_chat_template",
    "rt_token_ids",
]

logger = logging.getLogger(__name__)

#: the files a chat template is read from, the later overriding the earlier (as the real)
CHAT_TEMPLATE_FILES = (
    "tokenizer_config.json",
    "processor_config.json",
    "chat_template.json",
    "chat_template.jinja",
)

#: templates the real openvino_genai 2026.4.1 replaces by a simplified one it can render
#: (the table compiled into libopenvino_genai: chatglm3-6b's and Qwen2-VL-2B/7B's)
FALLBACK_TEMPLATES: dict[str, str] = {
    # THUDM/chatglm3-6b: a space after the newline, written as an expression
    "{% for message in messages %}{% if loop.first %}[gMASK]sop<|{{ message['role'] }}|>\n "
    "{{ message['content'] }}{% else %}<|{{ message['role'] }}|>\n {{ message['content'] }}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}": (
        "{% for message in messages %}{% if loop.first %}[gMASK]sop<|{{ message['role'] }}|>\n"
        "{{ ' ' }}{{ message['content'] }}{% else %}<|{{ message['role'] }}|>\n{{ ' ' }}"
        "{{ message['content'] }}{% endif %}{% endfor %}{% if add_generation_prompt %}"
        "<|assistant|>{% endif %}"
    ),
    # Qwen/Qwen2-VL-2B, Qwen/Qwen2-VL-7B: a content-list template, read as plain messages
    "{% if messages is string %}{{ messages }}{% else %}{% for content in messages %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% elif content['type'] == 'video' or 'video' "
    "in content %}<|vision_start|><|video_pad|><|vision_end|>{% elif 'text' in content %}"
    "{{ content['text'] }}{% endif %}{% endfor %}{% endif %}": (
        "{% for message in messages %}{{ message['content'] }}{% endfor %}"
    ),
}

_NAMES = ("pad", "bos", "eos")


def remap_template(template: str) -> str:
    """The template the real renders in place of ``template`` (itself unless it is known)."""
    return FALLBACK_TEMPLATES.get(template, template)


@dataclass
class SpecialTokens:
    """Ids (-1: unknown) and strings ("": unknown) of the pad, BOS and EOS tokens."""

    pad_id: int = -1
    bos_id: int = -1
    eos_id: int = -1
    pad: str = ""
    bos: str = ""
    eos: str = ""

    def complete(self) -> bool:
        return self.ids_complete() and all(getattr(self, n) for n in _NAMES)

    def ids_complete(self) -> bool:
        return all(getattr(self, f"{n}_id") != -1 for n in _NAMES)


def _load(path: Path) -> Any:
    """The parsed JSON of ``path``, or None when there is no such file."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ConfigError(
            f"{path} is not valid JSON ({e}); openvino_genai fails on it too: fix or remove the file",
            key=path.name,
        ) from e


def _type_error(path: Path, key: str, want: str, value: Any) -> ConfigError:
    return ConfigError(
        f"{path.name}: {key!r} must be {want}, got {type(value).__name__} {value!r} "
        f"(openvino_genai fails on it too: 'type must be {want.split()[-1]}'); fix {path}",
        key=key,
    )


def _number(path: Path, data: Any, key: str) -> int | None:
    """A number as the real's ``read_json_param`` reads it: null and lists are ignored."""
    if not isinstance(data, dict) or data.get(key) is None or isinstance(data[key], list):
        return None
    value = data[key]
    if isinstance(value, bool | int | float):
        return int(value)
    raise _type_error(path, key, "a number", value)


def _string(path: Path, data: Any, key: str) -> str | None:
    """A string as the real's ``read_json_param`` reads it: null and lists are ignored."""
    if not isinstance(data, dict) or data.get(key) is None or isinstance(data[key], list):
        return None
    value = data[key]
    if isinstance(value, str):
        return value
    raise _type_error(path, key, "a string", value)


def read_special_tokens(folder: Path) -> SpecialTokens:
    """Steps 1-3 of the module doc: the special tokens the json files of ``folder`` give."""
    tokens = SpecialTokens()
    _ids_from_config(folder / "config.json", tokens)
    _strings_from_special_tokens_map(folder / "special_tokens_map.json", tokens)
    if tokens.complete():
        return tokens
    path = folder / "tokenizer_config.json"
    config = _load(path)
    if config is None:
        return tokens
    for n in _NAMES:
        value = _string(path, config, f"{n}_token")
        if not getattr(tokens, n) and value is not None:
            setattr(tokens, n, value)
    if not tokens.pad and tokens.eos:
        tokens.pad = tokens.eos
    if not tokens.ids_complete() and isinstance(config, dict):
        _ids_from_added_tokens(path, config.get("added_tokens_decoder"), tokens)
    return tokens


def _ids_from_config(path: Path, tokens: SpecialTokens) -> None:
    """Step 1: ``<name>_token_id`` numbers of config.json."""
    config = _load(path)
    for n in _NAMES:
        value = _number(path, config, f"{n}_token_id")
        if value is not None:
            setattr(tokens, f"{n}_id", value)


def _strings_from_special_tokens_map(path: Path, tokens: SpecialTokens) -> None:
    """Step 2: the ``{"content": ...}`` strings of special_tokens_map.json (plain strings ignored)."""
    special = _load(path)
    if not isinstance(special, dict):
        return
    for n in _NAMES:
        value = _string(path, special.get(f"{n}_token"), "content")
        if not getattr(tokens, n) and value is not None:
            setattr(tokens, n, value)


def _ids_from_added_tokens(path: Path, decoder: Any, tokens: SpecialTokens) -> None:
    """Step 3's ids: tokenizer_config.json's ``added_tokens_decoder`` id -> content, by string."""
    if not isinstance(decoder, dict):
        return
    for key in sorted(decoder):  # nlohmann::json keeps object keys sorted
        value = decoder[key]
        if not isinstance(value, dict) or "content" not in value:
            continue
        for n in _NAMES:
            if getattr(tokens, f"{n}_id") == -1 and value["content"] == getattr(tokens, n):
                setattr(tokens, f"{n}_id", _token_id(path, key))
    if tokens.pad_id == -1 and tokens.eos_id != -1:
        tokens.pad_id = tokens.eos_id


def _token_id(path: Path, key: str) -> int:
    try:
        return int(key)
    except ValueError as e:
        raise ConfigError(
            f"{path.name}: added_tokens_decoder key {key!r} is not a token id", key="added_tokens_decoder"
        ) from e


def read_chat_template(folder: Path) -> str:
    """Step 4 of the module doc: the chat template the files of ``folder`` give ("" if none)."""
    template = ""
    for name in CHAT_TEMPLATE_FILES:
        path = folder / name
        if name.endswith(".jinja"):
            if path.is_file():
                template = path.read_text(encoding="utf-8", errors="replace")
            continue
        data = _load(path)
        if not isinstance(data, dict) or "chat_template" not in data:
            continue
        value = data["chat_template"]
        if isinstance(value, str):
            template = value
            continue
        if isinstance(value, list):
            default = next(
                (
                    item["template"]
                    for item in value
                    if isinstance(item, dict)
                    and item.get("name") == "default"
                    and isinstance(item.get("template"), str)
                ),
                None,
            )
            if default is not None:
                template = default
                continue
        logger.warning(
            "Unsupported chat_template format in file: %s (a string or a list of objects with "
            "'name' and 'template' is supported); ignoring it",
            path,
        )
    return template


def _as_str(value: Any) -> str:
    try:
        return str(value.astype(str))
    except Exception:  # noqa: BLE001 - OVAny conversions differ between versions
        return str(value)


def rt_token_ids(model: ov.Model, tokens: SpecialTokens) -> None:
    """Step 5 for the ids: the tokenizer IR's rt_info ids replace what the files gave."""
    rt = model.get_rt_info()
    for n in _NAMES:
        key = f"{n}_token_id"
        if key in rt:
            try:
                setattr(tokens, f"{n}_id", int(_as_str(rt[key])))
            except ValueError:
                logger.warning("rt_info %s of the tokenizer IR is not an integer; ignoring it", key)


def rt_chat_template(model: ov.Model) -> str | None:
    """Step 5 for the template: the tokenizer IR's rt_info ``chat_template`` (None if absent).

    A string, or ``<chat_template><default value="..."/></chat_template>``.
    """
    rt = model.get_rt_info()
    if "chat_template" not in rt:
        return None
    value = rt["chat_template"]
    if isinstance(value, dict):
        if "default" in value:
            return _as_str(value["default"])
        logger.warning("rt_info chat_template of the tokenizer IR has no 'default'; ignoring it")
        return None
    return _as_str(value)
