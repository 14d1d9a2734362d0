"""Fixtures for the NPUW tests: the stories260K model, oracles, and our NPUW compiled on CPU."""

from __future__ import annotations

from pathlib import Path

import openvino as ov
import pytest

from ov_npu_emu.testing import CPU_EXACT_CONFIG


@pytest.fixture(scope="session")
def stories_model(stories260k_dir: Path) -> ov.Model:
    return ov.Core().read_model(stories260k_dir / "openvino_model.xml")


@pytest.fixture(scope="session")
def cpu_request(stories_model):
    """The stateful model on the real CPU plugin in f32: the numerical oracle."""
    return ov.Core().compile_model(stories_model, "CPU", CPU_EXACT_CONFIG).create_infer_request()


@pytest.fixture(scope="session")
def emu_core():
    from ov_npu_emu import Core

    return Core()


@pytest.fixture(scope="session")
def npuw_compiled(emu_core):
    """``npuw_compiled(model, cfg)``: our NPUW's compiled model, built once per model and config
    (per worker). For tests that only need fresh requests: each request has its own KV and
    counters, so sharing the compiled model saves the compile (seconds) and checks the same."""
    cache: dict[tuple[int, str], tuple[ov.Model, object]] = {}

    def get(model: ov.Model, cfg: dict):
        key = (id(model), repr(sorted(cfg.items())))
        if key not in cache:  # the model is kept in the entry, so its id is not reused
            cache[key] = (model, emu_core.compile_model(model, "NPU", cfg))
        return cache[key][1]

    return get


_LLMS: dict[str, tuple[str, ov.Model, object]] = {}


def _llm(request, name: str) -> tuple[str, ov.Model, object]:
    if name not in _LLMS:
        if name == "stories260K":
            model = request.getfixturevalue("stories_model")
        else:
            folder = request.getfixturevalue(f"{name}_model_dir")
            model = ov.Core().read_model(Path(folder) / "openvino_model.xml")
        cpu = ov.Core().compile_model(model, "CPU", CPU_EXACT_CONFIG).create_infer_request()
        _LLMS[name] = (name, model, cpu)
    return _LLMS[name]


@pytest.fixture(scope="session", params=["stories260K", "tiny", "small"])
def llm(request) -> tuple[str, ov.Model, object]:
    """(name, stateful model, f32 CPU request) for every model the acceptance matrix runs on."""
    return _llm(request, request.param)


@pytest.fixture(scope="session", params=["stories260K", "tiny"])
def llm_quick(request) -> tuple[str, ov.Model, object]:
    """The two cheaper models, for the tests outside the acceptance matrix."""
    return _llm(request, request.param)
