"""Paged KV cache bookkeeping: fixed-size blocks, a free list, one block table per sequence and
a block-status array that every model call is checked against (seed 002's bounds check)."""

from __future__ import annotations

from collections import deque

import numpy as np

from ov_npu_emu.errors import KVBlockError, KVCacheFullError

__all__ = ["BlockManager"]

#: block status values (the owner sequence id is kept separately)
FREE = 0
USED = 1


class BlockManager:
    """Blocks ``0 .. num_blocks-1`` of ``block_size`` token slots each.

    ``tables[seq_id]`` lists the physical blocks of one sequence in logical order; a block
    belongs to at most one sequence (no prefix sharing / copy-on-write here).  ``status`` and
    ``owner`` are numpy arrays so :meth:`check` can validate a whole batch cheaply.
    """

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if block_size <= 0:
            raise KVBlockError(f"block size must be positive, got {block_size}")
        self.block_size = int(block_size)
        self.num_blocks = 0
        self.status = np.zeros(0, dtype=np.int8)
        self.owner = np.zeros(0, dtype=np.int64)
        self._free: deque[int] = deque()
        self.tables: dict[int, list[int]] = {}
        self.grow(num_blocks)

    # -- capacity --------------------------------------------------------------------------
    def grow(self, num_blocks: int) -> None:
        """Add blocks ``self.num_blocks .. num_blocks-1`` to the free list."""
        if num_blocks <= self.num_blocks:
            return
        old = self.num_blocks
        self.status = np.concatenate([self.status, np.zeros(num_blocks - old, dtype=np.int8)])
        self.owner = np.concatenate([self.owner, np.full(num_blocks - old, -1, dtype=np.int64)])
        self._free.extend(range(old, num_blocks))
        self.num_blocks = int(num_blocks)

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self._free)

    def blocks_for(self, num_tokens: int) -> int:
        return -(-int(num_tokens) // self.block_size)

    def required_blocks(self, seq_id: int, num_tokens: int) -> int:
        """Blocks that must still be allocated so ``seq_id`` holds ``num_tokens`` tokens."""
        have = len(self.tables.get(seq_id, ()))
        return max(self.blocks_for(num_tokens) - have, 0)

    def free_slots(self, seq_id: int, num_tokens_now: int) -> int:
        """Token slots ``seq_id`` could still get: its own partial block plus the free list."""
        have = len(self.tables.get(seq_id, ())) * self.block_size
        return have - int(num_tokens_now) + len(self._free) * self.block_size

    # -- allocation ------------------------------------------------------------------------
    def allocate(self, seq_id: int, num_tokens: int) -> None:
        """Make ``seq_id``'s table hold at least ``num_tokens`` token slots."""
        need = self.required_blocks(seq_id, num_tokens)
        if need > len(self._free):
            raise KVCacheFullError(
                f"sequence {seq_id} needs {need} more KV blocks, {len(self._free)} are free; "
                "raise SchedulerConfig.num_kv_blocks (or cache_size)"
            )
        table = self.tables.setdefault(seq_id, [])
        for _ in range(need):
            b = self._free.popleft()
            self.status[b] = USED
            self.owner[b] = seq_id
            table.append(b)

    def free(self, seq_id: int) -> None:
        """Return every block of ``seq_id`` to the free list (no-op for unknown ids)."""
        table = self.tables.pop(seq_id, None)
        if not table:
            return
        for b in table:
            self._check_block(seq_id, b)
            self.status[b] = FREE
            self.owner[b] = -1
            self._free.append(b)

    def fork(self, parent_id: int, child_id: int) -> None:
        raise KVBlockError(
            "copy-on-write forks of KV blocks (beam search / parallel sampling in the paged "
            "backend) are not implemented; use ATTENTION_BACKEND='SDPA' or num_beams=1 and "
            "num_return_sequences=1"
        )

    # -- checks ----------------------------------------------------------------------------
    def _check_block(self, seq_id: int, b: int) -> None:
        if not 0 <= b < self.num_blocks:
            raise KVBlockError(
                f"block table of sequence {seq_id} names block {b}, outside 0..{self.num_blocks - 1}; "
                "the table was corrupted (nothing was run)"
            )
        if self.status[b] != USED:
            raise KVBlockError(
                f"block table of sequence {seq_id} names block {b}, which is free; the table "
                "was corrupted (nothing was run)"
            )
        if self.owner[b] != seq_id:
            raise KVBlockError(
                f"block table of sequence {seq_id} names block {b}, owned by sequence "
                f"{int(self.owner[b])}; the table was corrupted (nothing was run)"
            )

    def check_batch(self, wanted: list[tuple[int, int]]) -> list[list[int]]:
        """:meth:`check` for every ``(seq_id, num_tokens)`` of one model call at once: the
        tables, after one vectorised test that every block used is in range, in use, owned by
        its sequence and named once; the per-sequence check finds the culprit otherwise."""
        tables = []
        sizes = []
        for seq_id, num_tokens in wanted:
            table = self.tables.get(seq_id)
            if table is None or len(table) * self.block_size < num_tokens:
                self.check(seq_id, num_tokens)  # raises with the precise message
            tables.append(table)
            sizes.append(len(table))
        flat = np.fromiter((b for t in tables for b in t), dtype=np.int64, count=sum(sizes))
        seqs = np.repeat(np.fromiter((w[0] for w in wanted), dtype=np.int64, count=len(wanted)), sizes)
        ok = flat.size == 0 or (
            flat.min() >= 0
            and flat.max() < self.num_blocks
            and bool(np.all(self.status[flat] == USED))
            and bool(np.all(self.owner[flat] == seqs))
            and np.unique(flat).size == flat.size
        )
        if not ok:
            for seq_id, num_tokens in wanted:
                self.check(seq_id, num_tokens)
            raise KVBlockError("one block appears in the tables of two sequences; refused")
        return tables

    def check(self, seq_id: int, num_tokens: int) -> list[int]:
        """The table of ``seq_id`` after validating it holds ``num_tokens`` tokens in blocks
        that exist, are in use and belong to it; :class:`KVBlockError` otherwise."""
        table = self.tables.get(seq_id)
        if table is None:
            raise KVBlockError(f"sequence {seq_id} has no block table")
        if len(table) * self.block_size < num_tokens:
            raise KVBlockError(
                f"sequence {seq_id} needs {num_tokens} token slots but its table holds "
                f"{len(table)} blocks of {self.block_size}"
            )
        arr = np.asarray(table, dtype=np.int64)
        if (
            arr.size
            and (
                arr.min() < 0
                or arr.max() >= self.num_blocks
                or not np.all(self.status[arr] == USED)
                or not np.all(self.owner[arr] == seq_id)
                or np.unique(arr).size != arr.size
            )
        ):
            seen: set[int] = set()
            for b in table:
                self._check_block(seq_id, int(b))
                if b in seen:
                    raise KVBlockError(
                        f"block table of sequence {seq_id} names block {b} twice; the table was "
                        "corrupted (nothing was run)"
                    )
                seen.add(int(b))
        return table
