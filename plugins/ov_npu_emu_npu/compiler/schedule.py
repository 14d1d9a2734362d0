"""Scheduling: task dependencies (data, buffer reuse, state write-back) -> barriers."""

from __future__ import annotations

import bisect
import dataclasses
import logging
from collections.abc import Sequence

from ov_npu_emu.errors import CompileError
from ov_npu_emu_npu.compiler.graph import Task, Value
from ov_npu_emu_npu.compiler.lower import Lowered

__all__ = ["Barrier", "Schedule", "last_per_lane", "schedule", "slot_read_deps", "slot_write_deps"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class Barrier:
    """A hardware barrier: consumers start once all producers have posted."""

    bid: int
    producers: list[int]  # task ids that post it
    consumers: list[int]  # task ids that wait on it


@dataclasses.dataclass
class Schedule:
    barriers: list[Barrier]
    waits: dict[int, list[int]]  # task id -> barrier ids it waits on
    posts: dict[int, list[int]]  # task id -> barrier ids it posts


def _latest_write(slot: Value, tid: int) -> int:
    """The last task before ``tid`` that wrote the slot (-1: none)."""
    i = bisect.bisect_left(slot.producers, tid)
    return slot.producers[i - 1] if i else -1


def slot_read_deps(slot: Value, tid: int) -> list[int]:
    """A read of a CMX slot waits for the write that filled it (earlier fills are ordered before
    that one by the slot's own write-after-read edges)."""
    w = _latest_write(slot, tid)
    return [w] if w >= 0 else []


def slot_write_deps(slot: Value, tid: int) -> list[int]:
    """A write into a CMX slot waits for every reader of the previous contents (or, unread, for
    the previous write): the DMA of tile i+2 must not overwrite what tile i's compute reads."""
    w = _latest_write(slot, tid)
    lo, hi = bisect.bisect_right(slot.readers, w), bisect.bisect_left(slot.readers, tid)
    readers = slot.readers[lo:hi]
    return readers if readers else ([w] if w >= 0 else [])


def last_per_lane(tids: list[int], before: int, lane_of: Sequence[int], n_lanes: int) -> list[int]:
    """The latest task of each lane among the sorted ``tids`` below ``before`` (``n_lanes``: how
    many lanes ``tids`` run on, where the backward scan may stop): a lane runs its
    FIFO in order, so waiting for it implies the lane's earlier ones (a tiled MatMul's output has
    hundreds of producers; every reader listing them all made scheduling quadratic)."""
    out: dict[int, int] = {}
    i = bisect.bisect_left(tids, before)
    while i > 0 and len(out) < n_lanes:
        i -= 1
        out.setdefault(lane_of[tids[i]], tids[i])
    return list(out.values())


def schedule(lw: Lowered, reuse_deps: dict[int, set[int]]) -> Schedule:
    """Collect dependencies, drop those the engine FIFOs already imply, group them into barriers."""
    _collect_deps(lw, reuse_deps)
    _prune_deps(lw.tasks)
    return _barriers(lw.tasks)


def _collect_deps(lw: Lowered, reuse_deps: dict[int, set[int]]) -> None:
    """Every task's data dependencies (values, CMX slots, reuse, lifted state) into ``t.deps``."""
    tasks = lw.tasks
    lane_of = [t.lane for t in tasks]
    producer_lanes: dict[int, int] = {}  # root vid -> lanes its producers run on
    for t in tasks:
        for v in t.ins:
            r = v.root
            if r.slot:
                t.deps.update(slot_read_deps(r, t.tid))
            else:
                if r.vid not in producer_lanes:
                    producer_lanes[r.vid] = len({lane_of[p] for p in r.producers})
                t.deps.update(last_per_lane(r.producers, t.tid, lane_of, producer_lanes[r.vid]))
        for v in t.outs:
            if v.root.slot:
                readers = slot_write_deps(v.root, t.tid)
                t.deps.update(last_per_lane(readers, t.tid, lane_of, len({lane_of[x] for x in readers})))
        t.deps.update(reuse_deps.get(t.tid, ()))
    # lifted state: the write-back into the state buffer (aliased by the state input at run time)
    # must wait until every reader of the state input is done
    for in_port, out_port in lw.state_pairs:
        readers = lw.inputs[in_port].root.readers
        for p in lw.outputs[out_port].root.producers:
            tasks[p].deps.update(r for r in readers if r != p)


def _prune_deps(tasks: list[Task]) -> None:
    """Keep of each task's dependencies only the latest task of every other lane."""
    for t in tasks:
        if any(d >= t.tid for d in t.deps):
            raise CompileError(f"task {t.tid} depends on a later task (not topological)", stage="schedule")
        # a task waits for its lane's previous task anyway (FIFO), so drop that edge; of another
        # lane only the latest task is needed (it ran after that lane's earlier ones)
        latest: dict[int, int] = {}
        for d in t.deps:
            lane = tasks[d].lane
            if lane != t.lane and d > latest.get(lane, -1):
                latest[lane] = d
        t.deps = set(latest.values())


def _barriers(tasks: list[Task]) -> Schedule:
    """One barrier per distinct dependency set: its producers post it, its consumers wait on it."""
    by_key: dict[frozenset[int], Barrier] = {}
    waits: dict[int, list[int]] = {}
    posts: dict[int, list[int]] = {}
    for t in tasks:
        if not t.deps:
            continue
        key = frozenset(t.deps)
        b = by_key.get(key)
        if b is None:
            b = Barrier(len(by_key), sorted(key), [])
            by_key[key] = b
            for p in b.producers:
                posts.setdefault(p, []).append(b.bid)
        b.consumers.append(t.tid)
        waits[t.tid] = [b.bid]
    logger.debug("schedule: %d tasks, %d barriers", len(tasks), len(by_key))
    return Schedule(list(by_key.values()), waits, posts)
