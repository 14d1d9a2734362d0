"""phi3 and gemma builder presets through the whole stack: reference, CPU, genai, NPUW, our NPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import pytest

from ov_npu_emu.errors import ConfigError
from ov_npu_emu.modelbuilder import (
    LlamaConfig,
    get_preset,
    init_weights,
    load_reference,
    make_model_folder,
)
from tests.npuw._oracle import greedy, real_npuw_config

ARCHS = ["phi3-tiny", "gemma-tiny"]
#: per preset a prompt whose greedy top-1/top-2 logit gap stays >= MIN_MARGIN for all steps
#: (searched over random prompts): the real NPUW keeps its KV in f16, which moves logits ~1e-3
PROMPTS = {
    "phi3-tiny": [1, 169, 25, 29, 148, 169, 66, 81],
    "gemma-tiny": [1, 181, 77, 88, 105, 235, 237, 77],
}
MIN_MARGIN = 0.01
NEW_TOKENS = 32
#: f32 compute and KV; no int8 activation quantization (irrelevant for f32 weights, harmless)
F32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
LENS = {"MAX_PROMPT_LEN": 64, "MIN_RESPONSE_LEN": 64}


@pytest.fixture(scope="module", params=ARCHS)
def arch_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model_folder(tmp_path_factory.mktemp(request.param), request.param)


def _prompt(folder: Path) -> list[int]:
    return PROMPTS[folder.name.rstrip("0123456789")]


@pytest.fixture(scope="module")
def expected(arch_dir: Path) -> list[int]:
    ref = load_reference(arch_dir)
    prompt = _prompt(arch_dir)
    ids = ref.greedy_generate(prompt, NEW_TOKENS)
    # a degenerate stream (one token repeated) would hide KV-cache and position bugs
    assert len(set(ids)) > 8, ids
    logits, _ = ref.forward(np.array([prompt + ids[:-1]], np.int64))
    top2 = np.sort(logits[0, len(prompt) - 1 :], axis=-1)[:, -2:]
    assert float((top2[:, 1] - top2[:, 0]).min()) >= MIN_MARGIN  # flips would be noise, not bugs
    return ids


# ---------------------------------------------------------------------- graph structure


def _types(model: ov.Model) -> list[str]:
    return [op.get_type_name() for op in model.get_ordered_ops()]


def test_phi3_graph_fuses_qkv_and_gate_up() -> None:
    from ov_npu_emu.modelbuilder import build_model

    c = get_preset("phi3-tiny")
    model = build_model(init_weights(c))
    types = _types(model)
    matmuls = [op for op in model.get_ordered_ops() if op.get_type_name() == "MatMul"]
    # per layer: qkv, o, gate_up, down; plus the LM head
    assert len(matmuls) == 4 * c.num_hidden_layers + 1
    assert types.count("VariadicSplit") == c.num_hidden_layers
    assert types.count("Split") >= c.num_hidden_layers  # gate_up chunk (+ RoPE halves)
    names = {op.get_friendly_name() for op in matmuls}
    assert "model.layers.0.self_attn.qkv_proj/MatMul" in names
    assert "model.layers.0.mlp.gate_up_proj/MatMul" in names
    assert "Swish" in types and "Gelu" not in types
    assert types.count("ScaledDotProductAttention") == c.num_hidden_layers
    assert "Broadcast" in types  # GQA expansion (4 query heads over 2 KV heads)
    qkv = next(op for op in matmuls if "qkv_proj" in op.get_friendly_name())
    assert qkv.get_output_partial_shape(0)[2].get_length() == c.q_size + 2 * c.kv_size


def test_gemma_graph_scales_embeddings_and_uses_gelu_tanh() -> None:
    from ov_npu_emu.modelbuilder import build_model

    c = get_preset("gemma-tiny")
    assert c.head_dim * c.num_attention_heads != c.hidden_size  # head_dim is independent
    model = build_model(init_weights(c))
    ops_by_name = {op.get_friendly_name(): op for op in model.get_ordered_ops()}
    scale = ops_by_name["model/embed_scale"]
    const = scale.input_value(1).get_node()
    assert float(const.get_data().reshape(-1)[0]) == np.float32(np.sqrt(c.hidden_size))
    gelus = [op for op in model.get_ordered_ops() if op.get_type_name() == "Gelu"]
    assert len(gelus) == c.num_hidden_layers
    assert all(str(g.get_attributes()["approximation_mode"]).lower() == "tanh" for g in gelus)
    # every RMSNorm (2 per layer + final) scales by (1 + w)
    assert sum(n.endswith("/one_plus_weight") for n in ops_by_name) == 2 * c.num_hidden_layers + 1
    # tied: the LM head MatMul reads the embedding constant
    head = ops_by_name["lm_head/MatMul"].input_value(1).get_node()
    assert head.get_friendly_name() == "model.embed_tokens.weight"


def test_config_json_and_round_trip(arch_dir: Path) -> None:
    import json

    data = json.loads((arch_dir / "config.json").read_text())
    c = get_preset(arch_dir.name.rstrip("0123456789"))
    assert data["model_type"] == c.model_type
    assert data["architectures"] == [
        {"phi3": "Phi3ForCausalLM", "gemma": "GemmaForCausalLM"}[c.model_type]
    ]
    back = LlamaConfig.from_hf_dict(data)
    assert back.replace(init_scale=c.init_scale) == c
    if c.model_type == "gemma":
        assert data["hidden_activation"] == "gelu_pytorch_tanh"
        assert data["tie_word_embeddings"] is True


def test_phi3_rejects_attention_bias() -> None:
    with pytest.raises(ConfigError, match="phi3 has no q/k/v bias"):
        get_preset("phi3-tiny", attention_bias=True)


@pytest.mark.parametrize("dtype", ["int8", "int4"])
def test_phi3_fused_rows_are_the_split_weights(dtype: str) -> None:
    """Quantizing the fused matrix equals quantizing each part: the row views dequantize alike."""
    w = init_weights(get_preset("phi3-tiny"), dtype=dtype, group_size=16)
    layer = w.layers[0]
    fused = layer.qkv_proj.dequantize()
    parts = [layer.q_proj, layer.k_proj, layer.v_proj]
    np.testing.assert_array_equal(np.concatenate([p.dequantize() for p in parts]), fused)
    # the IR holds the fused weights once: the row views are not counted again
    stored = layer.stored()
    assert any(x is layer.qkv_proj for x in stored) and any(x is layer.gate_up_proj for x in stored)
    assert not any(x is layer.q_proj or x is layer.up_proj for x in stored)
    per_layer = sum(x.nbytes for x in stored)
    head = w.lm_head.nbytes if w.lm_head is not None else 0
    assert w.nbytes() == w.embed.nbytes + w.final_norm.nbytes + head + 2 * per_layer


# ---------------------------------------------------------------------- numerics vs CPU


def test_reference_logits_match_cpu(arch_dir: Path) -> None:
    ref = load_reference(arch_dir)
    compiled = ov.Core().compile_model(arch_dir / "openvino_model.xml", "CPU", F32)
    req = compiled.create_infer_request()
    ids = np.array([_prompt(arch_dir)], np.int64)
    req.infer(
        {
            "input_ids": ids,
            "attention_mask": np.ones_like(ids),
            "position_ids": np.arange(ids.shape[1], dtype=np.int64)[None],
            "beam_idx": np.zeros(1, np.int32),
        }
    )
    logits = np.asarray(req.get_tensor("logits").data)
    want, _ = ref.forward(ids)
    np.testing.assert_allclose(logits, want, rtol=0, atol=1e-4)


def test_cpu_stateful_greedy(arch_dir: Path, expected: list[int]) -> None:
    compiled = ov.Core().compile_model(arch_dir / "openvino_model.xml", "CPU", F32)
    req = compiled.create_infer_request()
    assert greedy(req, _prompt(arch_dir), NEW_TOKENS) == (expected, None)


# ---------------------------------------------------------------------- pipelines


def _genai_ids(module: Any, folder: Path, device: str, **props: Any) -> list[int]:
    pipe = module.LLMPipeline(str(folder), device, **props)
    out = pipe.generate(
        ov.Tensor(np.array([_prompt(folder)], np.int64)), max_new_tokens=NEW_TOKENS, ignore_eos=True
    )
    return list(out.tokens[0])


def test_real_genai_cpu(arch_dir: Path, expected: list[int]) -> None:
    import openvino_genai as ov_genai
    assert _genai_ids(ov_genai, arch_dir, "CPU", **F32) == expected


def test_real_genai_npuw_on_cpu(arch_dir: Path, expected: list[int]) -> None:
    """Real genai on "NPU" = the real NPUW with every sub-model on the CPU plugin."""
    import openvino_genai as ov_genai
    props = {"NPUW_DEVICES": "CPU", "NPUW_ONLINE_PIPELINE": "NONE", **F32, **LENS}
    assert _genai_ids(ov_genai, arch_dir, "NPU", **props) == expected


def test_real_npuw_on_cpu(arch_dir: Path, expected: list[int]) -> None:
    compiled = ov.Core().compile_model(
        arch_dir / "openvino_model.xml", "NPU", real_npuw_config(64, 64)
    )
    req = compiled.create_infer_request()
    assert greedy(req, _prompt(arch_dir), NEW_TOKENS) == (expected, None)


@pytest.mark.parametrize("sub_device", ["CPU", "NPU"])
def test_genai_shim_npu(arch_dir: Path, expected: list[int], sub_device: str) -> None:
    import genai_shim
    got = _genai_ids(genai_shim, arch_dir, "NPU", NPUW_DEVICES=sub_device, **F32, **LENS)
    assert got == expected


#: every NPUW rewrite these architectures meet: shared LM head (tied for gemma), V stored
#: transposed, RoPE tables gathered by position, one-token SDPA in grouped-query form
ALL_TRANSFORMS = {
    "NPUW_LLM_SHARED_HEAD": "YES",
    "NPUW_LLM_OPTIMIZE_V_TENSORS": "YES",
    "NPUW_LLM_CACHE_ROPE": "YES",
    "NPUW_LLM_GENERATE_GROUPED_ATTENTION": "YES",
}


@pytest.mark.parametrize("sub_device", ["CPU", "NPU"])
def test_genai_shim_npu_all_transforms(
    arch_dir: Path, expected: list[int], sub_device: str
) -> None:
    import genai_shim
    props = {"NPUW_DEVICES": sub_device, **F32, **LENS, **ALL_TRANSFORMS}
    assert _genai_ids(genai_shim, arch_dir, "NPU", **props) == expected


def test_npuw_transforms_apply(arch_dir: Path) -> None:
    """The lead's NPUW rewrites recognise the phi3/gemma patterns (none silently skipped)."""
    import ov_npu_emu_npuw.attention_rewrites as rewrites
    import ov_npu_emu_npuw.transform as transform
    c = get_preset(arch_dir.name.rstrip("0123456789"))
    stateless, kv = transform.to_stateless(ov.Core().read_model(arch_dir / "openvino_model.xml"))
    gen = transform.make_generate_model(stateless, kv, 128, ov.Type.f32)
    assert rewrites.group_attention(gen.clone()) == c.num_hidden_layers
    assert rewrites.cache_rope(gen.clone(), 128) == 2  # one Sin, one Cos shared by all layers
    assert transform.make_lm_head_model(stateless) is not None


