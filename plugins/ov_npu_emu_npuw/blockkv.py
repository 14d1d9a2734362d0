"""NPUW_LLM_ENABLE_BLOCK_BASED_KV_CACHE: the KV cache as fixed-size blocks allocated on demand.

What the real NPUW does (docs/npuw.md "Block-based KV cache"), and so do we:

* The block size is the prefill chunk size (so block mode needs chunked prefill).
* Every static model with a past (the chunk-prefill models and each generate variant) takes its
  past as numbered block inputs ``past_key_values.N.key_block_0 …`` of ``block`` slots each, plus
  ``past_key_values.N.key_block_tail`` for the remainder of its ``S`` past slots
  (:func:`split_kv_into_blocks`, the real ``SplitKVCacheIntoBlocks``).  Values stored transposed
  (NPUW_LLM_OPTIMIZE_V_TENSORS) are split along their last axis.
* Token ``t`` always lives at row ``t % block`` of logical block ``t // block`` whatever the
  model, so a generate-variant switch or a bigger pyramid prefill model only rebinds blocks: no
  migration copy (the contiguous buffer's views differ in stride and need one).
* Numbered inputs are bound zero-copy to the block memory (``set_tensor``); an input whose block
  is not allocated yet reads a shared zero "dummy" block (masked out by the attention mask).  The
  tail input is a copy, refreshed as rows are written.
* Blocks are allocated when the first token lands in them and all go back to the free list when
  a new conversation starts; the memory of the blocks the next prompt needs stays allocated
  ("keep warm"), the rest is dropped.

Ours keeps one block table for all KV tensors (the real keeps one manager per layer key/value;
all of them allocate in the same order) and checks every block access against a status array:
an out-of-range or free block is a :class:`~ov_npu_emu.errors.KVBlockError`, never a silent read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from ov_npu_emu.errors import KVBlockError, KVCacheFullError
from ov_npu_emu_npuw.model_io import KVLayout, find_param

if TYPE_CHECKING:
    from ov_npu_emu.api.infer_request import InferRequest

__all__ = ["BlockKV", "BlockTable", "block_input_names", "has_past_input", "split_kv_into_blocks"]

logger = logging.getLogger(__name__)

TAIL = "_block_tail"


def block_input_names(past: str, slots: int, block: int) -> tuple[list[str], str | None]:
    """Numbered block input names and the tail input name (None if ``slots`` is a multiple of
    ``block``) that replace the past input ``past`` of ``slots`` slots."""
    numbered, tail = divmod(slots, block)
    return [f"{past}_block_{j}" for j in range(numbered)], (f"{past}{TAIL}" if tail else None)


def has_past_input(past: str, names: Iterable[str]) -> bool:
    """Whether a sub-model's input names hold past ``past``, contiguous or split into blocks."""
    names = set(names)
    return past in names or f"{past}_block_0" in names or f"{past}{TAIL}" in names


def split_kv_into_blocks(model: ov.Model, kv: KVLayout, block: int) -> None:
    """Replace each past input ``[1,H,S,D]`` (``[1,H,D,S]`` for transposed V) by block inputs.

    Like the real pass, the blocks go into the ``Concat(past, new)`` that read the past (a Convert
    per block when the past went through one); a past with other readers (ShapeOf, our V
    transpose at the boundary) is rebuilt as ``Concat(blocks)`` in its place instead.
    """
    names = {n for p in model.inputs for n in p.get_names()}
    for i, name in enumerate(kv.past_names):
        if name not in names:
            continue  # the static whole-prompt prefill has no past
        param = find_param(model, name)
        shape = list(param.get_partial_shape().to_shape())
        axis = 3 if kv.transposed(i) else 2
        numbered, tail = block_input_names(name, shape[axis], block)
        parts = []
        for part_name, slots in [(n, block) for n in numbered] + ([(tail, shape[axis] % block)] if tail else []):
            part_shape = list(shape)
            part_shape[axis] = slots
            p = ops.parameter(part_shape, param.get_element_type(), name=part_name)
            p.output(0).get_tensor().set_names({part_name})
            parts.append(p)
        fold = _concat_with_new(param, axis)
        if fold is not None:  # the real's graph: Concat(cvt(block_0) … cvt(tail), new)
            convert, concat = fold
            et = convert.get_output_element_type(0) if convert else None
            ins = [ops.convert(p, et).output(0) if et else p.output(0) for p in parts]
            merged = ops.concat([*ins, concat.input_value(1)], axis)
            merged.set_friendly_name(concat.get_friendly_name())
            concat.output(0).replace(merged.output(0))
        else:  # other readers too (ShapeOf, V transposed at the boundary): rebuild the past
            joined = parts[0] if len(parts) == 1 else ops.concat([p.output(0) for p in parts], axis)
            param.output(0).replace(joined.output(0))
        model.remove_parameter(param)
        model.add_parameters(parts)
    model.validate_nodes_and_infer_types()


