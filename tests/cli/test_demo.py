"""``ov-npu-emu demo``: the README's first command, end to end through the emulated stack."""

from __future__ import annotations

import io
import re
from contextlib import redirect_stdout

from ov_npu_emu.cli import main


def _demo(*argv: str) -> str:
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["demo", *argv]) == 0
    return buf.getvalue()


def test_demo_tells_a_story_with_the_bundled_model_on_npu():
    """No arguments: the bundled stories260K through genai_shim -> NPUW -> emulated NPU, greedy."""
    out = _demo()
    assert "stories260K" in out and "emulated NPU" in out
    assert "prompt   'Once upon a time'\n" in out
    text = re.search(r"^output   (.*)\nperf ", out, re.MULTILINE | re.DOTALL).group(1)
    assert text.startswith(", there was a little girl named Lily. She loved to play"), text
    assert re.search(r"perf +5 prompt tokens, 40 generated", out), out


def test_demo_text_matches_real_openvino_genai(stories260k_dir):
    import openvino_genai
    out = _demo("--model", str(stories260k_dir), "--max-new-tokens", "30")
    text = re.search(r"^output   (.*)\nperf ", out, re.M | re.S).group(1)
    real = openvino_genai.LLMPipeline(str(stories260k_dir), "CPU", INFERENCE_PRECISION_HINT="f32")
    expected = real.generate("Once upon a time", max_new_tokens=30)
    assert text == expected


def test_demo_rejects_a_folder_without_a_model(tmp_path, capsys):
    assert main(["demo", "--model", str(tmp_path)]) == 1
    assert "has no openvino_model.xml" in capsys.readouterr().err
