"""``ov-npu-emu devices``: list devices with their full names (like hello_query_device)."""

from __future__ import annotations

import argparse
import json


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "devices",
        help="list available devices and their properties",
        description="List the devices registered by plugins (built-in and third-party).",
    )
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ov_npu_emu import Core

    core = Core()
    rows = {d: core.get_property(d, "FULL_DEVICE_NAME") for d in core.available_devices}
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for d, full in rows.items():
            print(f"{d:6s} {full}")
    return 0