def _concat_with_new(param: ov.Node, axis: int) -> tuple[ov.Node | None, ov.Node] | None:
    """(Convert or None, Concat) when the past's only reader is ``Concat(past, new)`` along
    ``axis``, directly or through one Convert; None otherwise."""
    targets = list(param.output(0).get_target_inputs())
    if len(targets) != 1:
        return None
    node, index, convert = targets[0].get_node(), targets[0].get_index(), None
    if node.get_type_name() == "Convert":
        convert = node
        targets = list(node.output(0).get_target_inputs())
        if len(targets) != 1:
            return None
        node, index = targets[0].get_node(), targets[0].get_index()
    if node.get_type_name() != "Concat" or node.get_input_size() != 2 or index != 0:
        return None
    if int(node.get_attributes()["axis"]) % 4 != axis:
        return None
    return convert, node


class BlockTable:
    """The block pool's bookkeeping: a status array, a LIFO free stack and the logical table.

    ``table[j]`` is the physical block holding tokens ``[j·block, (j+1)·block)``.  ``status`` is
    FREE (0), ALLOCATED (1) or FULL (2) per physical block, like the real KVCacheBlockManager's
    block states; ``tokens`` counts the rows written to each.
    """

    FREE, ALLOCATED, FULL = 0, 1, 2

    def __init__(self, num_blocks: int, block: int) -> None:
        self.block = block
        self.num_blocks = num_blocks
        self.status = np.zeros(num_blocks, np.int8)
        self.tokens = np.zeros(num_blocks, np.int32)
        self.table: list[int] = []
        self._free = list(range(num_blocks - 1, -1, -1))  # block 0 on top, as the real's stack

    def check(self, b: int) -> None:
        """The block-status check: ``b`` must be a block of the pool that is in use."""
        if not 0 <= b < self.num_blocks:
            raise KVBlockError(
                f"KV block {b} is out of range (valid 0..{self.num_blocks - 1}); the block table "
                "is corrupted: start a new conversation (reset_state)"
            )
        if self.status[b] == self.FREE:
            raise KVBlockError(
                f"KV block {b} is free (released at the last new conversation or never allocated); "
                "the block table is stale: start a new conversation (reset_state)"
            )

    def allocate(self) -> int:
        if not self._free:
            raise KVCacheFullError(
                f"KV-Cache is full: all {self.num_blocks} blocks of {self.block} tokens are in use"
            )
        b = self._free.pop()
        self.status[b] = self.ALLOCATED
        self.tokens[b] = 0
        self.table.append(b)
        return b

    def note_rows(self, b: int, rows: int) -> None:
        self.tokens[b] = max(int(self.tokens[b]), rows)
        if self.tokens[b] >= self.block:
            self.status[b] = self.FULL

    def release(self) -> None:
        self.status[:] = self.FREE
        self.tokens[:] = 0
        self.table = []
        self._free = list(range(self.num_blocks - 1, -1, -1))


class _View:
    """One sub-request's past: its numbered block inputs and its tail copy."""

    def __init__(self, req: InferRequest, names: list[list[str]], tails: list[np.ndarray | None]):
        self.req = req
        self.names = names  # per KV tensor: numbered input names
        self.tails = tails  # per KV tensor: the bound tail array (storage layout) or None
        self.numbered = len(names[0]) if names else 0
        self.tail_lo = 0  # tokens [tail_lo, tail_hi) are in the tail input (set by BlockKV.bind)
        self.tail_hi = 0


