"""Memory planning: weights packed in a constant region; activations by liveness in DDR and CMX."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np

from ov_npu_emu.errors import MemoryPlanError
from ov_npu_emu_npu.arrays import same_contents
from ov_npu_emu_npu.blob.format import align_up
from ov_npu_emu_npu.compiler.graph import Place, Value
from ov_npu_emu_npu.compiler.lower import Lowered

__all__ = ["ALIGN", "MemoryPlan", "WeightsImage", "plan_memory"]

logger = logging.getLogger(__name__)

#: every buffer starts on a 64-byte boundary (a DMA burst / cache line)
ALIGN = 64


class WeightsImage:
    """The packed constant region as a list of chunks (padding and views of the constants' data).

    It is never materialised on its own: the blob writer copies the chunks straight into the blob,
    so a compile holds the weights once (in the blob) instead of twice (an image, then the blob).
    """

    def __init__(self, size: int, chunks: list[bytes | memoryview], pieces: dict[int, np.ndarray]) -> None:
        self.size = size
        self.chunks = chunks
        #: read-only uint8 view of each constant by its offset (a split blob's driver banks these)
        self.pieces = pieces

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        return b"".join(self.chunks)


@dataclasses.dataclass
class MemoryPlan:
    """Region sizes and the ordering constraints that buffer reuse adds."""

    weights: WeightsImage  # the packed constant region
    scratch_size: int  # bytes of DDR scratch
    cmx_used: int  # bytes of CMX used at peak
    reuse_deps: dict[int, set[int]]  # task id -> earlier tasks it must wait for (write-after-read)
    #: (offset, nbytes) of every distinct constant in ``weights``: lets the driver bank them one by one
    constants: list[tuple[int, int]] = dataclasses.field(default_factory=list)


#: lifetimes shorter than this many tasks find their overlapping buffers through the per-task lists
_SHORT = 16


def _lifetime(v: Value) -> tuple[int, int]:
    touched = v.producers + v.readers
    return min(touched), max(touched)


def _place(values: list[Value], capacity: int | None, region: str,
           lanes: list[int]) -> tuple[int, dict[int, set[int]]]:
    """Greedy by size: each buffer goes to the lowest offset free during its whole lifetime.

    :param lanes: engine lane per task id (reuse dependencies keep the latest task per lane)
    """
    live = [v for v in values if v.producers or v.readers]
    spans = {v.vid: _lifetime(v) for v in live}
    placed: list[Value] = []
    top = 0
    # the placed buffers' lifetimes and address ranges as arrays: the overlap filter runs in
    # numpy (it was a Python scan over every placed buffer per buffer: quadratic, minutes at 0.5B);
    # a short-lived buffer instead looks its candidates up per task (the thousands of one-task
    # CMX stages of a 1B prefill made even the numpy filter quadratic)
    cap = max(len(live), 1)
    p_lo, p_hi = np.empty(cap, np.int64), np.empty(cap, np.int64)
    p_off, p_end = np.empty(cap, np.int64), np.empty(cap, np.int64)
    alive: dict[int, list[int]] = {}  # task id -> short-lived placed buffers alive then
    longs, n_long = np.empty(cap, np.int64), 0  # the long-lived placed buffers
    for n, v in enumerate(sorted(live, key=lambda x: (-x.nbytes, spans[x.vid][0]))):
        lo, hi = spans[v.vid]
        size = align_up(max(v.nbytes, 1), ALIGN)
        if hi - lo < _SHORT:
            short = {i for t in range(lo, hi + 1) for i in alive.get(t, ())}
            lg = longs[:n_long]
            lg = lg[~((p_hi[lg] < lo) | (hi < p_lo[lg]))]
            cand = np.sort(np.concatenate([np.fromiter(short, np.int64, len(short)), lg]))
        else:
            cand = np.flatnonzero(~((p_hi[:n] < lo) | (hi < p_lo[:n])))
        order = cand[np.argsort(p_off[cand], kind="stable")]  # by offset, then placement order
        off = 0
        for b0, b1 in zip(p_off[order].tolist(), p_end[order].tolist(), strict=True):
            if off + size <= b0:
                break
            off = max(off, b1)
        v.offset = off
        top = max(top, off + size)
        placed.append(v)
        p_lo[n], p_hi[n], p_off[n], p_end[n] = lo, hi, off, off + size
        if hi - lo < _SHORT:
            for t in range(lo, hi + 1):
                alive.setdefault(t, []).append(n)
        else:
            longs[n_long] = n
            n_long += 1
    if capacity is not None and top > capacity:
        raise MemoryPlanError(f"{region} needs {top} bytes but has {capacity}; raise NPU_EMU_CMX_SIZE "
                              "or let the compiler tile smaller", stage="memory")
    return top, _reuse_deps(placed, spans, lanes)


def _reuse_deps(placed: list[Value], spans: dict[int, tuple[int, int]], lanes: list[int]) -> dict[int, set[int]]:
    """Reuse of an address by a later buffer must wait for every task touching the earlier one:
    those tasks all precede the new buffer's first task, and a lane runs in order, so the latest
    of them per lane stands for the rest.

    A sweep over the buffers by first task: a buffer whose last task is before the current
    start has ended, and its per-lane latest tasks are max-ed into the address segments it
    covers (the segments between all buffers' boundaries), so a buffer's dependencies are the
    maxima over its own segments (comparing every pair of buffers was quadratic in the
    thousands of CMX stages of a large prefill).
    """
    if not placed:
        return {}
    n = len(placed)
    offs = np.array([u.offset for u in placed], np.int64)
    ends = offs + np.array([align_up(max(u.nbytes, 1), ALIGN) for u in placed], np.int64)
    first = np.array([spans[u.vid][0] for u in placed], np.int64)
    last = np.array([spans[u.vid][1] for u in placed], np.int64)
    lane_ids = sorted(set(lanes))
    row = {ln: i for i, ln in enumerate(lane_ids)}
    latest = np.full((len(lane_ids), n), -1, np.int64)
    for j, u in enumerate(placed):
        for t in u.producers + u.readers:
            r = row[lanes[t]]
            latest[r, j] = max(latest[r, j], t)
    bounds = np.unique(np.concatenate([offs, ends]))
    seg_lo, seg_hi = np.searchsorted(bounds, offs), np.searchsorted(bounds, ends)
    ended_max = np.full((len(lane_ids), len(bounds)), -1, np.int64)
    by_last = np.argsort(last, kind="stable")
    before: list[set[int]] = [set() for _ in range(n)]
    k = 0
    for j in np.argsort(first, kind="stable").tolist():
        while k < n and last[by_last[k]] < first[j]:
            u = by_last[k]
            seg = ended_max[:, seg_lo[u]:seg_hi[u]]
            np.maximum(seg, latest[:, u:u + 1], out=seg)
            k += 1
        if placed[j].producers:
            before[j] = {t for t in ended_max[:, seg_lo[j]:seg_hi[j]].max(axis=1).tolist() if t >= 0}
    deps: dict[int, set[int]] = {}
    for v, b in zip(placed, before, strict=True):
        if b:  # every buffer has a task, so an empty set means no earlier buffer at these addresses
            for p in v.producers:
                deps.setdefault(p, set()).update(b)
    return deps


def _identical(consts: list[Value]) -> dict[int, Value]:
    """Constants whose bytes equal an earlier one's (e.g. a tied embedding's two int8 chains).

    Candidates are grouped by type, size and a 64-element strided sample, so distinct weights
    are told apart without reading them whole; only sample matches are compared in full.
    """
    groups: dict[tuple[str, int, bytes], list[Value]] = {}
    for v in consts:
        if v.nbytes < ALIGN:
            continue
        flat = np.asarray(v.data).reshape(-1)
        sample = flat[:: max(1, flat.size // 64)][:64].tobytes()
        groups.setdefault((v.dtype.str, v.nbytes, sample), []).append(v)
    twins: dict[int, Value] = {}
    for group in groups.values():
        for i, v in enumerate(group[1:], 1):
            for first in group[:i]:
                if first.vid not in twins and same_contents(np.asarray(first.data), np.asarray(v.data)):
                    twins[v.vid] = first
                    break
    return twins


def plan_memory(lw: Lowered, cmx_size: int) -> MemoryPlan:
    """Assign offsets to every root value; returns sizes, the weights image and reuse deps."""
    roots = [v for v in lw.values if v.alias is None]
    consts = [v for v in roots if v.place is Place.CONST and (v.readers or v.producers)]
    twins = _identical(consts)
    size = 0
    unique = []
    for v in consts:
        first = twins.get(v.vid)
        if first is not None:  # same bytes already placed: share them
            v.offset = first.offset
            continue
        v.offset = align_up(size, ALIGN)
        size = v.offset + v.nbytes
        unique.append(v)
    consts = unique
    # chunks, not a preallocated image: weights can be gigabytes and the writer copies them once
    chunks: list[bytes | memoryview] = []
    pieces: dict[int, np.ndarray] = {}
    pos = 0
    for v in consts:
        if v.offset > pos:
            chunks.append(bytes(v.offset - pos))
        data = np.ascontiguousarray(v.data, dtype=v.dtype).reshape(-1).view(np.uint8).view()
        data.flags.writeable = False
        chunks.append(memoryview(data))
        pieces[v.offset] = data
        pos = v.offset + v.nbytes
    blob = WeightsImage(size, chunks, pieces)
    for v in roots:
        if v.place is Place.CONST and v.producers:
            raise MemoryPlanError(f"task writes into constant value {v.vid}", stage="memory")
    lanes = [t.lane for t in lw.tasks]
    scratch, d1 = _place([v for v in roots if v.place is Place.SCRATCH], None, "DDR scratch", lanes)
    cmx, d2 = _place([v for v in roots if v.place is Place.CMX], cmx_size, "CMX", lanes)
    for k, s in d2.items():
        d1.setdefault(k, set()).update(s)
    logger.debug("memory: weights %d B, scratch %d B, cmx %d B", len(blob), scratch, cmx)
    return MemoryPlan(blob, scratch, cmx, d1, [(v.offset, v.nbytes) for v in consts])
