"""MatMul tiling through CMX with DMA ping-pong: activation, weight and output tiles in CMX slots.

A MatMul ``o[M, N] = a[M, K] @ w[K, N]`` with a constant weight is cut into ``mt x kt x nt``
tiles. Every operand stream (activation chunks, weight chunks, output tiles) owns ``slots`` CMX
buffers, used round robin: with two slots the DMA filling tile i+1 runs while the DPU computes
tile i (the DMA is issued first in program order, and its only wait is on the readers of the
slot's previous contents). K is split when a row does not fit: the first chunk of an output tile
is a plain ``matmul``, the others a ``matmul_acc`` adding into the same CMX accumulator; the
tile goes back to DDR once after its last chunk. With one slot (NPU_EMU_PING_PONG=NO) each load
waits for the previous tile's compute: the same tiles, in sequence.

The slot values are marked ``slot=True``: the scheduler orders them by their write/read history
(a read waits for the latest write, a write for the readers of the previous contents) and
``verify.verify_slots`` proves both from the barriers.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from ov_npu_emu_npu.arch import HardwareConfig
from ov_npu_emu_npu.blob.format import align_up
from ov_npu_emu_npu.blob.kernel_params import MatMulParams
from ov_npu_emu_npu.compiler.graph import Place, Value

__all__ = ["MatmulTiling", "choose_tiling", "lower_tiled_matmul"]

#: CMX buffers start on 64-byte boundaries (memory.ALIGN; not imported: memory imports lower)
_ALIGN = 64
#: more tiles than this and the task list (and its host-side dispatch) grows faster than it helps
_MAX_STEPS = 4096


@dataclasses.dataclass(frozen=True)
class MatmulTiling:
    """Tile sizes, loop order and the cost model's estimate for one MatMul."""

    mt: int  # rows per tile
    kt: int  # reduction chunk
    nt: int  # output columns per tile
    rows_outer: bool  # loop rows outermost (activation chunk reused across column tiles) or columns
    est_cycles: float  # makespan the cost model expects with two slots
    cmx_bytes: int  # bytes of CMX the slots take


