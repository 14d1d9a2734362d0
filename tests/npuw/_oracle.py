"""Helpers shared by the NPUW tests: greedy driving through the stateful interface, oracles."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["F32_SUB", "call", "decode_step", "greedy", "real_npuw_config"]

#: f32 compute for the sub-models (the CPU default is bf16 here)
F32_SUB = {"INFERENCE_PRECISION_HINT": "f32"}


def real_npuw_config(max_prompt: int, min_response: int, **extra: Any) -> dict[str, Any]:
    """Config for the real NPUW on CPU that is token-exact with the f32 CPU model.

    Found by experiment: the shared LM head keeps f16 numerics even with f32 hints, so it is off;
    KV_CACHE_PRECISION=f32 makes the real NPUW diverge, so KV stays at its f16 default.
    """
    return {
        "NPU_USE_NPUW": "YES",
        "NPUW_LLM": "YES",
        "NPUW_DEVICES": "CPU",
        "NPUW_ONLINE_PIPELINE": "NONE",
        "NPUW_LLM_MAX_PROMPT_LEN": max_prompt,
        "NPUW_LLM_MIN_RESPONSE_LEN": min_response,
        "NPUW_LLM_SHARED_HEAD": "NO",
        "++NPUW_LLM_PREFILL_CONFIG": F32_SUB,
        "++NPUW_LLM_GENERATE_CONFIG": F32_SUB,
        **extra,
    }


def greedy(
    req: Any, prompt: list[int], n_new: int, reset: bool = True
) -> tuple[list[int], str | None]:
    """Drive a stateful request the way openvino.genai does (REAL_STACK_FACTS §2.3).

    Returns the greedy ids and the error text that stopped generation (None if it did not stop).
    """
    if reset:
        req.reset_state()
    L = len(prompt)
    feed = {
        "input_ids": np.array([prompt], np.int64),
        "attention_mask": np.ones((1, L), np.int64),
        "position_ids": np.arange(L, dtype=np.int64)[None],
        "beam_idx": np.zeros(1, np.int32),
    }
    out: list[int] = []
    try:
        req.infer(feed)
        out.append(int(np.asarray(req.get_tensor("logits").data)[0, -1].argmax()))
        while len(out) < n_new:
            cur = L + len(out)
            req.infer(
                {
                    "input_ids": np.array([[out[-1]]], np.int64),
                    "attention_mask": np.ones((1, cur), np.int64),
                    "position_ids": np.array([[cur - 1]], np.int64),
                    "beam_idx": np.zeros(1, np.int32),
                }
            )
            out.append(int(np.asarray(req.get_tensor("logits").data)[0, -1].argmax()))
    except RuntimeError as e:
        return out, str(e)
    return out, None


def top2_margin(req: Any, tokens: list[int]) -> float:
    """Gap between the two best next-token logits after ``tokens`` (one prefill on ``req``)."""
    req.reset_state()
    n = len(tokens)
    req.infer(
        {
            "input_ids": np.array([tokens], np.int64),
            "attention_mask": np.ones((1, n), np.int64),
            "position_ids": np.arange(n, dtype=np.int64)[None],
            "beam_idx": np.zeros(1, np.int32),
        }
    )
    top = np.sort(np.asarray(req.get_tensor("logits").data)[0, -1])
    return float(top[-1] - top[-2])


def assert_matches_real(
    ours: list[int], real: list[int], cpu_req: Any, prompt: list[int], min_equal: int = 64
) -> None:
    """``ours`` equals the real NPUW's ids, except after a near-tie the real one breaks differently.

    The real NPUW stores KV in f16 (it diverges with f32 KV, see docs/npuw.md), so on random-weight
    models it can flip a near-tie that the f32 CPU model and ours (f32 KV) resolve the same way.
    Such a divergence is accepted only after ``min_equal`` identical ids and only where the CPU
    model's top-2 logit gap is below 1e-3.
    """
    first = next((i for i, (a, b) in enumerate(zip(ours, real, strict=False)) if a != b), None)
    if first is None:
        assert len(ours) == len(real) or min(len(ours), len(real)) >= min_equal
        return
    margin = top2_margin(cpu_req, prompt + ours[:first])
    assert first >= min_equal and margin < 1e-3, (
        f"ids diverge from the real NPUW at {first} (CPU top-2 gap {margin})"
    )


def decode_step(model: Any, stored: int, seed: int = 0) -> tuple[np.ndarray, Any]:
    """One step of a static generate model on the CPU plugin (f32, 1 thread) with random past KV
    of which ``stored`` slots are valid; returns (``npuw_output_embed`` copy, compiled model)."""
    import openvino as ov

    from ov_npu_emu_npuw.transform import EMBED

    cm = ov.Core().compile_model(model, "CPU", {**F32_SUB, "INFERENCE_NUM_THREADS": 1})
    req = cm.create_infer_request()
    rng = np.random.default_rng(seed)
    for port in cm.inputs:
        name, shape = port.any_name, list(port.get_shape())
        if name == "input_ids":
            value = np.array([[7]], np.int64)
        elif name == "attention_mask":
            value = np.zeros(shape, np.int64)
            value[0, :stored] = 1
            value[0, -1] = 1
        elif name == "position_ids":
            value = np.array([[stored]], np.int64)
        else:
            value = rng.standard_normal(shape).astype(port.get_element_type().to_dtype())
        req.set_tensor(name, ov.Tensor(value))
    req.infer()
    return req.get_tensor(EMBED).data.copy(), cm


def call(req: Any, ids: list[int], start: int) -> np.ndarray:
    """One stateful call feeding ``ids`` at positions ``start…`` (history all attended);
    returns a copy of the logits."""
    n = start + len(ids)
    req.infer(
        {
            "input_ids": np.array([ids], np.int64),
            "attention_mask": np.ones((1, n), np.int64),
            "position_ids": np.arange(start, n, dtype=np.int64)[None],
            "beam_idx": np.zeros(1, np.int32),
        }
    )
    return np.asarray(req.get_tensor("logits").data).copy()
