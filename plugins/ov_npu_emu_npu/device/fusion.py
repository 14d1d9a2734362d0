"""Host fusion of ping-pong-tiled MatMuls: a tiled MatMul's tasks run as one host product.

``compiler/tiling.py`` lowers ``o[M, N] = a[M, K] @ w`` as DMA loads of activation and weight
chunks into CMX slots, one DPU task per tile (K chunks after the first add with ``matmul_acc``)
and a DMA of each finished tile back to DDR.  That is the device's program, and the cost model
times it tile by tile; on the host, though, every tile is one more dispatch and every weight chunk
one more copy (for a decode step, most of its host time; docs/performance.md, "Decode kernels
against the bandwidth floor").  When the decoded
descriptors provably form one MatMul, the host plan runs it as one product per K chunk and
column block (:data:`CALL_WEIGHT_ELEMS`), from DDR straight into the output, at the schedule
position of the group's last task.  Nothing in the blob, the descriptors, the timeline or the
profile's device times changes.

Every obligation is checked from the descriptors as fetched (never from the compiler), and
anything unproven keeps the tiles:

1. **Structure.** Each DPU ``matmul``/``matmul_acc`` on CMX operands reads slots that a DMA filled
   from outside CMX (the latest write of exactly that range), accumulates into one CMX tile that a
   DMA then stores outside CMX; the tiles of one node (the blob's task metadata groups them) are
   ``a[r0:r0+r, k0:k0+kc] @ w[...]`` of one row-major ``a [M, K]``, ``w [K, N]`` (``[N, K]``
   transposed) and ``o [M, N]``, every output element stored once, every tile cut into the same K
   chunks in order.
2. **Hazards.** No other task between the group's first and last task writes ``a`` or ``w``,
   touches ``o`` or the group's CMX slots, and groups whose spans overlap keep disjoint operands;
   every CMX read of the remaining tasks is preceded, in the same inference, by a write of theirs
   (the slots the fused tasks no longer fill are read by no one else).
3. **Bits.** BLAS may pick another kernel for another problem size, so the fused product is used
   only after a probe on random data (same shapes, strides and host alignments) gives the tile
   products' bits, once per shape (as :mod:`.windowed` and attention's window do).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import numpy as np

from ov_npu_emu_npu.blob.format import TaskKind
from ov_npu_emu_npu.blob.kernel_params import MatMulDqParams, MatMulParams, unpack_params
from ov_npu_emu_npu.device.engines import DecodedTask, Schedule
from ov_npu_emu_npu.device.kernels import make_kernel
from ov_npu_emu_npu.device.kernels.dequant import STORED_FORMAT_MAX_ROWS
from ov_npu_emu_npu.device.kernels.hostalign import aligned as _aligned
from ov_npu_emu_npu.device.kernels.hostalign import mod as _mod

__all__ = ["CALL_WEIGHT_ELEMS", "FUSED_KERNELS", "plan_schedule"]

logger = logging.getLogger(__name__)

FUSED_KERNELS = ("matmul", "matmul_acc")
#: weight elements per fused BLAS call.  OpenBLAS hands a large enough GEMV to a second thread;
#: on a loaded host the caller then waits for a descheduled thread, many times the product's own
#: time (docs/performance.md, "Decode kernels against the bandwidth floor").  Smaller calls stay on the
#: calling thread, as the tiles did.
CALL_WEIGHT_ELEMS = 1 << 18
_PROBES: dict[tuple[Any, ...], bool] = {}
_PROBE_LOCK = threading.Lock()

Span = tuple[int, int]
AddressArray = Callable[[int, np.dtype, tuple[int, ...]], np.ndarray]


@dataclasses.dataclass
class _Step:
    """One DPU task of a tile chain with the loads that filled its operands."""

    dpu: int  # schedule index
    a_load: int
    w_load: int


@dataclasses.dataclass
class _Tile:
    node: str
    steps: list[_Step]
    end: int  # end address of the CMX accumulator
    store: int = -1


@dataclasses.dataclass
class _Group:
    """A MatMul proven from its tiles: operand addresses, shape, K chunks and its tasks."""

    a: tuple[int, np.dtype]
    w: tuple[int, np.dtype]
    o: tuple[int, np.dtype]
    m: int
    k: int
    n: int
    tb: bool
    chunks: tuple[tuple[int, int], ...]
    params: tuple[np.ndarray, ...]  # per chunk: the parameter block of its kernel
    tiles: list[tuple[int, int, int, int, list[_Step]]]  # (r0, n0, r, nc, steps)
    members: frozenset[int]

    @property
    def first(self) -> int:
        return min(self.members)

    @property
    def last(self) -> int:
        return max(self.members)

    def ddr(self) -> tuple[Span, Span, Span]:
        (a, adt), (w, wdt), (o, odt) = self.a, self.w, self.o
        return ((a, a + self.m * self.k * adt.itemsize), (w, w + self.k * self.n * wdt.itemsize),
                (o, o + self.m * self.n * odt.itemsize))


def _dma_spans(t: DecodedTask) -> tuple[Span, Span]:
    src, dst, d0, d1, row, ss0, ss1, ds0, ds1 = t.dma  # type: ignore[misc]
    return (src, src + (d0 - 1) * ss0 + (d1 - 1) * ss1 + row), (dst, dst + (d0 - 1) * ds0 + (d1 - 1) * ds1 + row)


def _spans(t: DecodedTask) -> tuple[list[Span], list[Span]]:
    """(read, written) address ranges of a task (outputs count as read too: matmul_acc reads its)."""
    if t.dma is not None:
        r, w = _dma_spans(t)
        return [r], [w]
    ops = [(a, a + v.nbytes) for a, v in zip(t.addrs, t.views, strict=False)]
    return ops, ops[t.n_in:]


def _overlaps(x: Span, spans: Sequence[Span]) -> bool:
    return any(x[0] < hi and lo < x[1] for lo, hi in spans)


def _contiguous_dst(t: DecodedTask) -> bool:
    _src, _dst, d0, d1, row, _ss0, _ss1, _ds0, ds1 = t.dma  # type: ignore[misc]
    return d0 == 1 and (d1 == 1 or ds1 == row)


def _rows_of(t: DecodedTask, side: str) -> tuple[int, int, int]:
    """(rows, row bytes, pitch) of a DMA's ``side`` ("src"/"dst"); pitch 0 for one row."""
    _src, _dst, d0, d1, row, _ss0, ss1, _ds0, ds1 = t.dma  # type: ignore[misc]
    if d0 != 1:
        return 0, 0, -1
    return d1, row, (ss1 if side == "src" else ds1) if d1 > 1 else 0


