"""API coverage of genai_shim against the real openvino_genai (docs/genai_shim.md, API coverage).

    python tools/api_coverage.py            # print the tables
    python tools/api_coverage.py --write    # rewrite them in docs/genai_shim.md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "genai_shim.md"
sys.path.insert(0, str(ROOT))


def render() -> str:
    import openvino_genai

    import genai_shim
    from genai_shim.api_coverage import markdown

    return markdown(openvino_genai, genai_shim)


def rewrite(doc: str, table: str) -> str:
    from genai_shim.api_coverage import MARK_BEGIN, MARK_END

    head, _, rest = doc.partition(MARK_BEGIN)
    _, _, tail = rest.partition(MARK_END)
    return f"{head}{MARK_BEGIN}\n{table}\n{MARK_END}{tail}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite docs/genai_shim.md")
    args = ap.parse_args()
    table = render()
    if args.write:
        DOC.write_text(rewrite(DOC.read_text(encoding="utf-8"), table), encoding="utf-8")
    else:
        print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
