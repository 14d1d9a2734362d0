"""The key tables of the docs, generated from the option tables each owner declares
(ov_npu_emu/options.py ``OptionTable.markdown()``): NPUW's in docs/npuw.md, the emulated NPU's in
docs/npu_device.md, the CPU device's in docs/npuw.md.

    python tools/option_tables.py            # print the tables
    python tools/option_tables.py --write    # rewrite them between their markers in the docs
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for _p in (ROOT, ROOT / "plugins"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))


def _npuw() -> str:
    from ov_npu_emu_npuw.config import NPUW_OPTIONS

    return NPUW_OPTIONS.markdown()


def _npu() -> str:
    from ov_npu_emu_npu.options import NPU_OPTIONS

    return NPU_OPTIONS.markdown()


def _cpu() -> str:
    from ov_npu_emu_cpu.options import CPU_OPTIONS

    return CPU_OPTIONS.markdown()


#: (doc, marker name, render): the table sits between <!-- BEGIN name --> and <!-- END name -->
TABLES: list[tuple[Path, str, Callable[[], str]]] = [
    (ROOT / "docs" / "npuw.md", "NPUW_OPTIONS", _npuw),
    (ROOT / "docs" / "npu_device.md", "NPU_OPTIONS", _npu),
    (ROOT / "docs" / "npuw.md", "CPU_OPTIONS", _cpu),
]


def markers(name: str) -> tuple[str, str]:
    return f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"


def in_doc(doc: Path, name: str) -> str:
    """The table now between the markers of ``name`` in ``doc`` (stripped)."""
    begin, end = markers(name)
    text = doc.read_text(encoding="utf-8")
    if begin not in text or end not in text:
        raise SystemExit(f"{doc.name}: markers {begin} / {end} missing")
    return text.split(begin, 1)[1].split(end, 1)[0].strip()


def main() -> int:
    from tools.doc_tables import rewrite

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite the tables in the docs")
    args = ap.parse_args()
    for doc, name, render in TABLES:
        table = render()
        if args.write:
            in_doc(doc, name)  # the markers must be there
            doc.write_text(rewrite(doc.read_text(encoding="utf-8"), *markers(name), table), encoding="utf-8")
            print(f"{doc.relative_to(ROOT)}: {name}")
        else:
            print(f"## {name} ({doc.relative_to(ROOT)})\n\n{table}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
