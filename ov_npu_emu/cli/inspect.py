"""``ov-npu-emu inspect X.blob``: readelf-like view of an NPU blob (``--json`` for tools)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ov_npu_emu.errors import UserInputError

__all__ = ["format_report", "register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("inspect", help="show an NPU blob: header, sections, symbols, relocations, tasks",
                              description="Describe an NPU ELF blob: header, sections, symbols, relocations, "
                                          "tasks by engine, barriers and the driver's memory map.")
    p.add_argument("blob", help="blob written by `ov-npu-emu compile` or export_model()")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.add_argument("--relocs", action="store_true", help="list every relocation (default: counts only)")
    p.set_defaults(func=run)


def format_report(d: dict[str, Any], all_relocs: bool = False) -> str:
    h = d["header"]
    out = ["ELF header:"]
    out += [f"  {k:14s} {v}" for k, v in h.items()]
    md = d["metadata"]
    out += ["", f"Model {md.get('model_name')!r}: compiler {md['compiler']['version']}, precision {md['precision']}, "
                f"config hash {md['config_hash']}"]
    for kind in ("inputs", "outputs"):
        for i, p in enumerate(md[kind]):
            st = f"  (state {p['state']})" if p["state"] else ""
            out.append(
                f"  {kind[:-1]:6s} {i}: {p['symbol']:8s} {','.join(p['names']) or '-'} "
                f"{p['element_type']} {p['shape']}{st}"
            )
    out += ["", "Sections:", f"  {'Nr':>3} {'Name':28s} {'Size':>10} {'Kind':20s}"]
    for s in d["sections"]:
        out.append(
            f"  {s['index']:3d} {s['name']:28s} {s['size']:10d} {s['kind'] or ('NOBITS' if s['nobits'] else '')}"
        )
    out += ["", "Symbols (user I/O, resolved per inference):"]
    out += [f"  {s['name']:10s} size {s['size']}" for s in d["symbols"]]
    by_sec: dict[str, int] = {}
    for r in d["relocations"]:
        by_sec[r["section"]] = by_sec.get(r["section"], 0) + 1
    out += ["", "Relocation sections:"] + [f"  {k:32s} {n} entries" for k, n in by_sec.items()]
    if all_relocs:
        for r in d["relocations"]:
            out.append(f"  {r['section']:32s} +0x{r['offset']:06x} {r['type']} {r['symbol']} + {r['addend']}")
    out += ["", "Tasks by engine:"]
    for eng, ts in d["tasks"].items():
        kinds: dict[str, int] = {}
        for t in ts:
            kinds[t["kernel"]] = kinds.get(t["kernel"], 0) + 1
        cyc = sum(t["cycles"] for t in ts)
        out.append(
            f"  {eng:6s} {len(ts):5d} tasks, {cyc} est. cycles: "
            + ", ".join(f"{k}x{n}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1]))
        )
    b = d["barriers"]
    out += ["", f"Barriers: {len(b)}"]
    for x in b[:8]:
        out.append(f"  #{x['id']}: producers {len(x['producers'])}, consumers {len(x['consumers'])}")
    if len(b) > 8:
        out.append(f"  ... {len(b) - 8} more")
    out += ["", "Memory map (driver, per request):"]
    for m in d["memory_map"]:
        out.append(f"  0x{m['address']:012x}  {m['size']:10d}  {m['kind']:20s} {m['section']}")
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    from ov_npu_emu.npu.driver.inspect import describe_blob

    path = Path(args.blob)
    if not path.is_file():
        raise UserInputError(f"blob file {args.blob!r} does not exist")
    d = describe_blob(path.read_bytes())
    if args.json:
        print(json.dumps(d, indent=2, default=str))
    else:
        print(format_report(d, args.relocs))
    return 0