def _find_tiles(tasks: Sequence[DecodedTask], cmx: Span, node_of: Mapping[int, str],
                skip: set[int]) -> list[_Tile]:
    """Walk the schedule: tile chains whose loads, products and store follow the tiling pattern."""
    walk = _TileWalk(cmx, node_of, skip)
    for i, t in enumerate(tasks):
        if t.dma is not None:
            walk.dma(i, t)
        else:
            walk.compute(i, t)
    return walk.done


class _TileWalk:
    """The state of :func:`_find_tiles`' walk: filled CMX slots, open tile chains, finished tiles."""

    def __init__(self, cmx: Span, node_of: Mapping[int, str], skip: set[int]) -> None:
        self.cmx, self.node_of, self.skip = cmx, node_of, skip
        self.slots: dict[int, tuple[int, int]] = {}  # CMX start -> (end, index of the DMA that filled it)
        self.chains: dict[int, _Tile] = {}  # accumulator CMX start -> open chain
        self.done: list[_Tile] = []

    def in_cmx(self, a: int) -> bool:
        return self.cmx[0] <= a < self.cmx[1]

    def clobber(self, span: Span, keep_chain: int | None = None) -> None:
        slots, chains = self.slots, self.chains
        for s in [s for s, (e, _) in slots.items() if s < span[1] and span[0] < e]:
            del slots[s]
        for s in [s for s, c in chains.items() if s != keep_chain and s < span[1] and span[0] < c.end]:
            del chains[s]

    def dma(self, i: int, t: DecodedTask) -> None:
        """A DMA: a store closes the chain of the accumulator it reads; a load fills a slot."""
        src, dst = t.dma[0], t.dma[1]  # type: ignore[index]
        rd, wr = _dma_spans(t)
        if self.in_cmx(src) and not self.in_cmx(dst):
            ch = self.chains.pop(src, None)
            rows, row, pitch = _rows_of(t, "src")
            if ch is not None and t.tid not in self.skip and (rows == 1 or pitch == row):
                ch.store = i
                self.done.append(ch)
        if self.in_cmx(dst) or _overlaps(wr, [self.cmx]):
            self.clobber(wr)
            if not self.in_cmx(src) and _contiguous_dst(t) and t.tid not in self.skip:
                self.slots[dst] = (wr[1], i)

    def compute(self, i: int, t: DecodedTask) -> None:
        """A compute task: a MatMul on loaded slots opens or extends a chain; others clobber."""
        reads, writes = _spans(t)
        fused = (t.kind is TaskKind.DPU and t.kernel in FUSED_KERNELS and len(t.views) == 3 and t.n_in == 2
                 and all(self.in_cmx(a) for a in t.addrs) and t.tid not in self.skip and t.tid in self.node_of)
        if not fused:
            for s in writes:
                if _overlaps(s, [self.cmx]):
                    self.clobber(s)
            return
        chains = self.chains
        a_addr, w_addr, o_addr = t.addrs
        la, lw = self.slots.get(a_addr), self.slots.get(w_addr)
        ok = (la is not None and lw is not None and la[0] == a_addr + t.views[0].nbytes
              and lw[0] == w_addr + t.views[1].nbytes and t.views[2].ndim == 2)
        for s in writes:
            self.clobber(s, keep_chain=o_addr)
        if not ok:
            chains.pop(o_addr, None)
            return
        step = _Step(i, la[1], lw[1])  # type: ignore[index]
        if t.kernel == "matmul":
            chains[o_addr] = _Tile(self.node_of[t.tid], [step], o_addr + t.views[2].nbytes)
        elif o_addr in chains and chains[o_addr].node == self.node_of[t.tid]:
            chains[o_addr].steps.append(step)
        else:
            chains.pop(o_addr, None)


