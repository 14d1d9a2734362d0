"""The emulated device address space: numpy-backed regions (device arena, weights, mapped host I/O)."""

from __future__ import annotations

import bisect
import dataclasses
import logging
import math
import struct
import threading
from collections.abc import Callable

import numpy as np

from ov_npu_emu.errors import ExecutionError
from ov_npu_emu.runtime.pages import zeroed
from ov_npu_emu_npu.blob.format import MemKind, align_up

__all__ = ["AddressSpace", "DeviceArena", "Region", "WeightsCache"]

logger = logging.getLogger(__name__)

#: virtual address bases: device arena, shared weights, host mappings (bump-allocated, never reused
#: so a stale pointer faults instead of silently reading a newer tensor)
ARENA_BASE = 0x0000_1000_0000
WEIGHTS_BASE = 0x0002_0000_0000
HOST_BASE = 0x0010_0000_0000
PAGE = 1 << 16

_U64 = struct.Struct("<Q")


@dataclasses.dataclass(eq=False)
class Region:
    """A contiguous mapping: ``buf`` (uint8) seen by the device at ``base``."""

    base: int
    buf: np.ndarray
    kind: MemKind
    name: str

    @property
    def size(self) -> int:
        return int(self.buf.size)


class AddressSpace:
    """Maps device virtual addresses to numpy memory; engines only ever see addresses."""

    def __init__(self) -> None:
        self._bases: list[int] = []
        self._regions: list[Region] = []
        self._next_host = HOST_BASE
        #: (base, limit, region) of the last resolve(): addresses in [base, limit) resolve to region
        #: (limit stops at the next mapping's base); reset by every map / unmap
        self._last: tuple[int, int, Region] | None = None

    def map(self, buf: np.ndarray, kind: MemKind, name: str, base: int | None = None) -> Region:
        if buf.dtype != np.uint8 or buf.ndim != 1:
            raise ExecutionError("device mappings must be 1-D uint8 views")
        if base is None:
            base = self._next_host
            self._next_host = align_up(base + max(buf.size, 1), PAGE) + PAGE  # guard page
        r = Region(base, buf, kind, name)
        self._last = None
        i = bisect.bisect(self._bases, base)
        self._bases.insert(i, base)
        self._regions.insert(i, r)
        return r

    def unmap(self, region: Region) -> None:
        i = self._regions.index(region)
        self._last = None
        del self._regions[i]
        del self._bases[i]

    def regions(self) -> list[Region]:
        return list(self._regions)

    def resolve(self, addr: int, nbytes: int) -> tuple[Region, int]:
        # the previous lookup's region first: a command-list build reads ~6 fields of each
        # descriptor, mostly from one section (124k lookups for a 3B prefill)
        last = self._last
        if last is not None and last[0] <= addr and addr + nbytes <= last[1]:
            return last[2], addr - last[0]
        i = bisect.bisect(self._bases, addr) - 1
        if i >= 0:
            r = self._regions[i]
            off = addr - r.base
            if off + nbytes <= r.size:
                limit = r.base + r.size
                if i + 1 < len(self._bases):
                    limit = min(limit, self._bases[i + 1])
                self._last = (r.base, limit, r)
                return r, off
        raise ExecutionError(f"device address 0x{addr:x} (+{nbytes} bytes) is not mapped: page fault")

    def bytes_at(self, addr: int, nbytes: int) -> np.ndarray:
        r, off = self.resolve(addr, nbytes)
        return r.buf[off:off + nbytes]

    def array(self, addr: int, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        dt = np.dtype(dtype)
        # math.prod: exact Python ints (no int64 wrap of a corrupt shape) and cheaper than np.prod
        # per operand, of which a large prefill's command-list build has tens of thousands
        n = math.prod(int(d) for d in shape) * dt.itemsize
        return self.bytes_at(addr, n).view(dt).reshape(shape)

    def read(self, addr: int, nbytes: int) -> bytes:
        return self.bytes_at(addr, nbytes).tobytes()

    def write_u64(self, addr: int, value: int) -> None:
        self.bytes_at(addr, 8)[:] = np.frombuffer(_U64.pack(value & 0xFFFF_FFFF_FFFF_FFFF), np.uint8)


class DeviceArena:
    """One big uint8 allocation split by memory kind (the driver's device memory for a request)."""

    def __init__(self, sizes: list[tuple[str, MemKind, int]], align: int = 4096) -> None:
        offs: dict[str, int] = {}
        pos = 0
        # allocate grouped by kind, like the driver's per-kind buffer objects
        for name, _kind, size in sorted(sizes, key=lambda s: int(s[1])):
            offs[name] = pos
            pos = align_up(pos + max(size, 1), align)
        # written sparsely (a prefill's real token rows only): committed page by page, no huge pages
        self.buf = zeroed(max(pos, align))
        self.offsets = offs
        self.kinds = {name: kind for name, kind, _ in sizes}
        self.sizes = {name: size for name, _, size in sizes}
        self.base = ARENA_BASE

    def addr(self, name: str) -> int:
        return self.base + self.offsets[name]

    def view(self, name: str) -> np.ndarray:
        o = self.offsets[name]
        return self.buf[o:o + self.sizes[name]]


class WeightsCache:
    """Decompressed weights of one compiled model: driver-owned memory shared by its requests.

    The blob keeps INT8/INT4 weights compressed and the DPU's matmul_dq decompresses them. A
    decode step that decompressed every weight on every inference would cost far more than
    the matmuls, so the driver keeps each decompressed weight, keyed by the operand addresses,
    shapes and format the descriptor carries, the first time a command list binds it (like a
    weights cache in device DDR). ``NPU_EMU_WEIGHTS_CACHE=NO`` disables it: matmul_dq then
    decompresses tile by tile on every run. Entries are read-only and never evicted; the
    weights they come from are read-only too. ``budget`` bounds the bytes held
    (``NPU_EMU_WEIGHTS_CACHE_MB``): weights that do not fit are not cached, and their tasks
    decompress tile by tile on every run.
    """

    def __init__(self, budget: int | None = None) -> None:
        self._entries: dict[tuple, np.ndarray] = {}
        self._lock = threading.Lock()
        self.nbytes = 0  # bytes held
        self.hits = 0
        self.misses = 0
        #: bytes it may hold (None: no limit); over it a fill is refused (``get`` returns None)
        self.budget = budget
        self.refused = 0

    def get(self, key: tuple, make: Callable[[], np.ndarray], nbytes: int | None = None) -> np.ndarray | None:
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self.hits += 1
                return hit
            if self.budget is not None and nbytes is not None and self.nbytes + nbytes > self.budget:
                self.refused += 1
                return None
            arr = np.ascontiguousarray(make())
            arr.flags.writeable = False
            self._entries[key] = arr
            self.nbytes += int(arr.nbytes)
            self.misses += 1
            return arr

    def __len__(self) -> int:
        return len(self._entries)
