"""Builds the stateful Llama-family ov.Model in the optimum-intel layout with openvino's opsets."""

from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset13 as ops
from openvino import Output
from openvino.op.util import Variable, VariableInfo

from ov_npu_emu.modelbuilder.config import LlamaConfig
from ov_npu_emu.modelbuilder.weights import (
    LayerWeights,
    LlamaWeights,
    StoredWeight,
    StreamedWeights,
    pack_int4,
)

__all__ = ["MASK_MIN", "build_model", "kv_variable_ids", "rope_inv_freq"]

#: Additive mask value for blocked positions.  f16's lowest finite value, as optimum exports use:
#: finfo(f32).min turns into -inf/NaN once a device computes in f16 or adds two masks.
MASK_MIN = -65504.0


def rope_inv_freq(config: LlamaConfig) -> np.ndarray:
    """The f32 ``inv_freq`` constant [D/2] (HF default RoPE): theta^(-2i/D)."""
    d = config.head_dim
    return (1.0 / (config.rope_theta ** (np.arange(0, d, 2, dtype=np.float64) / d))).astype(
        np.float32
    )


def kv_variable_ids(layer: int) -> tuple[str, str]:
    """optimum-intel variable ids of one layer's (key, value) cache."""
    return (
        f"past_key_values.{layer}.keypresent.{layer}.key",
        f"past_key_values.{layer}.valuepresent.{layer}.value",
    )


def _i64(values: list[int] | int, name: str | None = None) -> Output:
    node = ops.constant(np.array(values, dtype=np.int64))
    if name:
        node.set_friendly_name(name)
    return node.output(0)


def _constant(data: np.ndarray, name: str) -> ov.Node:
    """A weight Constant; memmapped (streamed) and contiguous in-memory data are shared, not
    copied (the Constant holds a reference to the array; copying a 1B's weights cost seconds)."""
    if isinstance(data, np.memmap) or (data.flags.c_contiguous and data.flags.aligned and data.ndim > 0):
        node = ov.op.Constant(data, shared_memory=True)
        node.set_friendly_name(name)
        return node
    return ops.constant(data, name=name)


def _f32(values: list[float] | float) -> Output:
    return ops.constant(np.array(values, dtype=np.float32)).output(0)