def _sizes(d: int) -> list[int]:
    """Tile-size candidates: d, halves of d, powers of two below d."""
    out = {d}
    x = d
    while x > 1:
        x = -(-x // 2)
        out.add(x)
    p = 1
    while p < d:
        out.add(p)
        p *= 2
    return sorted(out)


def _estimate(hw: HardwareConfig, m: int, k: int, n: int, mt: int, kt: int, nt: int, rows_outer: bool,
              sizes: tuple[int, int, int]) -> tuple[float, int]:
    """(cycles with two slots, tasks): DMA over the channels vs DPU, whichever is longer, plus the
    first load and the last store that nothing hides."""
    ai, wi, oi = sizes
    nm, nk, nn = -(-m // mt), -(-k // kt), -(-n // nt)
    steps = nm * nk * nn
    a_all, w_all, o_all = m * k * ai, k * n * wi, m * n * oi
    if rows_outer:  # the activation chunk stays while the column tiles pass (when K is whole)
        a_loads, a_bytes = (nm, a_all) if nk == 1 else (steps, nn * a_all)
        w_loads, w_bytes = (1, w_all) if nn == 1 and nk == 1 else (steps, nm * w_all)
    else:  # the weight chunk stays while the row tiles pass (when K is whole)
        a_loads, a_bytes = (1, a_all) if nm == 1 and nk == 1 else (steps, nn * a_all)
        w_loads, w_bytes = (nn, w_all) if nk == 1 else (steps, nm * w_all)
    stores = nm * nn
    bpc = hw.bytes_per_cycle
    ovh = hw.task_overhead_cycles
    dma = (a_loads + w_loads + stores) * ovh + (a_bytes + w_bytes + o_all) / bpc
    dpu = steps * ovh + m * k * n / hw.dpu_macs_per_cycle
    exposed = 2 * ovh + (mt * kt * ai + kt * nt * wi + mt * nt * oi) / bpc
    return max(dma / hw.dma_channels, dpu) + exposed, a_loads + w_loads + stores + steps


@functools.lru_cache(maxsize=256)  # an LLM repeats a few MatMul shapes over all its layers
def choose_tiling(hw: HardwareConfig, m: int, k: int, n: int, sizes: tuple[int, int, int], *,
                  split_k: bool) -> MatmulTiling | None:
    """The cheapest tiling whose two slots per stream fit the CMX; None when none does.

    ``sizes``: element bytes of activation, weight, output. ``split_k``: may K be chunked
    (the accumulation is f32: only for f32 outputs). K stays whole unless splitting it is
    needed or >10% cheaper: a whole row is one BLAS product, the closest to the CPU plugin's sums.
    """
    whole = _cheapest(hw, m, k, n, sizes, [k])
    if not split_k:
        return whole
    split = _cheapest(hw, m, k, n, sizes, [kt for kt in _sizes(k) if kt < k])
    if split is not None and (whole is None or split.est_cycles < 0.9 * whole.est_cycles):
        return split
    return whole


def _cheapest(hw: HardwareConfig, m: int, k: int, n: int, sizes: tuple[int, int, int],
              k_chunks: list[int]) -> MatmulTiling | None:
    ai, wi, oi = sizes
    best: tuple[float, int, MatmulTiling] | None = None
    for kt in k_chunks:
        for mt in _sizes(m):
            for nt in _sizes(n):
                need = 2 * (align_up(mt * kt * ai, _ALIGN) + align_up(kt * nt * wi, _ALIGN)
                            + align_up(mt * nt * oi, _ALIGN))
                if need > hw.cmx_size:
                    continue
                if -(-m // mt) * -(-k // kt) * -(-n // nt) > _MAX_STEPS:
                    continue
                for rows_outer in (True, False):
                    est, tasks = _estimate(hw, m, k, n, mt, kt, nt, rows_outer, sizes)
                    if best is None or (est, tasks) < best[:2]:
                        best = (est, tasks, MatmulTiling(mt, kt, nt, rows_outer, est, need))
    return None if best is None else best[2]


class _Stream:
    """The CMX slots of one operand stream, used round robin (made when first needed: a
    MatMul that is one tile uses one slot per stream)."""

    def __init__(self, lw: Any, elems: int, dtype: np.dtype, count: int) -> None:
        self.make = lambda: lw.new_value((elems,), dtype, Place.CMX, slot=True)
        self.count = count
        self.slots: list[Value] = []
        self.used = 0
        self.key: Any = None  # which chunk the latest-filled slot holds

    def next(self) -> Value:
        if len(self.slots) < self.count:
            self.slots.append(self.make())
        v = self.slots[self.used % self.count]
        self.used += 1
        return v

    @property
    def latest(self) -> Value:
        return self.slots[(self.used - 1) % self.count]


def _copy_2d(lw: Any, src: Value, src_off: int, dst: Value, dst_off: int, rows: int, row: int,
             src_pitch: int, dst_pitch: int, node: Any) -> None:
    """``rows`` rows of ``row`` bytes, one DMA (strided when either side has a pitch)."""
    if rows == 1 or (src_pitch == row and dst_pitch == row):
        lw.dma(src, src_off, dst, dst_off, 1, 1, rows * row, (0, 0), (0, 0), node)
    else:
        lw.dma(src, src_off, dst, dst_off, 1, rows, row, (0, src_pitch), (0, dst_pitch), node)


def lower_tiled_matmul(lw: Any, a: Value, b: Value, o: Value, tb: bool, node: Any, *, slots: int) -> bool:
    """Lower ``o = a @ b`` (b constant [N, K] when ``tb`` else [K, N]) as CMX tiles; False when
    no tiling fits (the caller then keeps its DDR path)."""
    k = a.shape[-1]
    n = o.shape[-1]
    m = int(np.prod(a.shape[:-1], dtype=np.int64))
    ai, wi, oi = a.dtype.itemsize, b.dtype.itemsize, o.dtype.itemsize
    plan = choose_tiling(lw.hw, m, k, n, (ai, wi, oi), split_k=o.dtype == np.float32)
    if plan is None:
        return False
    mt, kt, nt = plan.mt, plan.kt, plan.nt
    nm, nk, nn = -(-m // mt), -(-k // kt), -(-n // nt)

    a_s, w_s = _Stream(lw, mt * kt, a.dtype, slots), _Stream(lw, kt * nt, b.dtype, slots)
    o_s = _Stream(lw, mt * nt, o.dtype, slots)
    if plan.rows_outer:
        steps = [(mi, ni, ki) for mi in range(nm) for ni in range(nn) for ki in range(nk)]
    else:
        steps = [(mi, ni, ki) for ni in range(nn) for mi in range(nm) for ki in range(nk)]

    def extent(i: int, t: int, d: int) -> tuple[int, int]:
        return i * t, min(t, d - i * t)

    def loads(step: tuple[int, int, int]) -> tuple[Value, Value]:
        """Issue this step's chunk DMAs (a chunk already in its slot is not loaded again)."""
        mi, ni, ki = step
        (r0, r), (k0, kc), (n0, nc) = extent(mi, mt, m), extent(ki, kt, k), extent(ni, nt, n)
        if a_s.key != (mi, ki):
            a_s.key = (mi, ki)
            dst = a_s.next()
            _copy_2d(lw, a, (r0 * k + k0) * ai, dst, 0, r, kc * ai, k * ai, kc * ai, node)
        if w_s.key != (ki, ni):
            w_s.key = (ki, ni)
            dst = w_s.next()
            if tb:  # [N, K]: nc rows of a K chunk
                _copy_2d(lw, b, (n0 * k + k0) * wi, dst, 0, nc, kc * wi, k * wi, kc * wi, node)
            else:  # [K, N]: kc rows of an N chunk
                _copy_2d(lw, b, (k0 * n + n0) * wi, dst, 0, kc, nc * wi, n * wi, nc * wi, node)
        return lw.alias(a_s.latest, (r, kc)), lw.alias(w_s.latest, (nc, kc) if tb else (kc, nc))

    def compute(step: tuple[int, int, int], at: Value, wt: Value) -> None:
        mi, ni, ki = step
        (r0, r), (_, kc), (n0, nc) = extent(mi, mt, m), extent(ki, kt, k), extent(ni, nt, n)
        if ki == 0:  # a new output tile: the next accumulator slot
            o_s.next()
        acc = lw.alias(o_s.latest, (r, nc))
        lw.dpu("matmul" if ki == 0 else "matmul_acc", [at, wt], [acc], MatMulParams(False, tb), node, r * kc * nc)
        if ki == nk - 1:  # the tile is complete: back to DDR
            _copy_2d(lw, acc, 0, o, (r0 * n + n0) * oi, r, nc * oi, nc * oi, n * oi, node)

    if slots == 1:  # each load waits for the previous compute: no overlap (the A/B baseline)
        for s in steps:
            compute(s, *loads(s))
        return True
    # software pipeline: step s+1's loads are issued before step s's compute, into the other slot
    nxt = loads(steps[0])
    for i, s in enumerate(steps):
        cur = nxt
        if i + 1 < len(steps):
            nxt = loads(steps[i + 1])
        compute(s, *cur)
    return True

