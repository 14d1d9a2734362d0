"""``ov-npu-emu compile MODEL.xml -o X.blob``: compile a static model for the emulated NPU."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ov_npu_emu.errors import ConfigError, UserInputError

__all__ = ["parse_kv", "register", "run"]


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
        from ov_npu_emu.cli.profile import static_llm  # profile imports this module at load time

        model = static_llm(model, 1 if args.decode_kv is not None else args.prefill, args.decode_kv or 0)
    shapes = parse_shapes(args.shape)
    if shapes:
        try:
            model.reshape(shapes)
        except RuntimeError as e:  # openvino: unknown input name or a shape that does not propagate
            raise UserInputError(f"--shape {args.shape}: cannot reshape the model: {e}") from e
    return model


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("compile", help="compile MODEL.xml into an NPU ELF blob",
                              description="Compile a static-shape OpenVINO IR for the emulated NPU and "
                                          "write the ELF blob (what CompiledModel.export_model() returns).")
    p.add_argument("model", help="OpenVINO IR .xml (static shapes, or pass --shape)")
    p.add_argument("-o", "--output", required=True, help="blob file to write")
    p.add_argument("--config", action="append", metavar="KEY=VALUE", help="compile config (repeatable)")
    p.add_argument("--shape", action="append", metavar="NAME=D0,D1", help="reshape an input first (repeatable)")
    p.add_argument("--decode-kv", type=int, metavar="N",
                   help="LLM: compile the one-token decode step over N past KV rows (stateless, static)")
    p.add_argument("--prefill", type=int, metavar="N", help="LLM: compile a prefill of N tokens")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ov_npu_emu import Core

    core = Core()
    model = load_model(core, args)
    cm = core.compile_model(model, "NPU", parse_kv(args.config))
    blob = cm.export_model().getvalue()
    Path(args.output).write_bytes(blob)
    print(f"wrote {args.output}: {len(blob)} bytes")
    return 0
