"""LlamaConfig presets, seeded weights and quantization, and the IR's optimum-intel interface."""

from __future__ import annotations

from collections import Counter

import numpy as np
import openvino as ov
import pytest

from ov_npu_emu.errors import ConfigError
from ov_npu_emu.modelbuilder import (
    MASK_MIN,
    PRESETS,
    LlamaConfig,
    build_model,
    get_preset,
    init_weights,
    kv_variable_ids,
)
from ov_npu_emu.modelbuilder.weights import quantize_int8


def _count(weights) -> int:
    arrays = [weights.embed, weights.final_norm] + ([weights.lm_head] if weights.lm_head else [])
    for layer in weights.layers:
        arrays += [v for v in vars(layer).values() if v is not None]
    return sum(int(np.prod(a.shape)) for a in arrays)


@pytest.mark.parametrize("overrides", [{}, {"attention_bias": True, "tie_word_embeddings": False}])
def test_num_parameters_matches_weights(overrides):
    config = get_preset("tiny", **overrides)
    assert config.num_parameters() == _count(init_weights(config))


def test_presets():
    assert set(PRESETS) == {
        "tiny", "small", "qwen2.5-0.5b-shape", "phi3-tiny", "gemma-tiny",
        "llama-3.2-1b-shape", "llama-3.2-3b-shape", "llama-3.1-8b-shape",
    }
    q = PRESETS["qwen2.5-0.5b-shape"]
    assert (q.hidden_size, q.num_hidden_layers, q.num_attention_heads, q.num_key_value_heads) == (
        896,
        24,
        14,
        2,
    )
    assert (q.head_dim, q.intermediate_size, q.vocab_size) == (64, 4864, 151936)
    assert q.tie_word_embeddings and q.attention_bias and q.model_type == "qwen2"
    assert 490e6 < q.num_parameters() < 500e6  # Qwen2.5-0.5B: 494M
    assert 2e6 < PRESETS["small"].num_parameters() < 8e6


@pytest.mark.parametrize(
    ("name", "shape", "params", "tied"),
    [
        # (layers, hidden, heads, kv heads, head_dim, intermediate); HF num_parameters()
        ("llama-3.2-1b-shape", (16, 2048, 32, 8, 64, 8192), 1_235_814_400, True),
        ("llama-3.2-3b-shape", (28, 3072, 24, 8, 128, 8192), 3_212_749_824, True),
        ("llama-3.1-8b-shape", (32, 4096, 32, 8, 128, 14336), 8_030_261_248, False),
    ],
)
def test_llama3_presets(name, shape, params, tied):
    c = PRESETS[name]
    got = (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads,
           c.head_dim, c.intermediate_size)
    assert got == shape
    assert (c.vocab_size, c.rope_theta, c.model_type) == (128256, 500000.0, "llama")
    assert c.tie_word_embeddings is tied and not c.attention_bias
    assert c.num_parameters() == params


def test_chunked_draws_equal_one_draw(monkeypatch):
    """Big matrices are drawn and quantized in row chunks: same values as one draw."""
    from ov_npu_emu.modelbuilder import weights as wmod

    config = get_preset("small")
    for dtype in ("f32", "int8", "int4"):
        whole = init_weights(config, 3, dtype)
        monkeypatch.setattr(wmod, "DRAW_CHUNK_BYTES", 4 * 256 * 7)  # 7 rows of hidden 256
        chunked = init_weights(config, 3, dtype)
        monkeypatch.undo()
        pairs = [(whole.embed, chunked.embed), (whole.lm_head, chunked.lm_head)]
        pairs += [(a, b) for la, lb in zip(whole.layers, chunked.layers, strict=False)
                  for a, b in zip(la.stored(), lb.stored(), strict=False)]
        for a, b in pairs:
            for name in ("data", "zero_point", "scale"):
                x, y = getattr(a, name), getattr(b, name)
                assert (x is None and y is None) or np.array_equal(x, y), (dtype, name)


