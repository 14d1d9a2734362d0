"""LoRA adapters side by side with the real openvino_genai 2026.4.1 (f32 hints), on the committed
llama-fp32 export and the adapters of tools/make_lora_fixture.py (tests/fixtures/lora).

One pipeline per device runs the same sequence of generate() calls — adapter on (construction
config), off, alpha 0.5, an adapter whose layers were not registered at construction (the real
applies only layers the construction adapters adapted: the text equals "off"), a blend of two,
and back to the construction config — and every text must equal the real's.  The sequence
changes the adapters per call on compiled models that are never rebuilt.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import genai_shim
from genai_shim.llm.paged import PagedLLM
from ov_npu_emu.errors import ConfigError, UserInputError
from tests.genai_shim.conftest import F32, NPU_LENS, REAL_NPU

pytestmark = pytest.mark.oracle

ROOT = Path(__file__).resolve().parents[1] / "fixtures"
LLAMA = ROOT / "optimum" / "llama-fp32"
QV_R8 = ROOT / "lora" / "llama_qv_r8.safetensors"
MLP_R4 = ROOT / "lora" / "llama_mlp_r4.safetensors"
QV_R40 = ROOT / "lora" / "llama_qv_r40.safetensors"
PROMPT = "hello world"
N = 12


def _sequence(mod, pipe, a, b) -> list[str]:
    """Texts of the per-call adapter changes (see the module doc)."""
    cfg = mod.AdapterConfig
    calls = [
        {},
        {"adapters": cfg()},
        {"adapters": cfg(a, 0.5)},
        {"adapters": cfg(b)},
        {"adapters": cfg([(a, 0.7), (b, 0.3)])},
        {},
    ]
    return [pipe.generate(PROMPT, max_new_tokens=N, **kw) for kw in calls]


def _run(mod, device: str, **props) -> list[str]:
    a, b = mod.Adapter(str(QV_R8)), mod.Adapter(str(MLP_R4))
    pipe = mod.LLMPipeline(str(LLAMA), device, adapters=mod.AdapterConfig(a), **props)
    return _sequence(mod, pipe, a, b)


@pytest.fixture(scope="module")
def real_cpu(real_genai) -> list[str]:
    return _run(real_genai, "CPU", **F32)


def test_cpu_matches_real(real_cpu):
    """Default "CPU": the paged-attention backend, as the real (its own LoRA variables)."""
    a, b = genai_shim.Adapter(str(QV_R8)), genai_shim.Adapter(str(MLP_R4))
    pipe = genai_shim.LLMPipeline(str(LLAMA), "CPU", adapters=genai_shim.AdapterConfig(a), **F32)
    ours = _sequence(genai_shim, pipe, a, b)
    assert isinstance(pipe._impl, PagedLLM)  # never fell back to the stateful model
    assert ours == real_cpu
    on, off, half, unregistered, blend, back = ours
    # the adapter changes the text, alpha matters, and the call without adapters is the
    # construction config again (not a test that cannot fail)
    assert len({on, off, half, blend}) == 4 and unregistered == off and back == on


def test_cpu_stateful_and_beam_search_match_real(real_genai, real_cpu):
    """ATTENTION_BACKEND=SDPA (the stateful model) gives the same sequence; beam search (stateful
    model here, paged in the real) with the adapter at alpha 0.5 too."""
    assert _run(genai_shim, "CPU", ATTENTION_BACKEND="SDPA", **F32) == real_cpu

    def beams(mod):
        a = mod.Adapter(str(QV_R8))
        pipe = mod.LLMPipeline(str(LLAMA), "CPU", adapters=mod.AdapterConfig(a, 0.5), **F32)
        return pipe.generate(PROMPT, max_new_tokens=8, num_beams=3, num_return_sequences=2).texts

    assert beams(genai_shim) == beams(real_genai)


def test_continuous_batching_pipeline_matches_real(real_genai):
    """ContinuousBatchingPipeline(..., {"adapters": ...}): per-call adapters through
    GenerationConfig.adapters, one value for all requests of a call (the real's error)."""

    def run(mod):
        a = mod.Adapter(str(QV_R8))
        sc = mod.SchedulerConfig()
        sc.cache_size = 1
        cb = mod.ContinuousBatchingPipeline(str(LLAMA), sc, "CPU", {**F32, "adapters": mod.AdapterConfig(a)})
        plain, half, off = (mod.GenerationConfig(max_new_tokens=8) for _ in range(3))
        half.adapters, off.adapters = mod.AdapterConfig(a, 0.5), mod.AdapterConfig()
        out = [[r.m_generation_ids for r in cb.generate([PROMPT, "the cat"], [plain, plain])]]
        out.append([r.m_generation_ids for r in cb.generate([PROMPT], [half])])
        out.append([r.m_generation_ids for r in cb.generate([PROMPT], [off])])
        with pytest.raises(RuntimeError, match="LoRA adapters value must be the same for all requests"):
            cb.generate([PROMPT, "x"], [half, off])
        return out

    ours = run(genai_shim)
    assert ours == run(real_genai)
    assert len({str(x) for x in ours[0][:1] + ours[1] + ours[2]}) == 3


def test_npuw_on_cpu_matches_real_npu(real_genai, real_cpu, monkeypatch):
    real = _run(real_genai, "NPU", **F32, **REAL_NPU, **NPU_LENS)
    assert real == real_cpu  # the claim: NPUW on CPU gives the CPU text
    import ov_npu_emu

    ours_pipe_compiles = []
    orig = ov_npu_emu.Core.compile_model

    def counting(self, *args, **kwargs):
        ours_pipe_compiles.append(args[1] if len(args) > 1 else kwargs.get("device_name"))
        return orig(self, *args, **kwargs)

    a, b = genai_shim.Adapter(str(QV_R8)), genai_shim.Adapter(str(MLP_R4))
    pipe = genai_shim.LLMPipeline(
        str(LLAMA), "NPU", adapters=genai_shim.AdapterConfig(a), **F32, **REAL_NPU, **NPU_LENS
    )
    monkeypatch.setattr(ov_npu_emu.Core, "compile_model", counting)
    assert _sequence(genai_shim, pipe, a, b) == real
    assert ours_pipe_compiles == []  # adapters switched on the compiled models
    assert int(pipe._impl.compiled.get_property("NPUW_LLM_MAX_LORA_RANK")) == 32  # the real default


def test_emulated_npu_matches_real_cpu(real_cpu):
    """The emulated NPU at its default (f16) precision gives the real CPU's f32 text here."""
    assert _run(genai_shim, "NPU", **NPU_LENS) == real_cpu


@pytest.mark.parametrize("mode", ["MODE_STATIC", "MODE_FUSE", "MODE_STATIC_RANK", "MODE_DYNAMIC"])
def test_modes_match_real(real_genai, mode):
    def texts(mod) -> list[str]:
        a = mod.Adapter(str(QV_R8))
        m = getattr(mod.AdapterConfig.Mode, mode)
        pipe = mod.LLMPipeline(str(LLAMA), "CPU", adapters=mod.AdapterConfig(a, 0.8, m), **F32)
        out = [pipe.generate(PROMPT, max_new_tokens=N)]
        if mode in ("MODE_STATIC_RANK", "MODE_DYNAMIC"):
            out.append(pipe.generate(PROMPT, max_new_tokens=N, adapters=mod.AdapterConfig(a, 0.3)))
        return out

    assert texts(genai_shim) == texts(real_genai)


def _rank40_text(mod, **props) -> str:
    a = mod.Adapter(str(QV_R40))
    pipe = mod.LLMPipeline(str(LLAMA), "NPU", adapters=mod.AdapterConfig(a), **F32, **REAL_NPU, **NPU_LENS, **props)
    return pipe.generate(PROMPT, max_new_tokens=N)


def test_rank_over_npuw_max_lora_rank(real_genai):
    """Rank 40 > NPUW_LLM_MAX_LORA_RANK 32 (the default): the real NPUW's error, at the first
    prefill (the adapter reaches NPUW as a state, not at compile time)."""
    with pytest.raises(RuntimeError, match="Please adjust NPUW_LLM_MAX_LORA_RANK"):
        _rank40_text(real_genai)
    too_big = "LoRA tensor low-rank size: 40 is larger than the maximum LoRA low-rank size 32"
    with pytest.raises(ConfigError, match=too_big) as e:
        _rank40_text(genai_shim)
    assert e.value.key == "NPUW_LLM_MAX_LORA_RANK"


def test_rank_padded_to_npuw_max_lora_rank(real_genai, real_cpu):
    """With NPUW_LLM_MAX_LORA_RANK=64 the rank-40 adapter is zero-padded to 64: the real's text."""
    big = {"NPUW_LLM_MAX_LORA_RANK": "64"}
    assert _rank40_text(genai_shim, **big) == _rank40_text(real_genai, **big) != real_cpu[1]


def _write(path: Path, tensors: dict[str, np.ndarray]) -> Path:
    from tools.make_lora_fixture import write_safetensors

    write_safetensors(path, tensors)
    return path


def test_adapter_errors_match_real(real_genai, tmp_path):
    only_a = _write(
        tmp_path / "only_a.safetensors",
        {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": np.ones((4, 128), np.float32)},
    )
    not_st = tmp_path / "x.bin"
    not_st.write_bytes(b"x" * 16)
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"\x05" + b"\x00" * 7 + b"{abcd")
    cases = [
        (tmp_path / "missing.safetensors", "LoRA adapter path does not exist"),
        (not_st, "Expected .safetensors file, got"),
        (only_a, "Either A, B or both matrices are missing in LoRA tensors for layer: "
                 "base_model.model.model.layers.0.self_attn.q_proj"),
        (garbage, "Cannot parse safetensor as a Safetensors file format"),
    ]
    for path, text in cases:
        with pytest.raises(RuntimeError, match=text):
            real_genai.Adapter(str(path))
        with pytest.raises(UserInputError, match=text):
            genai_shim.Adapter(str(path))
    unrelated = _write(tmp_path / "other.safetensors", {"foo.weight": np.ones((2, 2), np.float32)})
    assert bool(real_genai.Adapter(str(unrelated))) is bool(genai_shim.Adapter(str(unrelated))) is True
    assert bool(real_genai.Adapter()) is bool(genai_shim.Adapter()) is False
    # Adapter(ov.Tensor) reads the same bytes from memory
    import openvino as ov

    blob = ov.Tensor(np.frombuffer(QV_R8.read_bytes(), np.uint8).copy())
    assert bool(real_genai.Adapter(blob)) is True
    from_memory, from_file = genai_shim.Adapter(blob), genai_shim.Adapter(str(QV_R8))
    assert sorted(from_memory._layers) == sorted(from_file._layers) and len(from_file._layers) == 4
    assert all(np.array_equal(from_memory._layers[k].B, from_file._layers[k].B) for k in from_file._layers)


def test_adapter_config_matches_real(real_genai):
    def run(mod):
        a, b = mod.Adapter(str(QV_R8)), mod.Adapter(str(MLP_R4))
        c = mod.AdapterConfig([(a, 0.5), (b, 0.25)])
        out = [bool(mod.AdapterConfig()), bool(c), c.get_alpha(a), c.get_alpha(b)]
        c.set_alpha(b, 2)
        out += [c.get_alpha(b), [w for _, w in c.get_adapters_and_alphas()]]
        c.remove(a)
        # (the real's get_adapters() wraps copies: `==` on them is False, so not compared)
        out += [len(c.get_adapters()), mod.AdapterConfig(a).get_alpha(a)]
        errors = []
        for call in (lambda: c.add(b), lambda: c.get_alpha(a), lambda: c.set_alpha(a, 1.0), lambda: c.remove(a)):
            with pytest.raises(RuntimeError) as e:
                call()
            errors.append(str(e.value).strip().splitlines()[-1].split("AdapterConfig::")[1][:20])
        return out, errors

    assert run(genai_shim) == run(real_genai)


def test_nothing_silently_dropped(tmp_path):
    """Where the real silently keeps what it compiled (adapters passed to generate() of a pipeline
    built without them; a different alpha in MODE_FUSE), genai_shim raises."""
    a = genai_shim.Adapter(str(QV_R8))
    plain = genai_shim.LLMPipeline(str(LLAMA), "CPU", ATTENTION_BACKEND="SDPA", **F32)
    with pytest.raises(ConfigError, match="GenerationConfig.adapters=.* created with the adapters property") as e:
        plain.generate(PROMPT, max_new_tokens=2, adapters=genai_shim.AdapterConfig(a))
    assert e.value.key == "adapters"
    fused = genai_shim.LLMPipeline(
        str(LLAMA), "CPU", adapters=genai_shim.AdapterConfig(a, genai_shim.AdapterConfig.Mode.MODE_FUSE), **F32
    )
    with pytest.raises(ConfigError, match="Cannot change adapters and/or the alphas"):
        fused.generate(PROMPT, max_new_tokens=2, adapters=genai_shim.AdapterConfig(a, 0.5))
    with pytest.raises(ConfigError, match="AdapterConfig::mode cannot be changed"):
        fused.generate(
            PROMPT, max_new_tokens=2, adapters=genai_shim.AdapterConfig(a, genai_shim.AdapterConfig.Mode.MODE_DYNAMIC)
        )
    with pytest.raises(ConfigError, match="NPUW_LLM_MAX_LORA_RANK must be an integer"):
        genai_shim.LLMPipeline(str(LLAMA), "NPU", NPUW_LLM_MAX_LORA_RANK="many", **REAL_NPU, **NPU_LENS)
