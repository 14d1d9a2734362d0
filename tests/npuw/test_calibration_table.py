"""The calibration table of docs/npu_device.md ("Calibration") is what the committed presets give:
``bench/calibrate_npu.py --check``'s points re-estimated here and compared with the documented
predictions and errors, so a change to the cost model that moves them fails until the fit is re-run
and the table re-derived (the fitted TPOT rows exact, the held-out errors as documented)."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from ov_npu_emu_npu.platforms import PLATFORMS
from ov_npu_emu_npuw.estimate import estimate

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("calibrate_npu", ROOT / "bench" / "calibrate_npu.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def _documented() -> dict[str, tuple[float, float, float]]:
    """point id -> (predicted ms, device ms, error %) from the table in docs/npu_device.md."""
    text = (ROOT / "docs" / "npu_device.md").read_text(encoding="utf-8")
    section = text[text.index("\n## Calibration"):]
    section = section[: section.index("\n## ", 5)]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\| ([a-z0-9.-]+) \|.*\| ([\d.]+) \(([\d.]+) \+ [\d.]+\) \| \**([−+-]?[\d.]+)%\** \|$", line)
        if m:
            rows[m[1]] = (float(m[2]), float(m[3]), float(m[4].replace("−", "-")))
    return rows


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return _bench()


def test_the_documented_table_is_what_the_presets_give(bench: ModuleType) -> None:
    doc = _documented()
    assert set(doc) == {p.pid for p in bench.POINTS}
    for p in bench.POINTS:
        pred = bench.predicted(p, PLATFORMS[p.npu])
        err = 100 * (pred - p.published_ms) / p.published_ms
        want_pred, want_device, want_err = doc[p.pid]
        assert pred == pytest.approx(want_pred, abs=0.051, rel=2e-4), p.pid
        assert pred - PLATFORMS[p.npu].step_overhead_ms == pytest.approx(want_device, abs=0.051, rel=2e-4), p.pid
        assert err == pytest.approx(want_err, abs=0.051), p.pid
        if p.role == "fit" and p.metric == "tpot":  # two terms per generation solve these exactly
            assert abs(err) < 0.05, p.pid


def test_a_platform_object_is_estimated_with_its_own_fields() -> None:
    """A preset object with another SoC's DRAM (the bench's ARL point) or a fit's terms is not
    reduced to its name: its hardware reaches the device (the decode is DDR-bound, so it moves)."""
    from ov_npu_emu.modelbuilder import get_preset

    cfg = get_preset("llama-3.2-1b-shape")
    base = PLATFORMS["NPU3720"]
    slow = dataclasses.replace(base, dram_gbps=base.dram_gbps / 2)
    a = estimate(cfg, base, prompt=32)["tpot_ms"] - base.step_overhead_ms
    b = estimate(cfg, slow, prompt=32)["tpot_ms"] - base.step_overhead_ms
    assert b > 1.5 * a
