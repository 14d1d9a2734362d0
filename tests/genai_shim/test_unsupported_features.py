"""Pipeline properties for features genai_shim does not implement fail loudly, never silently."""

from __future__ import annotations

import pytest

import genai_shim as openvino_genai
from ov_npu_emu.errors import ConfigError


@pytest.mark.parametrize(
    ("key", "value", "feature"),
    [
        ("draft_model", object(), "speculative decoding"),
        ("prompt_lookup", "yes", "prompt_lookup must be a bool"),
        ("adapters", object(), "LoRA"),
    ],
    ids=["draft_model", "prompt_lookup", "adapters"],
)
def test_unsupported_feature_property_raises(tiny_model_dir, key, value, feature):
    with pytest.raises(ConfigError, match=feature) as ei:
        openvino_genai.LLMPipeline(str(tiny_model_dir), "CPU", **{key: value})
    assert ei.value.key == key


def test_falsy_feature_properties_and_scheduler_config_are_accepted(tiny_model_dir):
    pipe = openvino_genai.LLMPipeline(
        str(tiny_model_dir), "CPU", prompt_lookup=False, scheduler_config=openvino_genai.SchedulerConfig()
    )
    assert isinstance(pipe.generate("Hi", max_new_tokens=2), str)
