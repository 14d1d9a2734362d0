"""One parser per kind of configuration value, the same spellings in every layer."""

from __future__ import annotations

import pytest

from ov_npu_emu.errors import ConfigError
from ov_npu_emu.options import as_bool, as_choice, as_uint, check_known


@pytest.mark.parametrize(("value", "expected"), [
    ("YES", True), ("yes", True), ("TRUE", True), ("1", True), ("ON", True), (True, True), (1, True),
    ("NO", False), ("false", False), ("0", False), ("off", False), (False, False), (0, False),
])
def test_bool_spellings(value, expected):
    assert as_bool("K", value) is expected


@pytest.mark.parametrize("value", ["Y", "enable", "", "2", None])
def test_bad_bool_names_the_key(value):
    with pytest.raises(ConfigError, match="K=.*expected YES or NO") as e:
        as_bool("K", value)
    assert e.value.key == "K"


def test_uint_and_choice():
    assert as_uint("N", "64") == 64 and as_uint("N", 3, minimum=1) == 3
    for bad in ("-1", "1.5", "x", True):
        with pytest.raises(ConfigError, match="whole number"):
            as_uint("N", bad)
    assert as_choice("M", "once", ["ONCE", "EVERY_INFERENCE"]) == "ONCE"
    with pytest.raises(ConfigError, match="one of ONCE, EVERY_INFERENCE"):
        as_choice("M", "twice", ["ONCE", "EVERY_INFERENCE"])


def test_unknown_keys_in_our_namespace_suggest_the_right_one():
    check_known({"NPU_EMU_CMX_SIZE": 1, "OTHER": 2}, ("NPU_EMU_",), {"NPU_EMU_CMX_SIZE"}, "NPU")
    with pytest.raises(ConfigError, match=r"NPU_EMU_CMX_SIZ \(did you mean NPU_EMU_CMX_SIZE\?\)"):
        check_known({"NPU_EMU_CMX_SIZ": 1}, ("NPU_EMU_",), {"NPU_EMU_CMX_SIZE"}, "NPU")


def test_compiler_flags_use_the_shared_spellings():
    import numpy as np

    import ov_npu_emu as ov
    from ov_npu_emu.testing import make_add_model

    core = ov.Core()
    feed = {"a": np.ones((2, 3), np.float32), "b": np.ones((2, 3), np.float32)}
    for v in ("ON", "off", True):  # "ON" used to be an error here and a silent NO elsewhere
        cm = core.compile_model(make_add_model(), "NPU", {"NPU_EMU_STAGING": v, "NPU_EMU_VERIFY": v})
        np.testing.assert_array_equal(cm.create_infer_request().infer(feed)[0], 2 * np.ones((2, 3)))
    with pytest.raises(ConfigError, match="NPU_EMU_VERIFY"):
        core.compile_model(make_add_model(), "NPU", {"NPU_EMU_VERIFY": "maybe"})


def test_npu_device_keys_are_parsed_once_and_typos_are_errors():
    import ov_npu_emu as ov
    from ov_npu_emu.testing import make_add_model

    core = ov.Core()
    # "ON" used to leave mutable command lists silently off (only YES/TRUE/1 counted)
    cm = core.compile_model(make_add_model(), "NPU", {"NPU_EMU_MUTABLE_COMMAND_LIST": "ON"})
    assert cm.impl.mutable is True
    assert core.compile_model(make_add_model(), "NPU", {"NPU_EMU_MUTABLE_COMMAND_LIST": "off"}).impl.mutable is False
    typo = r"NPU_EMU_MUTABLE_COMAND_LIST \(did you mean NPU_EMU_MUTABLE_COMMAND_LIST\?\)"
    with pytest.raises(ConfigError, match=typo):
        core.compile_model(make_add_model(), "NPU", {"NPU_EMU_MUTABLE_COMAND_LIST": "NO"})
    with pytest.raises(ConfigError, match="NPU_EMU_QUEUE_MODE=.*one of"):
        core.set_property("NPU", {"NPU_EMU_QUEUE_MODE": "carrier-pigeon"})
    # other namespaces pass by (NPUW's keys reach the device through NPUW's sub-configs)
    core.compile_model(make_add_model(), "NPU", {"NPUW_WEIGHTS_BANK": "x", "PERF_COUNT": "YES"})


