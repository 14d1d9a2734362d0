"""Paged KV cache bookkeeping: fixed-size blocks, a free list, one block table per sequence,
optional prefix caching (full blocks found again by their token content), copy-on-write forks
(beam search, parallel sampling: a fork shares its parent's blocks until it writes one), and a
block-status array that every model call is checked against (seed 002's bounds check)."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Hashable, Sequence

import numpy as np

from ov_npu_emu.errors import KVBlockError, KVCacheFullError

__all__ = ["BlockManager"]

#: ``owner`` of a block that is free or only held by the prefix cache
NOBODY = -1
#: ``owner`` of a block that more than one sequence acquired (a cached prefix block: read-only)
SHARED = -2


class BlockManager:
    """Blocks ``0 .. num_blocks-1`` of ``block_size`` token slots each.

    ``tables[seq_id]`` lists the physical blocks of one sequence in logical order.  ``status``
    holds each block's reference count (0 = free or cached but unused) and ``owner`` the sequence
    that may write it (``SHARED`` for blocks several sequences read: prefix blocks and forks,
    ``_holders`` names them), both numpy arrays so
    one vectorised test validates a whole model call.

    With ``prefix_caching`` every block a sequence has filled completely is remembered under
    (its parent block's entry, its tokens); a new sequence whose tokens start the same way takes
    those blocks instead of computing them.  Cached blocks nobody uses are evicted, least
    recently used first, when the free list runs dry.
    """

    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool = False) -> None:
        if block_size <= 0:
            raise KVBlockError(f"block size must be positive, got {block_size}")
        self.block_size = int(block_size)
        self.prefix_caching = bool(prefix_caching)
        self.num_blocks = 0
        self.status = np.zeros(0, dtype=np.int32)
        self.owner = np.zeros(0, dtype=np.int64)
        self._free: deque[int] = deque()
        self.tables: dict[int, list[int]] = {}
        # prefix cache: (parent entry id, tokens) -> (entry id, block); block -> its key
        self._cache: dict[tuple[int, tuple[Hashable, ...]], tuple[int, int]] = {}
        self._key_of: dict[int, tuple[int, tuple[Hashable, ...]]] = {}
        self._evictable: OrderedDict[int, None] = OrderedDict()
        self._holders: dict[int, set[int]] = {}  # SHARED block -> the sequences naming it
        self._chain: dict[int, list[int]] = {}  # seq -> entry ids of its registered blocks
        self._next_entry = 1
        self.cache_hits = 0  # blocks taken from the prefix cache
        # check_batch: seq -> (verified table, epoch, its blocks); epoch bumps on frees etc.
        self._verified: dict[int, tuple[list[int], int, set[int], int]] = {}
        self._epoch = 0
        self.grow(num_blocks)

    # -- capacity --------------------------------------------------------------------------
    def grow(self, num_blocks: int) -> None:
        """Add blocks ``self.num_blocks .. num_blocks-1`` to the free list."""
        if num_blocks <= self.num_blocks:
            return
        old = self.num_blocks
        self.status = np.concatenate([self.status, np.zeros(num_blocks - old, dtype=np.int32)])
        self.owner = np.concatenate([self.owner, np.full(num_blocks - old, NOBODY, dtype=np.int64)])
        self._free.extend(range(old, num_blocks))
        self.num_blocks = int(num_blocks)

    def clear(self) -> None:
        """No blocks at all (the real's dynamic cache after a generate() call); only when no
        sequence holds one and nothing is cached."""
        if self.tables or self._cache:
            raise KVBlockError("clear() with sequences or cached prefixes holding blocks; free them first")
        self.num_blocks = 0
        self.status = np.zeros(0, dtype=np.int32)
        self.owner = np.zeros(0, dtype=np.int64)
        self._free.clear()
        self._evictable.clear()
        self._verified.clear()
        self._epoch += 1

    @property
    def num_free_blocks(self) -> int:
        """Blocks that can be handed out: free ones and unused cached ones."""
        return len(self._free) + len(self._evictable)

    @property
    def shared_blocks(self) -> dict[int, set[int]]:
        """Blocks more than one sequence names, with those sequences."""
        return self._holders

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    def blocks_for(self, num_tokens: int) -> int:
        return -(-int(num_tokens) // self.block_size)

    def required_blocks(self, seq_id: int, num_tokens: int) -> int:
        """Blocks that must still be allocated so ``seq_id`` holds ``num_tokens`` tokens."""
        have = len(self.tables.get(seq_id, ()))
        return max(self.blocks_for(num_tokens) - have, 0)

    # -- allocation ------------------------------------------------------------------------
    def _take(self) -> int:
        if self._free:
            return self._free.popleft()
        b, _ = self._evictable.popitem(last=False)  # least recently used cached block
        self._epoch += 1
        key = self._key_of.pop(b)
        del self._cache[key]
        return b

    def allocate(self, seq_id: int, num_tokens: int) -> None:
        """Make ``seq_id``'s table hold at least ``num_tokens`` token slots."""
        need = self.required_blocks(seq_id, num_tokens)
        if need > self.num_free_blocks:
            raise KVCacheFullError(
                f"sequence {seq_id} needs {need} more KV blocks, {self.num_free_blocks} are free; "
                "raise SchedulerConfig.num_kv_blocks (or cache_size)"
            )
        table = self.tables.setdefault(seq_id, [])
        for _ in range(need):
            b = self._take()
            self.status[b] = 1
            self.owner[b] = seq_id
            table.append(b)

    def free(self, seq_id: int) -> None:
        """Drop ``seq_id``'s references; unreferenced blocks go back to the free list, or stay
        in the prefix cache (evictable) when their content is registered."""
        table = self.tables.pop(seq_id, None)
        self._chain.pop(seq_id, None)
        self._verified.pop(seq_id, None)
        self._epoch += 1
        if not table:
            return
        for b in table:
            if not 0 <= b < self.num_blocks or self.status[b] <= 0 or self.owner[b] == SHARED:
                self._check_block(seq_id, b, writable=False)  # never drop another's reference
            self._release(b, seq_id)

    def trim(self, seq_id: int, num_tokens: int) -> None:
        """Release the blocks of ``seq_id`` past its first ``num_tokens`` tokens (speculative
        decoding's rollback of rejected candidates; the real's clean_empty_blocks)."""
        table = self.tables.get(seq_id)
        keep = self.blocks_for(num_tokens)
        if not table or len(table) <= keep:
            return
        dropped = table[keep:]
        del table[keep:]
        chain = self._chain.get(seq_id)
        if chain:
            del chain[keep:]
        self._verified.pop(seq_id, None)
        self._epoch += 1
        for b in dropped:
            self._release(b, seq_id)

    def fork(self, parent_id: int, child_id: int) -> None:
        """``child_id`` starts as a copy of ``parent_id``'s table: every block gains a reference
        and becomes read-only for both (copy-on-write, see :meth:`make_writable`)."""
        table = self.tables.get(parent_id)
        if table is None:
            raise KVBlockError(f"cannot fork sequence {parent_id}: it holds no KV blocks")
        if child_id in self.tables:
            raise KVBlockError(f"cannot fork into sequence {child_id}: it already holds KV blocks")
        for b in table:
            self._check_block(parent_id, b, writable=False)
        self.tables[child_id] = list(table)
        self._chain[child_id] = list(self._chain.get(parent_id, ()))
        for b in table:
            self.status[b] += 1
            self._share(b, child_id)
        self._epoch += 1

    def _share(self, b: int, seq_id: int) -> None:
        """``seq_id`` becomes one more holder of block ``b`` (its count is already raised)."""
        holders = self._holders.get(b)
        if holders is None:
            holders = self._holders[b] = {int(self.owner[b])}
            self.owner[b] = SHARED
        holders.add(seq_id)

    def copies_needed(self, writes: list[tuple[int, int]]) -> int:
        """Block copies :meth:`make_writable` will make for every ``(seq_id, past)`` of one
        step: a block shared by ``k`` sequences and written by ``w`` of them is copied
        ``min(w, k - 1)`` times (the last holder writes the original)."""
        n = self.num_blocks  # a forged entry needs no copy: check_batch refuses it
        writers: dict[int, int] = {}
        for seq_id, past in writes:
            for b in self.tables.get(seq_id, ())[past // self.block_size :]:
                if 0 <= b < n and self.status[b] > 1:
                    writers[b] = writers.get(b, 0) + 1
        return sum(min(w, int(self.status[b]) - 1) for b, w in writers.items())

    def make_writable(self, seq_id: int, past: int) -> list[tuple[int, int]]:
        """Copy-on-write: give ``seq_id`` its own copy of every shared block it writes from
        token ``past`` on; returns the ``(source, destination)`` block copies the KV cache must
        make before the model call."""
        table = self.tables.get(seq_id)
        if table is None:
            return []
        copies = []
        for i in range(past // self.block_size, len(table)):
            b = table[i]
            if not 0 <= b < self.num_blocks or self.status[b] <= 1:
                continue  # own block (or a forged entry, which check_batch refuses)
            self._check_block(seq_id, b, writable=False)  # a forged shared entry: refused
            if not self.num_free_blocks:
                raise KVCacheFullError(
                    f"sequence {seq_id} must copy a shared KV block but none is free; raise "
                    "SchedulerConfig.num_kv_blocks (or cache_size)"
                )
            new = self._take()
            self.status[new] = 1
            self.owner[new] = seq_id
            table[i] = new
            self._release(b, seq_id)
            copies.append((b, new))
        if copies:
            self._epoch += 1
        return copies

    def _release(self, b: int, seq_id: int) -> None:
        """Drop one reference to block ``b`` (held by ``seq_id``, which no longer names it)."""
        self.status[b] -= 1
        if self.status[b] == 0:
            self.owner[b] = NOBODY
            if b in self._key_of:
                self._evictable[b] = None
            else:
                self._free.append(b)
            self._holders.pop(b, None)
        elif self.owner[b] == SHARED:
            holders = self._holders[b]
            holders.discard(seq_id)
            if self.status[b] == 1:  # the last holder may write the block again
                self.owner[b] = holders.pop()
                del self._holders[b]

    # -- prefix caching --------------------------------------------------------------------
    def restore_prefix(self, seq_id: int, tokens: Sequence[Hashable], limit: int) -> int:
        """Give a sequence without blocks the cached blocks its first tokens match, at most
        ``limit`` tokens (at least one token must still be computed); returns the tokens
        restored (a multiple of the block size)."""
        if not self.prefix_caching or seq_id in self.tables:
            return 0
        bs = self.block_size
        parent = 0
        table: list[int] = []
        chain: list[int] = []
        while (len(table) + 1) * bs <= limit:
            i = len(table)
            hit = self._cache.get((parent, tuple(tokens[i * bs : (i + 1) * bs])))
            if hit is None:
                break
            entry, b = hit
            if self.status[b] == 0:
                self._evictable.pop(b, None)
                self.owner[b] = seq_id
                self.status[b] += 1
            else:
                self.status[b] += 1
                self._share(b, seq_id)
            table.append(b)
            chain.append(entry)
            parent = entry
        if table:
            self._epoch += 1
            self.tables[seq_id] = table
            self._chain[seq_id] = chain
            self.cache_hits += len(table)
        return len(table) * bs

    def register(self, seq_id: int, tokens: Sequence[Hashable], processed: int) -> None:
        """Remember the blocks of ``seq_id`` that ``processed`` tokens have filled."""
        if not self.prefix_caching:
            return
        bs = self.block_size
        table = self.tables.get(seq_id, [])
        chain = self._chain.setdefault(seq_id, [])
        while len(chain) < min(processed // bs, len(table)):
            i = len(chain)
            key = (chain[-1] if chain else 0, tuple(tokens[i * bs : (i + 1) * bs]))
            hit = self._cache.get(key)
            if hit is not None:
                chain.append(hit[0])  # same content cached in another block: follow that entry
                continue
            b = table[i]
            if b in self._key_of:  # the block already carries another key (cannot happen)
                chain.append(self._cache[self._key_of[b]][0])
                continue
            entry = self._next_entry
            self._next_entry += 1
            self._cache[key] = (entry, b)
            self._key_of[b] = key
            chain.append(entry)

    # -- checks ----------------------------------------------------------------------------
    def _check_block(self, seq_id: int, b: int, writable: bool) -> None:
        if not 0 <= b < self.num_blocks:
            raise KVBlockError(
                f"block table of sequence {seq_id} names block {b}, outside 0..{self.num_blocks - 1}; "
                "the table was corrupted (nothing was run)"
            )
        if self.status[b] <= 0:
            raise KVBlockError(
                f"block table of sequence {seq_id} names block {b}, which is free; the table "
                "was corrupted (nothing was run)"
            )
        owner = int(self.owner[b])
        if owner == SHARED and seq_id not in self._holders[b]:
            raise KVBlockError(
                f"block table of sequence {seq_id} names block {b}, shared by sequences "
                f"{sorted(self._holders[b])} only; the table was corrupted (nothing was run)"
            )
        if owner != seq_id and not (owner == SHARED and not writable):
            what = "shared (read-only)" if owner == SHARED else f"owned by sequence {owner}"
            raise KVBlockError(
                f"block table of sequence {seq_id} names block {b}, {what}; the table was "
                "corrupted (nothing was run)"
            )

    def check(self, seq_id: int, num_tokens: int, past: int = 0) -> list[int]:
        """The table of ``seq_id`` after validating it holds ``num_tokens`` tokens in blocks that
        exist and are in use, that the blocks written from token ``past`` on are its own, and
        that no block is named twice; :class:`KVBlockError` otherwise."""
        table = self.tables.get(seq_id)
        if table is None:
            raise KVBlockError(f"sequence {seq_id} has no block table")
        if len(table) * self.block_size < num_tokens:
            raise KVBlockError(
                f"sequence {seq_id} needs {num_tokens} token slots but its table holds "
                f"{len(table)} blocks of {self.block_size}"
            )
        first_written = past // self.block_size
        seen: set[int] = set()
        for i, b in enumerate(table):
            self._check_block(seq_id, int(b), writable=i >= first_written)
            if b in seen:
                raise KVBlockError(
                    f"block table of sequence {seq_id} names block {b} twice; the table was "
                    "corrupted (nothing was run)"
                )
            seen.add(int(b))
        return table

    def check_batch(self, wanted: list[tuple[int, int, int]]) -> list[list[int]]:
        """:meth:`check` for every ``(seq_id, num_tokens, past)`` of one model call.

        Each sequence's last verified table is remembered with its write start and the
        manager's epoch (bumped by every free, eviction and prefix restore, the only operations
        that change the status of blocks already in a table): when the epoch is unchanged, the
        write start has not moved back and the table still starts with that snapshot, only its
        new blocks are tested; otherwise (a table edited in place, an epoch change) the whole
        table is.  A forged entry is therefore always seen, at a cost per step that does not
        grow with the sequence length.  No block may be written by two sequences of one call."""
        bs = self.block_size
        tables = []
        for seq_id, num_tokens, past in wanted:
            table = self.tables.get(seq_id)
            if table is None or len(table) * bs < num_tokens:
                self.check(seq_id, num_tokens)  # raises with the precise message
            snap = self._verified.get(seq_id)
            first_written = past // bs
            if snap is not None and snap[1] == self._epoch and first_written >= snap[3]:
                old, _, seen, _ = snap
                n = len(old)
                if len(table) >= n and table[:n] == old:
                    for i in range(n, len(table)):
                        b = table[i]
                        if b in seen:
                            self.check(seq_id, num_tokens, past)
                        self._check_block(seq_id, b, writable=i >= first_written)
                        seen.add(b)
                        old.append(b)
                    tables.append(table)
                    continue
            self.check(seq_id, num_tokens, past)
            # blocks before first_written were verified read-only: a later call may only move
            # the write region forward (it moves back only after a free, which bumps the epoch)
            self._verified[seq_id] = (list(table), self._epoch, set(table), first_written)
            tables.append(table)
        if len(wanted) > 1:
            written = [b for (_, _, past), t in zip(wanted, tables, strict=False) for b in t[past // bs :]]
            if len(set(written)) != len(written):
                raise KVBlockError("one block is written by two sequences in one call; refused")
        return tables
