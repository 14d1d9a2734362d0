"""Verifiers run after compiler stages: memory plan without live overlaps, sound barrier graph."""

from __future__ import annotations

import bisect

from ov_npu_emu.errors import CompileError, MemoryPlanError
from ov_npu_emu_npu.blob.format import align_up
from ov_npu_emu_npu.compiler.graph import Place, Task
from ov_npu_emu_npu.compiler.lower import Lowered
from ov_npu_emu_npu.compiler.schedule import Schedule, last_per_lane, slot_read_deps, slot_write_deps

__all__ = ["verify_memory", "verify_schedule", "verify_slots"]


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


class _Reach:
    """What a task is known to run after: per lane, the latest task its barriers (or its own lane's
    FIFO) wait for; a lane's earlier tasks are implied by its FIFO order."""

    def __init__(self, sched: Schedule, t: Task, lane_of: list[int]) -> None:
        self.lane_of = lane_of
        self.latest: dict[int, int] = {t.lane: t.tid - 1}
        for b in sched.waits.get(t.tid, []):
            for q in sched.barriers[b].producers:
                lane = lane_of[q]
                self.latest[lane] = max(self.latest.get(lane, -1), q)

    def __contains__(self, p: int) -> bool:
        return p <= self.latest.get(self.lane_of[p], -1)


def verify_schedule(lw: Lowered, sched: Schedule) -> None:
    """Every data dependency is covered by a barrier or by lane order; counts are consistent."""
    posted: dict[int, set[int]] = {}
    for tid, bids in sched.posts.items():
        for b in bids:
            posted.setdefault(b, set()).add(tid)
    for bar in sched.barriers:
        if posted.get(bar.bid, set()) != set(bar.producers):
            raise CompileError(f"barrier {bar.bid}: producer count does not match its posters", stage="schedule")
    lane_of = [t.lane for t in lw.tasks]
    producer_lanes: dict[int, int] = {}
    for t in lw.tasks:
        covered = _Reach(sched, t, lane_of)
        for v in t.ins:
            r = v.root
            if r.slot:
                continue  # verify_slots: a slot is rewritten, only its latest write is read
            if r.vid not in producer_lanes:
                producer_lanes[r.vid] = len({lane_of[p] for p in r.producers})
            # the latest producer of each lane is enough: covering it covers the lane's earlier ones
            for p in last_per_lane(r.producers, t.tid, lane_of, producer_lanes[r.vid]):
                if p not in covered:
                    raise CompileError(
                        f"task {t.tid} reads value {v.vid} without waiting for task {p}", stage="schedule"
                    )
    verify_slots(lw, sched)


def verify_slots(lw: Lowered, sched: Schedule) -> None:
    """The CMX ping-pong slots are safe: no task reads a slot before the barrier (or lane order)
    of the DMA that filled it, and no DMA overwrites a slot before the barriers of every reader of
    its previous contents. By induction over each slot's history, every read sees exactly the
    write it was scheduled after."""
    lane_of = [t.lane for t in lw.tasks]
    for t in lw.tasks:
        if not any(v.root.slot for v in t.ins + t.outs):
            continue
        covered = _Reach(sched, t, lane_of)
        for v in t.ins:
            if v.root.slot:
                missing = [p for p in slot_read_deps(v.root, t.tid) if p not in covered]
                if missing:
                    raise CompileError(f"task {t.tid} reads CMX slot {v.root.vid} before the barrier of task "
                                       f"{missing[0]}, which fills it", stage="schedule")
        for v in t.outs:
            if v.root.slot:
                missing = [r for r in slot_write_deps(v.root, t.tid) if r != t.tid and r not in covered]
                if missing:
                    raise CompileError(f"task {t.tid} overwrites CMX slot {v.root.vid} before the barrier of task "
                                       f"{missing[0]}, which reads its previous contents", stage="schedule")