class BlockKV:
    """Block-backed KV for one infer request, with the interface LLMInferRequest uses of
    :class:`~ov_npu_emu_npuw.kvcache.KVBuffers` (``write``, ``migrate``, ``zero`` …)."""

    paged = True
    quantized = False

    def __init__(
        self,
        past_names: tuple[str, ...],
        num_heads: tuple[int, ...],
        head_dims: tuple[int, ...],
        max_slots: int,
        total_size: int,
        block: int,
        dtype: np.dtype,
        transposed: tuple[bool, ...],
    ) -> None:
        self.past_names = past_names
        self.num_heads = num_heads
        self.head_dims = head_dims
        self.row = head_dims
        self.max_slots = max_slots
        self.block = block
        self.dtype = np.dtype(dtype)
        self.transposed = transposed
        # real: max_blocks = ceil(total KV size / block size), memory allocated on first use
        self.blocks = BlockTable(-(-total_size // block), block)
        self.mem: list[list[np.ndarray | None]] = [[None] * self.blocks.num_blocks for _ in past_names]
        self._tensors: dict[tuple[int, int], ov.Tensor] = {}
        self._dummy: dict[tuple[int, ...], ov.Tensor] = {}
        self._views: list[_View] = []
        self._rows_of: dict[int, list[np.ndarray]] = {}  # block -> logical [1,H,C,D] view per tensor
        self.peak_block_bytes = 0

    # -- geometry -----------------------------------------------------------------------
    def _block_shape(self, i: int, slots: int) -> tuple[int, ...]:
        h, d = self.num_heads[i], self.head_dims[i]
        return (1, h, d, slots) if self.transposed[i] else (1, h, slots, d)

    def _logical(self, i: int, arr: np.ndarray) -> np.ndarray:
        return arr.transpose(0, 1, 3, 2) if self.transposed[i] else arr

    def __len__(self) -> int:
        return len(self.past_names)

    # -- memory accounting --------------------------------------------------------------
    @property
    def block_bytes(self) -> int:
        """Bytes of block memory held now (blocks in use plus those kept warm)."""
        return sum(m.nbytes for per in self.mem for m in per if m is not None)

    @property
    def used_block_bytes(self) -> int:
        """Bytes of the blocks the conversation uses."""
        return sum(self.mem[i][b].nbytes for i in range(len(self)) for b in self.blocks.table)

    @property
    def fixed_bytes(self) -> int:
        """Bytes that do not grow with the conversation: tail copies and the shared dummies."""
        tails = sum(t.nbytes for v in self._views for t in v.tails if t is not None)
        return tails + sum(t.data.nbytes for t in self._dummy.values())

    @property
    def nbytes(self) -> int:
        return self.block_bytes + self.fixed_bytes

    scale_nbytes = 0  # no u8/u4 block KV (config.py refuses the combination)
    residual_nbytes = 0

    # -- block access (status-checked) --------------------------------------------------
    def block_array(self, i: int, b: int) -> np.ndarray:
        """Storage of physical block ``b`` of KV tensor ``i``; a free or out-of-range block is a
        KVBlockError."""
        self.blocks.check(b)
        m = self.mem[i][b]
        if m is None:  # unreachable unless the table was forged: allocate() fills every tensor
            raise KVBlockError(f"KV block {b} of tensor {self.past_names[i]} has no memory")
        return m

    def _tensor(self, i: int, b: int) -> ov.Tensor:
        t = self._tensors.get((i, b))
        if t is None:
            t = self._tensors[i, b] = ov.Tensor(self.block_array(i, b), shared_memory=True)
        return t

    def _dummy_tensor(self, i: int) -> ov.Tensor:
        shape = self._block_shape(i, self.block)
        t = self._dummy.get(shape)
        if t is None:
            t = self._dummy[shape] = ov.Tensor(np.zeros(shape, self.dtype), shared_memory=True)
        return t

    def _grow(self, tokens: int) -> None:
        """Allocate blocks until the table covers ``tokens`` tokens; rebind the new blocks."""
        while len(self.blocks.table) * self.block < tokens:
            j = len(self.blocks.table)
            b = self.blocks.allocate()
            for i in range(len(self)):
                if self.mem[i][b] is None:
                    self.mem[i][b] = np.zeros(self._block_shape(i, self.block), self.dtype)
            self._rows_of[b] = [self._logical(i, self.mem[i][b]) for i in range(len(self))]
            for v in self._views:
                if j < v.numbered:
                    for i in range(len(self)):
                        v.req.set_tensor(v.names[i][j], self._tensor(i, b))
            self.peak_block_bytes = max(self.peak_block_bytes, self.block_bytes)
            logger.debug("KV block %d allocated for tokens [%d, %d)", b, j * self.block, (j + 1) * self.block)

    # -- the KVBuffers interface --------------------------------------------------------
    def bind(self, req: InferRequest, slots: int) -> None:
        """Bind the past of a sub-request with ``slots`` past slots: numbered inputs to the
        blocks (or the dummy), the tail input to its own copy."""
        names, tails = [], []
        for i, past in enumerate(self.past_names):
            numbered, tail = block_input_names(past, slots, self.block)
            for j, n in enumerate(numbered):
                has = j < len(self.blocks.table)
                req.set_tensor(n, self._tensor(i, self.blocks.table[j]) if has else self._dummy_tensor(i))
            arr = None
            if tail is not None:
                arr = np.zeros(self._block_shape(i, slots % self.block), self.dtype)
                req.set_tensor(tail, ov.Tensor(arr, shared_memory=True))
            names.append(numbered)
            tails.append(arr)
        view = _View(req, names, tails)
        view.tail_lo = view.numbered * self.block
        view.tail_hi = slots if any(t is not None for t in tails) else view.tail_lo
        self._views.append(view)

    def write(self, i: int, slots: int, start: int, rows: np.ndarray) -> None:
        """Store logical rows ``[1, H, n, D]`` as tokens ``[start, start+n)`` (``slots`` is the
        view the caller thinks in; positions are absolute here)."""
        n = rows.shape[2]
        end = start + n
        if end > self.max_slots:
            raise KVCacheFullError(
                f"KV-Cache is full: writing tokens up to {end} into {self.max_slots} slots"
            )
        self._grow(end)
        t = start
        while t < end:
            j, off = divmod(t, self.block)
            cnt = min(self.block - off, end - t)
            b = self.blocks.table[j]
            dst = self._logical(i, self.block_array(i, b))
            dst[:, :, off : off + cnt, :] = rows[:, :, t - start : t - start + cnt, :]
            self.blocks.note_rows(b, off + cnt)
            t += cnt
        for v in self._views:  # refresh the tail copies that cover these tokens
            tail = v.tails[i]
            if tail is None:
                continue
            lo = v.numbered * self.block
            a, z = max(start, lo), min(end, lo + self._logical(i, tail).shape[2])
            if a < z:
                self._logical(i, tail)[:, :, a - lo : z - lo, :] = rows[:, :, a - start : z - start, :]

    def write_step(self, slots: int, start: int, rows: list[np.ndarray]) -> None:
        """:meth:`write` for every tensor at once; the one-token decode step checks its block
        once and assigns one row per tensor (the hot path)."""
        if rows[0].shape[2] != 1 or start + 1 > self.max_slots:
            for i, r in enumerate(rows):
                self.write(i, slots, start, r)
            return
        self._grow(start + 1)
        j, off = divmod(start, self.block)
        b = self.blocks.table[j]
        self.blocks.check(b)
        for dst, r in zip(self._rows_of[b], rows, strict=True):
            dst[:, :, off, :] = r[:, :, 0, :]
        self.blocks.note_rows(b, off + 1)
        for v in self._views:
            if v.tail_lo <= start < v.tail_hi:
                for i, r in enumerate(rows):
                    self._logical(i, v.tails[i])[:, :, start - v.tail_lo, :] = r[:, :, 0, :]

    def rows(self, i: int, a: int, b: int) -> np.ndarray:
        """Logical rows ``[1, H, b−a, D]`` of tokens ``[a, b)`` gathered from the blocks."""
        parts = []
        t = a
        while t < b:
            j, off = divmod(t, self.block)
            if j >= len(self.blocks.table):
                raise KVBlockError(f"token {t} is beyond the allocated KV blocks ({len(self.blocks.table)})")
            cnt = min(self.block - off, b - t)
            parts.append(self._logical(i, self.block_array(i, self.blocks.table[j]))[:, :, off : off + cnt, :])
            t += cnt
        return np.concatenate(parts, axis=2)

    def migrate(self, src_slots: int, dst_slots: int, count: int) -> None:
        """Nothing to move: a token sits in the same block row for every model."""

    def zero(self, next_tokens: int = 0) -> None:
        """New conversation: every block back to the free list, inputs back to the dummy; the
        memory of the blocks ``next_tokens`` will need stays allocated (the real's keep-warm)."""
        self.blocks.release()
        keep = -(-next_tokens // self.block)
        for per in self.mem:
            for b in range(keep, len(per)):  # the free stack hands out 0, 1, … first
                per[b] = None
        self._tensors = {k: t for k, t in self._tensors.items() if k[1] < keep}
        self._rows_of = {}
        for v in self._views:
            for i in range(len(self)):
                for n in v.names[i]:
                    v.req.set_tensor(n, self._dummy_tensor(i))

    def for_each(self, fn: Callable[[int], None], nbytes_hint: int = 0) -> None:
        for i in range(len(self)):
            fn(i)
