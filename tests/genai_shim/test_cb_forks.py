"""Copy-on-write forks in the paged backend (beam search, parallel sampling) against the real
openvino_genai: the upstream beam-search sample's output, ContinuousBatchingPipeline texts and
scores, preemption of forked requests, and the block-status check on shared blocks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import genai_shim
from genai_shim.continuous_batching import BlockManager
from genai_shim.llm.paged import PagedLLM
from ov_npu_emu.errors import KVBlockError

from .conftest import F32

OPTIMUM = Path(__file__).resolve().parents[1] / "fixtures" / "optimum"
PROMPTS = ["Once upon a time", "Lily"]


def _sample_flow(mod: Any, folder: Path) -> tuple[Any, str]:
    """samples/python/text_generation/beam_search_causal_lm.py of openvino.genai, rewritten:
    default properties on CPU, 15 beams in 3 groups, every beam returned, ``print(beams)``."""
    pipe = mod.LLMPipeline(str(folder), "CPU")
    config = mod.GenerationConfig()
    config.max_new_tokens = 20
    config.num_beam_groups = 3
    config.num_beams = 15
    config.diversity_penalty = 1
    config.num_return_sequences = config.num_beams
    return pipe, str(pipe.generate(PROMPTS, config))


@pytest.mark.parametrize("model", ["stories260K", "llama-fp32"])
def test_upstream_beam_search_sample_prints_real_output(real_genai: Any, stories_dir: Path, model: str) -> None:
    folder = stories_dir if model == "stories260K" else OPTIMUM / model
    ours, printed = _sample_flow(genai_shim, folder)
    _, want = _sample_flow(real_genai, folder)
    assert printed == want
    assert printed.count("\n") >= 2 * 15 - 1  # every beam of both prompts
    # it ran on the paged backend, as the real CPU default does; the stateful model never built
    assert isinstance(ours._impl, PagedLLM)


def _cb_configs(mod: Any) -> list[Any]:
    beams = mod.GenerationConfig()
    beams.max_new_tokens = 24
    beams.num_beams = 4
    beams.num_return_sequences = 3
    groups = mod.GenerationConfig()
    groups.max_new_tokens = 16
    groups.num_beams = 6
    groups.num_beam_groups = 2
    groups.diversity_penalty = 1.0
    groups.num_return_sequences = 2
    greedy = mod.GenerationConfig()
    greedy.max_new_tokens = 30
    # parallel sampling that is deterministic (top_k=1) so the texts compare exactly
    samples = mod.GenerationConfig()
    samples.max_new_tokens = 20
    samples.do_sample = True
    samples.top_k = 1
    samples.num_return_sequences = 3
    return [beams, groups, greedy, samples]


CB_PROMPTS = ["Once upon a time", "Tom and Lily went to the", "The little dog", "Lily"]


def _sched(mod: Any, blocks: int, tokens: int = 256) -> Any:
    sc = mod.SchedulerConfig()
    sc.num_kv_blocks = blocks
    sc.max_num_batched_tokens = tokens
    return sc


def _results(res: list[Any]) -> list[tuple[list[str], list[float]]]:
    return [(list(r.m_generation_ids), list(r.m_scores)) for r in res]


@pytest.fixture(scope="module")
def real_cb(real_genai: Any, stories_dir: Path) -> list[tuple[list[str], list[float]]]:
    pipe = real_genai.ContinuousBatchingPipeline(str(stories_dir), _sched(real_genai, 64), "CPU", F32)
    return _results(pipe.generate(CB_PROMPTS, _cb_configs(real_genai)))


def _same(got: list[tuple[list[str], list[float]]], want: list[tuple[list[str], list[float]]]) -> None:
    assert [g[0] for g in got] == [w[0] for w in want]
    for (_, a), (_, b) in zip(got, want, strict=True):
        assert a == pytest.approx(b, abs=1e-4)


def test_cb_beams_and_parallel_samples_like_real(stories_dir: Path, real_cb: Any) -> None:
    pipe = genai_shim.ContinuousBatchingPipeline(str(stories_dir), _sched(genai_shim, 64), "CPU", F32)
    got = _results(pipe.generate(CB_PROMPTS, _cb_configs(genai_shim)))
    _same(got, real_cb)
    assert [len(g[0]) for g in got] == [3, 2, 1, 3]
    assert pipe._impl._blocks.num_free_blocks == 64  # every fork's blocks came back


def test_cb_forked_requests_preempted_keep_texts(stories_dir: Path, real_cb: Any) -> None:
    # 6 blocks of 32 tokens for 4 beams + 3 beams... : requests are preempted (all their
    # sequences at once) and recomputed; the texts must not change
    pipe = genai_shim.ContinuousBatchingPipeline(str(stories_dir), _sched(genai_shim, 6, 32), "CPU", F32)
    got = _results(pipe.generate(CB_PROMPTS, _cb_configs(genai_shim)))
    assert pipe.get_metrics().preemptions > 0
    _same(got, real_cb)
    assert pipe._impl._blocks.num_free_blocks == 6


def test_forks_share_prompt_blocks_and_shared_blocks_stay_read_only(stories_dir: Path, real_cb: Any) -> None:
    pipe = genai_shim.ContinuousBatchingPipeline(str(stories_dir), _sched(genai_shim, 64), "CPU", F32)
    config = _cb_configs(genai_shim)[0]
    handle = pipe.add_request(0, CB_PROMPTS[0], config)
    pipe.step()  # the prompt, then the first selection forks the beams
    bm = pipe._impl._blocks
    state = pipe._impl._states[0]
    beams = [r.seq_id for r in state.beams.requests]
    assert len(beams) == 4
    shared = bm.tables[beams[0]][0]
    assert all(bm.tables[s][0] == shared for s in beams) and bm.status[shared] == 4
    assert bm.num_used_blocks == 1  # one prompt block for four beams
    pipe.step()  # every beam writes its first token: copies of the shared block, one each but
    # the last holder, which writes the original (copy-on-write)
    firsts = {bm.tables[s][0] for s in bm.tables if s in beams}
    live = [r.seq_id for r in state.beams.requests]
    assert all(bm.status[bm.tables[s][0]] >= 1 for s in live)
    assert len(firsts) >= 2
    # forging another beam's (or a shared) block as the block one beam writes is refused
    a, b = live[0], live[1]
    saved = bm.tables[a][-1]
    bm.tables[a][-1] = bm.tables[b][-1]
    used = sorted({blk for t in bm.tables.values() for blk in t})
    before = [np.asarray(t.data)[used].copy() for t in pipe._impl._model._caches]
    with pytest.raises(KVBlockError, match="block"):
        pipe.step()
    # nothing ran: every block in use is byte-identical (a copy-on-write copy made while
    # scheduling only fills a fresh block)
    caches = pipe._impl._model._caches
    assert all(np.array_equal(x, np.asarray(t.data)[used]) for x, t in zip(before, caches, strict=True))
    bm.tables[a][-1] = saved
    while pipe.has_non_finished_requests():
        pipe.step()
    outs = handle.read_all()
    texts = [pipe.get_tokenizer().decode(o.generated_ids) for o in outs]
    assert texts == real_cb[0][0] and [o.score for o in outs] == pytest.approx(real_cb[0][1], abs=1e-4)
    assert bm.num_free_blocks == 64


def test_block_manager_copy_on_write() -> None:
    bm = BlockManager(6, 32)
    bm.allocate(1, 40)  # blocks 0, 1 (the second one partly filled)
    bm.fork(1, 2)
    assert bm.tables[2] == [0, 1] and bm.status[:2].tolist() == [2, 2]
    with pytest.raises(KVBlockError, match="shared"):
        bm.check(2, 41, past=40)  # writing a shared block without copying it first
    assert bm.copies_needed([(2, 40)]) == 1 and bm.copies_needed([(1, 40), (2, 40)]) == 1
    copies = bm.make_writable(2, 40)
    assert copies == [(1, 2)] and bm.tables[2] == [0, 2]
    assert bm.check(2, 41, past=40) == [0, 2]
    assert bm.check(1, 41, past=40) == [0, 1]  # the last holder writes the original again
    with pytest.raises(KVBlockError, match="shared"):
        bm.check(1, 41, past=0)  # block 0 is still shared by both
    bm.allocate(3, 1)
    bm.tables[3][0] = 0  # forged: block 0 is shared, but by sequences 1 and 2 only
    with pytest.raises(KVBlockError, match=r"shared by sequences \[1, 2\] only"):
        bm.check(3, 1, past=32)
    with pytest.raises(KVBlockError, match=r"shared by sequences \[1, 2\] only"):
        bm.make_writable(3, 0)
    bm.tables[3][0] = 3
    bm.free(3)
    bm.free(1)
    assert bm.status[:3].tolist() == [1, 0, 1] and bm.check(2, 41, past=0) == [0, 2]
    bm.free(2)
    assert bm.num_free_blocks == 6 and not bm.status.any()
    with pytest.raises(KVBlockError, match="holds no KV blocks"):
        bm.fork(1, 3)


def test_llm_pipeline_parallel_sampling_on_paged_backend(pipelines: Any, stories_dir: Path) -> None:
    """num_return_sequences > 1 (multinomial): the real CPU default runs it in its paged
    pipeline.  Our random stream (numpy PCG64) is not the real's std::mt19937, so seeded texts
    cannot match: with top_k=1 they must, otherwise the structure is checked."""
    ours = pipelines("ours", stories_dir, **F32)
    real = pipelines("real", stories_dir, **F32)
    kw = {"max_new_tokens": 12, "do_sample": True, "top_k": 1, "num_return_sequences": 2}
    a = ours.generate(["Hi", PROMPTS[0]], **kw)
    b = real.generate(["Hi", PROMPTS[0]], **kw)
    assert a.texts == b.texts and a.scores == pytest.approx(b.scores, abs=1e-4)
    assert a.perf_metrics.get_num_generated_tokens() == b.perf_metrics.get_num_generated_tokens()
    kw = {"max_new_tokens": 8, "do_sample": True, "num_return_sequences": 3, "rng_seed": 2}
    first = ours.generate(["Hi", PROMPTS[0]], **kw)
    assert len(first.texts) == len(real.generate(["Hi", PROMPTS[0]], **kw).texts) == 6
    assert ours.generate(["Hi", PROMPTS[0]], **kw).texts == first.texts  # seeded: repeatable
    assert len(set(first.texts[3:])) > 1, "independent samples for one prompt"
    assert isinstance(ours._impl, PagedLLM)  # no stateful model was needed


@pytest.mark.parametrize("backend", ["SDPA", "PA", "CB"])
def test_parallel_samples_come_best_score_first(real_genai: Any, stories_dir: Path, backend: str) -> None:
    """The real orders a prompt's parallel samples by cumulative log-probability, best first
    (its finished sequences are sorted so on the stateful, paged and continuous-batching
    paths); the streams differ (numpy vs std::mt19937), the order rule must not."""

    def scores(mod: Any) -> list[list[float]]:
        cfg = mod.GenerationConfig()
        cfg.do_sample, cfg.num_return_sequences, cfg.max_new_tokens = True, 4, 8
        cfg.temperature, cfg.rng_seed = 1.5, 3
        if backend == "CB":
            pipe = mod.ContinuousBatchingPipeline(str(stories_dir), mod.SchedulerConfig(), "CPU", F32)
            return [r.m_scores for r in pipe.generate(PROMPTS, [cfg, cfg])]
        pipe = mod.LLMPipeline(str(stories_dir), "CPU", ATTENTION_BACKEND=backend, **F32)
        flat = pipe.generate(PROMPTS, cfg).scores
        return [flat[:4], flat[4:]]

    for mod in (real_genai, genai_shim):
        got = scores(mod)
        assert [len(s) for s in got] == [4, 4]
        assert all(len(set(s)) > 1 and s == sorted(s, reverse=True) for s in got), (mod.__name__, got)


def test_parallel_samples_are_read_once_when_finished(real_genai: Any, stories_dir: Path) -> None:
    """Several sequences per request stream nothing: the real's handle becomes readable once,
    when the request finished, with every sequence (its notify_handle pushes them at the end);
    read_all afterwards returns nothing more."""

    def reads(mod: Any) -> tuple[list[dict[int, list[int]]], int]:
        pipe = mod.ContinuousBatchingPipeline(str(stories_dir), mod.SchedulerConfig(), "CPU", F32)
        cfg = mod.GenerationConfig()
        cfg.do_sample, cfg.top_k, cfg.num_return_sequences, cfg.max_new_tokens = True, 1, 3, 4
        handle = pipe.add_request(0, PROMPTS[0], cfg)
        log = []
        while pipe.has_non_finished_requests():
            pipe.step()
            if handle.can_read():
                log.append({k: list(v.generated_ids) for k, v in handle.read().items()})
        return log, len(handle.read_all())

    ours, real = reads(genai_shim), reads(real_genai)
    assert len(real[0]) == 1 and len(real[0][0]) == 3 and len(real[0][0][0]) == 4
    assert ours == real
