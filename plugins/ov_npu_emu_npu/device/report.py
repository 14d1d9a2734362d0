"""One self-contained HTML page for a profiled inference: engine lanes, barriers, memory map, KV.

Everything is inline SVG and CSS (no script, no network), so the page opens anywhere, mails
as one file and renders the same in a headless browser. Tooltips (SVG ``<title>``) carry the
details: kernel, source node, cycles, barriers; buffer offsets, sizes and live tasks.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ov_npu_emu_npu.blob.format import TaskKind
from ov_npu_emu_npu.device.profiling import Timeline, overlap_spans

__all__ = ["html_report"]

_COLORS = {TaskKind.DMA: "#3b7dd8", TaskKind.DPU: "#e8870e", TaskKind.SHAVE: "#2e9e5b"}
_REGION_COLORS = {"cmx": "#8e5bd6", "scratch": "#c9455b"}
_W = 1100  # plot width in px
_LEFT = 70  # label column


def _esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _ticks(span_us: float, n: int = 8) -> list[float]:
    """Round tick positions (1, 2 or 5 × a power of ten apart), about ``n`` of them."""
    if span_us <= 0:
        return [0.0]
    mag = 10 ** math.floor(math.log10(span_us / n))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= span_us / n)
    return [i * step for i in range(int(span_us / step) + 1)]


def _axis(y: int, span_us: float) -> str:
    out = [f'<line x1="{_LEFT}" y1="{y}" x2="{_LEFT + _W}" y2="{y}" class="axis"/>']
    for t in _ticks(span_us):
        x = _LEFT + (t / span_us * _W if span_us else 0)
        out.append(f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 4}" class="axis"/>'
                   f'<text x="{x:.1f}" y="{y + 15}" class="tick">{t:g} µs</text>')
    return "".join(out)


def _timeline_svg(tl: Timeline, names: Mapping[int, tuple[str, str]], barriers: Sequence[Mapping[str, Any]]) -> str:
    span = max(tl.makespan, 1)
    lane_h, top = 26, 8
    rows = [*tl.lane_names, "DMA ∥ compute", "barriers"]
    height = top + lane_h * len(rows) + 24
    out = [f'<svg class="plot" width="{_LEFT + _W + 10}" height="{height}" '
           f'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="engine timeline">']
    for i, name in enumerate(rows):
        y = top + i * lane_h
        out.append(f'<rect x="{_LEFT}" y="{y}" width="{_W}" height="{lane_h - 4}" class="lane"/>'
                   f'<text x="{_LEFT - 6}" y="{y + 16}" class="label">{_esc(name)}</text>')
    x_of = lambda c: _LEFT + c / span * _W  # noqa: E731 - local scale
    for tid, t in sorted(tl.tasks.items()):
        s, e = tl.start[tid], tl.end[tid]
        node, op = names.get(tid, ("", ""))
        y = top + t.lane * lane_h
        out.append(f'<rect x="{x_of(s):.2f}" y="{y + 1}" width="{max(x_of(e) - x_of(s), 0.8):.2f}" '
                   f'height="{lane_h - 6}" fill="{_COLORS[t.kind]}" class="task"><title>#{tid} {_esc(t.kernel)} '
                   f'{_esc(node)} ({_esc(op)}) {e - s} cycles, {s / tl.clock_mhz:.2f}–{e / tl.clock_mhz:.2f} µs; '
                   f'waits {list(t.waits)} posts {list(t.posts)}</title></rect>')
    # DMA running under compute (ping-pong at work): the spans dma_hidden_fraction counts
    y = top + (len(rows) - 2) * lane_h
    for s, e in overlap_spans(tl):
        out.append(f'<rect x="{x_of(s):.2f}" y="{y + 1}" width="{max(x_of(e) - x_of(s), 0.8):.2f}" '
                   f'height="{lane_h - 6}" class="overlap"><title>DMA hidden behind compute: '
                   f'{s / tl.clock_mhz:.2f}–{e / tl.clock_mhz:.2f} µs</title></rect>')
    # a barrier fires when its last producer ends: a tick on the barrier row
    y = top + (len(rows) - 1) * lane_h
    for b in barriers:
        ends = [tl.end[p] for p in b.get("producers", []) if p in tl.end]
        if ends:
            x = x_of(max(ends))
            out.append(f'<line x1="{x:.2f}" y1="{y + 2}" x2="{x:.2f}" y2="{y + lane_h - 6}" class="barrier">'
                       f'<title>barrier {b["id"]}: {len(b["producers"])} producers, '
                       f'{len(b["consumers"])} consumers, fires at {max(ends) / tl.clock_mhz:.2f} µs</title></line>')
    out.append(_axis(top + len(rows) * lane_h, span / tl.clock_mhz))
    out.append("</svg>")
    return "".join(out)


def _memory_svg(tl: Timeline, buffers: Sequence[Sequence[Any]], region: str, size: int) -> str:
    bufs = [b for b in buffers if b[0] == region]
    if not bufs or size <= 0:
        return f"<p class='note'>No {region.upper()} buffers.</p>"
    span = max(tl.makespan, 1)
    h = 180
    out = [f'<svg class="plot" width="{_LEFT + _W + 10}" height="{h + 30}" xmlns="http://www.w3.org/2000/svg" '
           f'role="img" aria-label="{region} memory map">',
           f'<rect x="{_LEFT}" y="0" width="{_W}" height="{h}" class="lane"/>',
           f'<text x="{_LEFT - 6}" y="12" class="label">{size:,} B</text>',
           f'<text x="{_LEFT - 6}" y="{h}" class="label">0</text>']
    for reg, off, nbytes, first, last in bufs:
        s, e = tl.start.get(first, 0), tl.end.get(last, span)
        x0, x1 = _LEFT + s / span * _W, _LEFT + e / span * _W
        y1 = h - off / size * h
        y0 = h - (off + nbytes) / size * h
        out.append(f'<rect x="{x0:.2f}" y="{y0:.2f}" width="{max(x1 - x0, 0.8):.2f}" height="{max(y1 - y0, 0.8):.2f}" '
                   f'fill="{_REGION_COLORS[reg]}" class="buf"><title>{reg} [{off:#x}, {off + nbytes:#x}) '
                   f'{nbytes:,} B, live tasks #{first}–#{last}</title></rect>')
    out.append(_axis(h + 2, span / tl.clock_mhz))
    out.append("</svg>")
    return "".join(out)


def _kv_table(kv: Sequence[Mapping[str, Any]]) -> str:
    if not kv:
        return "<p class='note'>No KV-cache inputs (not a decoder step).</p>"
    rows = "".join(f"<tr><td>{_esc(k['name'])}</td><td>{_esc(k['shape'])}</td><td>{_esc(k['type'])}</td>"
                   f"<td class='num'>{k['bytes']:,}</td></tr>" for k in kv)
    total = sum(int(k["bytes"]) for k in kv)
    return (f"<table><tr><th>input</th><th>shape</th><th>type</th><th>bytes</th></tr>{rows}"
            f"<tr class='total'><td colspan='3'>total (2 × layers × batch × seq × kv heads × head dim × bytes)</td>"
            f"<td class='num'>{total:,}</td></tr></table>")


def _kv_plan_table(plan: Mapping[str, Any] | None) -> str:
    """NPUW's plan for the model: every generate variant is a view of one KV buffer."""
    if not plan:
        return ""
    if "error" in plan:
        return f"<p class='note'>NPUW KV plan unavailable: {_esc(plan['error'])}</p>"
    rows = "".join(f"<tr><td class='num'>{int(v['kv_size']):,}</td><td class='num'>{int(v['past_slots']):,}</td>"
                   f"<td class='num'>{int(v['bytes']):,}</td></tr>" for v in plan.get("variants", []))
    terms = plan.get("terms") or {}
    formula = (" = 2 × " + " × ".join(f"{terms[k]:g}" if isinstance(terms[k], float) else str(terms[k])
                                      for k in ("layers", "batch", "seq", "kv_heads", "head_dim",
                                                "bytes_per_element"))) if terms else ""
    return (f"<h3>NPUW KV plan per generate variant ({_esc(plan.get('kv_cache_precision', ''))}, "
            f"MAX_PROMPT_LEN {plan.get('max_prompt_len')}, MIN_RESPONSE_LEN {plan.get('min_response_len')})</h3>"
            f"<table class='kvplan'><tr><th>generate variant (KV size)</th><th>past slots</th><th>bytes</th></tr>"
            f"{rows}<tr class='total'><td colspan='2'>one buffer of {int(plan.get('capacity_tokens', 0)):,} tokens"
            f"{_esc(formula)}</td><td class='num'>{int(plan['bytes']):,}</td></tr></table>")


