"""One pre-allocated KV buffer per KV tensor; every static model sees a contiguous prefix view.

Layout (decided here, same idea as the real NPUW): each ``past_key_values.N.*`` owns one flat
buffer sized for the largest generate variant, ``Hkv·(Kmax−1)·D`` elements.  A model whose past
has ``S`` slots views the first ``Hkv·S·D`` elements as a contiguous ``[1, Hkv, S, D]`` tensor.
So every variant (and the chunked-prefill past) is a zero-copy prefix of the same memory, but the
row stride differs between views: token ``t`` of head ``h`` lives at ``(h·S + t)·D``.  Moving the
stored tokens from one view to another (variant switch, prefill→generate) therefore goes through
a temporary copy, exactly where the real NPUW does.

With NPUW_LLM_OPTIMIZE_V_TENSORS the value tensors are stored ``[1, Hkv, D, S]`` (sequence last,
the real NPUW's layout); :meth:`KVBuffers.seq` always gives the logical ``[1, Hkv, S, D]`` view,
so copies are written once for both layouts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import openvino as ov

__all__ = ["KVBuffers"]

logger = logging.getLogger(__name__)

#: below this many bytes per step a thread pool costs more than it saves
_PARALLEL_MIN_BYTES = 1 << 20


class KVBuffers:
    """The flat KV buffers plus per-slot-count views (``view(i, S)`` is ``[1, H_i, S, D_i]``)."""

    def __init__(
        self,
        num_heads: tuple[int, ...],
        head_dims: tuple[int, ...],
        max_slots: int,
        dtype: np.dtype,
        transposed: tuple[bool, ...] | None = None,
    ) -> None:
        self.transposed = transposed or (False,) * len(num_heads)
        self.num_heads = num_heads
        self.head_dims = head_dims
        self.max_slots = max_slots
        self.dtype = np.dtype(dtype)
        # Allocated once for the largest view; nothing else in the plugin allocates KV memory.
        self.flat = [
            np.zeros(h * max_slots * d, dtype=self.dtype) for h, d in zip(num_heads, head_dims)
        ]
        self._tensors: dict[tuple[int, int], ov.Tensor] = {}
        self._views: dict[tuple[int, int], np.ndarray] = {}
        self._pool: ThreadPoolExecutor | None = None

    @property
    def nbytes(self) -> int:
        return sum(f.nbytes for f in self.flat)

    def __len__(self) -> int:
        return len(self.flat)

    def view(self, i: int, slots: int) -> np.ndarray:
        """Contiguous storage view of the first elements of buffer ``i`` (``[1,H,S,D]`` or ``[1,H,D,S]``)."""
        v = self._views.get((i, slots))
        if v is None:
            h, d = self.num_heads[i], self.head_dims[i]
            if slots > self.max_slots:
                raise ValueError(f"view of {slots} slots exceeds the buffer ({self.max_slots})")
            shape = (1, h, d, slots) if self.transposed[i] else (1, h, slots, d)
            v = self._views[i, slots] = self.flat[i][: h * slots * d].reshape(shape)
        return v

    def seq(self, i: int, slots: int) -> np.ndarray:
        """The logical ``[1, H, slots, D]`` view (strided when V is stored transposed)."""
        v = self.view(i, slots)
        return v.transpose(0, 1, 3, 2) if self.transposed[i] else v

    def tensor(self, i: int, slots: int) -> ov.Tensor:
        """An ``ov.Tensor`` sharing the view's memory (cached so the bound object stays the same)."""
        key = (i, slots)
        if key not in self._tensors:
            self._tensors[key] = ov.Tensor(self.view(i, slots), shared_memory=True)
        return self._tensors[key]

    def zero(self) -> None:
        for f in self.flat:
            f.fill(0)

    def for_each(self, fn: Callable[[int], None], nbytes_hint: int = 0) -> None:
        """Run ``fn(i)`` for every KV tensor; in parallel over layers when the copy is large."""
        n = len(self.flat)
        if nbytes_hint * n < _PARALLEL_MIN_BYTES or n < 2:
            for i in range(n):
                fn(i)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="npuw-kv")
        list(self._pool.map(fn, range(n)))  # numpy copies release the GIL

    def migrate(self, src_slots: int, dst_slots: int, count: int) -> None:
        """Move tokens ``[0, count)`` from the ``src_slots`` view to the ``dst_slots`` view (aliased memory)."""
        if count == 0 or src_slots == dst_slots:
            return

        def move(i: int) -> None:
            tmp = self.seq(i, src_slots)[:, :, :count, :].copy()  # the views overlap: stage first
            self.seq(i, dst_slots)[:, :, :count, :] = tmp

        self.for_each(
            move, nbytes_hint=count * self.num_heads[0] * self.head_dims[0] * self.dtype.itemsize
        )