def test_hf_dict_round_trip():
    for config in PRESETS.values():
        back = LlamaConfig.from_hf_dict(config.to_hf_dict())
        # init_scale is a builder knob, not an HF field (gemma-tiny sets it)
        assert back.replace(init_scale=config.init_scale) == config


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"num_key_value_heads": 3}, "num_key_value_heads"),
        ({"head_dim": 15}, "head_dim"),
        ({"hidden_size": 0}, "hidden_size"),
        ({"model_type": "gpt2"}, "model_type"),
    ],
)
def test_invalid_configs(overrides, key):
    with pytest.raises(ConfigError) as info:
        get_preset("tiny", **overrides)
    assert info.value.key == key


def test_weights_are_deterministic_by_seed():
    a, b, c = (init_weights(get_preset("tiny"), seed) for seed in (5, 5, 6))
    assert np.array_equal(a.layers[1].down_proj.data, b.layers[1].down_proj.data)
    assert not np.array_equal(a.layers[1].down_proj.data, c.layers[1].down_proj.data)


def test_int8_quantization_is_close_and_dequantizes_exactly():
    w = np.random.default_rng(0).standard_normal((32, 48)).astype(np.float32)
    w[3] = 0.0  # an all-zero row must survive
    q = quantize_int8(w)
    assert (
        q.data.dtype == np.uint8 and q.zero_point.shape == (32, 1) and q.scale.dtype == np.float16
    )
    deq = q.dequantize()
    step = q.scale.astype(np.float32)
    assert np.all(np.abs(deq - w) <= step * 0.5 + 1e-3 * step)
    assert np.all(deq[3] == 0.0)
    # The IR's decompression (Convert, Subtract, Multiply in f32) gives bit-identical values.
    from ov_npu_emu.modelbuilder.graph import _Builder

    builder = _Builder(get_preset("tiny"), init_weights(get_preset("tiny")))
    out = builder.weight(q, "w")
    model = ov.Model([ov.opset13.result(out)], [], "deq")
    got = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})({})[0]
    assert np.array_equal(got, deq)


@pytest.mark.parametrize("group_size", [16, 32, 64, 128, -1])
def test_int4_sym_quantization_and_ir_decompression_are_exact(group_size):
    from ov_npu_emu.modelbuilder.graph import _Builder
    from ov_npu_emu.modelbuilder.weights import quantize_int4_sym

    w = np.random.default_rng(1).standard_normal((24, 256)).astype(np.float32) * 0.1
    q = quantize_int4_sym(w, group_size)
    groups = 1 if group_size == -1 else 256 // group_size
    assert q.kind == "int4" and q.zero_point is None and q.scale.dtype == np.float16
    assert q.shape == (24, 256) and q.group_size == (group_size if group_size > 0 else -1)
    assert q.scale.size == 24 * groups and q.data.min() >= -8 and q.data.max() <= 7
    assert q.nbytes == 24 * 256 // 2 + 24 * groups * 2
    deq = q.dequantize()
    step = np.repeat(q.scale.astype(np.float32).reshape(24, groups), 256 // groups, axis=1)
    # 7-bit scale rounding may push the largest value a bit past 7·scale: clip error <= 1.1 step
    assert np.all(np.abs(deq - w) <= 1.1 * step)
    builder = _Builder(get_preset("tiny"), init_weights(get_preset("tiny")))
    model = ov.Model([ov.opset13.result(builder.weight(q, "w"))], [], "deq")
    types = {op.get_output_element_type(0).get_type_name() for op in model.get_ordered_ops()}
    assert "i4" in types and "f16" in types
    got = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})({})[0]
    assert np.array_equal(got, deq)


