"""The kernel parameter table of docs/npu_blob_format.md, generated from the records in
ov_npu_emu/npu/blob/kernel_params.py.

    python tools/kernel_params_doc.py            # print the table
    python tools/kernel_params_doc.py --write    # rewrite it in docs/npu_blob_format.md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "npu_blob_format.md"
sys.path.insert(0, str(ROOT))

from ov_npu_emu.npu.blob.kernel_params import DOC_BEGIN, DOC_END, markdown


def rewrite(doc: str, table: str) -> str:
    head, _, rest = doc.partition(DOC_BEGIN)
    _, _, tail = rest.partition(DOC_END)
    return f"{head}{DOC_BEGIN}\n{table}\n{DOC_END}{tail}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite docs/npu_blob_format.md")
    args = ap.parse_args()
    if args.write:
        DOC.write_text(rewrite(DOC.read_text(encoding="utf-8"), markdown()), encoding="utf-8")
    else:
        print(markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
