"""Qwen3-VL's inputs embedder as openvino.genai's (visual_language/qwen3_vl/classes.cpp): Qwen2-VL's
preprocessing, patch embeddings, pad expansion and M-RoPE positions, plus

* the learned position embeddings of the vision tower (``openvino_vision_embeddings_pos_model``: a
  table of ``num_position_embeddings`` rows on a square grid), bilinearly interpolated to each
  image's patch grid: the model gathers the four corner rows per patch and, as the real patches it
  in (its default; the ``VISION_POS_EMBEDS=CPP`` host fallback sums the same terms in the same
  order), weighs and sums them; the sums, put in the merger's patch order (``merge_size`` blocks),
  are added to the patch embeddings before the merger;
* DeepStack: the merger also returns ``deepstack_feature_lists`` [layers, vision tokens, hidden],
  which the language model adds to its first layers' hidden states at the vision tokens; it takes
  them as ``deepstack_visual_embeds`` with ``visual_pos_masks`` (bool, true at the image and video
  pad tokens). A prompt without images gets a [1, 1] false mask and [layers, 1, hidden] zeros, and
  so does every decode step (the real's lm_encoding)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from genai_shim.vlm.common import Placement
from genai_shim.vlm.qwen2vl import EncodedImage, Qwen2VLEmbedder, block_mask
from ov_npu_emu.errors import ConfigError

__all__ = ["POS_XML", "Qwen3VLEmbedder", "interpolation_corners", "merge_order", "weighted_pos_model"]

POS_XML = "openvino_vision_embeddings_pos_model.xml"


def weighted_pos_model(model: ov.Model) -> ov.Model:
    """The position-embeddings model [4, N] -> [4, N, D] with a ``weights`` [4, N] input and the
    four corners weighed and summed on the device: ((w0 e0 + w1 e1) + w2 e2) + w3 e3 -> [N, D]
    (the real's default)."""
    results = model.get_results()
    if len(results) != 1:
        raise ConfigError(f"{POS_XML} must have one output, has {len(results)}")
    table = results[0].input_value(0)
    shape = table.get_partial_shape()
    if shape.rank.is_dynamic or shape.rank.get_length() != 3 or (shape[0].is_static and shape[0].get_length() != 4):
        raise ConfigError(f"{POS_XML}'s output must be [4, N, D], is {shape}")
    weights = ops.parameter([4, -1], ov.Type.f32, name="weights")
    weights.output(0).get_tensor().set_names({"weights"})
    axis = ops.constant(np.int64(0))
    corners = ops.split(table, axis, 4)
    scales = ops.split(weights, axis, 4)
    total: Any = None
    for i in range(4):
        row = ops.squeeze(corners.output(i), ops.constant(np.array([0], np.int64)))
        scale = ops.unsqueeze(ops.squeeze(scales.output(i), ops.constant(np.array([0], np.int64))),
                              ops.constant(np.array([1], np.int64)))
        term = ops.multiply(row, scale)
        total = term if total is None else ops.add(total, term)
    return ov.Model([ops.result(total)], [*model.get_parameters(), weights], "vision_embeddings_pos_weighted")


def interpolation_corners(grids: list[tuple[int, int, int]], side: int) -> tuple[np.ndarray, np.ndarray]:
    """(indices i64 [4, N], weights f32 [4, N]) over every patch of ``grids`` (frame, row, column
    order): the four table rows around each patch's place on the ``side`` x ``side`` grid
    (floor/floor, floor/ceil, ceil/floor, ceil/ceil) and their bilinear weights, in f32 as the
    real computes them."""
    f32 = np.float32
    cols_i: list[np.ndarray] = []
    cols_w: list[np.ndarray] = []
    for t, h, w in grids:
        def places(n: int) -> np.ndarray:
            scale = f32(side - 1) / f32(n - 1) if n > 1 else f32(0.0)
            return (np.arange(n, dtype=f32) * scale).astype(f32)

        hp, wp = places(h), places(w)
        hf, wf = hp.astype(np.int64), wp.astype(np.int64)
        hc, wc = np.minimum(hf + 1, side - 1), np.minimum(wf + 1, side - 1)
        dh, dw = (hp - hf.astype(f32)).astype(f32), (wp - wf.astype(f32)).astype(f32)
        one = f32(1.0)
        idx = np.stack([
            (hf[:, None] * side + wf[None, :]), (hf[:, None] * side + wc[None, :]),
            (hc[:, None] * side + wf[None, :]), (hc[:, None] * side + wc[None, :]),
        ]).reshape(4, h * w)
        wts = np.stack([
            (one - dh)[:, None] * (one - dw)[None, :], (one - dh)[:, None] * dw[None, :],
            dh[:, None] * (one - dw)[None, :], dh[:, None] * dw[None, :],
        ]).astype(f32).reshape(4, h * w)
        cols_i.extend([idx] * t)
        cols_w.extend([wts] * t)
    if not cols_i:
        return np.zeros((4, 0), np.int64), np.zeros((4, 0), f32)
    return np.concatenate(cols_i, axis=1).astype(np.int64), np.ascontiguousarray(np.concatenate(cols_w, axis=1))


def merge_order(grids: list[tuple[int, int, int]], merge: int) -> np.ndarray:
    """The row of the (frame, row, column)-ordered patch list that each patch of the merger's
    order takes: per frame, ``merge`` x ``merge`` blocks in row order, each block's patches in
    row order."""
    order: list[np.ndarray] = []
    base = 0
    for t, h, w in grids:
        if h % merge or w % merge:
            raise ConfigError(f"the patch grid {h}x{w} must divide by merge_size {merge}", key="merge_size")
        r = np.arange(h).reshape(h // merge, 1, merge, 1)
        c = np.arange(w).reshape(1, w // merge, 1, merge)
        one = (r * w + c).reshape(-1)
        for ti in range(t):
            order.append(base + ti * h * w + one)
        base += t * h * w
    return np.concatenate(order) if order else np.zeros(0, np.int64)


class Qwen3VLEmbedder(Qwen2VLEmbedder):
    """Qwen2-VL's embedder with Qwen3-VL's interpolated position embeddings and DeepStack inputs."""

    #: no videos yet (the real takes them, with its own timestamps and frame positions): Qwen2-VL's
    #: video path inherited as is would give them without the position embeddings
    video_tag = None

    def __init__(self, core: Any, folder: Path, config: dict[str, Any], placement: Placement, tokenizer: Any) -> None:
        super().__init__(core, folder, config, placement, tokenizer)
        vision = config.get("vision_config") or {}
        count = int(vision.get("num_position_embeddings", 2304))
        #: the side of the position table's square grid (the real's size_t(sqrt(n)))
        self.side = int(math.sqrt(float(count)))
        if self.side < 1:
            raise ConfigError(f"vision_config.num_position_embeddings {count} gives no position grid",
                              key="num_position_embeddings")
        self.deepstack_layers = len(vision.get("deepstack_visual_indexes") or [])
        self.pos = placement.request(core, weighted_pos_model(core.read_model(folder / POS_XML)),
                                     "vision_embeddings_pos")
        ids = tokenizer.encode("<|video_pad|>", add_special_tokens=False).input_ids.data[0]
        self.video_pad = int(ids[0])
        #: the last merge's deepstack features [layers, vision tokens, hidden]
        self._deepstack: np.ndarray | None = None

    def _pos_embeddings(self, grids: list[tuple[int, int, int]]) -> np.ndarray:
        """[patches, embed] interpolated position embeddings in the merger's patch order."""
        indices, weights = interpolation_corners(grids, self.side)
        self.pos.infer({"input": indices, "weights": weights})
        summed = np.asarray(self.pos.get_output_tensor(0).data, dtype=np.float32)
        return summed[merge_order(grids, self.cfg.merge_size)]

    def merge(self, images: list[EncodedImage]) -> np.ndarray:
        """The merger over every image at once, the position embeddings added to the patch
        embeddings first: [sum of tokens, hidden]; keeps the deepstack features for
        :meth:`lm_inputs`."""
        grids = [im.grid_thw for im in images]
        hidden = np.concatenate([im.patches for im in images], axis=0).astype(np.float32)
        hidden = hidden + self._pos_embeddings(grids)
        frames = [0]
        for t, h, w in grids:
            frames.extend([h * w] * t)
        feed = {"hidden_states": np.ascontiguousarray(hidden),
                "attention_mask": block_mask(hidden.shape[0], np.cumsum(frames)),
                "rotary_pos_emb": self._rotary(images)}
        self.merger.infer(feed)
        self._deepstack = np.array(self.merger.get_output_tensor(1).data, dtype=np.float32, copy=True)
        return np.array(self.merger.get_output_tensor(0).data, copy=True)

    def embed(self, ids: np.ndarray, images: list[EncodedImage]) -> np.ndarray:
        self._deepstack = None
        return super().embed(ids, images)

    def lm_inputs(self, ids: np.ndarray, images: list[EncodedImage]) -> dict[str, np.ndarray]:
        """``visual_pos_masks`` [1, L] (true at the image / video pad tokens) and the merger's
        ``deepstack_visual_embeds`` after :meth:`embed` with images; without: the real's [1, 1]
        false mask and [layers, 1, hidden] zeros."""
        if images and self._deepstack is not None:
            mask = (ids == self.image_pad) | (ids == self.video_pad)
            return {"visual_pos_masks": mask, "deepstack_visual_embeds": self._deepstack}
        return {"visual_pos_masks": np.zeros(ids.shape, np.bool_),
                "deepstack_visual_embeds": self.step_lm_inputs()["deepstack_visual_embeds"]}

    def step_lm_inputs(self) -> dict[str, np.ndarray]:
        hidden = int(self._hidden_size())
        return {"visual_pos_masks": np.zeros((1, 1), np.bool_),
                "deepstack_visual_embeds": np.zeros((self.deepstack_layers, 1, hidden), np.float32)}

    def _hidden_size(self) -> int:
        if not hasattr(self, "_hidden"):
            self._hidden = int(self.token_embeddings(np.zeros((1, 1), np.int64)).shape[-1])
        return self._hidden
