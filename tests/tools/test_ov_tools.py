"""tools/run_ov_samples.py and tools/ov_api_tests.py: the import swap, the comparisons and the
doc table (the upstream samples and tests themselves are not in this repository)."""

from __future__ import annotations

import json

import numpy as np

from tools import ov_api_tests, run_ov_samples

SAMPLE_HEAD = """import logging as log
import cv2
import numpy as np
import openvino as ov
from openvino.utils.types import get_dtype
from openvino import op, opset1, opset8

text = "import openvino as ov stays in a string"
"""


def test_samples_swap_only_import_lines():
    out = run_ov_samples.swap_imports(SAMPLE_HEAD)
    assert "import ov_npu_emu as ov\n" in out
    assert "from ov_npu_emu.utils.types import get_dtype\n" in out
    assert "from ov_npu_emu import op, opset1, opset8\n" in out
    assert 'text = "import openvino as ov stays in a string"' in out
    assert out.count("\n") == SAMPLE_HEAD.count("\n")


def test_api_tests_swap_and_modernize():
    src = ("import openvino\nimport openvino.opset13 as ops\nfrom openvino import Core\n"
           "import openvino.runtime.opset13 as rt_ops\nfrom openvino.runtime import ProfilingInfo\n"
           "x = openvino.Model\n")
    modern = ov_api_tests.modernize(src)
    assert "import openvino.opset13 as rt_ops\n" in modern and "from openvino import ProfilingInfo\n" in modern
    ours = ov_api_tests.swap_imports(modern)
    assert ours.startswith("import ov_npu_emu as openvino\nimport ov_npu_emu.opset13 as ops\n")
    assert "from ov_npu_emu import Core\n" in ours and "x = openvino.Model\n" in ours


def test_sample_comparison_tolerances():
    ref = run_ov_samples.Run("real-f32", 0, "[ INFO ] 531      0.0475735\n[ INFO ] Count:  12 iterations\n", "")
    close = run_ov_samples.Run("ours-npu", 0, "[ INFO ] 531      0.0475734\n[ INFO ] Count:  99 iterations\n", "")
    far = run_ov_samples.Run("ours-npu", 0, "[ INFO ] 531      0.0476735\n", "")
    assert run_ov_samples.compare("hello_classification", ref, close, exact=False) == []
    assert run_ov_samples.compare("hello_classification", ref, close, exact=True)  # CPU: exact
    assert run_ov_samples.compare("hello_classification", ref, far, exact=False)
    crashed = run_ov_samples.Run("ours-npu", 1, "", "Traceback ...\nUnsupportedOpError: X")
    assert "exited 1" in run_ov_samples.compare("hello_classification", ref, crashed, exact=False)[0]


def test_query_device_compares_the_cpu_section_without_our_keys():
    out = ("[ INFO ] Available devices:\n[ INFO ] CPU :\n[ INFO ] \t\tFULL_DEVICE_NAME: X\n"
           "[ INFO ] \t\tCPU_EMU_WEIGHTS_BANK: YES\n[ INFO ] NPU :\n[ INFO ] \t\tNPU_EMU_X: 1\n")
    assert run_ov_samples.comparable("hello_query_device", out) == ["[ INFO ] CPU :",
                                                                  "[ INFO ] \t\tFULL_DEVICE_NAME: X"]


def test_bmp_reads_back(tmp_path):
    img = np.arange(5 * 7 * 3, dtype=np.uint8).reshape(5, 7, 3)
    run_ov_samples.write_bmp(tmp_path / "x.bmp", img)
    data = (tmp_path / "x.bmp").read_bytes()
    assert data[:2] == b"BM" and int.from_bytes(data[18:22], "little") == 7
    row = (7 * 3 + 3) & ~3
    pixels = np.frombuffer(data[54:], np.uint8).reshape(5, row)[::-1, : 7 * 3].reshape(5, 7, 3)
    assert (pixels == img).all()


def test_api_table_counts_where_the_real_passes(tmp_path):
    res = tmp_path / "results"
    res.mkdir()
    real = {"test_a": {"status": "passed", "message": ""}, "test_b": {"status": "passed", "message": ""},
            "test_c": {"status": "failed", "message": "the real fails"}}
    ours = {"test_a": {"status": "passed", "message": ""}, "test_b": {"status": "failed", "message": "boom"},
            "test_c": {"status": "failed", "message": ""}}
    (res / "real-test_core.py.json").write_text(json.dumps(real))
    (res / "ours-cpu-test_core.py.json").write_text(json.dumps(ours))
    text = ov_api_tests.table(tmp_path)
    assert "| `test_core.py` | 3 | 2 | 1 of 2 | not run |" in text
    assert "unexplained: failed: boom" in text and "::test_c" not in text


def test_doc_has_the_table_markers():
    doc = ov_api_tests.DOC.read_text()
    assert ov_api_tests.BEGIN in doc and ov_api_tests.END in doc
