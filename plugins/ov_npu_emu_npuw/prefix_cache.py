"""Prefix KV cache (NPUW_LLM_ENABLE_PREFIX_CACHING): prompt blocks whose KV a later prompt reuses.

A prompt is cut into blocks of ``block_size`` tokens.  Each block is keyed by a digest of its
tokens chained with its parent's key, so a key names the *whole* prefix up to the block's end —
the KV of a token depends on every token before it.  A new chunked prefill restores the longest
chain of cached blocks into the KV buffer and only computes the rest; the blocks it computes are
stored for the next prompt.  Capacity is counted in blocks; the least recently used *leaf* block
(no cached child) is evicted first, so a cached chain never loses an inner link.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["PrefixCache"]

logger = logging.getLogger(__name__)

_ROOT = b""


@dataclasses.dataclass
class _Block:
    key: bytes
    parent: bytes
    tokens: tuple[int, ...]
    kv: list[np.ndarray]  # per KV tensor, logical [1, H, B, D] copies in the storage dtype
    children: int = 0


class PrefixCache:
    """Blocks of prompt KV keyed by prefix; LRU over leaf blocks, ``max_blocks`` at most."""

    def __init__(self, block_size: int, max_blocks: int) -> None:
        self.block_size = block_size
        self.max_blocks = max_blocks
        self._blocks: OrderedDict[bytes, _Block] = OrderedDict()  # oldest use first
        self.hit_tokens = 0  # tokens restored by the last match
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._blocks)

    @staticmethod
    def _key(parent: bytes, tokens: Sequence[int]) -> bytes:
        return hashlib.blake2b(
            parent + np.asarray(tokens, np.int64).tobytes(), digest_size=16
        ).digest()

    def match(self, tokens: Sequence[int], limit: int) -> list[_Block]:
        """The cached blocks that start ``tokens``, covering at most ``limit`` tokens."""
        found: list[_Block] = []
        parent = _ROOT
        b = self.block_size
        for start in range(0, limit - b + 1, b):
            chunk = tuple(int(t) for t in tokens[start : start + b])
            key = self._key(parent, chunk)
            block = self._blocks.get(key)
            if block is None or block.tokens != chunk or block.parent != parent:
                break
            self._blocks.move_to_end(key)
            found.append(block)
            parent = key
        self.hit_tokens = len(found) * b
        return found

    def store(
        self,
        tokens: Sequence[int],
        upto: int,
        rows: Callable[[int, int], list[np.ndarray]],
    ) -> int:
        """Cache every whole block of ``tokens[:upto]`` not cached yet; ``rows(a, b)`` gives the
        KV of tokens [a, b) per tensor.  Returns how many blocks were added."""
        parent = _ROOT
        added = 0
        b = self.block_size
        for start in range(0, upto - b + 1, b):
            chunk = tuple(int(t) for t in tokens[start : start + b])
            key = self._key(parent, chunk)
            block = self._blocks.get(key)
            if block is None:
                if not self._make_room():
                    break
                block = _Block(key, parent, chunk, [r.copy() for r in rows(start, start + b)])
                self._blocks[key] = block
                if parent in self._blocks:
                    self._blocks[parent].children += 1
                added += 1
            self._blocks.move_to_end(key)
            parent = key
        return added

    def _make_room(self) -> bool:
        while len(self._blocks) >= self.max_blocks:
            leaf = next((k for k, blk in self._blocks.items() if blk.children == 0), None)
            if leaf is None:  # cannot happen in a forest, but never loop forever
                return False
            gone = self._blocks.pop(leaf)
            if gone.parent in self._blocks:
                self._blocks[gone.parent].children -= 1
            self.evicted += 1
        return True

    def clear(self) -> None:
        self._blocks.clear()
