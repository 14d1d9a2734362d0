"""Command lists (mutable), a command queue with a device thread, and fences."""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time

import numpy as np

from ov_npu_emu.errors import ConfigError, ExecutionError
from ov_npu_emu_npu.blob.format import (
    BARRIER,
    DMA_DESC,
    SEC_BARRIER_LISTS,
    SEC_BARRIERS,
    SEC_CMX,
    SEC_DMA,
    SEC_DPU,
    SEC_SHAVE,
    TASK_SIZE,
    TaskKind,
)
from ov_npu_emu_npu.device.engines import DecodedTask, ManagementCore, Schedule, decode_task
from ov_npu_emu_npu.device.fusion import plan_schedule
from ov_npu_emu_npu.device.kernels import RowWindow
from ov_npu_emu_npu.device.profiling import Timeline, simulate_timeline
from ov_npu_emu_npu.driver.hpi import HostParsedInference

__all__ = ["CommandList", "CommandQueue", "Fence", "FENCE_MODES", "QUEUE_MODES"]

logger = logging.getLogger(__name__)

FENCE_MODES = ("interrupt", "polling")
QUEUE_MODES = ("inline", "thread")
_ENGINE_SECTIONS = ((SEC_DMA, TaskKind.DMA, DMA_DESC.size), (SEC_DPU, TaskKind.DPU, TASK_SIZE),
                    (SEC_SHAVE, TaskKind.SHAVE, TASK_SIZE))


