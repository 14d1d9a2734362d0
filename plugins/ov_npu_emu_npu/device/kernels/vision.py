"""SHAVE kernels of vision models: per-axis resampling (Interpolate, AdaptiveAvgPool), adaptive max
pooling, and SSD's DetectionOutput (box decoding, per-class top-k and NMS, keep_top_k)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ov_npu_emu_npu.device.kernels.registry import kernel


def _steps(x: np.ndarray, axes: tuple[int, ...], outs: list[int], dtype: np.dtype
           ) -> list[tuple[int, int, int, int, np.ndarray]]:
    """Per step: (outer, in, out, inner, output buffer) for resampling ``axes`` one after another."""
    shape = list(x.shape)
    steps = []
    for d, n_out in zip(axes, outs, strict=True):
        outer, inner = math.prod(shape[:d]), math.prod(shape[d + 1:])
        n_in = shape[d]
        shape[d] = n_out
        steps.append((outer, n_in, n_out, inner, np.empty(shape, dtype)))
    return steps


@kernel("resample")
def _resample(ins, outs, params):
    x, tables, o = ins[0], ins[1:], outs[0]
    gather = params.gather
    dtype = x.dtype if all(gather) else np.result_type(x.dtype, np.float32)
    steps = _steps(x, params.axes, [t.shape[0] for t in tables], np.dtype(dtype))
    runs: list[Callable[[np.ndarray], None]] = []
    for (outer, n_in, n_out, inner, buf), table, g in zip(steps, tables, gather, strict=True):
        dst = buf.reshape(outer, n_out, inner)

        def step(src: np.ndarray, table=table, g=g, dst=dst, outer=outer, n_in=n_in, n_out=n_out,
                 inner=inner) -> None:
            s3 = src.reshape(outer, n_in, inner)
            if g:
                np.copyto(dst, s3[:, table, :], casting="unsafe")
            elif inner == 1:  # last axis: one GEMM over all rows
                np.matmul(s3.reshape(outer, n_in), table.T, out=dst.reshape(outer, n_out))
            elif outer == 1:
                np.matmul(table, s3.reshape(n_in, inner), out=dst.reshape(n_out, inner))
            else:
                np.matmul(table, s3, out=dst)

        runs.append(step)

    def run() -> None:
        cur = x
        for step, (*_, buf) in zip(runs, steps, strict=True):
            step(cur)
            cur = buf
        np.copyto(o, cur, casting="unsafe")

    return run


@kernel("adaptive_max")
def _adaptive_max(ins, outs, params):
    x, bins, o = ins[0], ins[1:], outs[0]
    steps = _steps(x, params.axes, [b.shape[0] for b in bins], x.dtype)
    spans = [[(int(s), int(e)) for s, e in b] for b in bins]

    def run() -> None:
        cur = x
        for (outer, n_in, n_out, inner, buf), sp in zip(steps, spans, strict=True):
            s3, d3 = cur.reshape(outer, n_in, inner), buf.reshape(outer, n_out, inner)
            for i, (s, e) in enumerate(sp):
                np.max(s3[:, s:e, :], axis=1, out=d3[:, i, :])
            cur = buf
        np.copyto(o, cur, casting="unsafe")

    return run


# -- DetectionOutput --------------------------------------------------------------------------

def _decode(loc: np.ndarray, prior: np.ndarray, var: np.ndarray, p) -> np.ndarray:
    """[P, 4] deltas -> [P, 4] boxes (xmin, ymin, xmax, ymax), in f32 as the plugins compute."""
    f = np.float32
    if not p.normalized:
        prior = prior / np.array([p.input_width, p.input_height, p.input_width, p.input_height], f)
    v = np.ones(4, f) if p.variance_encoded_in_target else var
    if not p.center_size:  # CORNER
        out = prior + v * loc
    else:
        pw, ph = prior[:, 2] - prior[:, 0], prior[:, 3] - prior[:, 1]
        cx, cy = (prior[:, 0] + prior[:, 2]) / f(2), (prior[:, 1] + prior[:, 3]) / f(2)
        dcx = (v[..., 0] * loc[:, 0]) * pw + cx
        dcy = (v[..., 1] * loc[:, 1]) * ph + cy
        dw = np.exp(v[..., 2] * loc[:, 2]) * pw
        dh = np.exp(v[..., 3] * loc[:, 3]) * ph
        out = np.stack([dcx - dw / f(2), dcy - dh / f(2), dcx + dw / f(2), dcy + dh / f(2)], axis=1)
    out = out.astype(f)
    if p.clip_before_nms:
        np.clip(out, 0, 1, out=out)
    return out


def _iou(box: np.ndarray, kept: np.ndarray) -> np.ndarray:
    """Jaccard overlap of boxes [..., 4] with boxes [..., 4] (broadcast; 0 where they do not meet)."""
    iw = np.minimum(box[..., 2], kept[..., 2]) - np.maximum(box[..., 0], kept[..., 0])
    ih = np.minimum(box[..., 3], kept[..., 3]) - np.maximum(box[..., 1], kept[..., 1])
    inter = np.where((iw > 0) & (ih > 0), iw * ih, 0).astype(np.float32)

    def size(b: np.ndarray) -> np.ndarray:
        w, h = b[..., 2] - b[..., 0], b[..., 3] - b[..., 1]
        return np.where((w < 0) | (h < 0), 0, w * h).astype(np.float32)

    union = size(box) + size(kept) - inter
    return np.where(inter > 0, inter / np.where(union == 0, 1, union), 0)


#: candidates up to which NMS takes the pairwise overlap matrix at once (K² floats)
_PAIRWISE_MAX = 2048


def _nms(order: list[int], boxes: np.ndarray, thr: float) -> list[int]:
    """Greedy NMS over the priors in ``order`` (best first) with ``boxes`` [P, 4]: the priors kept.

    A candidate is kept when it overlaps no kept one by more than ``thr``."""
    if len(order) <= _PAIRWISE_MAX:
        cand = boxes[order]
        over = _iou(cand[:, None, :], cand[None, :, :]) > thr
        suppressed = np.zeros(len(order), bool)
        kept = []
        for i, k in enumerate(order):
            if not suppressed[i]:
                kept.append(k)
                suppressed |= over[i]
        return kept
    kept, kept_boxes = [], np.empty((0, 4), np.float32)
    for k in order:
        b = boxes[k]
        if kept and (_iou(b, kept_boxes) > thr).any():
            continue
        kept.append(k)
        kept_boxes = np.vstack([kept_boxes, b[None]])
    return kept


def _descending(scores: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``idx`` ordered by score, highest first; equal scores keep their order (a stable sort)."""
    return idx[np.argsort(-scores[idx], kind="stable")]


