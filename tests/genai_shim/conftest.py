"""Fixtures for genai_shim tests: model folders, cached pipelines (ours and the real oracle)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

#: force f32 compute and KV on the CPU plugin so token streams are comparable exactly
F32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
#: the real NPUW on this machine (no NPU): every submodel on CPU, no partitioning
REAL_NPU = {"NPUW_DEVICES": "CPU", "NPUW_ONLINE_PIPELINE": "NONE"}
NPU_LENS = {"MAX_PROMPT_LEN": 64, "MIN_RESPONSE_LEN": 64}


@pytest.fixture(scope="session")
def stories_dir(stories260k_dir: Path) -> Path:
    """The bundled stories260K folder (ov_npu_emu.testing's ``stories260k_dir``)."""
    return stories260k_dir


@pytest.fixture(scope="session", params=["stories260K", "tiny"])
def model_dir(request: pytest.FixtureRequest) -> Path:
    """Every model the oracle tests run on: stories260K and the builder's tiny folder."""
    if request.param == "stories260K":
        return request.getfixturevalue("stories_dir")
    return request.getfixturevalue("tiny_model_dir")


@pytest.fixture(scope="session")
def real_genai() -> Any:
    """The real openvino_genai (the oracle; a test dependency, so missing it is a failure)."""
    import openvino_genai

    return openvino_genai


def npuw_available() -> bool:
    """True when our NPUW plugin is registered (it claims NPU_USE_NPUW/NPUW_LLM compilations)."""
    from ov_npu_emu import Core

    pm = Core().plugin_manager
    return pm.get_plugin("npuw") is not None


#: marks tests that go through our NPUW; it is a built-in plugin, so it must be there (no skip;
#: the fixture is in tests/conftest.py)
needs_npuw = pytest.mark.usefixtures("require_npuw")



@pytest.fixture(scope="session")
def pipelines(real_genai: Any) -> Callable[..., Any]:
    """``pipelines(kind, folder, device, **props)`` → a cached pipeline; kind is "ours" or "real"."""
    import genai_shim

    cache: dict[tuple[Any, ...], Any] = {}

    def get(kind: str, folder: Path, device: str = "CPU", **props: Any) -> Any:
        key = (kind, str(folder), device, tuple(sorted(props.items())))
        if key not in cache:
            mod = genai_shim if kind == "ours" else real_genai
            cache[key] = mod.LLMPipeline(str(folder), device, **props)
        return cache[key]

    return get


CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'system' %}{{ m['content'] }}\n"
    "{% elif m['role'] == 'user' %}Question: {{ m['content'] }}\n"
    "{% elif m['role'] == 'assistant' %}Answer: {{ m['content'] }}{{ eos_token }}\n"
    "{% else %}{{ raise_exception('unknown role ' + m['role']) }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}Answer:{% endif %}"
)


@pytest.fixture(scope="session")
def chat_dir(stories_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """stories260K plus a chat template in tokenizer_config.json (the model itself has none)."""
    import json

    out = tmp_path_factory.mktemp("stories_chat")
    for f in stories_dir.iterdir():
        if f.is_file():
            (out / f.name).symlink_to(f)
    (out / "tokenizer_config.json").unlink()
    cfg = json.loads((stories_dir / "tokenizer_config.json").read_text())
    cfg["chat_template"] = CHAT_TEMPLATE
    (out / "tokenizer_config.json").write_text(json.dumps(cfg))
    return out


def _npu_backend(kind: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    props = {**F32, "NPUW_DEVICES": "CPU", "NPUW_ONLINE_PIPELINE": "NONE"}
    if kind == "npuw":
        assert npuw_available(), "the built-in NPUW plugin (plugins/ov_npu_emu_npuw) is not registered"
        return {"props": props, "plugin": None}
    import genai_shim.pipeline
    from tests.genai_shim.fake_npuw import FakeNpuwPlugin, make_core_with_fake

    plugin = FakeNpuwPlugin()
    monkeypatch.setattr(genai_shim.pipeline, "_make_core", lambda: make_core_with_fake(plugin))
    return {"props": props, "plugin": plugin}


@pytest.fixture(params=["fake_npuw", "npuw"])
def npu(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Device "NPU" for genai_shim: through our NPUW plugin and through a CPU-backed test double
    of it (tests the pipeline's NPU logic on its own, e.g. the config it hands over).

    Returns ``{"props": ..., "plugin": fake-or-None}``; ``props`` go to LLMPipeline(..., "NPU").
    """
    return _npu_backend(request.param, monkeypatch)


@pytest.fixture(params=["npuw"])
def npu_one(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Like ``npu`` but our NPUW only (keeps the slower oracle comparisons within the CI time
    budget); a missing NPUW plugin fails, it never falls back to the test double."""
    return _npu_backend(request.param, monkeypatch)
