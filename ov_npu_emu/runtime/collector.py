"""Python's cyclic garbage collector paused around work that builds many objects at once.

Compiling an LLM for NPUW builds tens of thousands of small objects (tasks, values, descriptors,
metadata dicts); the allocations trigger collections, and every full one walks all the tracked
objects of the process while freeing nothing: the compiler's structures are acyclic and die by
reference count (docs/performance_log.md "Load time of a 1B int4 on the emulated NPU").
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["collector_paused"]


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Disable the cyclic GC inside the block; re-enable it on exit if it was enabled on entry
    (nesting and a caller's own ``gc.disable()`` are left as they were)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