def _caffe_image(dec: np.ndarray, conf: np.ndarray, p) -> dict[int, list[int]]:
    """Per class (not the background): its priors kept by top-k and NMS, best first."""
    out: dict[int, list[int]] = {}
    for c in range(p.num_classes):
        if c == p.background_label_id:
            continue
        sc = conf[:, c]
        cand = _descending(sc, np.nonzero(sc > p.confidence_threshold)[0])
        if p.top_k > -1:
            cand = cand[:p.top_k]
        boxes = dec[:, 0 if p.share_location else c]
        out[c] = _nms([int(i) for i in cand], boxes, p.nms_threshold)
    return out


def _mxnet_image(dec: np.ndarray, conf: np.ndarray, p) -> dict[int, list[int]]:
    """MXNet style: each prior's best class (class 0 is the background), top_k over all classes."""
    best = conf[:, 1:].argmax(axis=1) + 1
    score = conf[np.arange(conf.shape[0]), best]
    cand = _descending(score, np.nonzero(score >= p.confidence_threshold)[0])
    if p.top_k > -1:
        cand = cand[:p.top_k]
    out: dict[int, list[int]] = {}
    for c in sorted({int(best[i]) for i in cand}):  # suppression within a class (as the CPU plugin)
        mine = [int(i) for i in cand if best[i] == c]
        out[c] = _nms(mine, dec[:, 0 if p.share_location else c], p.nms_threshold)
    return out


def _keep_top(indices: dict[int, list[int]], conf: np.ndarray, keep: int) -> dict[int, list[int]]:
    """At most ``keep`` detections over all classes, the best scores; per class best first."""
    pairs = [(float(conf[i, c]), c, i) for c in sorted(indices) for i in indices[c]]
    if keep < 0 or len(pairs) <= keep:
        return indices
    order = sorted(range(len(pairs)), key=lambda j: -pairs[j][0])[:keep]
    out: dict[int, list[int]] = {}
    for j in order:
        out.setdefault(pairs[j][1], []).append(pairs[j][2])
    return out


@kernel("detection_output")
def _detection_output(ins, outs, params):
    loc_in, conf_in, prior_in = ins
    o = outs[0]
    p = params
    n = loc_in.shape[0]
    n_loc = 1 if p.share_location else p.num_classes
    psize = 4 if p.normalized else 5
    rows = o.reshape(-1, 7)

    def run() -> None:
        pr = np.asarray(prior_in, np.float32).reshape(prior_in.shape[0], -1)
        num_priors = prior_in.shape[-1] // psize
        loc = np.asarray(loc_in, np.float32).reshape(n, num_priors, n_loc, 4)
        conf = np.asarray(conf_in, np.float32).reshape(n, num_priors, p.num_classes)
        rows.fill(0)
        count = 0
        for b in range(n):
            pb = pr[b if pr.shape[0] > 1 else 0]
            boxes = pb[:num_priors * psize].reshape(num_priors, psize)[:, psize - 4:]
            var = pb[num_priors * psize:num_priors * psize + num_priors * 4].reshape(num_priors, 4) \
                if not p.variance_encoded_in_target else np.ones((num_priors, 4), np.float32)
            dec = np.stack([_decode(loc[b, :, c], boxes, var, p) for c in range(n_loc)], axis=1)
            indices = (_mxnet_image if p.decrease_label_id else _caffe_image)(dec, conf[b], p)
            indices = _keep_top(indices, conf[b], p.keep_top_k)
            for c in sorted(indices):
                for i in indices[c]:
                    if count >= rows.shape[0]:
                        break
                    box = dec[i, 0 if p.share_location else c]
                    if p.clip_after_nms:
                        box = np.clip(box, 0, 1)
                    rows[count] = (b, c - 1 if p.decrease_label_id else c, conf[b, i, c], *box)
                    count += 1
        if count < rows.shape[0]:
            rows[count, 0] = -1

    return run
