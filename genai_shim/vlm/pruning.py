"""Visual-token pruning (CDPruner) as openvino.genai 2026.4.1's VLMPipeline applies it
(visual_language/vision_token_pruning_processor.cpp and cdpruner/): ``GenerationConfig.pruning_ratio``
percent of an image's merged visual tokens are dropped before the language model sees the prompt,
chosen by a greedy conditional DPP that keeps tokens both relevant to the instruction and diverse.

What the real does, step by step (facts read from its source and checked against it):

* **Where**: only the Qwen2-VL family's inputs embedder calls the pruner (Qwen2-VL, Qwen2.5-VL;
  Qwen3-VL, with its videos: each frame pair a region, and its DeepStack rows); LLaVA,
  LLaVA-NeXT(-Video), Gemma 3 and the others ignore
  ``pruning_ratio``. A Qwen2 / 2.5-VL prompt with a video and ``pruning_ratio`` > 0 is an error.
* **Validation** (every family, at each generate(), when ``pruning_ratio`` != 0):
  ``pruning_ratio`` in 1..100, ``relevance_weight`` in [0, 1]; 100 prunes nothing.
* **Text features**: the mean (f32, token by token) of the text embeddings of the prompt's tokens
  outside ``<|vision_start|>`` .. ``<|vision_end|>`` regions and not pad tokens.
* **Regions**: each image is pruned on its own ("frame chunking"), keeping
  ``round(N · (1 - ratio/100))`` (half away from zero) of its N tokens; fewer than one is the
  error "Percentage is too small, would result in zero tokens".
* **Split**: an image of N > 1 tokens is split into its first N//2 tokens and the rest; the first
  half keeps keep//2 tokens, the second the remainder, each half with its own kernel.
* **Kernel** (an OpenVINO graph compiled on the pipeline's device, CPU here): visual and text
  features L2-normalised (``NormalizeL2``, eps 1e-6 added), relevance = the mean cosine with the
  text, min-max normalised over the half (+1e-6 in the range); similarity S = V·Vᵀ;
  ``K = (1-w)·S + w·(r_i·S·r_j)``, ``w`` = relevance_weight.
* **Greedy DPP** (f32, the real's fast_dpp.cpp): marginal gains start at K's diagonal; each step
  takes the first largest gain, orthogonalises its kernel row against the rows chosen before
  (skipping coefficients below 1e-6 in magnitude), scales it by 1/sqrt(gain + 1e-6), subtracts its
  squares from the gains (NaN -> -FLT_MAX) and retires the token (-inf). The chosen indices are
  sorted.
* **After**: the pruned pad tokens leave the input ids and the embeddings; the M-RoPE positions are
  rebuilt with each kept token at its own (t, row, col) in its image's grid, the text after an
  image continuing from one past the largest position inside it; the rope delta is
  ``max(position) + 1 - len(ids)``; ``get_num_input_tokens()`` counts the pruned prompt.

The kernel runs as an OpenVINO graph on CPU, as the real's (identical numerics on the same host);
the DPP is numpy in f32, operation by operation as the real's loops.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ov_npu_emu.errors import ConfigError

__all__ = ["PRUNING_FAMILIES", "check_pruning_config", "dpp_select", "keep_count", "prune_qwen2vl",
           "prune_vision", "select_region", "text_features"]

#: config.json model_types whose real inputs embedder prunes visual tokens
PRUNING_FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")
#: the real's cdpruner::Config::numerical_threshold
EPS = np.float32(1e-6)
_F32_MAX = np.float32(np.finfo(np.float32).max)


def check_pruning_config(config: Any) -> None:
    """The real's CDPruner::validate_config, which every VLMPipeline.generate() runs (any family)."""
    ratio, weight = int(config.pruning_ratio), float(config.relevance_weight)
    if ratio == 0:
        return
    if not 1 <= ratio <= 100:
        raise ConfigError("pruning ratio must be between 0 and 100", key="pruning_ratio")
    if not 0.0 <= float(np.float32(weight)) <= 1.0:
        raise ConfigError("relevance weight must be between 0.0 and 1.0", key="relevance_weight")


def keep_count(tokens: int, ratio: int) -> int:
    """round(tokens · (1 - ratio / 100)) in double, halves away from zero (std::round)."""
    return int(math.floor(tokens * (1.0 - ratio / 100.0) + 0.5))


