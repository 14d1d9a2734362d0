"""The emulated NPU's commands: ``compile`` (IR -> ELF blob), ``inspect`` (readelf-like view of a
blob) and ``profile`` (one inference's per-task and per-engine device time, Chrome trace, HTML).

They reach the ``ov-npu-emu`` command line through the ``ovnpu_add_cli_commands`` hook, as NPUW's
``npuw`` and ``kv-plan`` do: the runtime core knows no device's commands.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ov_npu_emu.cli.model_args import example_inputs, load_model, parse_kv
from ov_npu_emu.errors import UserInputError
from ov_npu_emu.hookspecs import hookimpl

if TYPE_CHECKING:
    from ov_npu_emu_npu.plugin import NpuInferRequest

__all__ = ["format_report", "ovnpu_add_cli_commands", "run_compile", "run_inspect", "run_profile"]


@hookimpl
def ovnpu_add_cli_commands(subparsers: argparse._SubParsersAction) -> None:
    _register_compile(subparsers)
    _register_inspect(subparsers)
    _register_profile(subparsers)


# -- compile -----------------------------------------------------------------------------------
def _register_compile(subparsers: argparse._SubParsersAction) -> None:
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
    p.set_defaults(func=run_compile)


def run_compile(args: argparse.Namespace) -> int:
    from ov_npu_emu import Core

    core = Core()
    model = load_model(core, args)
    cm = core.compile_model(model, "NPU", parse_kv(args.config))
    stream = cm.export_model()
    assert stream is not None  # without a stream to write into, export_model returns one
    blob = stream.getvalue()
    Path(args.output).write_bytes(blob)
    print(f"wrote {args.output}: {len(blob)} bytes")
    return 0


# -- inspect -----------------------------------------------------------------------------------
def _register_inspect(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("inspect", help="show an NPU blob: header, sections, symbols, relocations, tasks",
                              description="Describe an NPU ELF blob: header, sections, symbols, relocations, "
                                          "tasks by engine, barriers and the driver's memory map.")
    p.add_argument("blob", help="blob written by `ov-npu-emu compile` or export_model()")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.add_argument("--relocs", action="store_true", help="list every relocation (default: counts only)")
    p.set_defaults(func=run_inspect)


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


def run_inspect(args: argparse.Namespace) -> int:
    from ov_npu_emu_npu.driver.inspect import describe_blob

    path = Path(args.blob)
    if not path.is_file():
        raise UserInputError(f"blob file {args.blob!r} does not exist")
    d = describe_blob(path.read_bytes())
    if args.json:
        print(json.dumps(d, indent=2, default=str))
    else:
        print(format_report(d, args.relocs))
    return 0


# -- profile -----------------------------------------------------------------------------------
def _register_profile(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("profile", help="profile one inference on the emulated NPU (Chrome trace)",
                              description="Compile MODEL.xml for NPU, run one inference and report per-task "
                                          "and per-engine estimated device time, utilization and DMA/compute "
                                          "overlap; --trace writes a Chrome-trace JSON (Perfetto).")
    p.add_argument("model", help="OpenVINO IR .xml")
    p.add_argument("--config", action="append", metavar="KEY=VALUE", help="compile config (repeatable)")
    p.add_argument("--shape", action="append", metavar="NAME=D0,D1", help="reshape an input (repeatable)")
    p.add_argument("--decode-kv", type=int, metavar="N",
                   help="LLM: profile one decode step (1 token over N past KV rows; stateless static)")
    p.add_argument("--prefill", type=int, metavar="N", help="LLM: profile a prefill of N tokens")
    p.add_argument("--trace", metavar="OUT.json", help="write a Chrome-trace timeline here")
    p.add_argument("--html", metavar="OUT.html",
                   help="write one self-contained page (no network): engine lanes with barriers, the CMX and "
                        "DDR memory maps over time, the KV-cache inputs, the most expensive tasks")
    p.add_argument("--top", type=int, default=10, help="show the N most expensive tasks")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=run_profile)


def run_profile(args: argparse.Namespace) -> int:
    from ov_npu_emu import Core
    from ov_npu_emu_npu.device.profiling import chrome_trace

    core = Core()
    model = load_model(core, args)
    config = {"PERF_COUNT": "YES", **parse_kv(args.config)}
    cm = core.compile_model(model, "NPU", config)
    req = cm.create_infer_request()
    req.infer(example_inputs(model))
    impl = cast("NpuInferRequest", req.impl)  # compiled on "NPU"
    tl = impl.timeline()
    summary: dict[str, Any] = tl.summary()
    names = impl.task_names
    prof = impl.get_profiling_info()
    summary["host_time_ms"] = sum(p.cpu_time.total_seconds() for p in prof) * 1e3
    top = sorted(tl.tasks.values(), key=lambda t: -(tl.end[t.tid] - tl.start[t.tid]))[: args.top]
    summary["top_tasks"] = [{"task": t.tid, "engine": tl.lane_names[t.lane], "kernel": t.kernel,
                             "node": names.get(t.tid, ("", ""))[0], "cycles": t.cycles} for t in top]
    if args.trace:
        Path(args.trace).write_text(chrome_trace(tl, names))
        summary["trace"] = args.trace
    if args.html:
        from ov_npu_emu_npu.device.report import html_report

        kv = [{"name": p.get_any_name(), "shape": list(p.get_shape()), "type": p.get_element_type().get_type_name(),
               "bytes": int(np.prod(list(p.get_shape()), dtype=np.int64)) * p.get_element_type().size}
              for p in model.inputs if p.get_any_name().startswith(("past_key_values", "past."))]
        plan = _kv_plan(args.model, config) if kv else None
        if plan is not None:
            summary["kv_plan"] = plan
        Path(args.html).write_text(html_report(tl, impl.blob_meta, names, kv=kv, kv_plan=plan), encoding="utf-8")
        summary["html"] = args.html
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"estimated device time: {summary['makespan_us']:.1f} us ({summary['makespan_cycles']} cycles); "
          f"host time in kernels: {summary['host_time_ms']:.2f} ms")
    print("tasks: " + ", ".join(f"{k} {v}" for k, v in summary["tasks"].items()))
    print("engines: " + ", ".join(f"{k} {summary['busy_us'][k]:.1f} us ({v:.0%})"
                                  for k, v in summary["utilization"].items()))
    print(f"DMA busy {summary['dma_busy_cycles']} cycles, {summary['dma_hidden_fraction']:.0%} overlapped with compute")
    print(f"top {len(top)} tasks:")
    for t in summary["top_tasks"]:
        print(f"  #{t['task']:<5d} {t['engine']:6s} {t['kernel']:12s} {t['cycles']:>9d} cyc  {t['node']}")
    if args.trace:
        print(f"trace written to {args.trace} (open in https://ui.perfetto.dev)")
    if args.html:
        print(f"report written to {args.html} (open in any browser; no network needed)")
    return 0


def _kv_plan(model: str, config: dict[str, Any]) -> dict[str, Any] | None:
    """NPUW's KV plan for the profiled LLM, through the plugin hook (ov_npu_emu does not import
    NPUW); None without a plugin that plans KV, or when it cannot plan this model."""
    from ov_npu_emu.errors import NpuEmuError
    from ov_npu_emu.plugin_manager import get_plugin_manager

    try:
        return get_plugin_manager().hook.ovnpu_kv_plan(model_path=model, config=config)
    except NpuEmuError as e:  # the page still shows the static model's KV inputs
        return {"error": str(e)}