def test_option_table_parses_defaults_and_refuses_typos():
    from ov_npu_emu.options import Option, OptionTable, as_flag, as_int

    table = OptionTable("Toy", [
        Option("TOY_N", as_int, 4, "a count"),
        Option("TOY_ON", as_flag, True, "a switch", origin="ours"),
        Option("TOY_LATER", as_flag, None, "decided later", origin="ours"),
    ], prefixes=("TOY_",), accepted={"TOY_IGNORED"})
    assert table.parse({"TOY_N": "7", "TOY_IGNORED": 1, "OTHER": 2}) == {"TOY_N": 7, "TOY_ON": True,
                                                                         "TOY_LATER": None}
    assert table.properties() == ["TOY_N", "TOY_ON", "TOY_LATER"] and table.defaults()["TOY_N"] == 4
    with pytest.raises(ConfigError, match=r"Toy does not know the property TOY_M \(did you mean TOY_N\?\)") as e:
        table.parse({"TOY_M": 1})
    assert e.value.key == "TOY_M"
    with pytest.raises(ConfigError, match="TOY_N must be an integer"):
        table.parse({"TOY_N": "x"})
    md = table.markdown()
    assert "| `TOY_ON` | YES | **ours** | a switch |" in md and "| `TOY_LATER` | (unset) |" in md
    with pytest.raises(ValueError, match="declared twice"):
        OptionTable("Toy", [Option("A", as_int, 0, ""), Option("A", as_int, 0, "")])
    with pytest.raises(ValueError, match="origin"):
        Option("A", as_int, 0, "", origin="theirs")


def test_npu_keys_are_declared_once_in_npu_options():
    import ov_npu_emu as ov
    from ov_npu_emu_npu.options import NPU_OPTIONS, device_defaults
    from ov_npu_emu_npu.plugin import NpuDevice

    core = ov.Core()
    supported = set(core.get_property("NPU", "SUPPORTED_PROPERTIES"))
    # device, compile and read-only keys alike; the compiled model's own in its list
    assert set(NPU_OPTIONS.properties()) - supported == {"NPU_EMU_COST_MODEL_US"}
    assert {"NPU_EMU_CMX_SIZE", "NPU_EMU_PLATFORM", "NPU_EMU_PLATFORMS", "CACHE_MODE"} <= supported
    assert dict(NpuDevice.DEFAULT_PROPERTIES) == device_defaults()
    assert core.get_property("NPU", "NPU_EMU_WEIGHTS_CACHE_MB") == 128
    # read-only keys are answered, never taken from a config
    assert "NPU3720" in core.get_property("NPU", "NPU_EMU_PLATFORMS")
    with pytest.raises(ConfigError, match=r"^Unsupported property NPU_EMU_PLATFORMS by NPU plugin\. It is read-only"):
        core.set_property("NPU", {"NPU_EMU_PLATFORMS": "x"})
    with pytest.raises(ConfigError, match="CACHE_MODE='FAST': expected one of OPTIMIZE_SPEED, OPTIMIZE_SIZE"):
        core.set_property("NPU", {"CACHE_MODE": "FAST"})
    assert all(o.scope in ("device", "compile", "device-info", "compiled-model") for o in NPU_OPTIONS)


def test_no_module_reads_npu_emu_keys_by_hand():
    """NPU_EMU_* keys are read through NPU_OPTIONS (plugins/ov_npu_emu_npu/options.py) only."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    # a config or properties mapping indexed with an NPU_EMU_* key (the parsed table's dict is fine)
    by_hand = re.compile(r"""\w*(config|properties|cfg)\w*\s*(\.get\(|\[)\s*["']NPU_EMU_""")
    found = [f"{path.relative_to(root)}:{n}"
             for top in ("plugins", "ov_npu_emu", "genai_shim") for path in sorted((root / top).rglob("*.py"))
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if by_hand.search(line) and path.name != "options.py"]
    assert not found, found
