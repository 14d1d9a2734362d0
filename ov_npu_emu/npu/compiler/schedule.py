"""Scheduling: task dependencies (data, buffer reuse, state write-back) -> barriers."""

from __future__ import annotations

import dataclasses
import logging

from ov_npu_emu.errors import CompileError
from ov_npu_emu.npu.compiler.lower import Lowered

__all__ = ["Barrier", "Schedule", "schedule"]

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


def schedule(lw: Lowered, reuse_deps: dict[int, set[int]]) -> Schedule:
    """Collect dependencies, drop those the engine FIFOs already imply, group them into barriers."""
    tasks = lw.tasks
    for t in tasks:
        srcs = t.ins
        for v in srcs:
            t.deps.update(p for p in v.root.producers if p < t.tid)
        t.deps.update(reuse_deps.get(t.tid, ()))
    # lifted state: the write-back into the state buffer (aliased by the state input at run time)
    # must wait until every reader of the state input is done
    for in_port, out_port in lw.state_pairs:
        readers = lw.inputs[in_port].root.readers
        for p in lw.outputs[out_port].root.producers:
            tasks[p].deps.update(r for r in readers if r != p)
    last_on_lane: dict[int, int] = {}
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
        last_on_lane[t.lane] = t.tid
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
