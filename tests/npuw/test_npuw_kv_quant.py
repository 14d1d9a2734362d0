"""KV_CACHE_PRECISION=u8 / u4 in our NPUW: quantised when written, dequantised by the graph.

Agreement is measured against the same NPUW with the default f16 KV on the project's usual
stories260K prompt; docs/npuw.md ("Quantised KV cache") has the numbers over five prompts.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from ov_npu_emu.cli import main
from ov_npu_emu.errors import ConfigError
from ov_npu_emu_npuw.kvquant import dequantize, quantize, quantize_channels, unpack

from ._oracle import greedy

#: "Once upon a time, there was a little girl named Lily." (stories260K tokenizer)
PROMPT = [1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426]
NEW = 96
_RUNS: dict[tuple[str, str], tuple[list[int], object]] = {}


def _run(emu_core, xml: str, device: str, precision: str) -> tuple[list[int], object]:
    if (device, precision) not in _RUNS:
        cfg = {
            "NPU_USE_NPUW": "YES", "NPUW_LLM": "YES", "NPUW_DEVICES": device,
            "NPUW_LLM_MAX_PROMPT_LEN": 64, "NPUW_LLM_MIN_RESPONSE_LEN": 128,
            "KV_CACHE_PRECISION": precision,
            # f32 on both devices: at defaults the CPU sub-models run the CPU plugin's own
            # precision (bf16 on AMX hosts), and the KV precision is the only variable here
            "INFERENCE_PRECISION_HINT": "f32",
        }
        req = emu_core.compile_model(xml, "NPU", cfg).create_infer_request()
        ids, err = greedy(req, PROMPT, NEW)
        assert err is None, err
        _RUNS[device, precision] = (ids, req.impl.kv)
    return _RUNS[device, precision]


@pytest.mark.parametrize("device", ["CPU", "NPU"])
@pytest.mark.parametrize("precision,min_agree,data_ratio", [("u8", 0.90, 0.5), ("u4", 0.50, 0.25)])
def test_quantised_kv_agrees_with_f16(emu_core, stories260k_dir, device, precision, min_agree, data_ratio):
    xml = str(stories260k_dir / "openvino_model.xml")
    # The f16-KV text is the same on both devices (bench/kv_quant_agreement.py prints both);
    # the CPU run serves as the reference for the emulated NPU too, one compile fewer.
    ref, kv16 = _run(emu_core, xml, "CPU", "f16")
    ids, kv = _run(emu_core, xml, device, precision)
    agree = sum(a == b for a, b in zip(ids, ref, strict=False))
    assert len(ids) == NEW and agree >= min_agree * NEW, (agree, ids, ref)
    # memory: the data is half (u8) / a quarter (u4) of f16, scales and residual beside it
    assert kv.data_nbytes == data_ratio * kv16.nbytes
    assert kv.scale_nbytes > 0 and kv.residual_nbytes > 0
    assert kv.nbytes == kv.data_nbytes + kv.scale_nbytes + kv.residual_nbytes < kv16.nbytes


@pytest.mark.parametrize("dtype,precision", [("f16", "f16"), ("int8", "u8"), ("int4", "u4")])
def test_kv_plan_of_the_model_equals_what_npuw_allocated(
    capsys, emu_core, stories260k_dir, dtype, precision
):
    """`ov-npu-emu kv-plan MODEL` == the nbytes of the KV buffers our NPUW really allocated."""
    _, kv = _run(emu_core, str(stories260k_dir / "openvino_model.xml"), "CPU", precision)
    argv = ["kv-plan", str(stories260k_dir), "--max-prompt", "64", "--min-response", "128",
            "--dtype", dtype, "--json"]
    assert main(argv) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["bytes"] == kv.nbytes
    assert (plan["data_bytes"], plan["scale_bytes"], plan["residual_bytes"]) == (
        kv.data_nbytes, kv.scale_nbytes, kv.residual_nbytes,
    )
    assert plan["capacity_tokens"] == kv.max_slots == 191
    assert [v["kv_size"] for v in plan["variants"]] == [192]
    t = plan["terms"]
    assert (t["layers"], t["kv_heads"], t["head_dim"], t["seq"], t["batch"]) == (5, 4, 8, 191, 1)
    if precision == "f16":
        assert plan["bytes"] == 2 * 5 * 1 * 191 * 4 * 8 * 2


def test_kv_plan_variants_are_views_of_one_buffer(capsys, stories260k_dir):
    argv = ["kv-plan", str(stories260k_dir), "--max-prompt", "128", "--min-response", "64",
            "--variants", "128", "--dtype", "int8", "--json"]
    assert main(argv) == 0
    plan = json.loads(capsys.readouterr().out)
    assert [(v["kv_size"], v["past_slots"]) for v in plan["variants"]] == [(128, 127), (192, 191)]
    assert plan["variants"][-1]["bytes"] == plan["bytes"] > plan["variants"][0]["bytes"]


def test_value_rows_and_key_channels_round_trip():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((1, 2, 5, 8)) * [1, 1, 1, 20, 1, 1, 1, 1] + 5).astype(np.float32)
    for prec, levels in (("u8", 255), ("u4", 15)):
        q, sc, zp = quantize(x, prec, 4)
        assert q.shape == (1, 2, 5, 8 if prec == "u8" else 4) and sc.shape == (1, 2, 5, 2)
        err = np.abs(dequantize(q, sc, zp, prec, 4) - x)
        rng_g = np.ptp(x.reshape(1, 2, 5, 2, 4), -1).repeat(4, -1).reshape(x.shape)
        assert (err <= rng_g / levels * 0.5 + 0.02 * np.abs(x).max()).all()
        # keys: one scale per channel over the tokens of a block
        q, sc, zp = quantize_channels(x, prec)
        assert sc.shape == (1, 2, 1, 8)
        back = unpack(q, prec) * sc.astype(np.float32) + zp.astype(np.float32)
        assert np.abs(back - x).max() <= np.ptp(x, axis=2).max() / levels * 0.5 + 0.05


def test_quantised_kv_rejects_what_it_does_not_implement(emu_core, stories260k_dir):
    xml = str(stories260k_dir / "openvino_model.xml")
    base = {"NPU_USE_NPUW": "YES", "NPUW_LLM": "YES", "NPUW_DEVICES": "CPU", "KV_CACHE_PRECISION": "u8"}
    with pytest.raises(ConfigError, match="NPUW_LLM_ENABLE_PREFIX_CACHING"):
        emu_core.compile_model(xml, "NPU", {
            **base, "NPUW_LLM_ENABLE_PREFIX_CACHING": "YES", "NPUW_LLM_PREFILL_CHUNK_SIZE": 64,
            "NPUW_LLM_MAX_PROMPT_LEN": 256,
        })
    with pytest.raises(ConfigError, match="NPUW_LLM_OPTIMIZE_V_TENSORS"):
        emu_core.compile_model(xml, "NPU", {**base, "NPUW_LLM_OPTIMIZE_V_TENSORS": "YES"})
    with pytest.raises(Exception, match="NPUW_EMU_KV_GROUP_SIZE"):
        emu_core.compile_model(xml, "NPU", {**base, "NPUW_EMU_KV_GROUP_SIZE": 3})
    with pytest.raises(ConfigError, match="use f16, f32, u8 or u4"):
        emu_core.compile_model(xml, "NPU", {**base, "KV_CACHE_PRECISION": "i8"})


def _step(req, token: int, pos: int) -> np.ndarray:
    req.infer({
        "input_ids": np.array([[token]], np.int64),
        "attention_mask": np.ones((1, pos + 1), np.int64),
        "position_ids": np.array([[pos]], np.int64),
        "beam_idx": np.zeros(1, np.int32),
    })
    return np.asarray(req.get_tensor("logits").data)[0, -1].copy()


def test_quantised_kv_survives_chunks_variant_switch_and_rewind(emu_core, stories260k_dir):
    """Chunked prefill, then a variant switch moves bytes, scales and zero points together,
    then a rewind into an older key block re-quantises it."""
    xml = str(stories260k_dir / "openvino_model.xml")
    prompt = PROMPT + [274, 287, 269, 345, 400, 428, 263, 377, 267, 265, 282, 295, 433, 426]
    n = len(prompt)  # 30: with MIN_RESPONSE 64 the kv96 variant (95 past slots) is picked
    req = emu_core.compile_model(xml, "NPU", {
        "NPU_USE_NPUW": "YES", "NPUW_LLM": "YES", "NPUW_DEVICES": "CPU",
        "NPUW_LLM_MAX_PROMPT_LEN": 64, "NPUW_LLM_MIN_RESPONSE_LEN": 64,
        "NPUW_LLM_PREFILL_CHUNK_SIZE": 16, "KV_CACHE_PRECISION": "u8",
        "NPUW_LLM_GENERATE_VARIANTS": "64,96",
    }).create_infer_request()
    first, err = greedy(req, prompt, 8)
    step7 = np.asarray(req.get_tensor("logits").data)[0, -1].copy()  # logits of token 7
    ids, err = greedy(req, prompt, 66)  # a new conversation: 95 tokens stored, kv96 full
    impl, kv = req.impl, req.impl.kv
    assert err is None and ids[:8] == first and impl.prefill_calls == 2
    assert (impl.variant, impl.num_stored_tokens, impl.switches) == (96, 95, 0)
    before = [
        (kv.view(i, 95)[:, :, :95].copy(), *(a.copy() for a in kv.aux_view(i, 95)))
        for i in range(len(kv))
    ]
    _step(req, ids[-1], n + 65)  # the 96th token does not fit: kv96 → kv128
    assert (impl.variant, impl.switches) == (128, 1)
    for i, (data, scale, zp) in enumerate(before):
        # keys: the new token joined block 11 (88..95) and re-quantised it; rows before are moved
        rows, blocks = (88, 11) if kv.keys[i] else (95, 95)
        np.testing.assert_array_equal(kv.view(i, 127)[:, :, :rows], data[:, :, :rows])
        now_scale, now_zp = kv.aux_view(i, 127)
        np.testing.assert_array_equal(now_scale[:, :, :blocks], scale[:, :, :blocks])
        np.testing.assert_array_equal(now_zp[:, :, :blocks], zp[:, :, :blocks])
    # rewind into key block 4 (positions 32..39; the last block is now 12): token 6 again at
    # its position, then token 7. Block 4 is re-quantised from its stored rows (their exact
    # values are gone) plus the new row: close to, not bit-equal with, the first pass.
    _step(req, ids[5], n + 5)
    again = _step(req, ids[6], n + 6)
    assert int(again.argmax()) == ids[7]
    assert np.abs(again - step7).max() < 0.02 * np.abs(step7).max(), np.abs(again - step7).max()


@pytest.mark.parametrize("precision", ["u8", "u4"])
def test_batched_step_write_equals_per_tensor_writes(precision):
    """write_step (all layers at once) stores exactly what write() stores tensor by tensor,
    including across key-block boundaries and after a rewind into an older block."""
    from ov_npu_emu_npuw.kvcache import KVBuffers

    rng = np.random.default_rng(1)
    keys = (True, False) * 3
    make = lambda: KVBuffers((2,) * 6, (8,) * 6, 40, np.float16, None, precision, 4, keys)  # noqa: E731
    a, b = make(), make()
    prompt = [rng.standard_normal((1, 2, 6, 8)).astype(np.float16) for _ in range(6)]
    for kv in (a, b):
        for i, r in enumerate(prompt):
            kv.write(i, 39, 0, r)
    for pos in [*range(6, 20), 9, 10, 11]:  # then a rewind to 9 (block 2, closed) and on
        rows = [rng.standard_normal((1, 2, 1, 8)).astype(np.float16) for _ in range(6)]
        a.write_step(39, pos, rows)
        for i, r in enumerate(rows):
            b.write(i, 39, pos, r)
    for x, y in zip((*a.flat, *a.scale_flat, *a.zp_flat), (*b.flat, *b.scale_flat, *b.zp_flat), strict=False):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("precision,group", [("u4", 4)])  # u8, G = D: the agreement tests
def test_graph_dequantisation_equals_the_host_scheme(stories_model, precision, group):
    """A generate variant fed stored bytes + scales on the real CPU plugin gives the logits of
    the f32 variant fed the host's dequantisation of the same bytes (kvquant.dequantize)."""
    import openvino as ov

    from ov_npu_emu_npuw.kvquant import BITS
    from ov_npu_emu_npuw.transform import make_generate_model, to_stateless

    stateless, kv = to_stateless(stories_model)
    K, rng = 24, np.random.default_rng(2)
    mk = lambda q: make_generate_model(stateless, kv, K, ov.Type.f32, kv_quant=q, kv_group=group)  # noqa: E731
    core = ov.Core()
    exact = core.compile_model(mk(""), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    quant = core.compile_model(mk(precision), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    feed = {
        "input_ids": np.array([[7]], np.int64),
        "attention_mask": np.ones((1, K), np.int64),
        "position_ids": np.array([[K - 1]], np.int64),
    }
    ref_feed = dict(feed)
    for name, h, d in zip(kv.past_names, kv.num_heads, kv.head_dims, strict=False):
        g = group or d
        rows = (rng.standard_normal((1, h, K - 1, d)) * 3).astype(np.float32)
        if name.endswith(".key"):  # per channel per block of g tokens
            blocks = [quantize_channels(rows[:, :, a : a + g], precision) for a in range(0, K - 1, g)]
            q = np.concatenate([b[0] for b in blocks], axis=2)
            sc = np.concatenate([b[1] for b in blocks], axis=2)
            zp = np.concatenate([b[2] for b in blocks], axis=2)
            idx = np.arange(K - 1) // g
            back = unpack(q, precision) * sc[:, :, idx].astype(np.float32) + zp[:, :, idx].astype(
                np.float32
            )
        else:
            q, sc, zp = quantize(rows, precision, g)
            back = dequantize(q, sc, zp, precision, g)
        assert q.shape[-1] == d * BITS[precision] // 8
        feed |= {name: q, name + ".scale": sc, name + ".zp": zp}
        ref_feed[name] = back
    got = quant.create_infer_request().infer(feed)
    want = exact.create_infer_request().infer(ref_feed)
    np.testing.assert_allclose(got["logits"], want["logits"], rtol=1e-4, atol=1e-4)