_CSS = """
body{font:14px system-ui,sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:22px 0 6px} h3{font-size:14px;margin:14px 0 4px}
.note{color:#666} .plot{display:block} .lane{fill:#f3f4f6;stroke:#d0d4da}
.label{font-size:11px;text-anchor:end;fill:#333} .tick{font-size:10px;text-anchor:middle;fill:#555}
.axis{stroke:#888} .barrier{stroke:#d62828;stroke-width:1.2} .overlap{fill:#6b4fbb}
.task{stroke:#0003;stroke-width:.3} .buf{stroke:#fff;stroke-width:.4;opacity:.85}
table{border-collapse:collapse;margin-top:4px} td,th{border:1px solid #d0d4da;padding:3px 8px;font-size:12px}
th{background:#f3f4f6;text-align:left} .num{text-align:right;font-variant-numeric:tabular-nums}
.total td{font-weight:600} .legend span{display:inline-block;width:12px;height:12px;margin:0 4px 0 14px;
vertical-align:-2px}
"""


def html_report(tl: Timeline, meta: Mapping[str, Any], names: Mapping[int, tuple[str, str]], *,
                kv: Sequence[Mapping[str, Any]] = (), kv_plan: Mapping[str, Any] | None = None,
                title: str = "") -> str:
    """The page: summary, engine timeline with barriers, CMX and DDR maps over time, KV inputs and
    (``kv_plan``, from the NPUW plugin's hook) the KV plan per generate variant."""
    summary = tl.summary()
    mem = meta.get("memory", {})
    buffers = meta.get("buffers", [])
    util = ", ".join(f"{k} {v:.0%}" for k, v in summary["utilization"].items())
    legend = "".join(f'<span style="background:{c}"></span>{k.name}' for k, c in _COLORS.items())
    legend += '<span style="background:#6b4fbb"></span>DMA hidden behind compute'
    legend += '<span style="background:#d62828;width:3px"></span>barrier fires'
    top = sorted(tl.tasks.values(), key=lambda t: -(tl.end[t.tid] - tl.start[t.tid]))[:12]
    rows = "".join(f"<tr><td>#{t.tid}</td><td>{_esc(tl.lane_names[t.lane])}</td><td>{_esc(t.kernel)}</td>"
                   f"<td>{_esc(names.get(t.tid, ('', ''))[0])}</td><td class='num'>{t.cycles:,}</td></tr>"
                   for t in top)
    name = title or meta.get("model_name", "model")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>ov-npu-emu profile: {_esc(name)}</title>
