"""Verifiers run after compiler stages: memory plan without live overlaps, sound barrier graph."""

from __future__ import annotations

import bisect

from ov_npu_emu.errors import CompileError, MemoryPlanError
from ov_npu_emu.npu.blob.format import align_up
from ov_npu_emu.npu.compiler.graph import Place
from ov_npu_emu.npu.compiler.lower import Lowered
from ov_npu_emu.npu.compiler.schedule import Schedule

__all__ = ["verify_memory", "verify_schedule"]


def verify_memory(lw: Lowered) -> None:
    """Every placed buffer is aligned; buffers live at the same time never overlap."""
    for place in (Place.SCRATCH, Place.CMX):
        vs = [v for v in lw.values if v.alias is None and v.place is place and (v.producers or v.readers)]
        for v in vs:
            if v.offset < 0 or v.offset % 64:
                raise MemoryPlanError(
                    f"value {v.vid} in {place.value} is unplaced or unaligned ({v.offset})", stage="memory"
                )
        # sweep over time: buffers live at one time must be disjoint, so each new one needs
        # checking only against its neighbours by address among the live ones
        spans = sorted(((min(v.producers + v.readers), max(v.producers + v.readers), v) for v in vs),
                       key=lambda s: (s[0], s[2].offset))
        live: list[tuple[int, int, int, int]] = []  # (offset, end, last task, vid) sorted by offset
        for t0, t1, v in spans:
            live = [x for x in live if x[2] >= t0] if any(x[2] < t0 for x in live) else live
            end = v.offset + align_up(max(v.nbytes, 1), 64)
            i = bisect.bisect_left(live, (v.offset, end, t1, v.vid))
            for j in (i - 1, i):
                if 0 <= j < len(live) and live[j][0] < end and v.offset < live[j][1]:
                    raise MemoryPlanError(
                        f"values {live[j][3]} and {v.vid} overlap in {place.value} while both live", stage="memory"
                    )
            live.insert(i, (v.offset, end, t1, v.vid))


def verify_schedule(lw: Lowered, sched: Schedule) -> None:
    """Every data dependency is covered by a barrier or by lane order; counts are consistent."""
    posted: dict[int, set[int]] = {}
    for tid, bids in sched.posts.items():
        for b in bids:
            posted.setdefault(b, set()).add(tid)
    for b in sched.barriers:
        if posted.get(b.bid, set()) != set(b.producers):
            raise CompileError(f"barrier {b.bid}: producer count does not match its posters", stage="schedule")
    tasks = lw.tasks
    for t in tasks:
        # a lane runs its tasks in order: waiting for task q covers every earlier task on q's
        # lane, and the task's own lane covers its earlier tasks (per lane: the latest covered)
        covered: dict[int, int] = {t.lane: t.tid - 1}
        for b in sched.waits.get(t.tid, []):
            for q in sched.barriers[b].producers:
                lane = tasks[q].lane
                if q > covered.get(lane, -1):
                    covered[lane] = q
        for v in t.ins:
            for p in v.root.producers:
                if p < t.tid and p > covered.get(tasks[p].lane, -1):
                    raise CompileError(
                        f"task {t.tid} reads value {v.vid} without waiting for task {p}", stage="schedule"
                    )
