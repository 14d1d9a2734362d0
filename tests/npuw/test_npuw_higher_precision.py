"""The LLM path's NPU compiler parameter: RMSNorm statistics in higher precision.

The real NPUW's LLMCompiledModel starts its default prefill, generate and LM-head sub-configs
from ``get_baseline_common_config``, whose first entry is
``NPU_COMPILATION_MODE_PARAMS=compute-layers-with-higher-precision=Sqrt,Power,ReduceMean,Add_RMSNorm``;
the caller's top-level keys and the ``++`` additions are merged over it (the user's value wins),
and a sub-config the caller replaces (NPUW_LLM_PREFILL_CONFIG, ...) does not get it.
"""

from __future__ import annotations

import pytest

from ov_npu_emu.api.core import Core as FacadeCore
from ov_npu_emu_npuw.config import LLM_COMPILATION_MODE_PARAMS, for_device, parse_config

KEY = "NPU_COMPILATION_MODE_PARAMS"
BASE = {"NPU_USE_NPUW": "YES", "NPUW_LLM": "YES"}


def test_the_value_is_the_real_one():
    assert LLM_COMPILATION_MODE_PARAMS == "compute-layers-with-higher-precision=Sqrt,Power,ReduceMean,Add_RMSNorm"


@pytest.mark.parametrize(
    ("extra", "prefill", "generate"),
    [
        ({}, LLM_COMPILATION_MODE_PARAMS, LLM_COMPILATION_MODE_PARAMS),
        ({KEY: ""}, "", ""),  # the caller's top-level value wins (here: nothing kept higher)
        ({"++NPUW_LLM_GENERATE_CONFIG": {KEY: "compute-layers-with-higher-precision=Sqrt"}},
         LLM_COMPILATION_MODE_PARAMS, "compute-layers-with-higher-precision=Sqrt"),
        ({"NPUW_LLM_PREFILL_CONFIG": {"INFERENCE_PRECISION_HINT": "f32"}}, None, LLM_COMPILATION_MODE_PARAMS),
    ],
    ids=["default", "top-level", "++generate", "replaced-prefill"],
)
def test_default_sub_configs_carry_it_and_the_users_value_wins(extra, prefill, generate):
    cfg = parse_config({**BASE, **extra})
    assert cfg.prefill_config.get(KEY) == prefill
    assert cfg.generate_config.get(KEY) == generate


def test_the_cpu_device_does_not_get_the_npu_compiler_key():
    sub = parse_config(BASE).prefill_config
    assert KEY in for_device(sub, "NPU")
    assert KEY not in for_device(sub, "CPU")


def test_every_npu_sub_model_is_compiled_with_it(emu_core, stories_model, monkeypatch):
    seen: list[dict] = []
    original = FacadeCore.compile_model

    def spy(self, model, device_name=None, config=None):  # type: ignore[no-untyped-def]
        if device_name == "NPU" and not (config or {}).get("NPUW_LLM"):
            seen.append(dict(config or {}))
        return original(self, model, device_name, config)

    monkeypatch.setattr(FacadeCore, "compile_model", spy)
    emu_core.compile_model(stories_model, "NPU", {**BASE, "NPUW_LLM_MAX_PROMPT_LEN": 32,
                                                  "NPUW_LLM_MIN_RESPONSE_LEN": 32, "NPUW_LLM_SHARED_HEAD": "YES"})
    assert len(seen) == 3  # generate variant, prefill, LM head
    assert all(c.get(KEY) == LLM_COMPILATION_MODE_PARAMS for c in seen), seen
