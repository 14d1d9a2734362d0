"""genai_shim's per-step shortcuts give what the general code paths give."""

from __future__ import annotations

import numpy as np
import pytest

from genai_shim.decoding import OneRow
from genai_shim.generation_config import GenerationConfig
from genai_shim.sampling import LogitProcessor, Sampler


def test_one_row_buffers_match_concatenate_and_sum():
    mask = np.array([[0, 0, 1, 1, 1]], np.int64)  # left padding: positions count real tokens only
    one = OneRow(mask)
    ref = mask.copy()
    for _ in range(150):  # past the initial buffer size, so it has to grow
        ref = np.concatenate([ref, np.ones((1, 1), np.int64)], axis=1)
        got_mask, got_pos = one.step()
        np.testing.assert_array_equal(got_mask, ref)
        assert got_pos.shape == (1, 1) and got_pos.dtype == np.int64
        assert int(got_pos[0, 0]) == int(ref.sum()) - 1


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_plain_greedy_skips_the_copy_but_picks_the_same_token(dtype):
    rng = np.random.default_rng(0)
    cfg = GenerationConfig()
    cfg.max_new_tokens = 4
    proc = LogitProcessor(cfg, [1, 2, 3])
    assert not proc.needs_penalties()
    sampler = Sampler()
    for _ in range(20):
        logits = rng.standard_normal(257).astype(dtype)
        logits[rng.integers(0, 257)] = logits.max()  # a tie: the first maximum wins
        before = logits.copy()
        token, logp = sampler.sample(proc, logits)
        assert token == int(np.argmax(logits.astype(np.float32))) and logp == 0.0
        np.testing.assert_array_equal(logits, before)  # the caller's row is untouched


@pytest.mark.parametrize(
    "setting",
    [
        {"repetition_penalty": 2.0},
        {"presence_penalty": 1.0},
        {"frequency_penalty": 1.0},
        {"min_new_tokens": 3, "eos_token_id": 5},
    ],
    ids=lambda d: next(iter(d)),
)
def test_configured_penalties_still_apply(setting):
    cfg = GenerationConfig()
    cfg.max_new_tokens = 8
    for k, v in setting.items():
        if k == "eos_token_id":
            cfg.set_eos_token_id(v)
        else:
            setattr(cfg, k, v)
    proc = LogitProcessor(cfg, [7])
    proc.register(7)
    assert proc.needs_penalties()
    logits = np.full(16, -1.0, np.float32)
    if "min_new_tokens" in setting:
        logits[7] = -0.2  # all negative: the suppressed EOS is set to 0.0 and wins
    else:
        logits[7] = 3.0  # the repeated token leads by less than every penalty above removes
        logits[9] = 2.5
    token, _ = Sampler().sample(proc, logits)
    want = int(np.argmax(proc.apply_penalties(logits.copy())))
    assert token == want and token != 7


class _Request:
    """Stands in for an infer request: get_tensor(name).data as bound."""

    def __init__(self, arrays: dict) -> None:
        self._arrays = arrays

    def get_tensor(self, name: str):
        return type("T", (), {"data": self._arrays[name]})()


def test_one_row_knows_whether_the_request_reads_its_buffers():
    one = OneRow(np.ones((1, 3), np.int64))
    shared = {"input_ids": one.ids, "position_ids": one.pos, "beam_idx": one.beam}
    assert one.read_by(_Request(shared), True, True)
    # a shared bind that fell back to a copy (another dtype): the ids must be fed every step
    copied = {**shared, "input_ids": one.ids.astype(np.int32)}
    assert not one.read_by(_Request(copied), True, True)
    assert one.read_by(_Request({"input_ids": one.ids}), False, False)


@pytest.mark.parametrize("device", ["CPU", "NPU"])
def test_decode_steps_feed_only_the_mask_with_the_same_tokens(device, stories_dir, monkeypatch):
    import genai_shim
    import genai_shim.decoding as decoding

    # CPU: the stateful model (the default is the paged backend, which has its own loop)
    props = {"NPUW_DEVICES": "CPU"} if device == "NPU" else {"ATTENTION_BACKEND": "SDPA"}
    pipe = genai_shim.LLMPipeline(str(stories_dir), device, INFERENCE_PRECISION_HINT="f32", **props)
    cfg = genai_shim.GenerationConfig()
    cfg.max_new_tokens = 12
    cfg.ignore_eos = True
    fed: list[list[str]] = []
    request = pipe._impl.request
    infer = request.infer
    monkeypatch.setattr(request, "infer", lambda feed, **kw: fed.append(sorted(feed)) or infer(feed, **kw))
    bound = pipe.generate("Once upon a time", cfg)
    # prefill, the first step (binds OneRow's arrays), then the mask alone
    assert fed[1] != ["attention_mask"] and fed[2:] == [["attention_mask"]] * (len(fed) - 2)
    monkeypatch.setattr(decoding.OneRow, "read_by", lambda *a: False)
    fed.clear()
    assert pipe.generate("Once upon a time", cfg) == bound  # every input fed each step
    assert all(len(keys) > 1 for keys in fed)
