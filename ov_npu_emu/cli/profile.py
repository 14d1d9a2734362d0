"""``ov-npu-emu profile MODEL.xml``: run once on the emulated NPU; per-task/engine times, trace."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from ov_npu_emu.cli._models import example_inputs, load_model, parse_kv

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
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
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ov_npu_emu import Core
    from ov_npu_emu.npu.device.profiling import chrome_trace

    core = Core()
    model = load_model(core, args)
    config = {"PERF_COUNT": "YES", **parse_kv(args.config)}
    cm = core.compile_model(model, "NPU", config)
    req = cm.create_infer_request()
    req.infer(example_inputs(model))
    impl = req.impl
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
        from ov_npu_emu.npu.device.report import html_report

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
