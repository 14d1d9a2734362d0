"""API coverage of genai_shim against the real openvino_genai (docs/genai_shim.md, API coverage).

    python tools/api_coverage.py            # print the tables
    python tools/api_coverage.py --write    # rewrite them in docs/genai_shim.md
"""

from __future__ import annotations

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


if __name__ == "__main__":
    from genai_shim.api_coverage import MARK_BEGIN, MARK_END
    from tools.doc_tables import main

    raise SystemExit(main(DOC, render, MARK_BEGIN, MARK_END, __doc__.splitlines()[0]))
