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

With ``KV_CACHE_PRECISION=u8`` / ``u4`` (scheme in kvquant.py) each KV tensor owns three flat
buffers with the same prefix-view layout: the quantised bytes ``[1, H, S, D]`` (u8) or
``[1, H, S, D/2]`` (u4, two values a byte), and f16 ``scale`` / ``zp`` ``[1, H, S, D/G]``.  Rows are
quantised when they are written (:meth:`KVBuffers.write`); the static models take all three as
inputs and dequantise in the graph.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import openvino as ov

from ov_npu_emu.runtime.pages import zeroed
from ov_npu_emu_npuw.kvquant import is_quantized, quantize, quantize_channels, stored_dim, unpack

__all__ = ["KVBuffers"]

logger = logging.getLogger(__name__)

#: below this many bytes per step a thread pool costs more than it saves
_PARALLEL_MIN_BYTES = 1 << 20


class KVBuffers:
    """The flat KV buffers plus per-slot-count views (``view(i, S)`` is ``[1, H_i, S, D_i]``)."""

    paged = False  # the block-based KV (blockkv.py) is the paged one

    def __init__(
        self,
        num_heads: tuple[int, ...],
        head_dims: tuple[int, ...],
        max_slots: int,
        dtype: np.dtype,
        transposed: tuple[bool, ...] | None = None,
        precision: str = "",
        group_size: int = 0,
        keys: tuple[bool, ...] | None = None,
    ) -> None:
        self.transposed = transposed or (False,) * len(num_heads)
        self.num_heads = num_heads
        self.head_dims = head_dims
        self.max_slots = max_slots
        self.precision = precision
        self.quantized = is_quantized(precision)
        self.dtype = np.dtype(np.uint8) if self.quantized else np.dtype(dtype)
        # quantised: which tensors are keys (per-channel blocks), bytes of a stored head row, G
        self.keys = keys or (False,) * len(num_heads)
        self.row = tuple(stored_dim(precision, d) if self.quantized else d for d in head_dims)
        self.groups = tuple((group_size or d) for d in head_dims)
        # Allocated once for the largest view; nothing else in the plugin allocates KV memory.
        # Each head's slots fill one token at a time: pages are committed as they are written.
        self.flat = [zeroed(h * max_slots * r, self.dtype) for h, r in zip(num_heads, self.row, strict=False)]
        self.scale_flat: list[np.ndarray] = []
        self.zp_flat: list[np.ndarray] = []
        self.residual: list[np.ndarray | None] = []
        if self.quantized:
            n = [h * self._aux_rows(i, max_slots) * self._aux_cols(i) for i, h in enumerate(num_heads)]
            self.scale_flat = [np.ones(k, np.float16) for k in n]
            self.zp_flat = [np.zeros(k, np.float16) for k in n]
            # keys: exact rows of the block being filled (re-quantised as it grows)
            self.residual = [
                np.zeros((1, h, g, d), np.float16) if key else None
                for h, d, g, key in zip(num_heads, head_dims, self.groups, self.keys, strict=False)
            ]
        self._res_block = [-1] * len(num_heads)  # block index the residual holds
        self._tensors: dict[tuple[int, int], ov.Tensor] = {}
        self._aux: dict[tuple[int, int], tuple[ov.Tensor, ov.Tensor]] = {}
        self._views: dict[tuple[int, int], np.ndarray] = {}
        self._aux_views: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self._pool: ThreadPoolExecutor | None = None

    def _aux_rows(self, i: int, slots: int) -> int:
        """Rows of scales for ``slots`` tokens: one per block of G tokens for keys, per token for values."""
        return -(-slots // self.groups[i]) if self.keys[i] else slots

    def _aux_cols(self, i: int) -> int:
        return self.head_dims[i] if self.keys[i] else self.head_dims[i] // self.groups[i]

    @property
    def data_nbytes(self) -> int:
        return sum(f.nbytes for f in self.flat)

    @property
    def scale_nbytes(self) -> int:
        """Bytes of the u8/u4 scales and zero points (0 for f16/f32)."""
        return sum(f.nbytes for f in (*self.scale_flat, *self.zp_flat))

    @property
    def residual_nbytes(self) -> int:
        """Bytes of the exact key rows of the blocks being filled (u8/u4 only)."""
        return sum(r.nbytes for r in self.residual if r is not None)

    @property
    def nbytes(self) -> int:
        return self.data_nbytes + self.scale_nbytes + self.residual_nbytes

    def __len__(self) -> int:
        return len(self.flat)

    def view(self, i: int, slots: int) -> np.ndarray:
        """Contiguous storage view of the first elements of buffer ``i`` (``[1,H,S,D]`` or ``[1,H,D,S]``)."""
        v = self._views.get((i, slots))
        if v is None:
            h, d = self.num_heads[i], self.row[i]
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

    def aux_view(self, i: int, slots: int) -> tuple[np.ndarray, np.ndarray]:
        """(scale, zero point) views of quantised buffer ``i`` for the ``slots`` view:
        ``[1, H, slots, D/G]`` for values, ``[1, H, ⌈slots/G⌉, D]`` for keys."""
        v = self._aux_views.get((i, slots))
        if v is None:
            h, r, c = self.num_heads[i], self._aux_rows(i, slots), self._aux_cols(i)
            v = self._aux_views[i, slots] = (
                self.scale_flat[i][: h * r * c].reshape(1, h, r, c),
                self.zp_flat[i][: h * r * c].reshape(1, h, r, c),
            )
        return v

    def aux_tensors(self, i: int, slots: int) -> tuple[ov.Tensor, ov.Tensor]:
        """``ov.Tensor``s sharing :meth:`aux_view` (bound beside :meth:`tensor`)."""
        key = (i, slots)
        if key not in self._aux:
            sc, zp = self.aux_view(i, slots)
            self._aux[key] = (ov.Tensor(sc, shared_memory=True), ov.Tensor(zp, shared_memory=True))
        return self._aux[key]

    def write(self, i: int, slots: int, start: int, rows: np.ndarray) -> None:
        """Store logical rows ``[1, H, n, D]`` at slots ``[start, start+n)`` of the ``slots`` view,
        quantising them first when the cache is u8/u4."""
        n = rows.shape[2]
        if not self.quantized:
            self.seq(i, slots)[:, :, start : start + n, :] = rows
            return
        if self.keys[i]:
            self._write_key(i, slots, start, rows)
            return
        q, sc, zp = quantize(rows, self.precision, self.groups[i])
        self.view(i, slots)[:, :, start : start + n, :] = q
        vs, vz = self.aux_view(i, slots)
        vs[:, :, start : start + n, :] = sc
        vz[:, :, start : start + n, :] = zp

    def write_step(self, slots: int, start: int, rows: list[np.ndarray]) -> None:
        """:meth:`write` for every tensor at once (the one-token generate step): when all keys
        (and all values) share a shape and the keys sit in the same block, the quantisation
        arithmetic runs once on the stacked rows instead of once per tensor."""
        keys = [i for i in range(len(rows)) if self.keys[i]]
        vals = [i for i in range(len(rows)) if not self.keys[i]]
        g = self.groups[0]
        uniform = (
            len({r.shape for r in rows}) == 1
            and len(set(self.groups)) == 1
            and len({self._res_block[i] for i in keys}) <= 1
        )
        if not uniform:
            for i, r in enumerate(rows):
                self.write(i, slots, start, r)
            return
        n = rows[0].shape[2]
        if vals:
            q, sc, zp = quantize(np.concatenate([rows[i] for i in vals]), self.precision, g)
            for j, i in enumerate(vals):
                self.view(i, slots)[:, :, start : start + n, :] = q[j : j + 1]
                vs, vz = self.aux_view(i, slots)
                vs[:, :, start : start + n, :] = sc[j : j + 1]
                vz[:, :, start : start + n, :] = zp[j : j + 1]
        if not keys:
            return
        end = start + n
        b = start // g
        base = b * g
        exact = np.concatenate([rows[i] for i in keys]).astype(np.float32)  # [L, H, n, D]
        if start > base:
            if self._res_block[keys[0]] == b:
                prev = np.concatenate([self.residual[i][:, :, : start - base] for i in keys])
            else:  # a rewind into an older block
                prev = np.concatenate([self._dequant_key(i, slots, base, start) for i in keys])
            exact = np.concatenate([prev.astype(np.float32), exact], axis=2)
        last = (end - 1) // g
        for blk in range(b, last + 1):
            lo, hi = blk * g, min((blk + 1) * g, end)
            q, sc, zp = quantize_channels(exact[:, :, lo - base : hi - base, :], self.precision)
            for j, i in enumerate(keys):
                self.view(i, slots)[:, :, lo:hi, :] = q[j : j + 1]
                vs, vz = self.aux_view(i, slots)
                vs[:, :, blk : blk + 1, :] = sc[j : j + 1]
                vz[:, :, blk : blk + 1, :] = zp[j : j + 1]
        tail = exact[:, :, last * g - base :, :]
        for j, i in enumerate(keys):
            self.residual[i][:, :, : end - last * g, :] = tail[j : j + 1]
            self._res_block[i] = last

    def _write_key(self, i: int, slots: int, start: int, rows: np.ndarray) -> None:
        """Keys: per-channel scales per block of G tokens; the block that ``start`` falls in is
        re-quantised together with its earlier rows (exact from the residual)."""
        g, end = self.groups[i], start + rows.shape[2]
        b = start // g
        base = b * g
        exact = rows.astype(np.float32)
        if start > base:
            if self._res_block[i] == b:
                prev = self.residual[i][:, :, : start - base].astype(np.float32)
            else:  # a rewind into an older block: its exact rows are gone, use the stored ones
                prev = self._dequant_key(i, slots, base, start)
            exact = np.concatenate([prev, exact], axis=2)
        data = self.view(i, slots)
        vs, vz = self.aux_view(i, slots)
        last = (end - 1) // g
        for j in range(b, last + 1):
            lo, hi = j * g, min((j + 1) * g, end)
            q, sc, zp = quantize_channels(exact[:, :, lo - base : hi - base, :], self.precision)
            data[:, :, lo:hi, :] = q
            vs[:, :, j : j + 1, :] = sc
            vz[:, :, j : j + 1, :] = zp
        self.residual[i][:, :, : end - last * g, :] = exact[:, :, last * g - base :, :]
        self._res_block[i] = last

    def _dequant_key(self, i: int, slots: int, a: int, b: int) -> np.ndarray:
        """Stored key rows ``[a, b)`` (one block) dequantised to f32."""
        j = a // self.groups[i]
        q = unpack(self.view(i, slots)[:, :, a:b, :], self.precision).astype(np.float32)
        vs, vz = self.aux_view(i, slots)
        return q * vs[:, :, j : j + 1, :].astype(np.float32) + vz[:, :, j : j + 1, :].astype(
            np.float32
        )

    def zero(self, next_tokens: int = 0) -> None:
        """New conversation: clear the buffer (``next_tokens`` matters to the block KV only)."""
        for f in self.flat:
            f.fill(0)
        for f in self.scale_flat:
            f.fill(1)
        for f in self.zp_flat:
            f.fill(0)
        self._res_block = [-1] * len(self.flat)

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
            if self.quantized:
                rows = self._aux_rows(i, count)
                for src, dst in zip(self.aux_view(i, src_slots), self.aux_view(i, dst_slots), strict=False):
                    tmp = src[:, :, :rows, :].copy()
                    dst[:, :, :rows, :] = tmp

        self.for_each(
            move, nbytes_hint=count * self.num_heads[0] * self.row[0] * self.dtype.itemsize
        )
