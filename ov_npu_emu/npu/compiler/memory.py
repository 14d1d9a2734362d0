"""Memory planning: weights packed in a constant region; activations by liveness in DDR and CMX."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np

from ov_npu_emu.errors import MemoryPlanError
from ov_npu_emu.npu.blob.format import align_up
from ov_npu_emu.npu.compiler.graph import Place, Value
from ov_npu_emu.npu.compiler.lower import Lowered
from ov_npu_emu.npu.compiler.schedule import last_per_lane

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


def _lifetime(v: Value) -> tuple[int, int]:
    touched = v.producers + v.readers
    return min(touched), max(touched)


def _place(values: list[Value], capacity: int | None, region: str,
           lane_of: list[int]) -> tuple[int, dict[int, set[int]]]:
    """Greedy by size: each buffer goes to the lowest offset free during its whole lifetime."""
    live = [v for v in values if v.producers or v.readers]
    spans = {v.vid: _lifetime(v) for v in live}
    placed: list[Value] = []
    top = 0
    for v in sorted(live, key=lambda x: (-x.nbytes, spans[x.vid][0])):
        lo, hi = spans[v.vid]
        size = align_up(max(v.nbytes, 1), ALIGN)
        busy = sorted((u.offset, u.offset + align_up(max(u.nbytes, 1), ALIGN)) for u in placed
                      if not (spans[u.vid][1] < lo or hi < spans[u.vid][0]))
        off = 0
        for b0, b1 in busy:
            if off + size <= b0:
                break
            off = max(off, b1)
        v.offset = off
        top = max(top, off + size)
        placed.append(v)
    if capacity is not None and top > capacity:
        raise MemoryPlanError(f"{region} needs {top} bytes but has {capacity}; raise NPU_EMU_CMX_SIZE "
                              "or let the compiler tile smaller", stage="memory")
    # reuse of an address by a later buffer must wait for every task touching the earlier one
    deps: dict[int, set[int]] = {}
    if placed:
        offs = np.array([u.offset for u in placed])
        ends = offs + np.array([align_up(max(u.nbytes, 1), ALIGN) for u in placed])
        last = np.array([spans[u.vid][1] for u in placed])
        for v in placed:
            lo = spans[v.vid][0]
            mask = (offs < v.offset + align_up(max(v.nbytes, 1), ALIGN)) & (v.offset < ends) & (last < lo)
            for i in np.nonzero(mask)[0]:
                u = placed[int(i)]
                touched = sorted(u.producers + u.readers)
                n_lanes = len({lane_of[x] for x in touched})
                for p in v.producers:  # each lane's latest toucher implies its earlier ones (FIFO)
                    deps.setdefault(p, set()).update(last_per_lane(touched, p, lane_of, n_lanes))
    return top, deps


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
                if first.vid not in twins and np.array_equal(first.data, v.data):
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
    lane_of = [t.lane for t in lw.tasks]
    scratch, d1 = _place([v for v in roots if v.place is Place.SCRATCH], None, "DDR scratch", lane_of)
    cmx, d2 = _place([v for v in roots if v.place is Place.CMX], cmx_size, "CMX", lane_of)
    for k, s in d2.items():
        d1.setdefault(k, set()).update(s)
    logger.debug("memory: weights %d B, scratch %d B, cmx %d B", len(blob), scratch, cmx)
    return MemoryPlan(blob, scratch, cmx, d1, [(v.offset, v.nbytes) for v in consts])
