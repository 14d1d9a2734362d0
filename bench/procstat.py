"""Process memory for the benchmarks (Linux /proc): the resident set size now."""

from __future__ import annotations

__all__ = ["rss_mb"]


def rss_mb() -> float:
    """Resident set size of this process in MiB (NaN where /proc is missing)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")
