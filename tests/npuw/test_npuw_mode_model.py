"""The properties of NPUW's mode compiled models (text embedding, Whisper): the LLM config's
keys, then the mode's own, read-only, unknown names a typed error naming the mode."""

from __future__ import annotations

import pytest

from ov_npu_emu.errors import ConfigError
from ov_npu_emu_npuw.config import parse_config
from ov_npu_emu_npuw.mode_model import ModeCompiledModel


class _Mode(ModeCompiledModel):
    mode = "test"

    def __init__(self) -> None:
        self.name, self.device = "m", "CPU"
        self.cfg = parse_config({"NPUW_LLM_MAX_PROMPT_LEN": 128})
        self.inputs, self.outputs = [], []

    def mode_properties(self):
        return {"NPUW_LLM_MAX_PROMPT_LEN": 4, "NPUW_X": True}

    def create_infer_request(self):  # pragma: no cover - not used here
        raise NotImplementedError

    def export_model(self):  # pragma: no cover - not used here
        raise NotImplementedError


def test_mode_keys_override_the_llm_config_and_the_rest_is_read_only():
    cm = _Mode()
    assert cm.get_property("NPUW_LLM_MAX_PROMPT_LEN") == 4 and cm.get_property("NPUW_X") is True
    assert cm.get_property("NPUW_LLM_MIN_RESPONSE_LEN") == parse_config({}).properties()["NPUW_LLM_MIN_RESPONSE_LEN"]
    assert cm.get_property("MODEL_NAME") == "m" and cm.get_property("EXECUTION_DEVICES") == ["CPU"]
    assert {"NPUW_X", "SUPPORTED_PROPERTIES", "MODEL_NAME"} <= set(cm.get_property("SUPPORTED_PROPERTIES"))
    with pytest.raises(ConfigError, match="Unsupported property NOPE by NPUW test compiled model") as err:
        cm.get_property("NOPE")
    assert err.value.key == "NOPE"
    with pytest.raises(ConfigError, match="read-only; pass \\['A'\\] to compile_model"):
        cm.set_property({"A": 1})