def text_features(ids: np.ndarray, emb: np.ndarray, vision_start: int, vision_end: int, pads: tuple[int, ...]
                  ) -> np.ndarray:
    """[1, D] f32: the mean of the embeddings of the tokens outside vision regions that are not
    pad tokens, summed token by token in f32 as the real's loop (zeros when there is none)."""
    inside = False
    acc = np.zeros(emb.shape[-1], np.float32)
    count = 0
    for i, tok in enumerate(ids.tolist()):
        if tok == vision_start:
            inside = True
            continue
        if tok == vision_end:
            inside = False
            continue
        if inside or tok in pads:
            continue
        acc = acc + emb[i]
        count += 1
    if count:
        acc = acc / np.float32(count)
    return acc.reshape(1, -1).astype(np.float32)


@functools.lru_cache(maxsize=4)
def _kernel_request(weight: float) -> Any:
    """The conditional-kernel graph for ``relevance_weight`` ``weight``, compiled on CPU with the
    plugin's defaults (as the real's, which compiles it with no properties)."""
    import openvino as ov
    import openvino.opset13 as ops

    f32 = np.float32
    visual = ops.parameter([-1, -1, -1], ov.Type.f32, name="visual")
    text = ops.parameter([-1, -1], ov.Type.f32, name="text")
    v = ops.normalize_l2(visual, ops.constant(np.array([2], np.int32)), float(EPS), "add")
    t = ops.normalize_l2(text, ops.constant(np.array([1], np.int32)), float(EPS), "add")
    cos = ops.matmul(v, ops.transpose(t, ops.constant(np.array([1, 0], np.int64))), False, False)
    mean = ops.reduce_mean(cos, ops.constant(np.array([2], np.int64)), False)
    axis = ops.constant(np.array([1], np.int64))
    lo, hi = ops.reduce_min(mean, axis, True), ops.reduce_max(mean, axis, True)
    rel = ops.divide(ops.subtract(mean, lo), ops.add(ops.subtract(hi, lo), ops.constant(EPS)))
    sim = ops.matmul(v, ops.transpose(v, ops.constant(np.array([0, 2, 1], np.int64))), False, False)
    weighted = ops.multiply(ops.multiply(ops.unsqueeze(rel, ops.constant(np.array([2], np.int64))), sim),
                            ops.unsqueeze(rel, ops.constant(np.array([1], np.int64))))
    w = f32(weight)
    kernel = ops.add(ops.multiply(sim, ops.constant(f32(1.0) - w)), ops.multiply(weighted, ops.constant(w)))
    model = ov.Model([ops.result(kernel)], [visual, text], "conditional_kernel")
    return ov.Core().compile_model(model, "CPU").create_infer_request()


def conditional_kernel(visual: np.ndarray, text: np.ndarray, weight: float) -> np.ndarray:
    """[N, N] f32 kernel of ``visual`` [N, D] given ``text`` [1, D]."""
    request = _kernel_request(float(np.float32(weight)))
    request.infer({0: np.ascontiguousarray(visual[None], np.float32), 1: np.ascontiguousarray(text, np.float32)})
    return np.array(request.get_output_tensor(0).data[0], np.float32, copy=True)


def dpp_select(kernel: np.ndarray, count: int) -> list[int]:
    """The real's greedy DPP over ``kernel`` [N, N] (f32 throughout): ``count`` indices, sorted."""
    n = kernel.shape[0]
    gains = np.array(np.diagonal(kernel), np.float32, copy=True)
    rows = np.zeros((count, n), np.float32)
    chosen: list[int] = []
    for step in range(count):
        # the first strictly largest gain (retired tokens are -inf; gains are never NaN here)
        best = int(np.argmax(np.where(np.isnan(gains), -np.inf, gains)))
        chosen.append(best)
        inv = np.float32(1.0) / np.sqrt(np.float32(gains[best] + EPS))
        row = np.array(kernel[best], np.float32, copy=True)
        for prev in range(step):
            coef = rows[prev, best]
            if abs(coef) < EPS:
                continue
            row = row - np.float32(coef) * rows[prev]
        row = row * np.float32(inv)
        rows[step] = row
        live = gains > -np.inf
        new = gains - row * row
        new = np.where(np.isnan(new), -_F32_MAX, new).astype(np.float32)
        gains = np.where(live, new, gains).astype(np.float32)
        gains[best] = -np.inf
    return sorted(chosen)


