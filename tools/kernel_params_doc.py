"""The kernel parameter table of docs/npu_blob_format.md, generated from the records in
plugins/ov_npu_emu_npu/blob/kernel_params.py.

    python tools/kernel_params_doc.py            # print the table
    python tools/kernel_params_doc.py --write    # rewrite it in docs/npu_blob_format.md
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "npu_blob_format.md"
sys.path.insert(0, str(ROOT))

from ov_npu_emu_npu.blob.kernel_params import DOC_BEGIN, DOC_END, markdown

if __name__ == "__main__":
    from tools.doc_tables import main

    raise SystemExit(main(DOC, markdown, DOC_BEGIN, DOC_END, __doc__.splitlines()[0]))
