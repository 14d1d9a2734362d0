"""The ``ov-npu-emu`` command line: subcommands are modules of this package plus plugin hooks.

Each module ``ov_npu_emu/cli/<name>.py`` that defines ``register(subparsers)`` adds its
subcommand (and sets ``func=run``); plugins add theirs through ``ovnpu_add_cli_commands``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import pkgutil
import sys
from collections.abc import Sequence

from ov_npu_emu.errors import NpuEmuError

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ov-npu-emu",
        description=(
            "ov-npu-emu: OpenVINO's NPU LLM stack (openvino_genai -> NPUW -> NPU compiler/driver) "
            "emulated on machines without an NPU. Start with `ov-npu-emu demo`."
        ),
        epilog="Run `ov-npu-emu COMMAND --help` for the options of a command.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log more (-v info, -vv debug)")
    parser.add_argument("--traceback", action="store_true", help="show the full traceback on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(mod, "register"):
            mod.register(sub)
    try:
        from ov_npu_emu.plugin_manager import get_plugin_manager

        get_plugin_manager().hook.ovnpu_add_cli_commands(subparsers=sub)
    except NpuEmuError as e:  # a broken plugin must not take the CLI down
        logging.getLogger(__name__).warning("plugin CLI commands unavailable: %s", e)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # `ov-npu-emu inspect X | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (NpuEmuError, OSError) as e:  # OSError: unreadable input or unwritable output path
        if args.traceback:
            raise
        print(f"ov-npu-emu: error: {e}", file=sys.stderr)
        return 1