def test_int4_group_size_fallbacks_and_errors():
    from ov_npu_emu.modelbuilder.weights import quantize_int4_sym

    w = np.ones((4, 176), np.float32)
    assert quantize_int4_sym(w, 32).group_size == -1  # 176 % 32 != 0: channel-wise
    assert quantize_int4_sym(w, 16).group_size == 16
    with pytest.raises(ConfigError, match="group_size"):
        quantize_int4_sym(w, 48)
    with pytest.raises(ConfigError, match="group_size"):
        init_weights(get_preset("tiny"), 0, "int4", group_size=7)
    lw = init_weights(get_preset("tiny", tie_word_embeddings=False), 0, "int4", group_size=16)
    # optimum keeps embeddings and lm_head in int8 in int4 exports; norms stay f32
    assert lw.embed.kind == "int8" and lw.lm_head.kind == "int8"
    assert lw.layers[0].q_proj.kind == "int4" and lw.layers[0].input_norm.kind == "f32"
    int8 = init_weights(get_preset("tiny", tie_word_embeddings=False), 0, "int8")
    assert lw.nbytes() < int8.nbytes()


@pytest.fixture(scope="module")
def tiny_model():
    return build_model(init_weights(get_preset("tiny")))


def test_interface_is_optimum_intel(tiny_model):
    m = tiny_model
    inputs = {p.get_any_name(): (p.get_element_type(), p.get_partial_shape()) for p in m.inputs}
    assert list(inputs) == ["input_ids", "attention_mask", "position_ids", "beam_idx"]
    for name in ("input_ids", "attention_mask", "position_ids"):
        assert inputs[name] == (ov.Type.i64, ov.PartialShape([-1, -1]))
    assert inputs["beam_idx"] == (ov.Type.i32, ov.PartialShape([-1]))
    assert [o.get_any_name() for o in m.outputs] == ["logits"]
    assert m.output("logits").get_partial_shape() == ov.PartialShape([-1, -1, 512])
    variables = {v.get_info().variable_id: v.get_info() for v in m.get_variables()}
    expected = [vid for i in range(2) for vid in kv_variable_ids(i)]
    assert sorted(variables) == sorted(expected)
    for info in variables.values():
        assert info.data_type == ov.Type.f32
        assert info.data_shape == ov.PartialShape([-1, 2, -1, 16])


def test_graph_structure(tiny_model):
    ops = Counter(op.get_type_name() for op in tiny_model.get_ordered_ops())
    assert ops["ScaledDotProductAttention"] == 2 and ops["ReadValue"] == 4 and ops["Assign"] == 4
    assert ops["Swish"] == 2 and ops["Sin"] == 1 and ops["Cos"] == 1 and ops["Broadcast"] >= 4
    for op in tiny_model.get_ordered_ops():
        if op.get_type_name() == "ReadValue":
            # ReadValue(zeros [B,Hkv,0,D]) -> Gather(beam_idx, axis 0) -> Concat(axis 2) -> Assign
            gather = next(iter(op.output(0).get_target_inputs())).get_node()
            assert gather.get_type_name() == "Gather"
            assert gather.input_value(1).get_node().get_friendly_name() == "beam_idx"
            concat = next(iter(gather.output(0).get_target_inputs())).get_node()
            assert concat.get_type_name() == "Concat" and concat.get_attributes()["axis"] == 2
        if op.get_type_name() == "Select":
            masked = op.input_value(2).get_node().get_data()
            assert masked.ravel()[0] == np.float32(MASK_MIN) == -65504.0


def test_qkv_bias_and_mha_variants():
    m = build_model(init_weights(get_preset("tiny", attention_bias=True, num_key_value_heads=4)))
    names = [op.get_friendly_name() for op in m.get_ordered_ops()]
    assert "model.layers.0.self_attn.q_proj/Add" in names
    assert "model.layers.1.self_attn.v_proj/Add" in names
    assert not any(
        op.get_type_name() == "Broadcast" and op.get_output_partial_shape(0).rank.get_length() == 5
        for op in m.get_ordered_ops()
    )


@pytest.mark.parametrize("dtype", ["f16", "int8"])
def test_compressed_weight_storage(dtype):
    m = build_model(init_weights(get_preset("tiny"), 0, dtype))
    types = Counter(
        str(op.get_output_element_type(0))
        for op in m.get_ordered_ops()
        if op.get_type_name() == "Constant"
    )
    if dtype == "f16":
        assert types["<Type: 'float16'>"] >= 20
    else:
        assert types["<Type: 'uint8_t'>"] >= 2 * 15  # weights and zero points