<style>{_CSS}</style></head><body>
<h1>ov-npu-emu profile: {_esc(name)}</h1>
<p class="note">Estimated by the emulated NPU's cost model ({tl.clock_mhz:g} MHz): {summary['makespan_us']:.1f} µs,
{summary['makespan_cycles']:,} cycles; engines busy: {util}; DMA hidden behind compute:
{summary['dma_hidden_fraction']:.0%}; tasks: {', '.join(f'{k} {v}' for k, v in summary['tasks'].items())}.</p>
<h2>Engine timeline</h2><div class="legend">{legend}</div>
{_timeline_svg(tl, names, meta.get("barriers", []))}
<h2>CMX over time ({int(mem.get("cmx", 0)):,} B used of {int(meta.get("hw", {}).get("cmx_size", 0)):,})</h2>
{_memory_svg(tl, buffers, "cmx", int(meta.get("hw", {}).get("cmx_size", 0)) or int(mem.get("cmx", 0)))}
<h2>DDR scratch over time ({int(mem.get("scratch", 0)):,} B; weights {int(mem.get("weights", 0)):,} B not drawn)</h2>
{_memory_svg(tl, buffers, "scratch", int(mem.get("scratch", 0)))}
<h2>KV cache</h2>{_kv_table(kv)}{_kv_plan_table(kv_plan)}
<h2>Most expensive tasks</h2>
<table><tr><th>task</th><th>engine</th><th>kernel</th><th>node</th><th>cycles</th></tr>{rows}</table>
</body></html>
"""
