"""Cost-model timeline of one inference: per-task start/end, utilization, DMA/compute overlap."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from ov_npu_emu_npu.blob.format import TaskKind
from ov_npu_emu_npu.device.engines import DecodedTask

__all__ = ["Timeline", "chrome_trace", "overlap_spans", "simulate_timeline"]


@dataclasses.dataclass
class Timeline:
    """Estimated device timeline in cycles."""

    start: dict[int, int]  # task id -> start cycle
    end: dict[int, int]  # task id -> end cycle
    lane_names: list[str]  # lane index -> "DMA0", ..., "DPU", "SHAVE"
    tasks: dict[int, DecodedTask]  # task id -> decoded task
    clock_mhz: float

    @property
    def makespan(self) -> int:
        return max(self.end.values(), default=0)

    def summary(self) -> dict[str, Any]:
        span = max(self.makespan, 1)
        busy: dict[str, int] = {}
        intervals: dict[str, list[tuple[int, int]]] = {"dma": [], "compute": []}
        for tid, t in self.tasks.items():
            name = self.lane_names[t.lane]
            busy[name] = busy.get(name, 0) + self.end[tid] - self.start[tid]
            intervals["dma" if t.kind is TaskKind.DMA else "compute"].append((self.start[tid], self.end[tid]))
        dma_u, comp_u = _union(intervals["dma"]), _union(intervals["compute"])
        overlap = _intersect(dma_u, comp_u)
        dma_total = sum(b - a for a, b in dma_u)
        return {
            "makespan_cycles": self.makespan,
            "makespan_us": self.makespan / self.clock_mhz,
            "utilization": {k: busy.get(k, 0) / span for k in self.lane_names},
            "busy_us": {k: busy.get(k, 0) / self.clock_mhz for k in self.lane_names},
            "dma_busy_cycles": dma_total,
            "compute_busy_cycles": sum(b - a for a, b in comp_u),
            "dma_compute_overlap_cycles": overlap,
            "dma_hidden_fraction": overlap / dma_total if dma_total else 0.0,
            "tasks": {k.name: sum(1 for t in self.tasks.values() if t.kind is k) for k in TaskKind},
        }


def overlap_spans(tl: Timeline) -> list[tuple[int, int]]:
    """Cycle spans where a DMA runs while a DPU or SHAVE task computes (the hidden DMA time)."""
    dma = _union([(tl.start[i], tl.end[i]) for i, t in tl.tasks.items() if t.kind is TaskKind.DMA])
    comp = _union([(tl.start[i], tl.end[i]) for i, t in tl.tasks.items() if t.kind is not TaskKind.DMA])
    out: list[tuple[int, int]] = []
    i = j = 0
    while i < len(dma) and j < len(comp):
        lo, hi = max(dma[i][0], comp[j][0]), min(dma[i][1], comp[j][1])
        if hi > lo:
            out.append((lo, hi))
        if dma[i][1] < comp[j][1]:
            i += 1
        else:
            j += 1
    return out


def _union(iv: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _intersect(x: list[tuple[int, int]], y: list[tuple[int, int]]) -> int:
    i = j = total = 0
    while i < len(x) and j < len(y):
        lo, hi = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        total += max(0, hi - lo)
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return total


def simulate_timeline(lanes: Sequence[list[DecodedTask]], n_barriers: int, lane_names: list[str],
                      clock_mhz: float) -> Timeline:
    """Replay the barrier walk with each task's estimated cycles instead of running kernels."""
    counts = [0] * n_barriers
    for lane in lanes:
        for t in lane:
            for b in t.posts:
                counts[b] += 1
    ready = [0] * n_barriers
    free = [0] * len(lanes)
    pcs = [0] * len(lanes)
    start: dict[int, int] = {}
    end: dict[int, int] = {}
    tasks: dict[int, DecodedTask] = {}
    remaining = sum(len(lane) for lane in lanes)
    while remaining:
        progressed = 0
        for li, lane in enumerate(lanes):
            while pcs[li] < len(lane):
                t = lane[pcs[li]]
                if any(counts[b] for b in t.waits):
                    break
                s = max([free[li]] + [ready[b] for b in t.waits])
                e = s + t.cycles
                start[t.tid], end[t.tid], tasks[t.tid] = s, e, t
                free[li] = e
                for b in t.posts:
                    counts[b] -= 1
                    ready[b] = max(ready[b], e)
                pcs[li] += 1
                progressed += 1
        if not progressed:
            break
        remaining -= progressed
    return Timeline(start, end, lane_names, tasks, clock_mhz)


def chrome_trace(tl: Timeline, names: dict[int, tuple[str, str]] | None = None) -> str:
    """Chrome trace JSON (loads in Perfetto / chrome://tracing): one thread lane per engine."""
    names = names or {}
    ev: list[dict[str, Any]] = [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "NPU (emulated)"}}]
    for i, n in enumerate(tl.lane_names):
        ev.append({"ph": "M", "pid": 1, "tid": i, "name": "thread_name", "args": {"name": n}})
        ev.append({"ph": "M", "pid": 1, "tid": i, "name": "thread_sort_index", "args": {"sort_index": i}})
    for tid, t in sorted(tl.tasks.items(), key=lambda kv: tl.start[kv[0]]):
        node, op = names.get(tid, ("", ""))
        ev.append({"ph": "X", "pid": 1, "tid": t.lane, "name": f"{t.kernel}:{node}" if node else t.kernel,
                   "cat": t.kind.name, "ts": tl.start[tid] / tl.clock_mhz,
                   "dur": max((tl.end[tid] - tl.start[tid]) / tl.clock_mhz, 0.001),
                   "args": {"task": tid, "op": op, "cycles": t.cycles, "waits": list(t.waits), "posts": list(t.posts)}})
    return json.dumps({"traceEvents": ev, "displayTimeUnit": "ns"})