@pytest.mark.parametrize("dtype", ["f16", "int8", "int4"])
@pytest.mark.parametrize("preset", ARCHS)
def test_compressed_reference_matches_cpu(tmp_path: Path, preset: str, dtype: str) -> None:
    """Fused phi3 weights and gemma's (1 + w) norms decompress exactly as the reference assumes."""
    folder = make_model_folder(tmp_path, preset, dtype, group_size=16)
    # no int8 activation quantization for int4 MatMuls: the reference is exact
    props = F32 | {"DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}
    compiled = ov.Core().compile_model(folder / "openvino_model.xml", "CPU", props)
    req = compiled.create_infer_request()
    ids = np.array([PROMPTS[preset]], np.int64)
    req.infer(
        {
            "input_ids": ids,
            "attention_mask": np.ones_like(ids),
            "position_ids": np.arange(ids.shape[1], dtype=np.int64)[None],
            "beam_idx": np.zeros(1, np.int32),
        }
    )
    want, _ = load_reference(folder).forward(ids)
    np.testing.assert_allclose(np.asarray(req.get_tensor("logits").data), want, rtol=0, atol=1e-4)


def test_cli_make_model_arch_presets(tmp_path: Path) -> None:
    import json

    from ov_npu_emu.cli import main

    assert main(["make-model", str(tmp_path / "p"), "--preset", "phi3-tiny"]) == 0
    assert json.loads((tmp_path / "p" / "config.json").read_text())["model_type"] == "phi3"
    # --model-type turns another preset into the architecture (gemma on tiny's shapes)
    assert main(["make-model", str(tmp_path / "g"), "--model-type", "gemma"]) == 0
    data = json.loads((tmp_path / "g" / "config.json").read_text())
    assert data["architectures"] == ["GemmaForCausalLM"]
