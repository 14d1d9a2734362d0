"""LlamaConfig: the hyper-parameters of a synthetic Llama-family model, and the named presets."""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from typing import Any

from ov_npu_emu.errors import ConfigError

__all__ = ["ARCHITECTURES", "DTYPES", "GROUP_SIZES", "PRESETS", "LlamaConfig", "get_preset"]

#: model_type -> HF ``architectures`` entry.  phi3 and gemma change the graph (see graph.py);
#: llama and qwen2 differ only in the q/k/v bias.
ARCHITECTURES: dict[str, str] = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "phi3": "Phi3ForCausalLM",
    "gemma": "GemmaForCausalLM",
}

#: Weight storage formats the builder can write (see ``weights.quantize``).
DTYPES: tuple[str, ...] = ("f32", "f16", "int8", "int4")

#: int4 group sizes the builder accepts; -1 means channel-wise (one scale per output row).
GROUP_SIZES: tuple[int, ...] = (16, 32, 64, 128, -1)


@dataclass(frozen=True)
class LlamaConfig:
    """Shape of a Llama-family decoder (Llama, Qwen2), HF-config field names where they exist."""

    vocab_size: int = (
        512  # rows of the embedding / logits width; >= 259 for the byte-level tokenizer
    )
    hidden_size: int = 64  # residual stream width
    intermediate_size: int = 176  # SwiGLU inner width
    num_hidden_layers: int = 2  # decoder blocks (one KV variable pair each)
    num_attention_heads: int = 4  # query heads
    num_key_value_heads: int = 2  # KV heads; < num_attention_heads means GQA (KV broadcast)
    head_dim: int = 16  # per-head width; q_proj is [heads*head_dim, hidden]
    rms_norm_eps: float = 1e-5  # RMSNorm epsilon
    rope_theta: float = 10000.0  # RoPE base
    max_position_embeddings: int = 2048  # advertised context (config.json only; RoPE is computed)
    tie_word_embeddings: bool = True  # lm_head reuses the embedding table
    attention_bias: bool = False  # q/k/v projections have a bias (Qwen2 style); o_proj never does
    model_type: str = "llama"  # a key of ARCHITECTURES: config.json model_type / architectures
    bos_token_id: int = 1  # matches the builder tokenizer's <s>
    eos_token_id: int = 2  # matches the builder tokenizer's </s>
    pad_token_id: int = 0  # matches the builder tokenizer's <unk>
    init_scale: float = 1.0  # multiplies the default init std (1/sqrt(fan_in) for projections)

    def __post_init__(self) -> None:
        def need(cond: bool, msg: str, key: str) -> None:
            if not cond:
                raise ConfigError(msg, key=key)

        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
        ):
            value = getattr(self, name)
            need(
                isinstance(value, int) and value > 0,
                f"{name} must be a positive int, got {value!r}",
                name,
            )
        need(
            self.num_attention_heads % self.num_key_value_heads == 0,
            f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
            f"num_key_value_heads ({self.num_key_value_heads})",
            "num_key_value_heads",
        )
        need(
            self.head_dim % 2 == 0,
            f"head_dim must be even for RoPE, got {self.head_dim}",
            "head_dim",
        )
        need(
            self.model_type in ARCHITECTURES,
            f"model_type must be one of {', '.join(ARCHITECTURES)}, got {self.model_type!r}",
            "model_type",
        )
        need(
            not (self.model_type == "phi3" and self.attention_bias),
            "phi3 has no q/k/v bias (its fused qkv_proj is bias-free); drop attention_bias",
            "attention_bias",
        )
        need(self.rms_norm_eps > 0, "rms_norm_eps must be > 0", "rms_norm_eps")
        need(self.rope_theta > 0, "rope_theta must be > 0", "rope_theta")
        need(self.init_scale > 0, "init_scale must be > 0", "init_scale")
        for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
            value = getattr(self, name)
            need(0 <= value < self.vocab_size, f"{name}={value} is outside the vocabulary", name)

    # ------------------------------------------------------------------ derived sizes

    @property
    def is_phi3(self) -> bool:
        """Fused qkv_proj and gate_up_proj (one MatMul each, then split)."""
        return self.model_type == "phi3"

    @property
    def is_gemma(self) -> bool:
        """Embeddings × √hidden, RMSNorm × (1 + w), GELU-tanh MLP."""
        return self.model_type == "gemma"

    @property
    def num_kv_groups(self) -> int:
        """Query heads per KV head (1 = MHA)."""
        return self.num_attention_heads // self.num_key_value_heads

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_key_value_heads * self.head_dim

    def num_parameters(self) -> int:
        """Parameter count (tied embeddings counted once), as HF's ``num_parameters()``."""
        h, i = self.hidden_size, self.intermediate_size
        per_layer = (
            h * self.q_size  # q_proj
            + 2 * h * self.kv_size  # k_proj, v_proj
            + self.q_size * h  # o_proj
            + 3 * h * i  # gate, up, down
            + 2 * h  # two RMSNorm weights
        )
        if self.attention_bias:
            per_layer += self.q_size + 2 * self.kv_size
        embed = self.vocab_size * h
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return embed + head + h + self.num_hidden_layers * per_layer

    def kv_bytes_per_token(self, itemsize: int = 4) -> int:
        """KV-cache bytes one token occupies over all layers (K and V)."""
        return 2 * self.num_hidden_layers * self.kv_size * itemsize

    # ------------------------------------------------------------------ conversions

    def replace(self, **overrides: Any) -> LlamaConfig:
        """Return a copy with fields replaced; unknown names raise :class:`ConfigError`."""
        names = {f.name for f in dataclasses.fields(self)}
        for key in overrides:
            if key not in names:
                hint = difflib.get_close_matches(key, sorted(names), n=1)
                extra = f"; did you mean {hint[0]!r}?" if hint else ""
                raise ConfigError(f"unknown LlamaConfig field {key!r}{extra}", key=key)
        return dataclasses.replace(self, **overrides)

    def to_hf_dict(self) -> dict[str, Any]:
        """An HF-style ``config.json`` dict (LlamaForCausalLM / Qwen2ForCausalLM)."""
        arch = ARCHITECTURES[self.model_type]
        out: dict[str, Any] = {
            "architectures": [arch],
            "model_type": self.model_type,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": None,
            "tie_word_embeddings": self.tie_word_embeddings,
            "attention_bias": self.attention_bias,
            "attention_dropout": 0.0,
            "mlp_bias": False,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
            "pad_token_id": self.pad_token_id,
            "torch_dtype": "float32",
            "use_cache": True,
        }
        if self.model_type == "qwen2":
            # Qwen2 always has q/k/v bias; HF's config has no attention_bias field for it.
            out.pop("attention_bias")
            out["use_sliding_window"] = False
        elif self.model_type == "phi3":
            # Phi3Config: no head_dim / mlp_bias fields; sliding_window None = full attention.
            for key in ("head_dim", "mlp_bias"):
                out.pop(key)
            out["sliding_window"] = None
            out["original_max_position_embeddings"] = self.max_position_embeddings
            out["embd_pdrop"] = out["resid_pdrop"] = 0.0
        elif self.model_type == "gemma":
            # GemmaConfig names the MLP activation hidden_activation (hidden_act is legacy).
            out.pop("mlp_bias")
            out["hidden_act"] = out["hidden_activation"] = "gelu_pytorch_tanh"
        return out

    @classmethod
    def from_hf_dict(cls, data: dict[str, Any]) -> LlamaConfig:
        """Read the fields this builder understands from an HF ``config.json`` dict."""
        model_type = data.get("model_type", "llama")
        heads = int(data["num_attention_heads"])
        hidden = int(data["hidden_size"])
        return cls(
            vocab_size=int(data["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(data["intermediate_size"]),
            num_hidden_layers=int(data["num_hidden_layers"]),
            num_attention_heads=heads,
            num_key_value_heads=int(data.get("num_key_value_heads") or heads),
            head_dim=int(data.get("head_dim") or hidden // heads),
            rms_norm_eps=float(data.get("rms_norm_eps", 1e-6)),
            rope_theta=float(data.get("rope_theta", 10000.0)),
            max_position_embeddings=int(data.get("max_position_embeddings", 2048)),
            tie_word_embeddings=bool(data.get("tie_word_embeddings", model_type == "gemma")),
            attention_bias=bool(data.get("attention_bias", model_type == "qwen2")),
            model_type=model_type,
            bos_token_id=int(data.get("bos_token_id") or 1),
            eos_token_id=int(data.get("eos_token_id") or 2),
            pad_token_id=int(data.get("pad_token_id") or 0),
        )


#: Named model shapes.  ``tiny`` is for unit tests, ``small`` for integration tests and demos,
#: ``qwen2.5-0.5b-shape`` and the ``llama-3.x-*-shape`` ones for benchmarks (random weights, the
#: real model's shapes).
PRESETS: dict[str, LlamaConfig] = {
    "tiny": LlamaConfig(),
    "small": LlamaConfig(
        vocab_size=2048,
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=32,
        tie_word_embeddings=False,
    ),
    "qwen2.5-0.5b-shape": LlamaConfig(
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        head_dim=64,
        rms_norm_eps=1e-6,
        rope_theta=1000000.0,
        max_position_embeddings=32768,
        tie_word_embeddings=True,
        attention_bias=True,
        model_type="qwen2",
    ),
    # Llama 3.x shapes (HF config.json of meta-llama/Llama-3.2-1B, -3B, Llama-3.1-8B): GQA with
    # 8 KV heads, vocab 128256, rope_theta 500000, tied embeddings for 1B/3B.  Not modelled:
    # rope_scaling "llama3" (the builder's RoPE is the default one) and Llama 3's token ids
    # (the byte-level builder tokenizer keeps ids 0/1/2 for pad/bos/eos).
    "llama-3.2-1b-shape": LlamaConfig(
        vocab_size=128256,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=64,
        rms_norm_eps=1e-5,
        rope_theta=500000.0,
        max_position_embeddings=131072,
        tie_word_embeddings=True,
    ),
    "llama-3.2-3b-shape": LlamaConfig(
        vocab_size=128256,
        hidden_size=3072,
        intermediate_size=8192,
        num_hidden_layers=28,
        num_attention_heads=24,
        num_key_value_heads=8,
        head_dim=128,
        rms_norm_eps=1e-5,
        rope_theta=500000.0,
        max_position_embeddings=131072,
        tie_word_embeddings=True,
    ),
    "llama-3.1-8b-shape": LlamaConfig(
        vocab_size=128256,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        rms_norm_eps=1e-5,
        rope_theta=500000.0,
        max_position_embeddings=131072,
        tie_word_embeddings=False,
    ),
    # Phi-3's structure (fused projections, untied head) at tiny's sizes; GQA as Phi-3-medium,
    # so the fused qkv splits unequally.
    "phi3-tiny": LlamaConfig(
        tie_word_embeddings=False,
        model_type="phi3",
    ),
    # Gemma-2b's structure (MQA, tied head, head_dim != hidden/heads) at tiny's sizes.
    "gemma-tiny": LlamaConfig(
        num_key_value_heads=1,
        head_dim=32,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        model_type="gemma",
        init_scale=2.0,  # with init_scale 1 the tied GELU model greedily repeats one token
    ),
}


def get_preset(name: str, **overrides: Any) -> LlamaConfig:
    """The preset ``name`` with ``overrides`` applied; unknown names raise :class:`ConfigError`."""
    if name not in PRESETS:
        hint = difflib.get_close_matches(name, list(PRESETS), n=1)
        extra = f"; did you mean {hint[0]!r}?" if hint else ""
        raise ConfigError(
            f"unknown model preset {name!r}{extra} (known: {', '.join(PRESETS)})", key="preset"
        )
    return PRESETS[name].replace(**overrides) if overrides else PRESETS[name]
