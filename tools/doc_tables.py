"""Tables the docs take from the code: a tool renders one, prints it, or (``--write``) puts it
between its two marker comments in the doc; a test compares the doc with a fresh rendering."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path


def rewrite(doc: str, begin: str, end: str, table: str) -> str:
    head, _, rest = doc.partition(begin)
    _, _, tail = rest.partition(end)
    return f"{head}{begin}\n{table}\n{end}{tail}"


def main(doc: Path, render: Callable[[], str], begin: str, end: str, description: str) -> int:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--write", action="store_true", help=f"rewrite the table in {doc.name}")
    args = ap.parse_args()
    table = render()
    if args.write:
        doc.write_text(rewrite(doc.read_text(encoding="utf-8"), begin, end, table), encoding="utf-8")
    else:
        print(table)
    return 0
