"""Structural health of the shipped packages, as numbers: what tests/test_structure.py holds.

- module-level import cycles (imports a module runs when it is first imported: not those inside
  functions or under ``if TYPE_CHECKING:``), over ov_npu_emu, genai_shim and the plugins;
- reaches into another object's private members (``obj._name`` where ``obj`` is not ``self``,
  ``cls`` or ``super()``, and ``from x import _name``) per package;
- comment lines that quote timings (a number with a time unit: ``15.5 ms``, ``8.9 -> 6.4 s``) and
  comment lines that read as a lab log (dates, load averages, session numbers).

``python tools/code_health.py`` prints every finding; ``--json`` the counts.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import re
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: (import name of the package, its folder)
PACKAGES = {
    "ov_npu_emu": ROOT / "ov_npu_emu",
    "genai_shim": ROOT / "genai_shim",
    "ov_npu_emu_cpu": ROOT / "plugins" / "ov_npu_emu_cpu",
    "ov_npu_emu_npu": ROOT / "plugins" / "ov_npu_emu_npu",
    "ov_npu_emu_npuw": ROOT / "plugins" / "ov_npu_emu_npuw",
}

#: a number with a unit of time or throughput, a "x faster", or a before -> after pair of numbers
TIMING = re.compile(r"\d(?:[\d.,]*\d)?\s*(?:ms|µs|us|ns|min|[GMK]i?B/s|tok/s)(?![\w/])|\d\s+(?:s|sec|seconds)\b"
                    r"|\d\s*x\s+(?:faster|slower)|\d(?:\.\d+)?\s*(?:->|→)\s*\d")
LAB_LOG = re.compile(r"\b20\d\d-\d\d-\d\d\b|load average|\bload\s+[\d.]+\b|\bsession\s+\d+\b|\bstop\s+\d+\b",
                     re.IGNORECASE)


def modules() -> Iterator[tuple[str, Path]]:
    """(dotted module name, path) of every module of the shipped packages."""
    for pkg, base in PACKAGES.items():
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            yield ".".join([pkg, *parts]), path


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _module_level_imports(tree: ast.Module, name: str, is_pkg: bool) -> Iterator[str]:
    """Modules imported when ``name`` runs: statements at module level, inside if/try/with
    blocks, but not in functions, classes' methods or ``if TYPE_CHECKING:``."""
    package = name if is_pkg else name.rpartition(".")[0]

    def walk(body: list[ast.stmt]) -> Iterator[str]:
        for node in body:
            if isinstance(node, ast.Import):
                yield from (a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                yield base
                yield from (f"{base}.{a.name}" for a in node.names)
            elif isinstance(node, ast.If):
                if not _is_type_checking(node.test):
                    yield from walk(node.body)
                yield from walk(node.orelse)
            elif isinstance(node, ast.Try):
                for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                    yield from walk(block)
            elif isinstance(node, (ast.With, ast.ClassDef)):
                yield from walk(node.body)

    yield from walk(tree.body)


def import_cycles() -> list[list[str]]:
    """Strongly connected groups (size > 1, or a self-import) of the module-level import graph."""
    mods = dict(modules())
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        targets = set()
        for imp in _module_level_imports(tree, name, path.name == "__init__.py"):
            # "from a.b import c" names a.b.c when c is a module, else a.b
            while imp and imp not in mods:
                imp = imp.rpartition(".")[0]
            if imp and imp != name:
                targets.add(imp)
            # importing a.b.c runs a and a.b first
            parent = imp.rpartition(".")[0]
            while parent:
                if parent in mods and parent != name and not name.startswith(parent + "."):
                    targets.add(parent)
                parent = parent.rpartition(".")[0]
        graph[name] = targets
    return [sorted(c) for c in _tarjan(graph) if len(c) > 1]


def _tarjan(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        # iterative DFS: deep package graphs would otherwise hit the recursion limit
        work = [(v, iter(sorted(graph.get(v, ()))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    out.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_reaches(package: str) -> list[str]:
    """``path:line obj._name`` for each reach into another object's private member."""
    out = []
    base = PACKAGES[package]
    for name, path in modules():
        if not name.startswith(package + ".") and name != package:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        rel = path.relative_to(ROOT)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                owner = node.value
                if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                    continue
                if (isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name)
                        and owner.func.id == "super"):
                    continue
                out.append(f"{rel}:{node.lineno} {ast.unparse(node)}")
            elif isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    # a package's own private helpers are fair inside it
                    if _private(a.name) and not (node.level or node.module.startswith(package)):
                        out.append(f"{rel}:{node.lineno} from {node.module} import {a.name}")
    del base
    return out


def comment_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of each ``#`` comment of a module."""
    src = path.read_text(encoding="utf-8")
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string


def timing_comments() -> list[str]:
    return [f"{p.relative_to(ROOT)}:{n} {c.strip()}" for _, p in modules() for n, c in comment_lines(p)
            if TIMING.search(c)]


def lab_log_comments() -> list[str]:
    return [f"{p.relative_to(ROOT)}:{n} {c.strip()}" for _, p in modules() for n, c in comment_lines(p)
            if LAB_LOG.search(c)]


def report() -> dict[str, list]:
    return {
        "import_cycles": import_cycles(),
        "private_reaches_genai_shim": private_reaches("genai_shim"),
        "timing_comments": timing_comments(),
        "lab_log_comments": lab_log_comments(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print the counts as JSON")
    args = ap.parse_args(argv)
    rep = report()
    if args.json:
        print(json.dumps({k: len(v) for k, v in rep.items()}, indent=2))
        return 0
    for key, items in rep.items():
        print(f"## {key}: {len(items)}")
        for item in items:
            print("  ", " -> ".join(item) if isinstance(item, list) else item)
    return 0


if __name__ == "__main__":
    sys.exit(main())
