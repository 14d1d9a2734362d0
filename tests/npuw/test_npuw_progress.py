"""Compile progress: one status line per sub-model on an interactive stderr, nothing otherwise."""

from __future__ import annotations

import io

import pytest

import ov_npu_emu as ov

CFG = {
    "NPU_USE_NPUW": "YES",
    "NPUW_LLM": "YES",
    "NPUW_DEVICES": "CPU",
    "NPUW_LLM_MAX_PROMPT_LEN": 64,
    "NPUW_LLM_MIN_RESPONSE_LEN": 64,
    "NPUW_LLM_GENERATE_VARIANTS": "64,128",
}


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("tty", "env", "shown"),
    [(True, "1", True), (False, "1", False), (True, "0", False)],
    ids=["tty", "pipe", "disabled"],
)
def test_progress_line_only_on_a_terminal(tiny_model_dir, monkeypatch, tty, env, shown):
    err = _Tty() if tty else io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    monkeypatch.setenv("OV_NPU_EMU_PROGRESS", env)
    ov.Core().compile_model(str(tiny_model_dir / "openvino_model.xml"), "NPU", CFG)
    text = err.getvalue()
    if shown:
        for n, name in enumerate(("_kv64", "_kv128", "_prefill"), 1):
            assert f"{name} on CPU ({n}/" in text, text
        assert "sub-models in" in text and text.endswith("\n")
    else:
        assert "[NPUW]" not in text
