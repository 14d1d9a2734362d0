"""Name coverage of ``ov_npu_emu`` against the real ``openvino`` (docs/runtime_api.md).

Every public name of the installed openvino is either ours (it runs models on our devices) or
openvino's own object, lent by ``ov_npu_emu`` (device-independent: models, tensors, types, opsets,
preprocessing, properties ...).  ``tests/api/test_names.py`` checks that none is missing and that
the table in the doc is this tool's output.

    python tools/ov_api_coverage.py            # print the table
    python tools/ov_api_coverage.py --write    # rewrite it in docs/runtime_api.md
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "runtime_api.md"
sys.path.insert(0, str(ROOT))

MARK_BEGIN = "<!-- ov-api-coverage:begin (tools/ov_api_coverage.py --write) -->"
MARK_END = "<!-- ov-api-coverage:end -->"


def coverage_rows(real: Any, ours: Any) -> list[tuple[str, str]]:
    """(name, "ours" | "openvino's" | "MISSING") for every public name of ``real``."""
    rows = []
    for name in sorted(n for n in dir(real) if not n.startswith("_")):
        if not hasattr(ours, name):
            rows.append((name, "MISSING"))
            continue
        mine, theirs = getattr(ours, name), getattr(real, name)
        rows.append((name, "openvino's" if mine is theirs else "ours"))
    return rows


def _kind(value: Any) -> str:
    if isinstance(value, types.ModuleType):
        return "module"
    return "class" if isinstance(value, type) else "function"


def markdown(real: Any, ours: Any) -> str:
    rows = coverage_rows(real, ours)
    ours_n, lent_n, missing_n = (sum(1 for _, s in rows if s == k) for k in ("ours", "openvino's", "MISSING"))
    lines = [
        f"openvino {real.get_version().split('-')[0]}: {len(rows)} public names; "
        f"{ours_n} ours, {lent_n} openvino's own (lent), {missing_n} missing.",
        "",
        "| name | kind | in ov_npu_emu |",
        "|---|---|---|",
    ]
    lines += [f"| `{name}` | {_kind(getattr(real, name))} | {status} |" for name, status in rows]
    return "\n".join(lines)


def render() -> str:
    import openvino

    import ov_npu_emu

    return markdown(openvino, ov_npu_emu)


if __name__ == "__main__":
    from tools.doc_tables import main

    raise SystemExit(main(DOC, render, MARK_BEGIN, MARK_END, __doc__.splitlines()[0]))
