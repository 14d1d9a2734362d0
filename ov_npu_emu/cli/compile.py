"""``ov-npu-emu compile MODEL.xml -o X.blob``: compile a static model for the emulated NPU."""

from __future__ import annotations

import argparse
from pathlib import Path

from ov_npu_emu.cli._models import load_model, parse_kv

__all__ = ["register", "run"]


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