class _Builder:
    """Holds the shared sub-graphs (mask, RoPE tables, KV init) while layers are added."""

    def __init__(self, config: LlamaConfig, weights: LlamaWeights | StreamedWeights) -> None:
        self.c = config
        self.w = weights
        self.sinks: list[ov.Node] = []

        def param(name: str, et: ov.Type, shape: list[int]) -> ov.Node:
            p = ops.parameter(ov.PartialShape(shape), et, name=name)
            p.output(0).get_tensor().set_names({name})
            return p

        self.input_ids = param("input_ids", ov.Type.i64, [-1, -1])
        self.attention_mask = param("attention_mask", ov.Type.i64, [-1, -1])
        self.position_ids = param("position_ids", ov.Type.i64, [-1, -1])
        self.beam_idx = param("beam_idx", ov.Type.i32, [-1])

    # ------------------------------------------------------------------ weights

    def weight(self, sw: StoredWeight, name: str) -> Output:
        """Constant (+ decompression) sub-graph producing the f32 weight."""
        if sw.kind == "int4":
            # The i8 values were once made a Constant here and dropped; one throwaway node keeps
            # the process-global node counter, hence the tokenizer IRs' auto names, unchanged.
            ops.constant(np.int8(0))
            return self.int4_weight(sw, name)
        const = _constant(sw.data, name)
        if sw.kind == "f32":
            return const.output(0)
        if sw.kind == "f16":
            # What ov.save_model(compress_to_fp16=True) produces: f16 constant + Convert.
            return ops.convert(const, ov.Type.f32, name=f"{name}/decompress").output(0)
        # int8: (Convert(u8) - Convert(zp)) * Convert(f16 scale); all in f32 so it stays exact.
        zp = _constant(sw.part("zero_point"), f"{name}/zero_point")
        scale = _constant(sw.part("scale"), f"{name}/scale")
        sub = ops.subtract(ops.convert(const, ov.Type.f32), ops.convert(zp, ov.Type.f32))
        return ops.multiply(sub, ops.convert(scale, ov.Type.f32), name=f"{name}/decompress").output(
            0
        )

    def int4_weight(self, sw: StoredWeight, name: str) -> Output:
        """NNCF's sym int4 layout: i4 [N,G,gs] -> Convert f16 -> × f16 scale [N,G,1] ->
        Reshape [N,K] -> Convert f32 (channel-wise: i4 [N,K] × scale [N,1], no Reshape)."""
        shape = ov.Shape(list(sw.data.shape))
        if sw.packed is not None:  # streamed: the Constant shares the memmapped bytes
            const = ov.op.Constant(ov.Tensor(sw.packed, shape, ov.Type.i4), shared_memory=True)
        else:
            tensor = ov.Tensor(ov.Type.i4, shape)
            np.asarray(tensor.data).view(np.uint8)[:] = pack_int4(sw.data)
            const = ops.constant(tensor)
        const.set_friendly_name(name)
        scale = _constant(sw.part("scale"), f"{name}/scale")
        y = ops.multiply(ops.convert(const, ov.Type.f16), scale)
        if sw.data.ndim == 3:
            y = ops.reshape(y, _i64(list(sw.shape)), special_zero=False)
        return ops.convert(y, ov.Type.f32, name=f"{name}/decompress").output(0)

    def linear(
        self, x: Output, w: StoredWeight, name: str, bias: StoredWeight | None = None
    ) -> Output:
        y = ops.matmul(
            x, self.weight(w, f"{name}.weight"), False, True, name=f"{name}/MatMul"
        ).output(0)
        if bias is not None:
            y = ops.add(y, self.weight(bias, f"{name}.bias"), name=f"{name}/Add").output(0)
        return y

    def rms_norm(self, x: Output, w: StoredWeight, name: str) -> Output:
        # Power/ReduceMean/Add/Sqrt/Divide/Multiply, the decomposition optimum exports contain.
        sq = ops.power(x, _f32([2.0]))
        mean = ops.reduce_mean(sq, _i64([-1]), keep_dims=True)
        rstd = ops.divide(_f32([1.0]), ops.sqrt(ops.add(mean, _f32([self.c.rms_norm_eps]))))
        normed = ops.multiply(x, rstd)
        scale = self.weight(w, f"{name}.weight")
        if self.c.is_gemma:
            # GemmaRMSNorm: x̂ · (1 + w); the Add stays in the IR (the plugins fold it)
            scale = ops.add(_f32([1.0]), scale, name=f"{name}/one_plus_weight").output(0)
        return ops.multiply(normed, scale, name=f"{name}/Multiply").output(0)

    # ------------------------------------------------------------------ shared sub-graphs

    def build_shared(self) -> None:
        c = self.c
        ids_shape = ops.shape_of(self.input_ids)
        batch = ops.gather(ids_shape, _i64([0]), _i64(0))
        q_len = ops.gather(ids_shape, _i64([1]), _i64(0))
        # Zero-length KV init [batch, Hkv, 0, D]: batch follows the caller's input_ids.
        self.kv_init_shape = ops.concat(
            [batch, _i64([c.num_key_value_heads, 0, c.head_dim])], 0
        ).output(0)

        # Mask [B,1,q,kv]: causal by index inside the (past + new) sequence whose length is
        # attention_mask's, AND attention_mask != 0.  Rows are the last q_len indices, so it
        # serves prefill with left padding and the NPUW generate layout (past slots, then new).
        kv_len = ops.gather(ops.shape_of(self.attention_mask), _i64([1]), _i64(0))
        kv_len_s = ops.squeeze(kv_len, _i64([0]))
        cols = ops.unsqueeze(ops.range(_i64(0), kv_len_s, _i64(1), ov.Type.i64), _i64([0]))
        first_row = ops.squeeze(ops.subtract(kv_len, q_len), _i64([0]))
        rows = ops.unsqueeze(ops.range(first_row, kv_len_s, _i64(1), ov.Type.i64), _i64([1]))
        causal = ops.unsqueeze(ops.less_equal(cols, rows), _i64([0, 1]))
        not_pad = ops.not_equal(ops.unsqueeze(self.attention_mask, _i64([1, 2])), _i64(0))
        allowed = ops.logical_and(causal, not_pad)
        self.mask = ops.select(
            allowed, _f32([0.0]), _f32([MASK_MIN]), name="attention_mask/additive"
        ).output(0)

        # RoPE tables [B,1,S,D] from position_ids (HF rotate_half layout: freqs repeated twice).
        pos = ops.unsqueeze(ops.convert(self.position_ids, ov.Type.f32), _i64([-1]))
        inv_freq = ops.constant(rope_inv_freq(c).reshape(1, 1, -1), name="rotary_emb.inv_freq")
        freqs = ops.multiply(pos, inv_freq)
        emb = ops.concat([freqs, freqs], -1)
        self.cos = ops.unsqueeze(ops.cos(emb, name="rotary_emb/cos"), _i64([1])).output(0)
        self.sin = ops.unsqueeze(ops.sin(emb, name="rotary_emb/sin"), _i64([1])).output(0)
        self.sdpa_scale = _f32(float(np.float32(1.0 / np.sqrt(c.head_dim))))

    def rope(self, x: Output) -> Output:
        halves = ops.split(x, _i64(-1), 2)
        rotated = ops.concat([ops.negative(halves.output(1)), halves.output(0)], -1)
        return ops.add(ops.multiply(x, self.cos), ops.multiply(rotated, self.sin)).output(0)

    def heads(self, x: Output, n_heads: int) -> Output:
        """[B,S,n*D] -> [B,n,S,D]."""
        r = ops.reshape(x, _i64([0, 0, n_heads, self.c.head_dim]), special_zero=True)
        return ops.transpose(r, _i64([0, 2, 1, 3])).output(0)

    def cache(self, new: Output, var_id: str, name: str) -> Output:
        """ReadValue(zeros) -> Gather(beam_idx) -> Concat(new, axis 2) -> Assign."""
        c = self.c
        info = VariableInfo()
        info.variable_id = var_id
        info.data_type = ov.Type.f32
        info.data_shape = ov.PartialShape([-1, c.num_key_value_heads, -1, c.head_dim])
        var = Variable(info)
        init = ops.broadcast(_f32([0.0]), self.kv_init_shape)
        past = ov.op.read_value(init, var)
        past.set_friendly_name(f"{name}/ReadValue")
        reordered = ops.gather(past, self.beam_idx, _i64(0))
        full = ops.concat([reordered, new], 2, name=f"{name}/Concat")
        assign = ov.op.assign(full, var)
        assign.set_friendly_name(f"{name}/Assign")
        self.sinks.append(assign)
        return full.output(0)

    def expand_kv(self, kv: Output) -> Output:
        """GQA: [B,Hkv,S,D] -> [B,Hq,S,D] by Unsqueeze/Broadcast/Reshape (as optimum exports do)."""
        c = self.c
        if c.num_kv_groups == 1:
            return kv
        unsq = ops.unsqueeze(kv, _i64([2]))
        shape = ops.shape_of(unsq)
        target = ops.concat(
            [
                ops.gather(shape, _i64([0, 1]), _i64(0)),
                _i64([c.num_kv_groups]),
                ops.gather(shape, _i64([3, 4]), _i64(0)),
            ],
            0,
        )
        expanded = ops.broadcast(unsq, target)
        return ops.reshape(
            expanded, _i64([0, c.num_attention_heads, -1, c.head_dim]), special_zero=True
        ).output(0)

    # ------------------------------------------------------------------ blocks

    def qkv(self, x: Output, lw: LayerWeights, p: str) -> tuple[Output, Output, Output]:
        """[B,S,H] -> q [B,Hq,S,D] (roped), k [B,Hkv,S,D] (roped), v [B,Hkv,S,D]."""
        c = self.c
        if lw.qkv_proj is not None:
            # phi3: one MatMul, then VariadicSplit along the feature axis into q | k | v
            fused = self.linear(x, lw.qkv_proj, f"{p}.self_attn.qkv_proj")
            parts = ops.variadic_split(
                fused, _i64(-1), _i64([c.q_size, c.kv_size, c.kv_size]),
                name=f"{p}.self_attn/qkv_split",
            )
            q_lin, k_lin, v_lin = parts.output(0), parts.output(1), parts.output(2)
        else:
            q_lin = self.linear(x, lw.q_proj, f"{p}.self_attn.q_proj", lw.q_bias)
            k_lin = self.linear(x, lw.k_proj, f"{p}.self_attn.k_proj", lw.k_bias)
            v_lin = self.linear(x, lw.v_proj, f"{p}.self_attn.v_proj", lw.v_bias)
        q = self.rope(self.heads(q_lin, c.num_attention_heads))
        k = self.rope(self.heads(k_lin, c.num_key_value_heads))
        return q, k, self.heads(v_lin, c.num_key_value_heads)

    def mlp(self, x: Output, lw: LayerWeights, p: str) -> Output:
        """down(act(gate(x)) · up(x)); phi3 fuses gate|up, gemma uses GELU-tanh."""
        if lw.gate_up_proj is not None:
            fused = self.linear(x, lw.gate_up_proj, f"{p}.mlp.gate_up_proj")
            halves = ops.split(fused, _i64(-1), 2, name=f"{p}.mlp/gate_up_split")  # chunk(2)
            gate_lin, up = halves.output(0), halves.output(1)
        else:
            gate_lin = self.linear(x, lw.gate_proj, f"{p}.mlp.gate_proj")
            up = self.linear(x, lw.up_proj, f"{p}.mlp.up_proj")
        if self.c.is_gemma:
            gate = ops.gelu(gate_lin, approximation_mode="tanh", name=f"{p}.mlp.act/Gelu")
        else:
            gate = ops.swish(gate_lin, _f32(1.0))
        return self.linear(ops.multiply(gate, up).output(0), lw.down_proj, f"{p}.mlp.down_proj")

    def layer(self, i: int, h: Output, lw: LayerWeights) -> Output:
        c = self.c
        p = f"model.layers.{i}"
        x = self.rms_norm(h, lw.input_norm, f"{p}.input_layernorm")
        q, k, v = self.qkv(x, lw, p)
        key_id, value_id = kv_variable_ids(i)
        k_all = self.expand_kv(self.cache(k, key_id, f"{p}.self_attn.key_cache"))
        v_all = self.expand_kv(self.cache(v, value_id, f"{p}.self_attn.value_cache"))
        attn = ops.scaled_dot_product_attention(
            q, k_all, v_all, self.mask, self.sdpa_scale, causal=False, name=f"{p}.self_attn/SDPA"
        )
        attn = ops.transpose(attn, _i64([0, 2, 1, 3]))
        attn = ops.reshape(attn, _i64([0, 0, c.q_size]), special_zero=True)
        h = ops.add(
            h,
            self.linear(attn.output(0), lw.o_proj, f"{p}.self_attn.o_proj"),
            name=f"{p}/attn_residual",
        )

        x = self.rms_norm(h.output(0), lw.post_norm, f"{p}.post_attention_layernorm")
        return ops.add(h, self.mlp(x, lw, p), name=f"{p}/mlp_residual").output(0)

    def build(self, name: str) -> ov.Model:
        self.build_shared()
        embed = self.weight(self.w.embed, "model.embed_tokens.weight")
        h = ops.gather(embed, self.input_ids, _i64(0), name="model.embed_tokens/Gather").output(0)
        if self.c.is_gemma:
            # GemmaModel: hidden * normalizer, a constant √hidden rounded to the compute dtype
            normalizer = _f32(float(np.float32(np.sqrt(self.c.hidden_size))))
            h = ops.multiply(h, normalizer, name="model/embed_scale").output(0)
        for i, lw in enumerate(self.w.layers):
            h = self.layer(i, h, lw)
        h = self.rms_norm(h, self.w.final_norm, "model.norm")
        if self.w.lm_head is not None:
            head = self.weight(self.w.lm_head, "lm_head.weight")
        elif self.w.embed.kind != "int8":
            head = embed  # tied: one Constant (f16: one Convert) feeds Gather and the logits MatMul
        else:
            # Tied int8: a second decompression chain on equal constants.  Real NPUW fails
            # ("Model references undeclared parameters: u8[V,H]") when one u8 decompression
            # sub-graph feeds both the embedding Gather and the LM head it cuts out.  save_model
            # stores identical constant data once, so the .bin does not grow.
            head = self.weight(self.w.embed, "lm_head.weight")
        logits = ops.matmul(h, head, False, True, name="lm_head/MatMul")
        logits.output(0).get_tensor().set_names({"logits"})
        result = ops.result(logits, name="logits/Result")
        params = [self.input_ids, self.attention_mask, self.position_ids, self.beam_idx]
        return ov.Model([result], self.sinks, params, name)


def build_model(weights: LlamaWeights | StreamedWeights, name: str | None = None) -> ov.Model:
    """The stateful LLM ov.Model for ``weights`` (its config, dtype and values).

    Interface (optimum-intel, ``text-generation-with-past``): inputs ``input_ids``,
    ``attention_mask``, ``position_ids`` (i64 [?,?]) and ``beam_idx`` (i32 [?]); output
    ``logits`` (f32 [?,?,vocab]); per layer the variables of :func:`kv_variable_ids`.
    """
    c = weights.config
    model = _Builder(c, weights).build(name or f"ov_npu_emu_{c.model_type}")
    model.set_rt_info(c.model_type, ["ov_npu_emu", "model_type"])
    model.set_rt_info(weights.dtype, ["ov_npu_emu", "weight_dtype"])
    model.set_rt_info(str(weights.seed), ["ov_npu_emu", "seed"])
    return model
