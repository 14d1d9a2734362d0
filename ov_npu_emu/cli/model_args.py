"""Model arguments shared by ``compile`` and ``profile``: KEY=VALUE configs, static shapes, and
turning a stateful LLM into one static prefill or decode step (plus plausible inputs for it)."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import openvino as ov

from ov_npu_emu.errors import ConfigError, UserInputError

__all__ = ["example_inputs", "load_model", "parse_kv", "parse_shapes", "static_llm"]


def parse_kv(items: list[str] | None) -> dict[str, Any]:
    """``["K=V", ...]`` -> dict; a missing ``=`` is a ConfigError."""
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"--config expects KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def parse_shapes(items: list[str] | None) -> dict[str, list[int]]:
    """``["input_ids=1,8"]`` -> {"input_ids": [1, 8]}."""
    out: dict[str, list[int]] = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"--shape expects NAME=D0,D1,..., got {item!r}")
        k, v = item.split("=", 1)
        try:
            out[k] = [int(d) for d in v.split(",") if d]
        except ValueError as e:
            raise ConfigError(f"--shape {item!r}: dimensions must be integers") from e
    return out


def load_model(core: Any, args: argparse.Namespace) -> Any:
    """Read ``args.model`` and make it static: ``--decode-kv`` / ``--prefill`` for LLMs, ``--shape``.

    Shared by ``compile`` and ``profile``, which take the same model arguments.
    """
    model = core.read_model(args.model)
    if args.decode_kv is not None or args.prefill is not None:
        model = static_llm(model, 1 if args.decode_kv is not None else args.prefill, args.decode_kv or 0)
    shapes = parse_shapes(args.shape)
    if shapes:
        try:
            model.reshape(shapes)
        except RuntimeError as e:  # openvino: unknown input name or a shape that does not propagate
            raise UserInputError(f"--shape {args.shape}: cannot reshape the model: {e}") from e
    return model


def static_llm(model: ov.Model, seq: int, past: int) -> ov.Model:
    """Stateful optimum-intel decoder -> stateless with past-KV inputs, static [1, seq] over ``past``."""
    from openvino._offline_transformations import stateful_to_stateless_transformation

    if model.get_sinks():
        stateful_to_stateless_transformation(model)
    shapes: dict[str, list[int]] = {}
    for p in model.inputs:
        n, ps = p.get_any_name(), p.get_partial_shape()
        if n.startswith("past_key_values") or n.startswith("past."):
            shapes[n] = [1, ps[1].get_length(), past, ps[3].get_length()]
        elif n == "beam_idx":
            shapes[n] = [1]
        elif n == "attention_mask":
            shapes[n] = [1, past + seq]
        elif n in ("input_ids", "position_ids"):
            shapes[n] = [1, seq]
        else:
            raise UserInputError(f"cannot infer a static shape for LLM input {n!r}; use --shape")
    model.reshape(shapes)
    return model


def example_inputs(model: ov.Model, seed: int = 0) -> dict[str, np.ndarray]:
    """Plausible inputs: random floats, token 1s, a full attention mask, positions after the past."""
    rng = np.random.default_rng(seed)
    feed: dict[str, np.ndarray] = {}
    for p in model.inputs:
        n, shape = p.get_any_name(), list(p.get_shape())
        dt = (
            np.dtype(np.bool_) if p.get_element_type() == ov.Type.boolean else np.dtype(p.get_element_type().to_dtype())
        )
        if n == "position_ids":
            feed[n] = (np.arange(shape[-1]) + max(0, _mask_len(model) - shape[-1])).reshape(shape).astype(dt)
        elif dt.kind == "f":
            feed[n] = rng.standard_normal(shape).astype(dt)
        else:
            feed[n] = np.ones(shape, dt) if n != "beam_idx" else np.zeros(shape, dt)
    return feed


def _mask_len(model: ov.Model) -> int:
    for p in model.inputs:
        if p.get_any_name() == "attention_mask":
            return int(p.get_shape()[-1])
    return 0
