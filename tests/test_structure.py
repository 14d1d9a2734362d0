"""The code's structure, held as numbers (tools/code_health.py computes them; issue 27):
no module-level import cycles, few reaches into other objects' privates from genai_shim, and
comments that give reasons rather than lab logs (figures live in docs/performance_log.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import code_health  # noqa: E402

#: reaches into another object's private members that genai_shim may keep (third-party ones,
#: e.g. argparse's sub-parser class, count too)
MAX_GENAI_PRIVATE_REACHES = 10
#: comment lines that quote a timing: a few stay where a number is the reason (a thread hand-off
#: cost that sets a threshold); the rest belong in docs/performance_log.md
MAX_TIMING_COMMENTS = 5


def _listing(items: list) -> str:
    return "\n".join(" -> ".join(i) if isinstance(i, list) else str(i) for i in items)


def test_no_module_level_import_cycles():
    cycles = code_health.import_cycles()
    assert not cycles, "import at use, or move the shared piece below both:\n" + _listing(cycles)


def test_genai_shim_uses_other_objects_through_their_public_members():
    reaches = code_health.private_reaches("genai_shim")
    assert len(reaches) <= MAX_GENAI_PRIVATE_REACHES, (
        f"{len(reaches)} reaches (limit {MAX_GENAI_PRIVATE_REACHES}); add a public method:\n" + _listing(reaches))


def test_no_comment_is_a_lab_log():
    found = code_health.lab_log_comments()
    assert not found, "dated runs and load averages go to docs/performance_log.md:\n" + _listing(found)


def test_few_comments_quote_timings():
    found = code_health.timing_comments()
    assert len(found) <= MAX_TIMING_COMMENTS, (
        f"{len(found)} comment lines quote timings (limit {MAX_TIMING_COMMENTS}); keep the reason, move the "
        "figure to docs/performance_log.md:\n" + _listing(found))


@pytest.mark.parametrize("text", ["# 15.5 ms split at 2^18", "# TTFT 8.9 -> 6.4 s", "# ~20 µs a hand-off",
                                  "# 3.1 -> 4.3 GB/s", "# 2x faster"])
def test_the_timing_pattern_sees_figures(text):
    assert code_health.TIMING.search(text)


@pytest.mark.parametrize("text", ["# a 2-D tile of 64 rows", "# shape (1, 32, 64)", "# int4 groups of 128",
                                  "# see docs/performance_log.md, 'Bandwidth floor'", "# 2 MiB blocks"])
def test_the_timing_pattern_leaves_plain_numbers(text):
    assert not code_health.TIMING.search(text)


@pytest.mark.parametrize("text", ["# measured 2026-11-30", "# at load 4.7", "# load average ~3", "# session 2"])
def test_the_lab_log_pattern_sees_dated_runs(text):
    assert code_health.LAB_LOG.search(text)


def test_the_cycle_finder_sees_a_cycle():
    sccs = code_health._tarjan({"a": {"b"}, "b": {"a"}, "c": {"a"}})
    assert [sorted(c) for c in sccs if len(c) > 1] == [["a", "b"]]
