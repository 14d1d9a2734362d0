"""Numpy reference forward pass and greedy decoding: the test oracle for builder models."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ov_npu_emu.errors import UserInputError, check
from ov_npu_emu.modelbuilder.graph import MASK_MIN, rope_inv_freq
from ov_npu_emu.modelbuilder.weights import LlamaWeights

__all__ = ["KVCache", "LlamaReference"]

#: Per layer (key, value), each [B, Hkv, S, D].
KVCache = list[tuple[np.ndarray, np.ndarray]]


@dataclass
class _DenseLayer:
    input_norm: np.ndarray
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    o: np.ndarray
    post_norm: np.ndarray
    gate: np.ndarray
    up: np.ndarray
    down: np.ndarray
    q_bias: np.ndarray | None
    k_bias: np.ndarray | None
    v_bias: np.ndarray | None


class LlamaReference:
    """The model of :func:`~ov_npu_emu.modelbuilder.build_model`, evaluated op by op in numpy.

    Weights are the dequantized f32 values the IR computes (``StoredWeight.dequantize``), so the
    reference is exact for every storage dtype.  Arithmetic runs in ``compute_dtype`` (float64 by
    default: an oracle independent of BLAS summation order; the OpenVINO CPU plugin at
    ``INFERENCE_PRECISION_HINT=f32`` lands within ~1e-4 of it on logits).  Values the graph
    computes as f32 constants or from f32 inputs (RoPE angles, the SDPA scale, inv_freq) are
    rounded to f32 first, as the graph does.
    """

    def __init__(
        self, weights: LlamaWeights, compute_dtype: type[np.floating] = np.float64
    ) -> None:
        self.weights = weights
        self.config = weights.config
        self.dtype = np.dtype(compute_dtype)
        dt = self.dtype

        def dense(sw: object) -> np.ndarray:
            return sw.dequantize().astype(dt)  # type: ignore[attr-defined]

        def opt(sw: object | None) -> np.ndarray | None:
            return None if sw is None else dense(sw)

        self.embed = dense(weights.embed)
        self.head = self.embed if weights.lm_head is None else dense(weights.lm_head)
        self.final_norm = dense(weights.final_norm)
        self.gemma = self.config.is_gemma
        self.layers = [
            _DenseLayer(
                dense(lw.input_norm),
                dense(lw.q_proj),
                dense(lw.k_proj),
                dense(lw.v_proj),
                dense(lw.o_proj),
                dense(lw.post_norm),
                dense(lw.gate_proj),
                dense(lw.up_proj),
                dense(lw.down_proj),
                opt(lw.q_bias),
                opt(lw.k_bias),
                opt(lw.v_bias),
            )
            for lw in weights.layers
        ]
        self.inv_freq = rope_inv_freq(self.config)  # f32, the graph's constant
        self.scale = float(np.float32(1.0 / np.sqrt(self.config.head_dim)))

    # ------------------------------------------------------------------ pieces

    def _rms_norm(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        mean = np.mean(x * x, axis=-1, keepdims=True)
        scale = 1.0 + w if self.gemma else w  # GemmaRMSNorm stores w, applies (1 + w)
        return x * (1.0 / np.sqrt(mean + self.config.rms_norm_eps)) * scale

    def _rope_tables(self, position_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # The graph multiplies Convert(position_ids, f32) by the f32 inv_freq in f32.
        freqs = position_ids.astype(np.float32)[..., None] * self.inv_freq  # [B,S,D/2] f32
        emb = np.concatenate([freqs, freqs], axis=-1).astype(self.dtype)
        return np.cos(emb)[:, None], np.sin(emb)[:, None]  # [B,1,S,D]

    def _heads(self, x: np.ndarray, w: np.ndarray, b: np.ndarray | None, n: int) -> np.ndarray:
        """Projection to ``n`` heads: [B,S,H] -> [B,n,S,D]."""
        y = x @ w.T
        if b is not None:
            y = y + b
        batch, seq = x.shape[:2]
        return y.reshape(batch, seq, n, self.config.head_dim).transpose(0, 2, 1, 3)

    def _act(self, x: np.ndarray) -> np.ndarray:
        if self.gemma:  # gelu_pytorch_tanh
            inner = np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)
            return 0.5 * x * (1.0 + np.tanh(inner))
        return x / (1.0 + np.exp(-x))  # SiLU

    @staticmethod
    def _rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        half = x.shape[-1] // 2
        rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
        return x * cos + rotated * sin

    def _mask(self, attention_mask: np.ndarray, q_len: int) -> np.ndarray:
        kv_len = attention_mask.shape[1]
        rows = np.arange(kv_len - q_len, kv_len)[:, None]
        cols = np.arange(kv_len)[None, :]
        allowed = (cols <= rows)[None, None] & (attention_mask != 0)[:, None, None, :]
        return np.where(allowed, 0.0, MASK_MIN).astype(self.dtype)  # [B,1,q,kv]

    # ------------------------------------------------------------------ forward

    def empty_cache(self, batch: int = 1) -> KVCache:
        c = self.config
        z = np.zeros((batch, c.num_key_value_heads, 0, c.head_dim), dtype=self.dtype)
        return [(z, z) for _ in range(c.num_hidden_layers)]

    def forward(
        self,
        input_ids: np.ndarray | Sequence[Sequence[int]],
        position_ids: np.ndarray | None = None,
        attention_mask: np.ndarray | None = None,
        past_kv: KVCache | None = None,
    ) -> tuple[np.ndarray, KVCache]:
        """One call of the stateful model: returns ``(logits [B,S,V], present_kv)``.

        :param input_ids: [B, S] token ids.
        :param position_ids: [B, S]; default ``past_len + arange(S)``.
        :param attention_mask: [B, past_len + S] (0 = padding); default all ones.
        :param past_kv: per layer (key, value) [B, Hkv, past_len, D]; default empty.
        :returns: logits in ``compute_dtype`` and the concatenated (past + new) KV per layer.
        """
        c = self.config
        ids = np.asarray(input_ids, dtype=np.int64)
        check(ids.ndim == 2, f"input_ids must be [B, S], got shape {ids.shape}")
        batch, seq = ids.shape
        check(bool(np.all((ids >= 0) & (ids < c.vocab_size))), "input_ids out of vocabulary range")
        past = past_kv if past_kv is not None else self.empty_cache(batch)
        check(
            len(past) == c.num_hidden_layers,
            f"past_kv needs {c.num_hidden_layers} layers, got {len(past)}",
        )
        past_len = past[0][0].shape[2]
        if position_ids is None:
            position_ids = np.broadcast_to(
                np.arange(past_len, past_len + seq, dtype=np.int64), (batch, seq)
            )
        if attention_mask is None:
            attention_mask = np.ones((batch, past_len + seq), dtype=np.int64)
        position_ids = np.asarray(position_ids, dtype=np.int64)
        attention_mask = np.asarray(attention_mask, dtype=np.int64)
        check(
            position_ids.shape == (batch, seq),
            f"position_ids shape {position_ids.shape} != {(batch, seq)}",
        )
        check(
            attention_mask.shape == (batch, past_len + seq),
            f"attention_mask shape {attention_mask.shape} != {(batch, past_len + seq)} "
            "(past + new)",
        )

        cos, sin = self._rope_tables(position_ids)
        mask = self._mask(attention_mask, seq)
        groups = c.num_kv_groups
        h = self.embed[ids]  # [B,S,H]
        if self.gemma:
            h = h * float(np.float32(np.sqrt(c.hidden_size)))  # the graph's f32 constant
        present: KVCache = []
        for layer, (past_k, past_v) in zip(self.layers, past, strict=False):
            x = self._rms_norm(h, layer.input_norm)

            q = self._rope(self._heads(x, layer.q, layer.q_bias, c.num_attention_heads), cos, sin)
            k = self._rope(self._heads(x, layer.k, layer.k_bias, c.num_key_value_heads), cos, sin)
            v = self._heads(x, layer.v, layer.v_bias, c.num_key_value_heads)
            k_all = np.concatenate([past_k.astype(self.dtype), k], axis=2)
            v_all = np.concatenate([past_v.astype(self.dtype), v], axis=2)
            present.append((k_all, v_all))
            # GQA: KV head j serves query heads j*G .. j*G+G-1 (the graph's Broadcast layout).
            k_rep = np.repeat(k_all, groups, axis=1)
            v_rep = np.repeat(v_all, groups, axis=1)
            scores = (q @ k_rep.transpose(0, 1, 3, 2)) * self.scale + mask
            scores = scores - scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(axis=-1, keepdims=True)
            attn = (probs @ v_rep).transpose(0, 2, 1, 3).reshape(batch, seq, c.q_size)
            h = h + attn @ layer.o.T

            x = self._rms_norm(h, layer.post_norm)
            gate = x @ layer.gate.T
            up = x @ layer.up.T
            h = h + (self._act(gate) * up) @ layer.down.T
        logits = self._rms_norm(h, self.final_norm) @ self.head.T
        return logits, present

    # ------------------------------------------------------------------ generation

    def greedy_generate(
        self, prompt_ids: Sequence[int], max_new_tokens: int, eos: int | None = None
    ) -> list[int]:
        """Greedy decoding, one token per step with a growing attention mask (as genai does).

        :returns: the new tokens only; if ``eos`` is produced it is included and decoding stops.
        """
        prompt = [int(t) for t in prompt_ids]
        if not prompt:
            raise UserInputError("greedy_generate needs at least one prompt token")
        check(max_new_tokens >= 0, "max_new_tokens must be >= 0")
        out: list[int] = []
        if max_new_tokens == 0:
            return out
        logits, kv = self.forward(np.array([prompt], dtype=np.int64))
        length = len(prompt)
        while True:
            token = int(np.argmax(logits[0, -1]))
            out.append(token)
            if len(out) >= max_new_tokens or (eos is not None and token == eos):
                return out
            logits, kv = self.forward(
                np.array([[token]], dtype=np.int64),
                np.array([[length]], dtype=np.int64),
                np.ones((1, length + 1), dtype=np.int64),
                kv,
            )
            length += 1
