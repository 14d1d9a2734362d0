"""Deterministic random weights by seed, and their f32 / f16 / int8 / int4 storage forms."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ov_npu_emu.errors import ConfigError, UserInputError
from ov_npu_emu.modelbuilder.config import DTYPES, GROUP_SIZES, LlamaConfig

EMBED_STD_NUMERATOR = 0.3  # embedding std = 0.3·init_scale/√hidden (see init_weights)
#: gemma: std = 1.0·init_scale/hidden; × √hidden in the graph makes it 1.0·init_scale/√hidden
GEMMA_EMBED_STD_NUMERATOR = 1.0

__all__ = [
    "DRAW_CHUNK_BYTES",
    "LayerWeights",
    "LlamaWeights",
    "StoredWeight",
    "StreamedWeights",
    "WeightSpill",
    "init_weights",
    "pack_int4",
    "quantize_int4_sym",
    "quantize_int8",
]


@dataclass(frozen=True)
class StoredWeight:
    """One weight tensor exactly as the IR stores it.

    ``kind`` is ``"f32"`` (``data`` f32), ``"f16"`` (``data`` f16, the IR adds Convert→f32),
    ``"int8"`` (``data`` u8 [N,K], ``zero_point`` u8 [N,1], ``scale`` f16 [N,1]) or ``"int4"``
    (``data`` i8 values in [-8, 7] shaped [N, K/gs, gs], or [N, K] channel-wise; ``scale`` f16
    [N, K/gs, 1] or [N, 1]; no zero point; the IR stores ``data`` as packed i4).
    """

    kind: str  # "f32" | "f16" | "int8" | "int4"
    data: np.ndarray  # f32 / f16 / u8 / i8 (int4 values) payload
    zero_point: np.ndarray | None = None  # int8 only: u8 [N,1]
    scale: np.ndarray | None = None  # int8: f16 [N,1]; int4: f16 [N,G,1] or [N,1]
    #: int4 streamed to disk (WeightSpill): the packed bytes; ``data`` is then a zero-stride
    #: placeholder of the values' shape (only the IR is built from such a weight)
    packed: np.ndarray | None = None

    def part(self, name: str) -> np.ndarray:
        """``zero_point`` or ``scale``, which this weight's kind stores (a typed error if absent)."""
        a = getattr(self, name)
        if a is None:
            raise UserInputError(f"a {self.kind} weight has no {name}; its kind needs one")
        return a

    @property
    def shape(self) -> tuple[int, ...]:
        """The logical (dequantized) shape, e.g. [N, K] for a grouped int4 weight."""
        if self.kind == "int4" and self.data.ndim == 3:
            return (self.data.shape[0], self.data.shape[1] * self.data.shape[2])
        return tuple(self.data.shape)

    @property
    def group_size(self) -> int:
        """int4 group size (-1: channel-wise); 0 for other kinds."""
        if self.kind != "int4":
            return 0
        return int(self.data.shape[2]) if self.data.ndim == 3 else -1

    def dequantize(self) -> np.ndarray:
        """The f32 values the IR computes from this weight (bit-exact with its decompression)."""
        if self.kind == "int8":
            if self.zero_point is None or self.scale is None:
                raise ConfigError("int8 weight without zero point or scale")
            # (q - zp) is an integer of <= 9 bits and scale has an 11-bit mantissa, so the f32
            # product is exact: any evaluation order in the runtime gives the same value.
            diff = self.data.astype(np.float32) - self.zero_point.astype(np.float32)
            return diff * self.scale.astype(np.float32)
        if self.kind == "int4":
            if self.scale is None:
                raise ConfigError("int4 weight without scale")
            # the scale keeps <= 8 significant bits (see quantize_int4_sym), so q·scale is exact
            # in f16 and f32 alike: the IR's f16 Multiply and any f32 device path agree bit-exactly
            prod = self.data.astype(np.float32) * self.scale.astype(np.float32)
            return prod.reshape(self.shape)
        return self.data.astype(np.float32)

    def rows(self, start: int, stop: int) -> StoredWeight:
        """Output rows [start, stop) of a 2-D weight: exact for every kind, since all scales and
        zero points are per output row (or per row group)."""
        def cut(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else np.ascontiguousarray(a[start:stop])

        return StoredWeight(self.kind, np.ascontiguousarray(self.data[start:stop]), cut(self.zero_point),
                            cut(self.scale))

    @property
    def nbytes(self) -> int:
        extra = sum(a.nbytes for a in (self.zero_point, self.scale) if a is not None)
        payload = (self.data.size + 1) // 2 if self.kind == "int4" else self.data.nbytes
        return int(payload) + extra


@dataclass
class LayerWeights:
    """One decoder block, HF layout: projections are [out_features, in_features]."""

    input_norm: StoredWeight  # [H]
    q_proj: StoredWeight  # [Hq*D, H]
    k_proj: StoredWeight  # [Hkv*D, H]
    v_proj: StoredWeight  # [Hkv*D, H]
    o_proj: StoredWeight  # [H, Hq*D]
    post_norm: StoredWeight  # [H]
    gate_proj: StoredWeight  # [I, H]
    up_proj: StoredWeight  # [I, H]
    down_proj: StoredWeight  # [H, I]
    q_bias: StoredWeight | None = None  # [Hq*D] when attention_bias
    k_bias: StoredWeight | None = None  # [Hkv*D]
    v_bias: StoredWeight | None = None  # [Hkv*D]
    # phi3: the stored fused weights; q/k/v_proj and gate/up_proj are then row views of them
    qkv_proj: StoredWeight | None = None  # [(Hq+2*Hkv)*D, H]
    gate_up_proj: StoredWeight | None = None  # [2*I, H]: gate rows first, then up

    def stored(self) -> list[StoredWeight]:
        """The weights the IR holds (fused ones once, not their row views)."""
        views: set[str] = set()
        if self.qkv_proj is not None:
            views |= {"q_proj", "k_proj", "v_proj"}
        if self.gate_up_proj is not None:
            views |= {"gate_proj", "up_proj"}
        return [v for k, v in vars(self).items() if v is not None and k not in views]


@dataclass
class LlamaWeights:
    """All weights of a model; ``lm_head`` is None when the embeddings are tied."""

    config: LlamaConfig
    dtype: str  # storage format, one of DTYPES
    seed: int  # the seed they were drawn from
    embed: StoredWeight  # [V, H]
    final_norm: StoredWeight  # [H]
    layers: list[LayerWeights] = field(default_factory=list)
    lm_head: StoredWeight | None = None  # [V, H]; None means tied to ``embed``

    @property
    def head(self) -> StoredWeight:
        """The weight the logits MatMul uses."""
        return self.embed if self.lm_head is None else self.lm_head

    def nbytes(self) -> int:
        """Bytes of weight payload (what the .bin will roughly hold)."""
        total = self.embed.nbytes + self.final_norm.nbytes
        if self.lm_head is not None:
            total += self.lm_head.nbytes
        for layer in self.layers:
            total += sum(value.nbytes for value in layer.stored())
        return total


def quantize_int8(w: np.ndarray) -> StoredWeight:
    """Asymmetric per-output-channel u8 quantization, as optimum/NNCF ``--weight-format int8``."""
    w = np.asarray(w, dtype=np.float32)
    wmin = np.minimum(w.min(axis=1, keepdims=True), 0.0)
    wmax = np.maximum(w.max(axis=1, keepdims=True), 0.0)
    scale = ((wmax - wmin) / 255.0).astype(np.float16)
    # A constant-zero row would give scale 0; any positive scale represents it exactly.
    scale[scale == 0] = np.float16(1.0)
    scale32 = scale.astype(np.float32)
    zp = np.clip(np.round(-wmin / scale32), 0, 255)
    q = np.clip(np.round(w / scale32) + zp, 0, 255)
    return StoredWeight("int8", q.astype(np.uint8), zp.astype(np.uint8), scale)


#: significant bits kept in an int4 scale: |q| <= 8 adds 4 bits, so q·scale fits f16's 11 exactly
_INT4_SCALE_BITS = 7


def _round_significant(x: np.ndarray, bits: int) -> np.ndarray:
    mant, exp = np.frexp(x.astype(np.float64))
    return np.ldexp(np.round(mant * (1 << bits)) / (1 << bits), exp)


def quantize_int4_sym(w: np.ndarray, group_size: int = 128) -> StoredWeight:
    """Symmetric int4 as optimum/NNCF ``--weight-format int4 --sym --group-size gs``.

    Values are in [-8, 7] with ``scale = max|w| / 8`` per group (f16).  ``group_size=-1`` is
    channel-wise; a group size that does not divide the input width falls back to channel-wise
    for that weight (logged in the docs; NNCF refuses such a layer instead).
    """
    if group_size not in GROUP_SIZES:
        raise ConfigError(
            f"int4 group_size must be one of {GROUP_SIZES} (-1 = channel-wise), got {group_size!r}",
            key="group_size",
        )
    w = np.asarray(w, dtype=np.float32)
    n, k = w.shape
    grouped = group_size > 0 and k % group_size == 0 and k > group_size
    wg = w.reshape(n, k // group_size, group_size) if grouped else w
    amax = np.abs(wg).max(axis=-1, keepdims=True).astype(np.float64)
    scale64 = _round_significant(np.maximum(amax / 8.0, 2.0**-10), _INT4_SCALE_BITS)
    scale = scale64.astype(np.float16)
    q = np.clip(np.round(wg / scale.astype(np.float32)), -8, 7).astype(np.int8)
    return StoredWeight("int4", q, None, scale)


def _store(w: np.ndarray, dtype: str, compressible: bool, group_size: int = 128, *,
           int4: bool = True) -> StoredWeight:
    """Store ``w`` in ``dtype``; norms and biases are never quantized (as in optimum exports).

    ``int4=False`` marks embeddings and lm_head, which optimum keeps in int8 in int4 exports.
    """
    quantized = dtype in ("int8", "int4")
    if dtype == "f32" or (quantized and not compressible):
        return StoredWeight("f32", np.ascontiguousarray(w, dtype=np.float32))
    if dtype == "f16":
        return StoredWeight("f16", w.astype(np.float16))
    if dtype == "int4" and int4:
        return quantize_int4_sym(w, group_size)
    return quantize_int8(w)


def check_dtype(dtype: str, group_size: int) -> None:
    """Validate a weight dtype (and the int4 group size) with errors that list the valid values."""
    if dtype not in DTYPES:
        raise ConfigError(
            f"unknown weight dtype {dtype!r} (known: {', '.join(DTYPES)})", key="dtype"
        )
    if dtype == "int4" and group_size not in GROUP_SIZES:
        raise ConfigError(
            f"int4 group_size must be one of {GROUP_SIZES} (-1 = channel-wise), got {group_size!r}",
            key="group_size",
        )


def _phi3_layer(c: LlamaConfig, norm: Any, fused: Any, linear: Any) -> LayerWeights:
    """A phi3 block: same draws as Llama's (q, k, v, o, gate, up, down), stored fused."""
    input_norm = norm()
    h, q, kv, i = c.hidden_size, c.q_size, c.kv_size, c.intermediate_size
    # o_proj is drawn between v and gate in Llama's order; keep it so per-part draws line up
    qkv = fused((q, h), (kv, h), (kv, h))
    o_proj = linear(h, q)
    post_norm = norm()
    gate_up = fused((i, h), (i, h))
    return LayerWeights(
        input_norm=input_norm,
        q_proj=qkv.rows(0, q),
        k_proj=qkv.rows(q, q + kv),
        v_proj=qkv.rows(q + kv, q + 2 * kv),
        o_proj=o_proj,
        post_norm=post_norm,
        gate_proj=gate_up.rows(0, i),
        up_proj=gate_up.rows(i, 2 * i),
        down_proj=linear(h, i),
        qkv_proj=qkv,
        gate_up_proj=gate_up,
    )


#: f32 bytes drawn at once for a big matrix: rows are drawn, and stored (quantized), in chunks of
#: this size, so an 8B model's [128256, 4096] embedding never exists in f32 as a whole.  The
#: values are the same as one draw (the generator's stream does not depend on the call sizes) and
#: so are the stored forms (every scale and zero point is per output row).
DRAW_CHUNK_BYTES = 64 << 20


def pack_int4(q: np.ndarray) -> np.ndarray:
    """int4 values (i8 in [-8, 7]) -> bytes as OpenVINO packs i4: two per byte, low nibble first."""
    nib = (np.ascontiguousarray(q, dtype=np.int8).reshape(-1) & 0xF).astype(np.uint8)
    if nib.size % 2:
        nib = np.append(nib, np.uint8(0))
    return nib[0::2] | (nib[1::2] << 4)


def _concat(parts: list[StoredWeight]) -> StoredWeight:
    if len(parts) == 1:
        return parts[0]

    def cat(name: str) -> np.ndarray | None:
        arrays = [getattr(p, name) for p in parts]
        return None if arrays[0] is None else np.concatenate(arrays, axis=0)

    return StoredWeight(parts[0].kind, np.concatenate([p.data for p in parts], axis=0), cat("zero_point"),
                        cat("scale"))


def _draws(
    config: LlamaConfig, seed: int, dtype: str, group_size: int
) -> Iterator[StoredWeight | LayerWeights | None]:
    """The weights in draw order: embed, each layer, final norm, lm_head (None when tied)."""
    check_dtype(dtype, group_size)
    if not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"seed must be a non-negative int, got {seed!r}", key="seed")
    rng = np.random.default_rng(seed)
    c = config
    s = c.init_scale

    def normal(shape: tuple[int, ...], std: float) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(std)

    def matrix(out_f: int, in_f: int, std: float, *, int4: bool = True) -> StoredWeight:
        step = max(1, DRAW_CHUNK_BYTES // (4 * in_f))
        return _concat([
            _store(normal((min(step, out_f - r0), in_f), std), dtype, True, group_size, int4=int4)
            for r0 in range(0, out_f, step)
        ])

    def linear(out_f: int, in_f: int) -> StoredWeight:
        return matrix(out_f, in_f, s / np.sqrt(in_f))

    def norm() -> StoredWeight:
        # gemma stores w and scales by (1 + w); same effective scale as the others
        base = 0.0 if c.is_gemma else 1.0
        return _store(base + normal((c.hidden_size,), 0.1), dtype, compressible=False)

    def fused(*parts: tuple[int, int]) -> StoredWeight:
        # drawn part by part (Llama's order), quantized as one matrix: scales are per row
        mats = [normal((out_f, in_f), s / np.sqrt(in_f)) for out_f, in_f in parts]
        return _store(np.concatenate(mats, axis=0), dtype, True, group_size)

    def bias(n: int) -> StoredWeight:
        return _store(normal((n,), 0.1 * s), dtype, compressible=False)

    embed_std = s * EMBED_STD_NUMERATOR / np.sqrt(c.hidden_size)
    if c.is_gemma:  # the graph multiplies by √hidden again
        embed_std = s * GEMMA_EMBED_STD_NUMERATOR / c.hidden_size
    # embeddings and lm_head stay int8 in int4 exports (optimum's backup precision)
    yield matrix(c.vocab_size, c.hidden_size, embed_std, int4=False)
    for _ in range(c.num_hidden_layers):
        if c.is_phi3:
            yield _phi3_layer(c, norm, fused, linear)
            continue
        layer = LayerWeights(
            input_norm=norm(),
            q_proj=linear(c.q_size, c.hidden_size),
            k_proj=linear(c.kv_size, c.hidden_size),
            v_proj=linear(c.kv_size, c.hidden_size),
            o_proj=linear(c.hidden_size, c.q_size),
            post_norm=norm(),
            gate_proj=linear(c.intermediate_size, c.hidden_size),
            up_proj=linear(c.intermediate_size, c.hidden_size),
            down_proj=linear(c.hidden_size, c.intermediate_size),
        )
        if c.attention_bias:
            layer.q_bias, layer.k_bias, layer.v_bias = (
                bias(c.q_size),
                bias(c.kv_size),
                bias(c.kv_size),
            )
        yield layer
    yield norm()
    if c.tie_word_embeddings:
        yield None
    else:
        yield matrix(c.vocab_size, c.hidden_size, s / np.sqrt(c.hidden_size), int4=False)


def init_weights(
    config: LlamaConfig, seed: int = 0, dtype: str = "f32", group_size: int = 128
) -> LlamaWeights:
    """Draw all weights from ``numpy.random.default_rng(seed)`` in a fixed order.

    Init scales are chosen so the random model is not degenerate: projections have std
    ``init_scale / sqrt(fan_in)`` (each block adds O(1) to the residual stream), embeddings
    ``0.3·init_scale / sqrt(hidden)``, RMSNorm weights ``1 + 0.1·N(0,1)``, biases ``0.1·N(0,1)``.
    A small embedding matters with tied weights: when the input embedding dominates the
    residual stream the tied LM head scores the input token highest and greedy decoding
    repeats it forever.
    """
    it = _draws(config, seed, dtype, group_size)
    embed = next(it)
    layers = [next(it) for _ in range(config.num_hidden_layers)]
    final_norm = next(it)
    lm_head = next(it)
    return LlamaWeights(config, dtype, seed, embed, final_norm, layers, lm_head)  # type: ignore[arg-type]


class StreamedWeights:
    """The weights of :func:`init_weights`, drawn lazily in the same order and handed to ``spill``.

    ``graph.build_model`` reads ``embed``, then iterates ``layers`` once, then ``final_norm`` and
    ``lm_head`` — the draw order — so only one layer is in memory at a time: ``spill`` (see
    :class:`WeightSpill`) moves every stored weight to a scratch file that the model's constants
    share, and ``ov.save_model`` streams it to the ``.bin``.
    """

    def __init__(self, config: LlamaConfig, seed: int, dtype: str, group_size: int,
                 spill: Callable[[Any], Any]) -> None:
        self.config, self.dtype, self.seed = config, dtype, seed
        self._it = _draws(config, seed, dtype, group_size)
        self._spill = spill
        self.embed: StoredWeight = spill(next(self._it))
        self._layers_done = False
        self._tail: list[Any] = []

    @property
    def layers(self) -> Iterator[LayerWeights]:
        if self._layers_done:
            raise ConfigError("StreamedWeights.layers can be iterated once")
        self._layers_done = True
        for _ in range(self.config.num_hidden_layers):
            yield self._spill(next(self._it))

    def _rest(self) -> list[Any]:
        if not self._tail:
            if not self._layers_done:
                raise ConfigError("StreamedWeights: iterate the layers before the final norm")
            self._tail = [self._spill(next(self._it)), self._spill(next(self._it))]
        return self._tail

    @property
    def final_norm(self) -> StoredWeight:
        return self._rest()[0]

    @property
    def lm_head(self) -> StoredWeight | None:
        return self._rest()[1]


class WeightSpill:
    """Writes stored weights to a scratch file and hands back memmapped copies (f32 / f16 / u8
    payloads as they are; int4 as the packed bytes in ``StoredWeight.packed``, with a zero-stride
    placeholder in ``data``).  Memory then holds one layer's draws at a time."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._file = open(self.path, "w+b")  # noqa: SIM115 - closed by close()
        self._pos = 0
        # The model's Constants share these maps (an i4 Constant through an ov.Tensor that does
        # not keep its numpy owner alive), so they live until close(), after save_model.
        self._maps: list[np.ndarray] = []

    def array(self, a: np.ndarray) -> np.ndarray:
        a = np.ascontiguousarray(a)
        pad = -self._pos % 64
        if pad:
            self._file.write(b"\0" * pad)
            self._pos += pad
        off = self._pos
        self._file.write(a.tobytes() if a.nbytes < (16 << 20) else a.data.cast("B"))
        self._pos += a.nbytes
        self._file.flush()
        if a.nbytes == 0:
            return a
        m = np.memmap(self.path, dtype=a.dtype, mode="r+", offset=off, shape=a.shape)
        self._maps.append(m)
        return m

    def weight(self, sw: StoredWeight) -> StoredWeight:
        if sw.kind == "int4":
            packed = self.array(pack_int4(sw.data))
            placeholder = np.broadcast_to(np.int8(0), sw.data.shape)
            return StoredWeight("int4", placeholder, None, self.array(sw.part("scale")), packed=packed)
        zp = None if sw.zero_point is None else self.array(sw.zero_point)
        scale = None if sw.scale is None else self.array(sw.scale)
        return StoredWeight(sw.kind, self.array(sw.data), zp, scale)

    def __call__(self, item: Any) -> Any:
        if item is None:
            return None
        if isinstance(item, StoredWeight):
            return self.weight(item)
        # phi3's q/k/v and gate/up row views are not written (the graph uses the fused weights)
        keep = {id(w) for w in item.stored()}
        spilled = {k: (self.weight(v) if v is not None and id(v) in keep else None)
                   for k, v in vars(item).items()}
        return LayerWeights(**spilled)  # type: ignore[arg-type]  # None: phi3's unused row views

    def close(self) -> None:
        self._maps.clear()
        self._file.close()
        self.path.unlink(missing_ok=True)