@functools.lru_cache(maxsize=64)
def _flags_of(kernel: str, block: bytes) -> tuple[bool, bool]:
    p = cast("MatMulParams | MatMulDqParams", unpack_params(kernel, np.frombuffer(block, np.float64)))
    return bool(p.transpose_a), bool(p.transpose_b)


def _flags(kernel: str, params: np.ndarray | None) -> tuple[bool, bool]:
    """(transpose_a, transpose_b) of a MatMul task's parameter block (a few distinct blocks)."""
    return _flags_of(kernel, np.asarray(params, np.float64).tobytes())


def _prove(tasks: Sequence[DecodedTask], tiles: list[_Tile]) -> _Group | None:
    """The one MatMul the tiles of a node compute, or None when they do not fit one."""
    first = tasks[tiles[0].steps[0].dpu]
    adt, wdt, odt = (v.dtype for v in first.views)
    oi = odt.itemsize
    ta, tb = _flags("matmul", first.params)
    if ta:
        return None
    ext = _extent(tasks, tiles, wdt.itemsize, oi)
    if ext is None:
        return None
    a_base, w_base, o_base, m, k, n = ext
    covered = np.zeros((m, n), np.bool_)
    chunks: tuple[tuple[int, int], ...] | None = None
    params: list[np.ndarray] = []
    out: list[tuple[int, int, int, int, list[_Step]]] = []
    members: set[int] = set()
    for tile in tiles:
        steps = _prove_steps(tasks, tile, (adt, wdt, odt), tb, (a_base, w_base), k, n, params, members)
        if steps is None:
            return None
        last, r, nc, r0, n0, kc_list = steps
        st = tasks[tile.store]
        if sum(c for _, c in kc_list) != k or (chunks is not None and tuple(kc_list) != chunks):
            return None
        chunks = tuple(kc_list)
        if st.dma[0] != last.addrs[2] or not _rows_ok(st, "dst", r, nc * oi, n * oi):  # type: ignore[index]
            return None
        if _coords(st.dma[1] - o_base, oi, n) != (r0, n0) or r0 + r > m or n0 + nc > n:  # type: ignore[index]
            return None
        if covered[r0:r0 + r, n0:n0 + nc].any():
            return None
        covered[r0:r0 + r, n0:n0 + nc] = True
        members.add(tile.store)
        out.append((r0, n0, r, nc, tile.steps))
    if chunks is None or not covered.all():
        return None
    return _Group((a_base, adt), (w_base, wdt), (o_base, odt), m, k, n, tb, chunks, tuple(params), out,
                  frozenset(members))


