"""CLI misuse: every subcommand reports ``ov-npu-emu: error: ...`` and exits 1, never a traceback."""

from __future__ import annotations

from pathlib import Path

import openvino as ov_real
import pytest

from ov_npu_emu.cli import main
from ov_npu_emu.testing import make_add_model

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("cli")
    ov_real.save_model(make_add_model(), str(d / "add.xml"))
    (d / "garbage.blob").write_bytes(b"garbage" * 10)
    (d / "empty").mkdir()
    return {"add": str(d / "add.xml"), "garbage": str(d / "garbage.blob"), "dir": str(d), "empty": str(d / "empty")}


CASES = [
    ("inspect", ["inspect", "/nonexistent.blob"]),
    ("inspect-garbage", ["inspect", "{garbage}"]),
    ("inspect-xml", ["inspect", "{add}"]),
    ("compile-missing", ["compile", "/nonexistent.xml", "-o", "{dir}/x.blob"]),
    ("compile-out-dir-missing", ["compile", "{add}", "-o", "/nonexistent/dir/x.blob"]),
    ("compile-out-is-dir", ["compile", "{add}", "-o", "{dir}"]),
    ("compile-bad-config", ["compile", "{add}", "-o", "{dir}/x.blob", "--config", "NPU_EMU_CMX_SIZE=abc"]),
    ("compile-config-no-eq", ["compile", "{add}", "-o", "{dir}/x.blob", "--config", "NOEQUALS"]),
    ("compile-bad-precision", ["compile", "{add}", "-o", "{dir}/x.blob", "--config", "INFERENCE_PRECISION_HINT=xyz"]),
    ("compile-shape-unknown", ["compile", "{add}", "-o", "{dir}/x.blob", "--shape", "nope=1,2"]),
    ("compile-shape-bad", ["compile", "{add}", "-o", "{dir}/x.blob", "--shape", "a=5,2"]),
    ("profile-missing", ["profile", "/nonexistent.xml"]),
    ("profile-bad-config", ["profile", "{add}", "--config", "NPU_EMU_CMX_SIZE=-1"]),
    ("npuw-missing", ["npuw", "/nonexistent"]),
    ("npuw-empty-dir", ["npuw", "{empty}"]),
    ("npuw-not-llm", ["npuw", "{add}"]),
    ("npuw-bad-variants", ["npuw", "{add}", "--variants", "abc"]),
    ("make-model-unwritable", ["make-model", "/proc/nonexistent/x"]),
    ("make-model-onto-file", ["make-model", "{add}"]),
    ("demo-missing", ["demo", "--model", "/nonexistent"]),
]


@pytest.mark.parametrize("argv", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_cli_misuse_is_one_error_line(files: dict[str, str], argv: list[str],
                                      capsys: pytest.CaptureFixture[str]) -> None:
    rc = main([a.format(**files) for a in argv])
    err = capsys.readouterr().err
    assert rc == 1
    assert "ov-npu-emu: error: " in err
    assert "Traceback" not in err
    assert not Path("/nonexistent").exists()
