"""Imports flow one way: genai_shim -> ov_npu_emu API -> plugins -> npu internals."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# (package path, module prefixes it must never import)
# ov_npu_emu/cli included: the demo that drives genai_shim lives in genai_shim/cli.py (CLI hook).
RULES = [
    ("ov_npu_emu", ("genai_shim", "ov_npu_emu_npu.")),
    ("ov_npu_emu/runtime", ("ov_npu_emu.api", "ov_npu_emu_npu", "ov_npu_emu_")),
    # the emulated NPU is a plugin like any other: the core, NPUW and the CPU plugin talk to it
    # through Core and properties only (also lazily: import-linter's contract sees function bodies)
    ("plugins/ov_npu_emu_npuw", ("ov_npu_emu_npu.",)),
    ("plugins/ov_npu_emu_cpu", ("ov_npu_emu_npu.",)),
    ("plugins/ov_npu_emu_npu/driver", ("ov_npu_emu_npu.compiler",)),
    ("plugins/ov_npu_emu_npu/device", ("ov_npu_emu_npu.compiler",)),
    ("plugins/ov_npu_emu_npu/blob", ("ov_npu_emu_npu.compiler",)),
]


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
    return out


@pytest.mark.parametrize(("package", "forbidden"), RULES, ids=[r[0] for r in RULES])
def test_no_upward_imports(package, forbidden):
    base = ROOT / package
    assert base.exists(), f"{package} is missing"
    bad = [
        f"{f.relative_to(ROOT)}:{line} imports {mod}"
        for f in base.rglob("*.py")
        for line, mod in _imports(f)
        if f"{mod}.".startswith(forbidden)  # "ov_npu_emu_npu." matches the package, not ov_npu_emu_npuw
    ]
    assert not bad, "\n".join(bad)


#: issue 11's rule: a module a newcomer can read in one sitting (split along seams, not by line)
def test_tests_share_helpers_through_helper_modules():
    """A test module's privates are not an API: shared helpers live in conftest.py or a helper
    module (tests/genai_shim/speculative_helpers.py, tests/samples/sample_runner.py, ...)."""
    bad = [
        f"{f.relative_to(ROOT)}:{line} imports {mod}"
        for f in (ROOT / "tests").rglob("test_*.py")
        for line, mod in _imports(f)
        if mod.startswith("tests.") and mod.rsplit(".", 1)[-1].startswith("test_")
    ]
    assert not bad, "\n".join(bad)