class CommandList:
    """The decoded, bound task lists of one request; later inferences patch it in place."""

    def __init__(self, hpi: HostParsedInference, window: RowWindow | None = None, *, fuse: bool = True) -> None:
        """:param fuse: run provable tiled MatMuls as one host product each (NPU_EMU_HOST_FUSION;
            device/fusion.py); the descriptors, barriers and cost model are the same either way"""
        self.hpi = hpi
        self.window = window  # the request's padded-rows hint, bound into attention and row-wise tasks
        self.fuse = fuse
        # the compiler's token-row marks per task (device/windowed.py); only read with a window
        self._rows = {int(t["tid"]): t["rows"] for t in hpi.parsed.meta["tasks"] if t.get("rows")} \
            if window is not None else {}
        self.dma_channels = int(hpi.parsed.meta.get("dma_channels", 1))
        aspace = hpi.aspace
        bsec = hpi.parsed.sections[SEC_BARRIERS]
        raw = aspace.read(hpi.section_addr[SEC_BARRIERS], bsec.size) if bsec.size else b""
        self.producer_counts = [BARRIER.unpack_from(raw, i * BARRIER.size)[1] for i in range(len(raw) // BARRIER.size)]
        lsec = hpi.parsed.sections[SEC_BARRIER_LISTS]
        self._lists = np.frombuffer(aspace.read(hpi.section_addr[SEC_BARRIER_LISTS], lsec.size), np.uint32) \
            if lsec.size else np.zeros(0, np.uint32)
        self.lanes: list[list[DecodedTask]] = [[] for _ in range(self.dma_channels + 2)]
        self._where: dict[tuple[str, int], tuple[int, int]] = {}  # (section, desc offset) -> (lane, pos)
        for sec, kind, size in _ENGINE_SECTIONS:
            n = hpi.parsed.sections[sec].size // size
            for i in range(n):
                t = self._decode(sec, kind, i * size)
                self._where[(sec, i * size)] = (t.lane, len(self.lanes[t.lane]))
                self.lanes[t.lane].append(t)
        self._sizes = {sec: size for sec, _, size in _ENGINE_SECTIONS}
        self._kinds = {sec: kind for sec, kind, _ in _ENGINE_SECTIONS}
        self.lane_names = [f"DMA{i}" for i in range(self.dma_channels)] + ["DPU", "SHAVE"]
        self.host_ns: dict[int, int] = {}  # measured host time per task of the last profiled run
        #: the barrier walk's order, made by the management core at the first run after a build;
        #: patches swap re-fetched tasks in place (None again if a patch changed barriers)
        self.schedule: Schedule | None = None

    def _decode(self, sec: str, kind: TaskKind, offset: int) -> DecodedTask:
        rows = None
        if self._rows:
            # the descriptor's task id, read the way the engine reads it (first u32 of the descriptor)
            tid = int(np.frombuffer(self.hpi.aspace.read(self.hpi.section_addr[sec] + offset, 4), np.uint32)[0])
            rows = self._rows.get(tid)
        return decode_task(self.hpi.aspace, sec, self.hpi.section_addr[sec], offset, kind, self._lists,
                           self.dma_channels, self.hpi.parsed.weights_cache, self.window, rows)

    def update_mutable_commands(self, patched: list[tuple[str, int]]) -> int:
        """Re-fetch only the descriptors whose argument pointers were patched; returns how many args."""
        touched: set[tuple[str, int]] = set()
        for sec, off in patched:
            size = self._sizes.get(sec)
            if size is None:
                raise ExecutionError(f"patched section {sec} holds no task descriptors")
            touched.add((sec, off - off % size))
        for sec, base in touched:
            lane, pos = self._where[(sec, base)]
            old, new = self.lanes[lane][pos], self._decode(sec, self._kinds[sec], base)
            self.lanes[lane][pos] = new
            if self.schedule is not None and not self.schedule.replace(old, new):
                self.schedule = None
        return len(patched)

    def plan_host(self, sched: Schedule) -> None:
        """The walked schedule's host plan: tiled MatMuls proven from the descriptors run fused."""
        cmx = self.hpi.section_addr[SEC_CMX], self.hpi.section_addr[SEC_CMX] + self.hpi.parsed.sections[SEC_CMX].size
        node_of = {int(t["tid"]): str(t["node"]) for t in self.hpi.parsed.meta.get("tasks", ()) if t.get("node")}
        # a task bound to a token-row window runs a different slice per inference: never fused
        plan_schedule(sched, self.hpi.aspace.array, cmx, node_of, set(self._rows))

    def timeline(self, clock_mhz: float) -> Timeline:
        return simulate_timeline(self.lanes, len(self.producer_counts), self.lane_names, clock_mhz)

    def tasks(self) -> list[DecodedTask]:
        return sorted((t for lane in self.lanes for t in lane), key=lambda t: t.tid)


class Fence:
    """Signalled by the device when a submission completes; waited on by interrupt or polling."""

    def __init__(self, mode: str = "interrupt") -> None:
        if mode not in FENCE_MODES:
            raise ConfigError(f"NPU_EMU_FENCE_MODE={mode!r}: expected one of {FENCE_MODES}", key="NPU_EMU_FENCE_MODE")
        self.mode = mode
        self.value = 0
        self.error: BaseException | None = None
        self._cond = threading.Condition()

    def signal(self, value: int, error: BaseException | None = None) -> None:
        with self._cond:
            self.error = error
            self.value = value
            self._cond.notify_all()

    def wait(self, value: int, timeout: float = 600.0) -> None:
        deadline = time.monotonic() + timeout
        if self.mode == "polling":
            while self.value < value:  # host polls the fence value in memory
                if time.monotonic() > deadline:
                    raise ExecutionError("fence wait timed out")
                time.sleep(0)
        else:
            with self._cond:
                if not self._cond.wait_for(lambda: self.value >= value, timeout):
                    raise ExecutionError("fence wait timed out")
        if self.error is not None:
            err, self.error = self.error, None
            raise err


@dataclasses.dataclass
class _Submission:
    cl: CommandList
    fence: Fence
    value: int
    profile: bool
    walk: bool = False


class CommandQueue:
    """One queue per device: a device thread runs submissions in order on the management core."""

    def __init__(self) -> None:
        self._q: queue.SimpleQueue[_Submission] = queue.SimpleQueue()
        self._core = ManagementCore()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._busy = threading.Lock()

    @property
    def core(self) -> ManagementCore:
        return self._core

    def submit(self, cl: CommandList, fence: Fence, *, profile: bool = False, inline: bool = False,
               walk: bool = False) -> int:
        """Enqueue ``cl``; returns the fence value that signals its completion.

        :param inline: run the management core on the calling thread (no device-thread handoff,
            which costs a scheduler wake-up per inference on a loaded machine); the fence is
            signalled the same way, so the caller's wait is unchanged.
        :param walk: walk the barriers task by task on this run (NPU_EMU_BARRIER_WALK=EVERY_INFERENCE)
            instead of replaying the command list's walked schedule.
        """
        value = fence.value + 1
        if inline:
            self._execute(_Submission(cl, fence, value, profile, walk))
            return value
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="ov_npu_emu-npu-device", daemon=True)
                self._thread.start()
        self._q.put(_Submission(cl, fence, value, profile, walk))
        return value

    def _loop(self) -> None:
        while True:
            self._execute(self._q.get())

    def _execute(self, sub: _Submission) -> None:
        # one device: submissions run one at a time, whichever thread submits them
        with self._busy:
            try:
                host_ns = sub.cl.host_ns if sub.profile else None
                if sub.walk:
                    self._core.execute(sub.cl.lanes, sub.cl.producer_counts, host_ns=host_ns)
                else:
                    # the walk's errors (BarrierDeadlockError) reach the waiter like a kernel's
                    if sub.cl.schedule is None:
                        sub.cl.schedule = self._core.schedule(sub.cl.lanes, sub.cl.producer_counts)
                    if sub.cl.fuse and not sub.cl.schedule.planned:
                        sub.cl.plan_host(sub.cl.schedule)
                    self._core.run(sub.cl.schedule, host_ns=host_ns)
            except BaseException as e:  # handed to the waiter through the fence
                sub.fence.signal(sub.value, e)
            else:
                sub.fence.signal(sub.value)