def select_region(visual: np.ndarray, text: np.ndarray, ratio: int, weight: float) -> list[int]:
    """The kept indices of one image's tokens ``visual`` [N, D] (sorted), as the real's
    CDPruner::select_tokens with its default split threshold (1)."""
    n = visual.shape[0]
    keep = keep_count(n, ratio)
    if keep <= 0:
        raise ConfigError("Percentage is too small, would result in zero tokens", key="pruning_ratio")
    if n <= 1:
        return dpp_select(conditional_kernel(visual, text, weight), keep)
    split = n // 2
    first = dpp_select(conditional_kernel(visual[:split], text, weight), keep // 2)
    second = dpp_select(conditional_kernel(visual[split:], text, weight), keep - keep // 2)
    return sorted(first + [split + i for i in second])


def _positions_3d(ids: np.ndarray, keep: list[np.ndarray], grids: list[tuple[int, int, int]], merge: int,
                  vision_start: int, pads: tuple[int, ...]) -> np.ndarray:
    """[3, 1, L'] M-RoPE positions of the pruned prompt (the real's update_position_ids_3d):
    walks the original ``ids`` with each region's keep flags."""
    out: list[tuple[int, int, int]] = []
    region = visual = 0
    inside = False
    next_pos = grid_base = 0
    top = [-1, -1, -1]
    for tok in ids.tolist():
        if inside and tok in pads:
            if keep[region][visual]:
                _, gh, gw = grids[region]
                width, area = gw // merge, (gh // merge) * (gw // merge)
                local, temporal = visual % area, visual // area
                vals = (grid_base + temporal, grid_base + local // width, grid_base + local % width)
                out.append(vals)
                top = [max(a, b) for a, b in zip(top, vals, strict=True)]
            visual += 1
            continue
        if inside:
            inside = False
            next_pos = max(top) + 1
            region += 1
            visual = 0
            top = [next_pos - 1] * 3
        out.append((next_pos, next_pos, next_pos))
        next_pos += 1
        if tok == vision_start:
            inside = True
            visual = 0
            grid_base = next_pos
    return np.ascontiguousarray(np.array(out, np.int64).T.reshape(3, 1, -1))


def prune_qwen2vl(ids: np.ndarray, emb: np.ndarray, grids: list[tuple[int, int, int]], merge: int,
                  vision_start: int, vision_end: int, image_pad: int, ratio: int, weight: float
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, list[list[int]]] | None:
    """Prune a Qwen2-VL prompt: ``ids`` [1, L], ``emb`` [1, L, D] (the image rows already merged
    in), ``grids`` each image's (t, h, w) in prompt order. Returns (ids, embeddings, M-RoPE
    positions, rope delta, kept indices per image) of the pruned prompt, or None when nothing is
    pruned (ratio 100: the real keeps the prompt as it is)."""
    # the real's Qwen2-VL context passes no video pad id: only image pads are vision tokens here
    out = prune_vision(ids, emb, grids, merge, vision_start, vision_end, (image_pad,), ratio, weight)
    return None if out is None else out[:5]


def prune_vision(ids: np.ndarray, emb: np.ndarray, grids: list[tuple[int, int, int]], merge: int,
                 vision_start: int, vision_end: int, pads: tuple[int, ...], ratio: int, weight: float
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, list[list[int]], np.ndarray] | None:
    """Prune the vision regions of ``ids`` [1, L] (``emb`` [1, L, D] with the vision rows merged
    in; ``grids`` each region's (t, h, w) in prompt order; ``pads`` the pad token ids that are
    vision tokens: Qwen3-VL's image and video pads, each video frame pair a region). Returns (ids,
    embeddings, M-RoPE positions, rope delta, kept indices per region, keep flags over the pad
    tokens in prompt order), or None when nothing is pruned."""
    if ratio >= 100:
        return None
    row = ids[0]
    slots = np.flatnonzero(np.isin(row, np.array(pads, np.int64)))
    feats = text_features(row, emb[0], vision_start, vision_end, pads)
    sizes = [t * h * w // (merge * merge) for t, h, w in grids]
    if sum(sizes) != slots.size:
        raise ConfigError(f"Derived per-vision token count ({sum(sizes)}) != merged vision tokens ({slots.size})")
    kept: list[list[int]] = []
    flags: list[np.ndarray] = []
    start = 0
    for size in sizes:
        region = np.ascontiguousarray(emb[0, slots[start:start + size]], np.float32)
        chosen = select_region(region, feats, ratio, weight)
        kept.append(chosen)
        mask = np.zeros(size, bool)
        mask[chosen] = True
        flags.append(mask)
        start += size
    if sum(len(k) for k in kept) == slots.size:
        return None
    keep_rows = np.ones(row.size, bool)
    slot_flags = np.concatenate(flags)
    keep_rows[slots] = slot_flags
    pos = _positions_3d(row, flags, grids, merge, vision_start, pads)
    new_ids = ids[:, keep_rows]
    delta = int(pos.max()) + 1 - new_ids.shape[1]
    return np.ascontiguousarray(new_ids), np.ascontiguousarray(emb[:, keep_rows]), pos, delta, kept, slot_flags
