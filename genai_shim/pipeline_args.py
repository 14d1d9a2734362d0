"""LLMPipeline's arguments: the constructor overloads (a folder, or the IR in memory) and the
token-id inputs of generate(), checked into [batch, length] int64 arrays."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import openvino as ov

from genai_shim.generation_config import GenerationConfig
from genai_shim.tokenizer import TokenizedInputs, Tokenizer
from ov_npu_emu.errors import ConfigError, UserInputError

__all__ = [
    "GENAI_ONLY_KEYS",
    "PipelineProperties",
    "encoded_inputs",
    "parse_ctor",
    "parse_memory_ctor",
    "split_properties",
    "stack_rows",
]

#: properties openvino.genai consumes itself on any device (never passed to compile_model)
GENAI_ONLY_KEYS = (
    "scheduler_config",
    "draft_model",
    "prompt_lookup",
    "adapters",
    "ATTENTION_BACKEND",
    "STATIC_PIPELINE",
)


def parse_memory_ctor(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[str, ov.Tensor, Tokenizer, str, GenerationConfig | None] | None:
    """The in-memory overload's arguments, or None for the folder overloads."""
    if not (len(args) > 1 and isinstance(args[1], ov.Tensor)) and "weights" not in kwargs:
        return None
    names = ("model", "weights", "tokenizer", "device", "generation_config")
    if len(args) > len(names):
        raise UserInputError(
            "LLMPipeline(model, weights, tokenizer, device, generation_config=None, "
            f"**properties) takes at most 5 positional arguments, got {len(args)}"
        )
    got = dict(zip(names, args, strict=False))
    for n in names[len(args) :]:
        if n in kwargs:
            got[n] = kwargs.pop(n)
    for n in names[:4]:
        if n not in got:
            raise UserInputError(
                f"LLMPipeline(model, weights, tokenizer, device, ...) is missing {n!r}"
            )
    checks = (
        ("model", str, "the IR's XML text (str)"),
        ("weights", ov.Tensor, "an openvino.Tensor"),
        ("tokenizer", Tokenizer, "a Tokenizer"),
        ("device", str, "a device name (str)"),
    )
    for n, typ, what in checks:
        if not isinstance(got[n], typ):
            raise UserInputError(f"{n} must be {what}, got {type(got[n]).__name__}")
    gc = got.get("generation_config")
    if gc is not None and not isinstance(gc, GenerationConfig):
        raise UserInputError(
            f"generation_config must be a GenerationConfig, got {type(gc).__name__}"
        )
    return got["model"], got["weights"], got["tokenizer"], got["device"], gc

def parse_ctor(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Tokenizer | None, str, Mapping[str, Any] | None]:
    tokenizer = kwargs.pop("tokenizer", None)
    device = kwargs.pop("device", None)
    config = kwargs.pop("config", None)
    rest = list(args)
    if rest and isinstance(rest[0], Tokenizer):
        tokenizer = rest.pop(0)
    if rest and isinstance(rest[0], str):
        device = rest.pop(0)
    if rest and isinstance(rest[0], Mapping):
        config = rest.pop(0)
    if rest:
        raise UserInputError(
            "LLMPipeline(models_path, device='CPU', config=None, **properties) or "
            "LLMPipeline(models_path, tokenizer, device, config=None, **properties); got "
            f"extra {rest!r}"
        )
    if config is not None and not isinstance(config, Mapping):
        raise UserInputError(
            f"config must be a dict of properties, got {type(config).__name__}"
        )
    return tokenizer, device or "CPU", config


def encoded_inputs(inputs: Any) -> tuple[np.ndarray, np.ndarray]:
    try:
        return _encoded_arrays(inputs)
    except (ValueError, TypeError) as e:  # numpy: strings, ragged lists, None
        if isinstance(e, UserInputError):
            raise
        raise UserInputError(f"input_ids must be integer token ids: {e}") from e

def _encoded_arrays(inputs: Any) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(inputs, TokenizedInputs):
        ids = np.asarray(inputs.input_ids.data, dtype=np.int64)
        mask = np.asarray(inputs.attention_mask.data, dtype=np.int64)
    else:
        ids = np.asarray(
            inputs.data if isinstance(inputs, ov.Tensor) else inputs, dtype=np.int64
        )
        mask = np.ones_like(ids)
    if ids.ndim == 1:
        ids, mask = ids[None, :], mask[None, :]
    if ids.ndim != 2 or ids.shape != mask.shape or ids.shape[1] == 0:
        raise UserInputError(
            f"input_ids must be a non-empty [batch, length] tensor, got shape {list(ids.shape)}"
        )
    return np.array(ids), np.array(mask)


def stack_rows(rows: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    width = max(r[0].shape[1] for r in rows)
    ids = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, (r_ids, r_mask) in enumerate(rows):
        n = r_ids.shape[1]
        ids[i, width - n :], mask[i, width - n :] = r_ids[0], r_mask[0]
    return ids, mask


@dataclass(frozen=True)
class PipelineProperties:
    """LLMPipeline's properties, split into genai's own and what reaches compile_model."""

    compile: dict[str, Any]
    prompt_lookup: bool
    backend: str  # ATTENTION_BACKEND, upper case ("PA" unless given)
    draft: Any
    scheduler_config: Any
    adapters: Any
    #: the real re-throws paged-attention failures only when PA was asked for explicitly
    explicit_pa: bool


def split_properties(props: dict[str, Any]) -> PipelineProperties:
    props = dict(props)
    prompt_lookup = props.get("prompt_lookup", False)
    if not isinstance(prompt_lookup, bool):
        raise ConfigError(
            f"prompt_lookup must be a bool, got {type(prompt_lookup).__name__}",
            key="prompt_lookup",
        )
    if prompt_lookup and props.get("draft_model") is not None:
        raise ConfigError(
            "genai_shim does not combine prompt_lookup with draft_model; use one of them",
            key="prompt_lookup",
        )
    backend = str(props.get("ATTENTION_BACKEND", "PA")).upper()
    draft = props.get("draft_model")
    scheduler_config = props.get("scheduler_config")
    explicit_pa = scheduler_config is not None or "ATTENTION_BACKEND" in props
    adapters = props.get("adapters")
    for k in GENAI_ONLY_KEYS:
        props.pop(k, None)
    return PipelineProperties(props, prompt_lookup, backend, draft, scheduler_config, adapters, explicit_pa)
