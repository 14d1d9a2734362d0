"""The device weights bank: constants of loaded blobs in shared, reference-counted device memory."""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ov_npu_emu.errors import BlobFormatError
from ov_npu_emu_npu.arrays import same_contents
from ov_npu_emu_npu.blob.format import align_up
from ov_npu_emu_npu.driver.memory import HOST_BASE, PAGE, WEIGHTS_BASE

__all__ = ["BANK_MIN_BYTES", "BankEntry", "BankedWeights", "WeightsBank"]

logger = logging.getLogger(__name__)

#: constants smaller than this stay in the blob's private weights image: banking them would cost
#: a lookup and a mapping each for nothing, and keeps tiny blobs' layout (neighbouring constants)
BANK_MIN_BYTES = 16 * 1024
#: samples taken for the fingerprint; only fingerprint matches are compared in full
_SAMPLES = 64


def fingerprint(data: np.ndarray) -> bytes:
    """Cheap content key: a strided sample of the bytes (length is part of the bank key)."""
    step = max(1, data.size // _SAMPLES)
    return data[::step][:_SAMPLES].tobytes() + data[-8:].tobytes()


@dataclasses.dataclass(eq=False)
class BankEntry:
    """One shared constant in device memory, with its decompressed-weights cache."""

    bank: str  # bank name ("" for the device's anonymous bank)
    base: int  # device virtual address
    buf: np.ndarray  # read-only uint8 device memory
    key: tuple[str, int, bytes]
    refs: int = 0
    #: decompressed weights whose compressed operand lives here (shared by every user)
    dq: dict[tuple, np.ndarray] = dataclasses.field(default_factory=dict)
    dq_nbytes: int = 0

    @property
    def nbytes(self) -> int:
        return int(self.buf.size)


class WeightsBank:
    """Device-level bank: one copy of each distinct constant, shared by every blob that holds it.

    Keys are (bank name, size, sampled fingerprint); a key hit is confirmed by a full compare, so
    equal samples of different weights never alias. Blobs compiled by NPUW carry one bank name
    (``NPUW_WEIGHTS_BANK``) and share within it; blobs without a name share the anonymous bank.
    An entry lives while a loaded blob references it; the last release frees it together with
    its decompressed weights. Device addresses are bump-allocated and never reused, so a stale
    pointer into a freed entry page-faults instead of reading another weight.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._by_key: dict[tuple[str, int, bytes], list[BankEntry]] = {}
        self._bases: list[int] = []
        self._live: list[BankEntry] = []
        self._next = WEIGHTS_BASE
        #: decompressed bytes the live entries hold (sum of their dq_nbytes), kept as they fill and
        #: free: a budget check per weights-cache fill would otherwise walk every entry (a large
        #: int4 model's first command-list build refuses most fills; docs/performance.md, "Large
        #: models on the emulated NPU")
        self.dq_bytes = 0
        self.counters = {"acquired": 0, "shared": 0, "freed": 0, "compared_bytes": 0, "adopted": 0}

    def reserve(self, nbytes: int) -> int:
        """A fresh device address range (with a guard page) below the host mappings."""
        with self.lock:
            base = self._next
            self._next = align_up(base + max(nbytes, 1), PAGE) + PAGE
            if self._next >= HOST_BASE:
                raise BlobFormatError("emulated NPU weights address space exhausted; release compiled models")
            return base

    def lookup(self, bank: str, data: np.ndarray) -> BankEntry | None:
        """The live entry holding ``data`` in ``bank``, if any (no reference is taken)."""
        key = (bank, int(data.size), fingerprint(data))
        with self.lock:
            for e in self._by_key.get(key, ()):
                self.counters["compared_bytes"] += e.nbytes
                if same_contents(e.buf, data):
                    return e
            return None

    def acquire(self, bank: str, data: np.ndarray, *, adopt: bool = False) -> BankEntry:
        """The entry holding ``data`` (uint8) in ``bank``: shared if present, else a new one.

        A new entry copies ``data``, or with ``adopt`` keeps ``data`` itself (a read-only view of
        a loaded blob, which the entry then keeps alive): no second copy of the weights while
        the blob is parsed.
        """
        key = (bank, int(data.size), fingerprint(data))
        with self.lock:
            for e in self._by_key.get(key, ()):
                self.counters["compared_bytes"] += e.nbytes
                if same_contents(e.buf, data):
                    e.refs += 1
                    self.counters["shared"] += 1
                    return e
            if adopt and not data.flags.writeable:
                buf = data
                self.counters["adopted"] += 1
            else:
                buf = np.empty(data.size, np.uint8)
                buf[:] = data
                buf.flags.writeable = False
            e = BankEntry(bank, self.reserve(data.size), buf, key, refs=1)
            self._by_key.setdefault(key, []).append(e)
            i = bisect.bisect(self._bases, e.base)
            self._bases.insert(i, e.base)
            self._live.insert(i, e)
            self.counters["acquired"] += 1
            return e

    def release(self, entries: Sequence[BankEntry]) -> None:
        with self.lock:
            for e in entries:
                e.refs -= 1
                if e.refs > 0:
                    continue
                group = self._by_key.get(e.key, [])
                if e in group:
                    group.remove(e)
                if not group:
                    self._by_key.pop(e.key, None)
                i = self._live.index(e)
                del self._live[i]
                del self._bases[i]
                e.dq.clear()
                self.dq_bytes -= e.dq_nbytes
                e.dq_nbytes = 0
                self.counters["freed"] += 1

    def owner(self, addr: int) -> BankEntry | None:
        """The live entry whose device memory contains ``addr``."""
        with self.lock:
            i = bisect.bisect(self._bases, addr) - 1
            if i >= 0 and addr < self._live[i].base + self._live[i].nbytes:
                return self._live[i]
            return None

    def entries(self, bank: str | None = None) -> list[BankEntry]:
        with self.lock:
            return [e for e in self._live if bank is None or e.bank == bank]

    def stats(self) -> dict[str, int]:
        """Device bytes held: shared constants and their decompressed weights."""
        with self.lock:
            return {"entries": len(self._live), "weights_bytes": sum(e.nbytes for e in self._live),
                    "dq_bytes": self.dq_bytes,
                    "refs": sum(e.refs for e in self._live)}


class _Span:
    __slots__ = ("off", "size", "va", "entry")

    def __init__(self, off: int, size: int, va: int, entry: BankEntry | None) -> None:
        self.off, self.size, self.va, self.entry = off, size, va, entry


class BankedWeights:
    """One blob's ``.npu.weights`` as placed by the driver: big constants in the bank, the rest private.

    ``constants`` is the blob's constant table ((offset, nbytes), from the metadata); without one
    the whole section is one constant. A relocation against ``.npu.weights + A`` resolves through
    the constant containing A (or the last one starting before A), so a shifted addend still
    lands ``A - offset`` bytes into that constant's device memory, as in a flat section.
    """

    def __init__(self, bank: WeightsBank, name: str, section: Any,
                 constants: Sequence[Sequence[int]] | None) -> None:
        """``section``: the ``.npu.weights`` bytes (a view of the blob), or the compiler's weights
        image of a split blob (``pieces``: a read-only array per constant offset), whose
        constants the bank adopts as they are."""
        pieces: dict[int, np.ndarray] | None = getattr(section, "pieces", None)
        size = len(section)
        data = np.frombuffer(section, np.uint8) if pieces is None and size else np.zeros(0, np.uint8)

        def piece(o: int, n: int) -> np.ndarray:
            if pieces is None:
                return data[o:o + n]
            a = pieces.get(o)
            if a is None or a.size < n:
                raise BlobFormatError(f"constant ({o}, {n}) is not in the compiled weights image")
            return a[:n]

        try:
            spans = sorted((int(o), int(n)) for o, n in (constants or [(0, size)]) if int(n) > 0)
        except (TypeError, ValueError) as e:
            raise BlobFormatError(f"the blob's constant table is corrupt ({e}); re-export the blob") from e
        for o, n in spans:
            if o < 0 or o + n > size:
                raise BlobFormatError(f"constant table entry ({o}, {n}) lies outside .npu.weights "
                                      f"({size} bytes); the blob is corrupt")
        self.bank = bank
        self.name = name
        self.section_size = int(size)
        self.entries: list[BankEntry] = []
        private = [(o, n) for o, n in spans if n < BANK_MIN_BYTES]
        # private constants keep their section order, 64-byte aligned, in one small image
        poff: dict[int, int] = {}
        top = 0
        for o, n in private:
            poff[o] = top
            top = align_up(top + n, 64)
        self.private = np.zeros(max(top, 1), np.uint8)
        for o, n in private:
            self.private[poff[o]:poff[o] + n] = piece(o, n)
        self.private.flags.writeable = False
        self.private_base = bank.reserve(self.private.size)
        self._spans: list[_Span] = []
        # New entries adopt their bytes from the blob (views, no copy) when most of the banked
        # bytes are new: the blob then stays alive as their memory. When most are shared (a
        # generate variant after the prefill model), the few new ones are copied so the blob,
        # with its duplicate of the shared weights, can be freed.
        # A split blob's constants are separate arrays: each new entry adopts its own.
        big = [(o, n) for o, n in spans if n >= BANK_MIN_BYTES]
        if pieces is not None:
            adopt = True
        else:
            with bank.lock:
                new = sum(n for o, n in big if bank.lookup(name, piece(o, n)) is None)
            adopt = 2 * new >= sum(n for _, n in big) > 0
        try:
            for o, n in spans:
                if n < BANK_MIN_BYTES:
                    self._spans.append(_Span(o, n, self.private_base + poff[o], None))
                else:
                    entry = bank.acquire(name, piece(o, n), adopt=adopt)
                    self.entries.append(entry)
                    self._spans.append(_Span(o, n, entry.base, entry))
        except BaseException:
            bank.release(self.entries)
            raise
        self._offs = [s.off for s in self._spans]
        self._by_va = sorted(self._spans, key=lambda s: s.va)
        self._vas = [s.va for s in self._by_va]
        self._digests: dict[int, bytes] = {}
        self._released = False

    def canonical(self, addr: int, nbytes: int) -> tuple | None:
        """A blob-independent name for the ``nbytes`` read at ``addr``, or None if it has none.

        A bank address names itself (entries are shared and addresses never reused); a private
        constant is named by its content digest and the offset into it. A read that runs past
        its constant (a corrupted relocation) has no shareable name.
        """
        i = bisect.bisect(self._vas, addr) - 1
        if i < 0:
            return None
        s = self._by_va[i]
        off = addr - s.va
        if off + nbytes > s.size:
            return None
        if s.entry is not None:
            return ("bank", addr)
        d = self._digests.get(s.va)
        if d is None:
            p0 = s.va - self.private_base
            d = self._digests[s.va] = hashlib.blake2b(self.private[p0:p0 + s.size].data, digest_size=16).digest()
        return ("const", s.size, d, off)

    def owner(self, addr: int) -> BankEntry | None:
        """This blob's bank entry containing ``addr``."""
        i = bisect.bisect(self._vas, addr) - 1
        if i >= 0 and self._by_va[i].entry is not None and addr < self._by_va[i].va + self._by_va[i].size:
            return self._by_va[i].entry
        return None

    def address(self, addend: int) -> int:
        """Device address of ``.npu.weights + addend``."""
        i = bisect.bisect(self._offs, addend) - 1
        s = self._spans[max(i, 0)] if self._spans else None
        if s is None:
            return self.private_base + addend
        return s.va + (addend - s.off)

    def addresses(self, addends: np.ndarray) -> np.ndarray:
        """:meth:`address` of every entry of ``addends`` (int64), at once."""
        if not self._spans:
            return self.private_base + addends
        offs = np.asarray(self._offs, np.int64)
        i = np.maximum(np.searchsorted(offs, addends, side="right") - 1, 0)
        vas = np.asarray([s.va for s in self._spans], np.int64)
        return vas[i] + (addends - offs[i])

    def regions(self) -> list[tuple[int, np.ndarray, str]]:
        """(device address, memory, name) of everything a request maps for these weights."""
        out = [(self.private_base, self.private, ".npu.weights:private")]
        seen: set[int] = set()
        for e in self.entries:
            if e.base not in seen:  # a blob may hold the same bytes twice (deduped by the bank)
                seen.add(e.base)
                out.append((e.base, e.buf, f".npu.weights:bank@{e.base:x}"))
        return out

    def section_chunks(self) -> list[Any]:
        """The original ``.npu.weights`` contents as chunks in order (zero gaps, then each
        constant's bank memory or private bytes), nothing copied."""
        out: list[Any] = []
        pos = 0
        for s in sorted(self._spans, key=lambda s: s.off):
            if s.off + s.size <= pos:
                continue  # the same bytes listed twice
            if s.off > pos:
                out.append(bytes(s.off - pos))
            src = s.entry.buf if s.entry is not None else self.private[s.va - self.private_base:][:s.size]
            out.append(np.ascontiguousarray(src).reshape(-1).view(np.uint8)[max(pos - s.off, 0):s.size])
            pos = s.off + s.size
        if self.section_size > pos:
            out.append(bytes(self.section_size - pos))
        return out

    def section_into(self, view: np.ndarray) -> None:
        """Write the original ``.npu.weights`` contents, rebuilt from the bank, into ``view``
        (``section_size`` zeroed bytes of the blob being exported)."""
        for s in self._spans:
            src = s.entry.buf if s.entry is not None else self.private[s.va - self.private_base:][:s.size]
            view[s.off:s.off + s.size] = src

    @property
    def private_nbytes(self) -> int:
        return int(self.private.size)

    def release(self) -> None:
        if not self._released:
            self._released = True
            self.bank.release(self.entries)


class BankWeightsCache:
    """The decompressed-weights cache of one loaded blob, stored on the bank entries it reads.

    Same interface as ``WeightsCache``. A key (operand addresses, shapes, format) whose compressed
    operand lives in a bank entry is filled once for every blob sharing that entry; weights in
    the private image are cached for this blob only. The counters are this blob's view: ``len``
    and ``nbytes`` count the entries it used, ``misses`` the ones it had to fill.
    """

    def __init__(self, weights: BankedWeights, budget: int | None = None) -> None:
        self._w = weights
        #: bytes of decompressed weights the whole bank may hold (None: no limit); a fill that
        #: would pass it is refused and the task decompresses tile by tile on every run instead
        self.budget = budget
        self.refused = 0
        self._private: dict[tuple, np.ndarray] = {}
        self._private_nbytes = 0
        self._used: dict[tuple, int] = {}
        self.hits = 0
        self.misses = 0
        self.shared_hits = 0  # first use of an entry another blob filled

    @property
    def nbytes(self) -> int:
        return sum(self._used.values())

    def _shared_key(self, key: tuple) -> tuple | None:
        """``key`` with every operand address replaced by its blob-independent name, if all have one."""
        try:
            _, addrs, shapes, dtypes = key[:4]
            names = [self._w.canonical(int(a), int(np.prod(sh, dtype=np.int64)) * np.dtype(dt).itemsize)
                     for a, sh, dt in zip(addrs, shapes, dtypes, strict=True)]
        except (TypeError, ValueError):
            return None
        if not names or any(n is None for n in names):
            return None
        return (key[0], tuple(names), *key[2:])

    def get(self, key: tuple, make: Callable[[], np.ndarray], nbytes: int | None = None) -> np.ndarray | None:
        shared = self._shared_key(key)
        # stored on the bank entry of the compressed operand, so it is shared and freed with it
        owner = self._w.owner(int(key[1][0])) if shared is not None else None
        if owner is not None and shared is not None:  # an owner implies a shared key
            key = shared
        # the bank's lock: entries' caches are shared with other blobs' views
        with self._w.bank.lock:
            table = owner.dq if owner is not None else self._private
            hit = table.get(key)
            if hit is not None:
                if key in self._used:
                    self.hits += 1
                else:
                    self.shared_hits += 1
                    self._used[key] = int(hit.nbytes)
                return hit
            if self.budget is not None and nbytes is not None:
                held = self._w.bank.dq_bytes + self._private_nbytes
                if held + nbytes > self.budget:
                    self.refused += 1
                    return None
            arr = np.ascontiguousarray(make())
            arr.flags.writeable = False
            table[key] = arr
            if owner is not None:
                owner.dq_nbytes += int(arr.nbytes)
                self._w.bank.dq_bytes += int(arr.nbytes)
            else:
                self._private_nbytes += int(arr.nbytes)
            self._used[key] = int(arr.nbytes)
            self.misses += 1
            return arr

    def __len__(self) -> int:
        return len(self._used)
