#!/usr/bin/env python3
"""Run OpenVINO's own Python API tests (src/bindings/python/tests/test_runtime of
openvinotoolkit/openvino) against ov_npu_emu and the real openvino, test by test, and write the
table in docs/runtime_api.md.

Nothing of openvino is copied into this repository: the tests are read from a directory given on
the command line, laid out as upstream's src/bindings/python (``tests/test_runtime/test_*.py``,
``tests/utils/helpers.py``).  Each side gets its own copy in a work directory:

  real   the files as they are, ``import openvino``
  ours   the same files with their import lines (and only those) naming ov_npu_emu:
         ``import openvino`` -> ``import ov_npu_emu as openvino``, ``from openvino[.x] import`` ->
         ``from ov_npu_emu[.x] import``, ``import openvino.x as y`` -> ``import ov_npu_emu.x as y``

On both sides an import of ``openvino.runtime`` (removed in openvino 2026.0; the stored test files
may predate that) names ``openvino`` instead, as the current upstream files do.

Both get this tool's ``tests/__init__.py`` and ``tests/conftest.py`` instead of upstream's (which
load the ONNX model zoo and the template plugin): a ``device`` fixture (upstream's reads TEST_DEVICE)
and upstream's ``skip_*`` / ``xfail_*`` markers as plain skips / non-strict xfails.

  python tools/ov_api_tests.py run UPSTREAM [--files test_core.py ...] [--work DIR]
      runs each file with pytest (junit XML) on the real ("CPU"), on ours on "CPU" (the CPU
      passthrough) and on ours on "NPU" (the emulated NPU), keeping the results in DIR/results
  python tools/ov_api_tests.py table [--work DIR]
      rewrites the table in docs/runtime_api.md from the results

A test counts where the real passes it; ours "fails" it when it does not pass it (fail, error or
skip).  The exceptions are listed with the reason (EXCEPTIONS below: a pattern of test ids and
why), a failure with no listed reason as "unexplained".
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "runtime_api.md"
DEFAULT_WORK = Path(os.environ.get("OV_API_TESTS_WORK", Path.home() / ".cache" / "ov-npu-emu-api-tests"))
BEGIN = "<!-- ov-api-tests:begin (tools/ov_api_tests.py table) -->"
END = "<!-- ov-api-tests:end -->"

FILES = (
    "test_sync_infer_request.py",
    "test_async_infer_request.py",
    "test_compiled_model.py",
    "test_core.py",
    "test_properties.py",
    "test_stateful.py",
)

#: (side, regex over "file::test id", reason): why ours does not pass a test the real passes
EXCEPTIONS: list[tuple[str, str, str]] = [
    ("ours-npu", r"test_sync_infer_request\.py::test_(infer_dynamic_model|mixed_dynamic_infer)",
     "a dynamic input shape: the emulated NPU compiles static shapes only and says so "
     "(`DynamicShapeError`: reshape the model first; docs/npu_device.md); the CPU passthrough runs them"),
]

_HARNESS_INIT = '''\
"""ov_npu_emu's stand-in for upstream's tests/__init__.py (tools/ov_api_tests.py)."""
import pytest

BACKEND_NAME = None


def xfail_test(reason="Mark the test as expected to fail", strict=False):
    return pytest.mark.xfail(reason=reason, strict=strict)


def __getattr__(name):
    if name.startswith("skip_"):
        return pytest.mark.skip(reason=name)
    if name.startswith("xfail_"):
        return pytest.mark.xfail(reason=name, strict=False)
    raise AttributeError(name)
'''

_HARNESS_CONFTEST = '''\
"""ov_npu_emu's stand-in for upstream's tests/conftest.py (tools/ov_api_tests.py)."""
import os

import pytest


def pytest_configure(config):
    for marker in ("skip_on_cpu", "skip_on_gpu", "skip_on_hetero", "skip_on_template", "template_plugin",
                   "dynamic_library", "onnx_coverage"):
        config.addinivalue_line("markers", marker)


@pytest.fixture(scope="session")
def device():
    return os.environ.get("OV_API_TESTS_DEVICE") or os.environ.get("TEST_DEVICE") or "CPU"
'''

_IMPORT_BARE = re.compile(r"^(\s*)import openvino(\s*(#.*)?)$")
_IMPORT_DOTTED = re.compile(r"^(\s*)(import|from) openvino(\.|\s)")

#: the runs: (name, side, TEST_DEVICE)
RUNS = (("real", "real", "CPU"), ("ours-cpu", "ours", "CPU"), ("ours-npu", "ours", "NPU"))


_RUNTIME = re.compile(r"^(\s*(?:import|from) openvino)\.runtime\b")


def modernize(text: str) -> str:
    """``openvino.runtime`` (gone since openvino 2026.0) as ``openvino`` in import lines."""
    return "".join(_RUNTIME.sub(r"\1", line) for line in text.splitlines(keepends=True))


def swap_imports(text: str) -> str:
    out = []
    for line in text.splitlines(keepends=True):
        m = _IMPORT_BARE.match(line.rstrip("\n"))
        if m:
            line = f"{m.group(1)}import ov_npu_emu as openvino{m.group(2)}\n"
        elif _IMPORT_DOTTED.match(line):
            line = line.replace("openvino", "ov_npu_emu", 1)
        out.append(line)
    return "".join(out)


def lay_out(upstream: Path, dest: Path, side: str) -> None:
    src = upstream / "tests"
    if not (src / "test_runtime").is_dir():
        raise SystemExit(f"{src}/test_runtime not found: give the directory laid out as src/bindings/python")
    if dest.exists():
        shutil.rmtree(dest)
    for f in src.rglob("*.py"):
        rel = f.relative_to(src)
        if rel.parts[0] not in ("test_runtime", "utils"):
            continue
        out = dest / "tests" / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        text = modernize(f.read_text())
        out.write_text(swap_imports(text) if side == "ours" else text)
    for pkg in ("test_runtime", "utils"):
        (dest / "tests" / pkg / "__init__.py").touch()
    (dest / "tests" / "__init__.py").write_text(_HARNESS_INIT)
    (dest / "tests" / "conftest.py").write_text(_HARNESS_CONFTEST)


def parse_junit(path: Path) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    if not path.exists():
        return out
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "")
        status, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                status = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                message = (el.get("message") or el.text or "").strip().splitlines()[0][:300] if (
                    el.get("message") or el.text) else ""
                break
        out[name] = {"status": status, "message": message}
    return out


def run(upstream: Path, work: Path, files: list[str], runs: list[str], k: str | None, timeout: float) -> None:
    results = work / "results"
    results.mkdir(parents=True, exist_ok=True)
    for side in ("real", "ours"):
        lay_out(upstream, work / side, side)
    for name, side, device in RUNS:
        if name not in runs:
            continue
        for f in files:
            if not (work / side / "tests" / "test_runtime" / f).exists():
                print(f"{f}: not in {upstream}")
                continue
            xml = results / f"{name}-{f}.xml"
            # the device fixture names the device; the tests' own TEST_DEVICE skips (written for
            # CPU and GPU: "Memory layers fully supported only on CPU and GPU") read as on CPU
            env = dict(os.environ, TEST_DEVICE="CPU", OV_API_TESTS_DEVICE=device,
                       PYTHONPATH=os.pathsep.join([str(work / side), str(ROOT), str(ROOT / "plugins")]))
            cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                   "-o", f"faulthandler_timeout={int(timeout)}", f"tests/test_runtime/{f}", f"--junitxml={xml}",
                   "--rootdir", str(work / side)]
            if k:
                cmd += ["-k", k]
            proc = subprocess.run(cmd, cwd=work / side, env=env, capture_output=True, text=True)
            tail = (proc.stdout.strip().splitlines() or [""])[-1]
            (results / f"{name}-{f}.log").write_text(proc.stdout + proc.stderr)
            res = parse_junit(xml)
            (results / f"{name}-{f}.json").write_text(json.dumps(res, indent=1, sort_keys=True))
            print(f"{name:<9} {f:<32} {tail}", flush=True)


def explain(run_name: str, test_id: str) -> str:
    for side, pattern, reason in EXCEPTIONS:
        if side in (run_name, "ours") and re.search(pattern, test_id):
            return reason
    return ""


def table(work: Path) -> str:
    results = work / "results"
    rows = ["| file | tests | real passes (CPU) | ours passes, CPU | ours passes, NPU |", "|---|---|---|---|---|"]
    missing: list[tuple[str, str, str, str]] = []
    for f in FILES:
        path = results / f"real-{f}.json"
        if not path.exists():
            continue
        real = json.loads(path.read_text())
        passed = sorted(t for t, r in real.items() if r["status"] == "passed")
        cells = [f"`{f}`", str(len(real)), str(len(passed))]
        for name in ("ours-cpu", "ours-npu"):
            p = results / f"{name}-{f}.json"
            if not p.exists():
                cells.append("not run")
                continue
            ours = json.loads(p.read_text())
            ok = [t for t in passed if ours.get(t, {}).get("status") == "passed"]
            cells.append(f"{len(ok)} of {len(passed)}")
            for t in passed:
                if ours.get(t, {}).get("status") != "passed":
                    got = ours.get(t, {"status": "not run", "message": ""})
                    missing.append((name, f, t, explain(name, f"{f}::{t}") or
                                    f"unexplained: {got['status']}: {got['message'][:160]}"))
        rows.append("| " + " | ".join(cells) + " |")
    lines = rows
    if missing:
        lines += ["", "Tests the real passes and ours does not:", ""]
        by_reason: dict[tuple[str, str], list[str]] = {}
        for name, f, t, reason in missing:
            by_reason.setdefault((name, reason), []).append(f"{f}::{t}")
        for (name, reason), tests in sorted(by_reason.items()):
            shown = ", ".join(f"`{t}`" for t in tests[:4]) + (f" and {len(tests) - 4} more" if len(tests) > 4 else "")
            lines.append(f"* {name} ({len(tests)}): {shown} — {reason}")
    return "\n".join(lines)


def write_doc(text: str) -> None:
    doc = DOC.read_text()
    if BEGIN not in doc:
        raise SystemExit(f"{DOC} has no {BEGIN} marker")
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOC.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("upstream", type=Path, help="a directory laid out as openvino's src/bindings/python")
    r.add_argument("--work", type=Path, default=DEFAULT_WORK)
    r.add_argument("--files", nargs="+", default=list(FILES))
    r.add_argument("--runs", nargs="+", choices=[n for n, _, _ in RUNS], default=[n for n, _, _ in RUNS])
    r.add_argument("-k", default=None)
    r.add_argument("--timeout", type=float, default=120.0, help="faulthandler dump after this many seconds")
    t = sub.add_parser("table")
    t.add_argument("--work", type=Path, default=DEFAULT_WORK)
    t.add_argument("--print", action="store_true", help="print instead of writing the doc")
    args = ap.parse_args(argv)
    if args.cmd == "run":
        run(args.upstream, args.work, args.files, args.runs, args.k, args.timeout)
        return 0
    text = table(args.work)
    if args.print:
        print(text)
    else:
        write_doc(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