def _extent(tasks: Sequence[DecodedTask], tiles: list[_Tile], wi: int, oi: int
            ) -> tuple[int, int, int, int, int, int] | None:
    """(a_base, w_base, o_base, m, k, n) of the MatMul the tiles' loads and stores span, or None."""
    a_base = min(tasks[s.a_load].dma[0] for t in tiles for s in t.steps)  # type: ignore[index]
    w_base = min(tasks[s.w_load].dma[0] for t in tiles for s in t.steps)  # type: ignore[index]
    o_base = min(tasks[t.store].dma[1] for t in tiles)  # type: ignore[index]
    head = next((t for t in tiles if tasks[t.store].dma[1] == o_base), None)  # type: ignore[index]
    if head is None:
        return None
    k = sum(tasks[s.dpu].views[0].shape[1] for s in head.steps)
    w_end = max(_dma_spans(tasks[s.w_load])[0][1] for t in tiles for s in t.steps)
    o_end = max(_dma_spans(tasks[t.store])[1][1] for t in tiles)
    if k <= 0 or (w_end - w_base) % (k * wi):
        return None
    n = (w_end - w_base) // (k * wi)
    if n <= 0 or (o_end - o_base) % (n * oi):
        return None
    m = (o_end - o_base) // (n * oi)
    if m <= 0 or m * n > 1 << 28:
        return None
    return a_base, w_base, o_base, m, k, n


def _coords(off: int, size: int, cols: int) -> tuple[int, int] | None:
    if off < 0 or off % size:
        return None
    e = off // size
    return divmod(e, cols)


def _rows_ok(t: DecodedTask, side: str, rows: int, row: int, pitch: int) -> bool:
    r, rb, p = _rows_of(t, side)
    if r == rows and rb == row and (rows == 1 or p == pitch):
        return True
    return r == 1 and rb == rows * row and (rows == 1 or row == pitch)  # whole rows in one copy


def _prove_steps(tasks: Sequence[DecodedTask], tile: _Tile, dts: tuple[np.dtype, np.dtype, np.dtype], tb: bool,
                 bases: tuple[int, int], k: int, n: int, params: list[np.ndarray], members: set[int]
                 ) -> tuple[DecodedTask, int, int, int, int, list[tuple[int, int]]] | None:
    """(last DPU task, rows, columns, first row, first column, K chunks) of one tile whose steps
    multiply consecutive K chunks of one block of the MatMul, or None. Adds the parameter block
    of each new K chunk to ``params`` and the steps' tasks to ``members``."""
    adt, wdt, odt = dts
    ai, wi = adt.itemsize, wdt.itemsize
    a_base, w_base = bases
    dpus = [tasks[s.dpu] for s in tile.steps]
    r, nc = dpus[0].views[2].shape
    kc_list: list[tuple[int, int]] = []
    r0 = n0 = -1
    for j, (s, d) in enumerate(zip(tile.steps, dpus, strict=True)):
        if d.views[0].dtype != adt or d.views[1].dtype != wdt or d.views[2].dtype != odt:
            return None
        if d.kernel != ("matmul" if j == 0 else "matmul_acc"):
            return None
        if _flags(d.kernel, d.params) != (False, tb) or d.views[2].shape != (r, nc):
            return None
        rr, kc = d.views[0].shape
        if rr != r or d.views[1].shape != ((nc, kc) if tb else (kc, nc)):
            return None
        la, lw = tasks[s.a_load], tasks[s.w_load]
        ca = _coords(la.dma[0] - a_base, ai, k)  # type: ignore[index]
        cw = _coords(lw.dma[0] - w_base, wi, k if tb else n)  # type: ignore[index]
        if ca is None or cw is None:
            return None
        rk0, k0 = ca
        wn0, wk0 = cw if tb else (cw[1], cw[0])
        if j == 0:
            r0, n0 = rk0, wn0
        if (rk0, wn0, wk0) != (r0, n0, k0) or k0 != sum(c for _, c in kc_list) or k0 + kc > k:
            return None
        if not _rows_ok(la, "src", r, kc * ai, k * ai):
            return None
        if tb and not _rows_ok(lw, "src", nc, kc * wi, k * wi):
            return None
        if not tb and not _rows_ok(lw, "src", kc, nc * wi, n * wi):
            return None
        kc_list.append((k0, kc))
        if len(params) < len(kc_list):
            params.append(np.asarray(d.params))
        members.update((s.dpu, s.a_load, s.w_load))
    return dpus[-1], r, nc, r0, n0, kc_list


