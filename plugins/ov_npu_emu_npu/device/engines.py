"""Engines read task descriptors from device memory; the management core runs them by barriers."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import operator
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from ov_npu_emu.errors import BarrierDeadlockError, ExecutionError, HostMemoryError, NpuEmuError
from ov_npu_emu_npu.arch import DTYPES
from ov_npu_emu_npu.blob.format import (
    DMA_DESC,
    KERNEL_ENTRY,
    OPERAND,
    TASK_HEAD,
    Operand,
    TaskKind,
)
from ov_npu_emu_npu.blob.kernel_params import MatMulDqParams, MatMulParams
from ov_npu_emu_npu.device.kernels import DQ_TILE_BYTES, RowWindow, dequantize, make_kernel
from ov_npu_emu_npu.device.kernels.dequant import stored_format_matmul, with_copies
from ov_npu_emu_npu.device.windowed import LazyRunner, bind_dma_window, bind_task_window

__all__ = ["DecodedTask", "ManagementCore", "Schedule", "decode_task"]

logger = logging.getLogger(__name__)


class AddressSpaceLike(Protocol):
    """What engines need from the driver's address space (kept abstract: device does not import driver)."""

    def read(self, addr: int, nbytes: int) -> bytes: ...

    def bytes_at(self, addr: int, nbytes: int) -> np.ndarray: ...

    def array(self, addr: int, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray: ...


class WeightsCacheLike(Protocol):
    """The driver's cache of decompressed weights (see driver.memory.WeightsCache)."""

    def get(self, key: tuple, make: Callable[[], np.ndarray], nbytes: int | None = None) -> np.ndarray | None:
        """The cached array for ``key`` (``make`` fills it), or None when ``nbytes`` more would
        pass the cache's budget."""


@dataclasses.dataclass
class DecodedTask:
    """A descriptor as an engine fetched it, bound to views of device memory."""

    tid: int  # global task id
    kind: TaskKind  # engine
    lane: int  # DMA channel, DPU or SHAVE lane
    section: str  # descriptor section
    offset: int  # descriptor offset in its section
    waits: tuple[int, ...]  # barriers to wait for
    posts: tuple[int, ...]  # barriers to post when done
    cycles: int  # cost-model estimate from the descriptor
    kernel: str  # kernel name ("dma" for DMA)
    run: Callable[[], None]  # executes the task on its views
    addrs: tuple[int, ...] = ()  # operand addresses read from the descriptor (for inspect/tests)
    #: a DMA's geometry as fetched: (src, dst, d0, d1, row, src strides 0/1, dst strides 0/1)
    dma: tuple[int, ...] | None = None
    views: tuple[np.ndarray, ...] = ()  # a DPU/SHAVE task's operand views, inputs first
    n_in: int = 0  # how many of ``views`` are inputs
    params: np.ndarray | None = None  # the task's f64 parameter block


def _strided(aspace: AddressSpaceLike, addr: int, d0: int, d1: int, row: int, s0: int, s1: int) -> np.ndarray:
    span = (d0 - 1) * s0 + (d1 - 1) * s1 + row
    base = aspace.bytes_at(addr, span)
    return np.lib.stride_tricks.as_strided(base, shape=(d0, d1, row), strides=(s0, s1, 1))


def _bind_cached_dq(views: list[np.ndarray], addrs: list[int], n_in: int, params: np.ndarray,
                    wcache: WeightsCacheLike) -> Callable[[], None]:
    """matmul_dq with the driver's weights cache: decompress once per (addresses, shapes, format).
    Decode-shaped tasks read the weight as stored and take no cache entry."""
    p = MatMulDqParams.unpack(params, "matmul_dq")
    fast = stored_format_matmul(views[:n_in], views[n_in:], p)
    if fast is not None:
        return fast
    fmt, has_zp, mul_f16, n, k = p.weight_format, p.has_zero_point, p.f16_rounding, p.n, p.k
    q = views[1]
    scale = views[2] if n_in > 2 else None
    zp = views[3] if has_zp and n_in > 3 else None
    # keyed by where the descriptor says the operands are: a re-pointed (or corrupted) scale or
    # weight relocation is a different entry, never a stale hit
    key = ("matmul_dq", tuple(addrs[1:n_in]), tuple(v.shape for v in views[1:n_in]),
           tuple(str(v.dtype) for v in views[1:n_in]), fmt, has_zp, mul_f16, n, k)
    def fill() -> np.ndarray:
        # tile by tile into one buffer: whole-matrix temporaries would be 2-3x the weight in f32
        out = np.empty((n, k), np.float32)
        step = max(1, DQ_TILE_BYTES // (4 * k))
        for r0 in range(0, n, step):
            r1 = min(n, r0 + step)
            out[r0:r1] = dequantize(fmt, q[r0:r1], None if scale is None else scale[r0:r1],
                                    None if zp is None else zp[r0:r1], mul_f16, k)
        return out

    if p.act_block and p.transpose_a:  # dynamic quantization of a transposed activation: the tile path
        return make_kernel("matmul_dq", views[:n_in], views[n_in:], p)
    w = wcache.get(key, fill, 4 * n * k)
    if w is None:  # over the cache's budget: decompress tile by tile on every run
        return make_kernel("matmul_dq", views[:n_in], views[n_in:], p)
    if w.shape != (n, k):
        raise ExecutionError(f"weights cache entry has shape {w.shape}, expected {(n, k)}")
    mm = MatMulParams(p.transpose_a, p.transpose_b)
    if not p.act_block:
        return make_kernel("matmul", [views[0], w], views[n_in:], mm)
    # dynamic quantization: the product of the activation's quantized values (kernels/act_quant.py),
    # read from a copy the activation is widened into and quantized in before each run
    xq = np.empty(views[0].shape, np.float32)
    return with_copies(make_kernel("matmul", [xq, w], views[n_in:], mm), views[0], views[n_in],
                       xq.reshape(-1, k), None, p.act_block)


def decode_task(aspace: AddressSpaceLike, section: str, section_addr: int, offset: int, kind: TaskKind,
                lists: np.ndarray, dma_channels: int, wcache: WeightsCacheLike | None = None,
                window: RowWindow | None = None, rows: Mapping[str, Any] | None = None) -> DecodedTask:
    """Fetch one descriptor from device memory and bind it (addresses as relocated there).

    :param wcache: the driver's decompressed-weights cache; without it matmul_dq decompresses
        its weight tile by tile on every run.
    :param window: the request's padded-rows hint (NPU_EMU_SKIP_PADDED_ROWS), read by attention
        and, with ``rows``, by the task itself
    :param rows: the task's token-row metadata from the blob (device/windowed.py): a row-wise
        task then runs on the window's rows only
    """
    addr = section_addr + offset
    if kind is TaskKind.DMA:
        (tid, _k, chan, _f, _dt, n_wait, n_post, wait_off, post_off, cycles, src, dst, d0, d1, row, _p,
         ss0, ss1, ds0, ds1) = DMA_DESC.unpack(aspace.read(addr, DMA_DESC.size))
        if d0 == 1 and d1 == 1:
            s, d = aspace.bytes_at(src, row), aspace.bytes_at(dst, row)
        else:
            # rows written over each other (e.g. a corrupt 2**31 count with stride 0) stay in
            # bounds but would copy for minutes: a real descriptor's destination never overlaps
            if d0 * d1 * row > (d0 - 1) * ds0 + (d1 - 1) * ds1 + row:
                raise ExecutionError(f"DMA task {tid}: {d0}x{d1} rows of {row} bytes overlap in the destination "
                                     f"(strides {ds0}, {ds1}); the descriptor is corrupt", task_index=tid)
            s = _strided(aspace, src, d0, d1, row, ss0, ss1)
            d = _strided(aspace, dst, d0, d1, row, ds0, ds1)
        run = _copy(d, s)
        if window is not None and rows is not None and d0 == 1 and d1 == 1:
            run = bind_dma_window(rows, window, d, s, run)
        return DecodedTask(tid, kind, chan % max(dma_channels, 1), section, offset,
                           tuple(int(x) for x in lists[wait_off:wait_off + n_wait]),
                           tuple(int(x) for x in lists[post_off:post_off + n_post]), cycles, "dma", run, (src, dst),
                           (src, dst, d0, d1, row, ss0, ss1, ds0, ds1))
    raw = aspace.read(addr, TASK_HEAD.size)
    (tid, _k, n_in, n_out, _f, n_params, n_wait, n_post, _p, wait_off, post_off, kaddr, paddr,
     cycles) = TASK_HEAD.unpack(raw)
    name = aspace.read(kaddr, KERNEL_ENTRY.size)[:24].rstrip(b"\0").decode("ascii", "replace")
    params = np.frombuffer(aspace.read(paddr, 8 * n_params), np.float64) if n_params else np.zeros(0)
    ops_raw = aspace.read(addr + TASK_HEAD.size, (n_in + n_out) * OPERAND.size)
    views = []
    addrs = []
    for i in range(n_in + n_out):
        op = Operand.unpack(ops_raw, i * OPERAND.size)
        if not 0 < op.dtype < len(DTYPES):
            raise ExecutionError(f"task {tid}: bad element-type code {op.dtype}", task_index=tid)
        views.append(aspace.array(op.addr, DTYPES[op.dtype], op.shape))
        addrs.append(op.addr)
    def bind(ins: list[np.ndarray], outs: list[np.ndarray]) -> Callable[[], None]:
        if name == "matmul_dq" and wcache is not None:
            return _bind_cached_dq([*ins, *outs], addrs, n_in, params, wcache)
        return make_kernel(name, ins, outs, params, window)

    def bind_full() -> Callable[[], None]:
        with _binding(tid, name):
            return bind(views[:n_in], views[n_in:])

    with _binding(tid, name):
        if window is not None and rows is not None:
            # bound when it first runs: row tiles before every window never are (so a corrupt
            # descriptor there is reported by the first inference that runs the tile)
            run = bind_task_window(name, rows, window, views[:n_in], views[n_in:], params, LazyRunner(bind_full),
                                   bind)
        else:
            run = bind_full()
    lane = dma_channels + (0 if kind is TaskKind.DPU else 1)
    return DecodedTask(tid, kind, lane, section, offset,
                       tuple(int(x) for x in lists[wait_off:wait_off + n_wait]),
                       tuple(int(x) for x in lists[post_off:post_off + n_post]), cycles, name, run, tuple(addrs),
                       None, tuple(views), n_in, params)


@contextlib.contextmanager
def _binding(tid: int, name: str) -> Iterator[None]:
    """Binding task ``tid``'s kernel, at command-list build or (a lazily bound row tile) at its
    first run: a kernel rejecting its operands means a corrupt descriptor."""
    try:
        yield
    except NpuEmuError:
        raise
    except MemoryError as e:
        raise HostMemoryError(f"task {tid} ({name}): binding operands") from e
    except Exception as e:  # noqa: BLE001
        raise ExecutionError(f"task {tid} ({name}): cannot bind operands: {e}", task_index=tid) from e


def _copy(dst: np.ndarray, src: np.ndarray) -> Callable[[], None]:
    # dst[...] = src as a C-level partial: no Python frame nor copyto dispatch per DMA (both are
    # uint8 views, so the unsafe casting of setitem never applies)
    return functools.partial(operator.setitem, dst, Ellipsis, src)


@dataclasses.dataclass
class Schedule:
    """The order the barrier walk ran a command list's tasks in, as flat parallel lists.

    The walk depends only on each FIFO's task order and the waits/posts/producer counts, which
    are fixed between command-list builds and patches; replaying its order is the same execution.
    """

    tasks: list[DecodedTask]
    runs: list[Callable[[], None]]  # tasks[i].run, bound once
    pos: dict[int, int] = dataclasses.field(default_factory=dict)  # task id -> index
    #: the host plan (device/fusion.py): what :meth:`ManagementCore.run` calls instead of ``runs``
    #: when set, tiled MatMuls as one product each; parallel lists of callables, the task each
    #: stands for (errors and host times are reported against it) and the tasks it replaced
    plan: list[Callable[[], None]] | None = None
    plan_tasks: list[DecodedTask] = dataclasses.field(default_factory=list)
    plan_members: list[tuple[DecodedTask, ...]] = dataclasses.field(default_factory=list)
    planned: bool = False  # the host plan was attempted for this walk (None plan: nothing fused)
    fused_groups: int = 0  # tiled MatMuls the plan runs as one product

    def __post_init__(self) -> None:
        self.pos = {t.tid: i for i, t in enumerate(self.tasks)}

    def set_plan(self, runs: list[Callable[[], None]], tasks: list[DecodedTask],
                 members: list[tuple[DecodedTask, ...]], groups: int) -> None:
        self.plan, self.plan_tasks, self.plan_members, self.fused_groups = runs, tasks, members, groups
        self.planned = True

    def replace(self, old: DecodedTask, new: DecodedTask) -> bool:
        """Swap a re-fetched descriptor in place; False when its barriers changed (walk again)."""
        if new.waits != old.waits or new.posts != old.posts or new.lane != old.lane:
            return False
        i = self.pos.get(old.tid)
        if i is None or self.tasks[i] is not old or new.tid != old.tid:
            return False
        self.tasks[i] = new
        self.runs[i] = new.run
        # a re-fetched descriptor may move a fused MatMul's operands: plan again before the next run
        self.plan, self.plan_tasks, self.plan_members, self.planned, self.fused_groups = None, [], [], False, 0
        return True


class ManagementCore:
    """Walks the engine FIFOs: a task starts when its barriers' producer counts reach zero."""

    def schedule(self, lanes: Sequence[list[DecodedTask]], producer_counts: Sequence[int]) -> Schedule:
        """Walk the barriers once without running anything; raises BarrierDeadlockError when stuck.

        Same walk as :meth:`execute` (round-robin over the FIFOs, each drained until a wait
        blocks), so the order is the one the per-task walk runs.
        """
        counts = list(producer_counts)
        for lane in lanes:  # a corrupt barrier list names a barrier the command list does not have
            for t in lane:
                bad = [b for b in (*t.waits, *t.posts) if not 0 <= b < len(counts)]
                if bad:
                    raise ExecutionError(f"task {t.tid} names barrier {bad[0]}, but the command list has "
                                         f"{len(counts)}; the descriptor is corrupt", task_index=t.tid)
        pcs = [0] * len(lanes)
        remaining = sum(len(lane) for lane in lanes)
        order: list[DecodedTask] = []
        while remaining:
            progressed = 0
            for li, lane in enumerate(lanes):
                pc = start = pcs[li]
                n = len(lane)
                while pc < n:
                    t = lane[pc]
                    if any(counts[b] for b in t.waits):  # a barrier is open when all its producers posted
                        break
                    order.append(t)
                    for b in t.posts:
                        counts[b] -= 1
                    pc += 1
                pcs[li] = pc
                progressed += pc - start
            if not progressed:
                stuck = [lane[pcs[i]].tid for i, lane in enumerate(lanes) if pcs[i] < len(lane)]
                raise BarrierDeadlockError(f"no runnable task; lanes blocked at tasks {stuck}",
                                           task_index=stuck[0] if stuck else None)
            remaining -= progressed
        logger.debug("barrier walk: %d tasks scheduled", len(order))
        return Schedule(order, [t.run for t in order])

    def run(self, sched: Schedule, *, host_ns: dict[int, int] | None = None) -> None:
        """Run a walked schedule: one bound call per task, no per-task barrier bookkeeping.

        :param host_ns: when given, receives the measured host time of each task (profiling).
        """
        # IEEE results without numpy's warnings: a mask's -max + -max is -inf on a device too, and
        # a user should not see "overflow encountered in add" from an inference that is right
        with np.errstate(all="ignore"):
            self._run(sched, host_ns)

    def _run(self, sched: Schedule, host_ns: dict[int, int] | None) -> None:
        i = -1
        plan = sched.plan
        tasks = sched.tasks if plan is None else sched.plan_tasks
        try:
            if host_ns is None:
                for i, run in enumerate(sched.runs if plan is None else plan):  # noqa: B007 - i names the failing task
                    run()
            elif plan is None:
                clock = time.perf_counter_ns
                for i, t in enumerate(tasks):  # noqa: B007 - i names the failing task below
                    t0 = clock()
                    t.run()
                    host_ns[t.tid] = clock() - t0
            else:
                clock = time.perf_counter_ns
                for i, run in enumerate(plan):  # noqa: B007 - i names the failing task below
                    t0 = clock()
                    run()
                    # a fused MatMul's host time is its last task's; the tiles it replaced took none
                    for m in sched.plan_members[i]:
                        host_ns[m.tid] = 0
                    host_ns[tasks[i].tid] = clock() - t0
        except NpuEmuError:
            raise
        except MemoryError as e:  # the host's, not the task's: never an ExecutionError
            failed = tasks[i] if 0 <= i < len(tasks) else None
            raise HostMemoryError(f"task {failed.tid if failed is not None else '?'}") from e
        except Exception as e:  # a kernel failure is reported against its task
            failed = tasks[i] if 0 <= i < len(tasks) else None
            tid = failed.tid if failed is not None else None
            raise ExecutionError(f"task {tid} ({failed.kernel if failed is not None else '?'}) failed: {e}",
                                 task_index=tid) from e

    def execute(self, lanes: Sequence[list[DecodedTask]], producer_counts: Sequence[int], *,
                host_ns: dict[int, int] | None = None) -> None:
        """Run every task of the command list, each engine FIFO in order, gated by barriers.

        Walks the barriers anew on every call (NPU_EMU_BARRIER_WALK=EVERY_INFERENCE); by default
        the queue runs :meth:`schedule` once per command-list build/patch and :meth:`run` per
        inference.  A deadlocked list raises BarrierDeadlockError before any task runs.

        :param host_ns: when given, receives the measured host time of each task (profiling).
        """
        # the same walk as the replayed path, just redone every time: one loop serves both modes
        self.run(self.schedule(lanes, producer_counts), host_ns=host_ns)
