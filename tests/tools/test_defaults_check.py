"""tools/defaults_check.py on one committed fixture: ours and the real NPUW on CPU at default
properties give the same greedy ids, in the table the tool prints.  An fp32 export: those match
on bf16 (AMX) hosts too, where the CPU sub-models of both sides run bf16 (docs/npuw.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tools import defaults_check as dc

pytest.importorskip("openvino_genai")


def test_first_difference() -> None:
    assert dc.first_difference([1, 2, 3], [1, 2, 3]) is None
    assert dc.first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert dc.first_difference([1, 2], [1, 2, 3]) == 2


def test_one_fixture_same_as_real_npuw(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, str(dc.ROOT / "tools" / "defaults_check.py"), "--fixtures", "--only",
                           "llama-fp32", "--tokens", "8", "--json", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=dc.ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| llama-fp32 | same |" in proc.stdout
    (res,) = json.loads(out.read_text())
    assert res["real NPUW"] == res["ours NPUW"] and len(res["real NPUW"]) == 8
    assert len(res["real CPU f32"]) == 8