def _block_widths(g: _Group) -> list[int]:
    """Column-block widths to try, widest first. A decode-shaped f32 product (the matmul kernel's
    gemv path, whose sums do not depend on the column split) in one block: the kernel splits it
    over the cores itself when it is large enough. Else as many tiles as CALL_WEIGHT_ELEMS allows, then one tile (the
    tiles' own column split, when the wider product's bits differ: measured for stories260K's
    172-wide MLP GEMVs cut into 86-wide tiles under BLAS)."""
    nt = g.tiles[0][3]
    per_call = max(1, CALL_WEIGHT_ELEMS // max(kc for _, kc in g.chunks))
    wide = max(nt, per_call // nt * nt)  # block edges on tile edges
    widths = [wide] if wide == nt else [wide, nt]
    f32 = all(dt == np.float32 for dt in (g.a[1], g.w[1], g.o[1]))
    if g.tb and f32 and g.m <= STORED_FORMAT_MAX_ROWS and g.n > wide:
        widths.insert(0, g.n)
    return widths


def _bind(g: _Group, act: np.ndarray, wgt: np.ndarray, out: np.ndarray, nb: int) -> Callable[[], None]:
    """The same kernels the tiles ran, over column blocks ``nb`` wide: per block, one call per K
    chunk in the tiles' order."""
    parts = []
    for n0 in range(0, g.n, nb):
        cols = slice(n0, min(g.n, n0 + nb))
        for c, ((k0, kc), p) in enumerate(zip(g.chunks, g.params, strict=True)):
            wc = wgt[cols, k0:k0 + kc] if g.tb else wgt[k0:k0 + kc, cols]
            parts.append(make_kernel("matmul" if c == 0 else "matmul_acc", [act[:, k0:k0 + kc], wc],
                                     [out[:, cols]], p))
    if len(parts) == 1:
        return parts[0]

    def run() -> None:
        for part in parts:
            part()

    return run


def _bind_reading_first(g: _Group, act: np.ndarray, wgt: np.ndarray, out: np.ndarray,
                        nb: int) -> Callable[[], None]:
    """:func:`_bind`, but when the memory plan placed ``o`` over ``a`` (the tiles loaded all of
    ``a`` before their first store) the activation is first copied aside, as the loads did:
    column blocks would otherwise read what earlier blocks wrote."""
    (a_lo, a_hi), _, o_span = g.ddr()
    if not _overlaps(o_span, [(a_lo, a_hi)]):
        return _bind(g, act, wgt, out, nb)
    staged = _aligned(act.shape, act.dtype, _mod(act))  # same host alignment as the probed one
    product = _bind(g, staged, wgt, out, nb)

    def run() -> None:
        np.copyto(staged, act)
        product()

    return run


def _probe(g: _Group, tasks: Sequence[DecodedTask], act: np.ndarray, wgt: np.ndarray, out: np.ndarray,
           nb: int) -> bool:
    """Whether the fused product gives the tiles' bits, on random data laid out as the real
    operands are (shapes, strides and host alignment of every DDR array and CMX slot)."""
    tile_key = tuple((r0, n0, r, nc, tuple(tuple(_mod(v) for v in tasks[s.dpu].views) for s in steps))
                     for r0, n0, r, nc, steps in g.tiles)
    key = (g.m, g.k, g.n, g.tb, str(act.dtype), str(wgt.dtype), str(out.dtype), g.chunks,
           tuple(p.tobytes() for p in g.params), _mod(act), _mod(wgt), _mod(out), tile_key, nb)
    with _PROBE_LOCK:
        hit = _PROBES.get(key)
        if hit is not None:
            return hit
        rng = np.random.default_rng(0)
        a = _aligned(act.shape, act.dtype, _mod(act))
        w = _aligned(wgt.shape, wgt.dtype, _mod(wgt))
        a[...] = rng.standard_normal(a.shape).astype(a.dtype)
        w[...] = rng.standard_normal(w.shape).astype(w.dtype)
        fused = _aligned(out.shape, out.dtype, _mod(out))
        tiled = np.zeros(out.shape, out.dtype)
        ok = True
        try:
            _bind(g, a, w, fused, nb)()
            for r0, n0, r, nc, steps in g.tiles:
                acc = None
                for c, ((k0, kc), s) in enumerate(zip(g.chunks, steps, strict=True)):
                    av, wv, ov = tasks[s.dpu].views
                    at = _aligned(av.shape, av.dtype, _mod(av))
                    wt = _aligned(wv.shape, wv.dtype, _mod(wv))
                    at[...] = a[r0:r0 + r, k0:k0 + kc]
                    wt[...] = w[n0:n0 + nc, k0:k0 + kc] if g.tb else w[k0:k0 + kc, n0:n0 + nc]
                    if acc is None:
                        acc = _aligned(ov.shape, ov.dtype, _mod(ov))
                    make_kernel("matmul" if c == 0 else "matmul_acc", [at, wt], [acc], g.params[c])()
                tiled[r0:r0 + r, n0:n0 + nc] = acc
            ok = bool(np.array_equal(fused, tiled, equal_nan=True))
        except Exception as e:  # noqa: BLE001 - a kernel that rejects the whole operands keeps the tiles
            logger.debug("fused MatMul probe failed: %s", e)
            ok = False
        _PROBES[key] = ok
        if not ok:
            logger.debug("MatMul [%d,%d]x[%d] in %d-column blocks differs from the tiles", g.m, g.k, g.n, nb)
        return ok


def _span_clear(g: _Group, tasks: Sequence[DecodedTask], cmx: Span, owner: Mapping[int, _Group]) -> bool:
    """Moving the group's work to its last task changes nothing another task sees.

    Checked on the host order with every group in ``owner`` (schedule index -> group) fused:
    ``o`` shares no byte with ``w``; between the group's first load of
    ``a`` (``w``) and its last task nothing writes ``a`` (``w``); between its first store and
    last task nothing reads or writes ``o``; between its first and last task nothing touches its
    CMX slots.  Another fused group counts at its last
    task, reading its ``a``/``w`` and writing its ``o``.
    """
    a, w, o = g.ddr()
    if _overlaps(o, [w]):
        return False
    # the CMX ranges the group's loads fill, its products read and its stores drain: the DPU operands
    slots = sorted({(a, a + v.nbytes) for *_, steps in g.tiles for st in steps
                    for a, v in zip(tasks[st.dpu].addrs, tasks[st.dpu].views, strict=True)})
    loads_a = min(st.a_load for *_, steps in g.tiles for st in steps)
    loads_w = min(st.w_load for *_, steps in g.tiles for st in steps)
    stores = min(i for i in g.members if tasks[i].dma is not None and _overlaps(_dma_spans(tasks[i])[1], [o]))
    for j in range(g.first + 1, g.last):
        h = owner.get(j)
        if h is g:
            continue
        if h is None:
            reads, writes = _spans(tasks[j])
        elif j == h.last:
            ha, hw, ho = h.ddr()
            reads, writes = [ha, hw], [ho]
        else:
            continue  # a task another fused group no longer runs
        if j > loads_a and any(_overlaps(s, [a]) for s in writes):
            return False
        if j > loads_w and any(_overlaps(s, [w]) for s in writes):
            return False
        if j > stores and any(_overlaps(s, [o]) for s in reads + writes):
            return False
        if any(_overlaps(s, slots) for s in reads + writes):
            return False
    return True


def _cmx_reads_written(tasks: Sequence[DecodedTask], cmx: Span, gone: set[int]) -> bool:
    """Every CMX byte a remaining task reads was written earlier in the inference by a remaining task."""
    lo, hi = cmx
    written = np.zeros(hi - lo, np.bool_)

    def view(t: DecodedTask, side: int) -> np.ndarray | None:
        if t.dma is not None:
            src, dst, d0, d1, row, ss0, ss1, ds0, ds1 = t.dma
            addr, s0, s1 = (src, ss0, ss1) if side == 0 else (dst, ds0, ds1)
            span = (d0 - 1) * s0 + (d1 - 1) * s1 + row
            if not (lo <= addr and addr + span <= hi):
                return None if addr >= hi or addr + span <= lo else written[0:0]
            return np.lib.stride_tricks.as_strided(written[addr - lo:], (d0, d1, row), (s0, s1, 1))
        return None

    for i, t in enumerate(tasks):
        if i in gone:
            continue
        if t.dma is not None:
            r, w = view(t, 0), view(t, 1)
            if r is not None and (r.size == 0 or not r.all()):
                return False
            if w is not None:
                if w.size == 0:
                    return False  # straddles the CMX edge: not a pattern to reason about
                w[...] = True
        elif not _compute_reads_written(t, cmx, written):
            return False
    return True


def _compute_reads_written(t: DecodedTask, cmx: Span, written: np.ndarray) -> bool:
    """A compute task's part of :func:`_cmx_reads_written`: its CMX reads were written (False if
    not), and its CMX writes are marked in ``written``."""
    lo, hi = cmx
    reads, writes = _spans(t)
    for s in reads[:t.n_in]:
        if _overlaps(s, [cmx]) and not (lo <= s[0] and s[1] <= hi and written[s[0] - lo:s[1] - lo].all()):
            return False
    for s in writes:
        if _overlaps(s, [cmx]):
            if not (lo <= s[0] and s[1] <= hi):
                return False
            if t.kernel == "matmul_acc" and not written[s[0] - lo:s[1] - lo].all():
                return False  # accumulates into what it reads
            written[s[0] - lo:s[1] - lo] = True
    return True


def plan_schedule(sched: Schedule, array: AddressArray, cmx: Span, node_of: Mapping[int, str],
                  skip: set[int]) -> None:
    """Give ``sched`` its host plan: every provable tiled MatMul as one product (see the module doc).

    :param array: the address space's ``array(addr, dtype, shape)`` (views of device memory)
    :param cmx: the CMX section's device address range
    :param node_of: task id -> the blob metadata's node name (which tiles belong together)
    :param skip: task ids never fused (e.g. bound to a token-row window)
    """
    tasks = sched.tasks
    by_node: dict[str, list[_Tile]] = {}
    if cmx[1] > cmx[0]:
        for tile in _find_tiles(tasks, cmx, node_of, skip):
            by_node.setdefault(tile.node, []).append(tile)
    bound: dict[int, tuple[_Group, Callable[[], None]]] = {}
    for tiles in by_node.values():
        g = _prove(tasks, tiles)
        if g is None:
            continue
        try:
            (a, adt), (w, wdt), (o, odt) = g.a, g.w, g.o
            act = array(a, adt, (g.m, g.k))
            wgt = array(w, wdt, (g.n, g.k) if g.tb else (g.k, g.n))
            out = array(o, odt, (g.m, g.n))
        except Exception as e:  # noqa: BLE001 - an unmapped operand: the tiles raise it as they would
            logger.debug("fused MatMul operands not mapped: %s", e)
            continue
        nb = next((nb for nb in _block_widths(g) if _probe(g, tasks, act, wgt, out, nb)), 0)
        if nb:
            bound[id(g)] = (g, _bind_reading_first(g, act, wgt, out, nb))
    # fused groups change what the others see: drop failing ones until the rest all pass
    groups = list(bound.values())
    while True:
        owner = {i: g for g, _ in groups for i in g.members}
        kept = [(g, run) for g, run in groups if _span_clear(g, tasks, cmx, owner)]
        if len(kept) == len(groups):
            break
        groups = kept
    gone = {i for g, _ in groups for i in g.members}
    if groups and not _cmx_reads_written(tasks, cmx, gone):
        logger.debug("host plan: a CMX read depends on a fused tile's slot; nothing fused")
        groups, gone = [], set()
    anchor = {g.last: (g, run) for g, run in groups}
    runs: list[Callable[[], None]] = []
    plan_tasks: list[DecodedTask] = []
    members: list[tuple[DecodedTask, ...]] = []
    for i, t in enumerate(tasks):
        if i in anchor:
            g, run = anchor[i]
            runs.append(run)
            plan_tasks.append(t)
            members.append(tuple(tasks[j] for j in sorted(g.members) if j != i))
        elif i not in gone:
            runs.append(sched.runs[i])
            plan_tasks.append(t)
            members.append(())
    sched.set_plan(runs, plan_tasks, members, len(groups))
    logger.debug("host plan: %d tiled MatMuls fused, %d of %d tasks dispatched", len(groups), len(runs), len(tasks))

