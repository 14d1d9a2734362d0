"""The memory planner's placement and reuse dependencies against a plain quadratic reference."""

from __future__ import annotations

import numpy as np
import pytest

from ov_npu_emu_npu.blob.format import align_up
from ov_npu_emu_npu.compiler.graph import Place, Value
from ov_npu_emu_npu.compiler.memory import ALIGN, _place


def _buffers(rng: np.random.Generator, n: int, tasks: int) -> list[Value]:
    """Buffers of random sizes over random lifetimes: most one or two tasks long (CMX stages),
    some spanning hundreds (activations kept across layers)."""
    values = []
    for vid in range(n):
        lo = int(rng.integers(0, tasks - 1))
        span = int(rng.integers(0, 3)) if rng.random() < 0.8 else int(rng.integers(16, 300))
        hi = min(tasks - 1, lo + span)
        readers = sorted({hi, *rng.integers(lo, hi + 1, 2).tolist()}) if hi > lo else []
        values.append(Value(vid, (int(rng.integers(1, 5000)),), np.dtype(np.uint8), Place.CMX,
                            producers=[lo], readers=readers))
    return values


def _reference(values: list[Value], lanes: list[int]) -> tuple[int, dict[int, int], dict[int, set[int]]]:
    """Greedy by size, lowest free offset; each reuse waits for the latest earlier task per lane."""
    span = {v.vid: (min(v.producers + v.readers), max(v.producers + v.readers)) for v in values}
    size = {v.vid: align_up(max(v.nbytes, 1), ALIGN) for v in values}
    placed: list[Value] = []
    off: dict[int, int] = {}
    for v in sorted(values, key=lambda x: (-x.nbytes, span[x.vid][0])):
        lo, hi = span[v.vid]
        cands = [u for u in placed if not (span[u.vid][1] < lo or hi < span[u.vid][0])]
        at = 0
        for u in sorted(cands, key=lambda u: off[u.vid]):  # stable: placement order breaks ties
            if at + size[v.vid] <= off[u.vid]:
                break
            at = max(at, off[u.vid] + size[u.vid])
        off[v.vid] = at
        placed.append(v)
    deps: dict[int, set[int]] = {}
    for v in placed:
        latest: dict[int, int] = {}
        for u in placed:
            overlap = off[u.vid] < off[v.vid] + size[v.vid] and off[v.vid] < off[u.vid] + size[u.vid]
            if overlap and span[u.vid][1] < span[v.vid][0]:
                for t in u.producers + u.readers:
                    latest[lanes[t]] = max(latest.get(lanes[t], -1), t)
        if latest:
            for p in v.producers:
                deps.setdefault(p, set()).update(latest.values())
    top = max((off[v.vid] + size[v.vid] for v in values), default=0)
    return top, off, deps


@pytest.mark.parametrize("seed", range(4))
def test_place_matches_the_quadratic_reference(seed):
    rng = np.random.default_rng(seed)
    tasks = 400
    lanes = rng.integers(0, 3, tasks).tolist()
    values = _buffers(rng, 300, tasks)
    top, deps = _place(values, None, "CMX", lanes)
    ref_top, ref_off, ref_deps = _reference(values, lanes)
    assert {v.vid: v.offset for v in values} == ref_off
    assert top == ref_top
    assert deps == ref_deps
