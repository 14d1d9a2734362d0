"""ContinuousBatchingPipeline on the paged-attention backend against the real
openvino_genai.ContinuousBatchingPipeline (f32 on the CPU plugin, so tokens compare exactly)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import pytest

import genai_shim
from genai_shim.continuous_batching import BlockManager
from genai_shim.llm.paged import PagedLLM
from ov_npu_emu.errors import ConfigError, KVBlockError, KVCacheFullError, UserInputError

from .conftest import F32

OPTIMUM = Path(__file__).resolve().parents[1] / "fixtures" / "optimum"

PROMPTS = [
    "Once upon a time",
    "The little dog",
    "Tom and Lily went to the park and",
    "A",
]


def _configs(mod: Any) -> list[Any]:
    """Four different GenerationConfigs: lengths, a stop string, max_length, min_new_tokens."""
    out = []
    a = mod.GenerationConfig()
    a.max_new_tokens = 20
    out.append(a)
    b = mod.GenerationConfig()
    b.max_new_tokens = 45
    b.stop_strings = {"toys"}
    out.append(b)
    c = mod.GenerationConfig()
    c.max_length = 40
    c.stop_strings = {"park."}
    c.include_stop_str_in_output = True
    out.append(c)
    d = mod.GenerationConfig()
    d.max_new_tokens = 64
    d.min_new_tokens = 10
    out.append(d)
    return out


def _sched(mod: Any, blocks: int, tokens: int = 256) -> Any:
    sc = mod.SchedulerConfig()
    sc.num_kv_blocks = blocks
    sc.max_num_batched_tokens = tokens
    return sc


@pytest.fixture(scope="module")
def real_results(real_genai: Any, stories_dir: Path) -> list[Any]:
    pipe = real_genai.ContinuousBatchingPipeline(str(stories_dir), _sched(real_genai, 64), "CPU", F32)
    return pipe.generate(PROMPTS, _configs(real_genai))


@pytest.fixture(scope="module")
def ours(stories_dir: Path) -> Any:
    return genai_shim.ContinuousBatchingPipeline(str(stories_dir), _sched(genai_shim, 64), "CPU", F32)


def test_scheduler_config_defaults_match_real(real_genai: Any) -> None:
    r, o = real_genai.SchedulerConfig(), genai_shim.SchedulerConfig()
    for k in (
        "max_num_batched_tokens",
        "num_kv_blocks",
        "cache_size",
        "dynamic_split_fuse",
        "max_num_seqs",
        "enable_prefix_caching",
        "use_cache_eviction",
        "use_sparse_attention",
        "num_linear_attention_blocks",
    ):
        assert getattr(o, k) == getattr(r, k), k


def test_four_prompts_real_texts(ours: Any, real_results: list[Any]) -> None:
    res = ours.generate(PROMPTS, _configs(genai_shim))
    assert [r.m_generation_ids for r in res] == [r.m_generation_ids for r in real_results]
    assert [r.m_status.name for r in res] == [r.m_status.name for r in real_results]
    assert [r.m_request_id for r in res] == [r.m_request_id for r in real_results]
    assert not ours.has_non_finished_requests()
    # every block went back to the free list
    assert ours._impl._blocks.num_free_blocks == ours._impl._blocks.num_blocks


def _long(mod: Any) -> list[Any]:
    out = []
    for n in (40, 60, 50, 45):
        c = mod.GenerationConfig()
        c.max_new_tokens = n
        c.ignore_eos = True
        out.append(c)
    return out


def test_preemption_keeps_texts(real_genai: Any, stories_dir: Path) -> None:
    # 4 blocks of 32 tokens for four requests of 45-65 tokens each (two blocks apiece): the
    # latest requests are preempted (blocks freed, recomputed later); the texts must not change
    real = real_genai.ContinuousBatchingPipeline(str(stories_dir), _sched(real_genai, 64), "CPU", F32)
    want = [r.m_generation_ids for r in real.generate(PROMPTS, _long(real_genai))]
    pipe = genai_shim.ContinuousBatchingPipeline(str(stories_dir), _sched(genai_shim, 4, 16), "CPU", F32)
    res = pipe.generate(PROMPTS, _long(genai_shim))
    assert pipe.get_metrics().preemptions > 0
    assert [r.m_generation_ids for r in res] == want
    assert pipe._impl._blocks.num_free_blocks == 4


@pytest.mark.parametrize(
    ("blocks", "prompt", "config"),
    [
        (1, "Once upon a time", {"max_new_tokens": 60, "ignore_eos": True}),
        (10, "Once upon a time", {"max_new_tokens": 1_000_000, "ignore_eos": True}),
        (10, "Once upon a time", {"max_new_tokens": 1_000_000, "ignore_eos": True, "num_beams": 3,
                                  "num_return_sequences": 3}),
        (1, "Once upon a time " * 30, {"max_new_tokens": 10}),  # the prompt alone is past the cache
    ],
    ids=["one_block", "upstream_post_oom_greedy", "upstream_post_oom_beams", "prompt_past_cache"],
)
def test_a_full_kv_cache_ends_requests_ignored_with_what_they_generated(
    real_genai: Any, stories_dir: Path, caplog: Any, blocks: int, prompt: str, config: dict[str, Any]
) -> None:
    """As the real (upstream test_post_oom_health): no error; the requests end IGNORED with the
    text generated so far, and the freed blocks serve the next call the same way."""
    texts = []
    for mod in (real_genai, genai_shim):
        pipe = mod.ContinuousBatchingPipeline(str(stories_dir), _sched(mod, blocks), "CPU", F32)
        runs = [pipe.generate([prompt], [mod.GenerationConfig(**config)])[0] for _ in range(2)]
        assert [str(r.m_status) for r in runs] == ["GenerationStatus.IGNORED"] * 2
        assert runs[0].m_generation_ids == runs[1].m_generation_ids
        assert not pipe.has_non_finished_requests()
        texts.append(runs[0].m_generation_ids)
    assert texts[0] == texts[1]
    assert "the KV cache is full" in caplog.text


def test_forged_block_table_entry(ours: Any, real_results: list[Any]) -> None:
    cfgs = _configs(genai_shim)
    handles = [ours.add_request(i, p, c) for i, (p, c) in enumerate(zip(PROMPTS, cfgs, strict=False))]
    ours.step()
    ours.step()
    tables = ours._impl._blocks.tables
    seq_a, seq_b = sorted(tables)[:2]
    for forged in (10_000, -1, tables[seq_b][0], ours._impl._blocks._free[0]):
        saved = tables[seq_a][0]
        tables[seq_a][0] = forged
        before = [np.asarray(t.data).copy() for t in ours._impl._model._caches]
        with pytest.raises(KVBlockError, match="block"):
            ours.step()
        # nothing ran: the caches are byte-identical, the table is restored by hand
        caches = ours._impl._model._caches
        assert all(np.array_equal(b, np.asarray(t.data)) for b, t in zip(before, caches, strict=False))
        tables[seq_a][0] = saved
    while ours.has_non_finished_requests():
        ours.step()
    texts = [ours.get_tokenizer().decode(h.read_all()[0].generated_ids) for h in handles]
    assert texts == [r.m_generation_ids[0] for r in real_results]
    assert handles[0].get_status() == genai_shim.GenerationStatus.FINISHED


def test_handles_read_incrementally(ours: Any, real_results: list[Any]) -> None:
    h = ours.add_request(7, PROMPTS[0], _configs(genai_shim)[0])
    got: list[int] = []
    while ours.has_non_finished_requests():
        ours.step()
        if h.can_read():
            got += h.read()[0].generated_ids
    assert ours.get_tokenizer().decode(got) == real_results[0].m_generation_ids[0]
    m = ours.get_metrics()
    assert m.kv_cache_size_in_bytes > 0 and 0 < m.max_cache_usage <= 100


def test_handle_reads_like_real_stream(stories_dir: Path, real_genai: Any) -> None:
    """What a handle can read after each step: with stop strings the last tokens a stop string
    may still take back are held until the request finishes; read_all returns only what read()
    has not (the real's stream)."""
    logs = {}
    for name, mod in (("ours", genai_shim), ("real", real_genai)):
        pipe = mod.ContinuousBatchingPipeline(str(stories_dir), mod.SchedulerConfig(), "CPU", F32)
        configs = [mod.GenerationConfig(max_new_tokens=8, stop_strings={"park"}),
                   mod.GenerationConfig(max_new_tokens=6)]
        handles = [pipe.add_request(i, p, c) for i, (p, c) in enumerate(zip(PROMPTS, configs, strict=False))]
        log: list[Any] = []
        while pipe.has_non_finished_requests():
            pipe.step()
            log.append([[list(o.generated_ids) for o in h.read().values()] if h.can_read() else None
                        for h in handles[:1]])
        log.append([[list(o.generated_ids) for o in h.read_all()] for h in handles])
        logs[name] = log
    assert logs["ours"] == logs["real"]
    assert logs["ours"][0] == [None]  # held back by the stop-string window


def test_optimum_export_ids(real_genai: Any) -> None:
    d = OPTIMUM / "llama-fp32"
    ids = np.arange(3, 40, dtype=np.int64).reshape(1, -1)
    prompts = [ids, ids[:, :5], np.concatenate([ids, ids], axis=1)]
    out = {}
    for name, mod in (("real", real_genai), ("ours", genai_shim)):
        pipe = mod.ContinuousBatchingPipeline(str(d), _sched(mod, 16, 32), "CPU", F32)
        cs = []
        for n in (24, 40, 8):
            c = mod.GenerationConfig()
            c.max_new_tokens = n
            c.ignore_eos = True
            cs.append(c)
        out[name] = [list(r.m_generation_ids[0]) for r in pipe.generate([ov.Tensor(x) for x in prompts], cs)]
    assert out["ours"] == out["real"]


def test_unsupported_features_are_typed_errors(ours: Any, stories_dir: Path) -> None:
    with pytest.raises(UserInputError, match="streaming is possible only with batch size=1"):
        ours.generate(["A", "B"], [genai_shim.GenerationConfig(max_new_tokens=2)] * 2, lambda s: None)
    # a field the pipeline cannot honour is refused, never dropped: as LLMPipeline does
    with pytest.raises(ConfigError, match="tree_depth"):
        ours.generate(["A"], [genai_shim.GenerationConfig(max_new_tokens=2, tree_depth=2)])



def test_assisting_fields_without_a_draft_are_ignored_as_the_real(
    real_genai: Any, stories_dir: Path, caplog: Any
) -> None:
    """Upstream passes num_assistant_tokens to plain pipelines: ignored (ours says so once)."""
    from genai_shim import generation_config

    generation_config._WARNED_ASSISTING.discard("num_assistant_tokens")
    texts = []
    for mod in (real_genai, genai_shim):
        pipe = mod.ContinuousBatchingPipeline(str(stories_dir), _sched(mod, 64), "CPU", F32)
        plain, assisted = (mod.GenerationConfig(max_new_tokens=12, **kw) for kw in ({}, {"num_assistant_tokens": 5}))
        texts.append([pipe.generate(["Once upon a time"], [c])[0].m_generation_ids for c in (plain, assisted)])
    assert texts[0][0] == texts[0][1] == texts[1][0] == texts[1][1]
    assert "num_assistant_tokens=5 has no effect without a draft_model" in caplog.text


def test_prefix_caching_reuses_blocks_and_keeps_texts(real_genai: Any, stories_dir: Path) -> None:
    base = " ".join(["Once upon a time there was a little dog named Max who liked to play."] * 4)
    prompts = [base + " One day", base + " The cat", base]
    out = {}
    for name, mod in (("real", real_genai), ("ours", genai_shim)):
        sc = _sched(mod, 40, 64)
        sc.enable_prefix_caching = True
        pipe = mod.ContinuousBatchingPipeline(str(stories_dir), sc, "CPU", F32)
        texts = []
        for batch in (prompts, prompts[:1]):  # the second call finds the first call's blocks
            cfgs = [mod.GenerationConfig(max_new_tokens=30) for _ in batch]
            texts.append([r.m_generation_ids[0] for r in pipe.generate(batch, cfgs)])
        out[name] = texts
        if name == "ours":
            assert pipe.get_metrics().prefix_cache_hits > 0
            assert pipe._impl._blocks.num_free_blocks == 40  # cached blocks count as free (evictable)
    assert out["ours"] == out["real"]


def test_block_manager_prefix_sharing_is_read_only() -> None:
    bm = BlockManager(6, 4, prefix_caching=True)
    toks = list(range(100, 111))  # 11 tokens: two full blocks and a partial one
    bm.allocate(1, 11)
    bm.register(1, toks, 11)
    assert bm.restore_prefix(2, toks, len(toks) - 1) == 8  # two full blocks shared
    bm.allocate(2, 11)
    assert bm.tables[2][:2] == bm.tables[1][:2] and bm.tables[2][2] != bm.tables[1][2]
    bm.check_batch([(1, 11, 10), (2, 11, 8)])  # reads of shared blocks, own writes: fine
    with pytest.raises(KVBlockError, match="shared"):
        bm.check_batch([(2, 11, 4)])  # would write into a shared prefix block
    bm.free(1)
    bm.free(2)
    assert bm.num_free_blocks == 6 and int(bm.status.sum()) == 0


def test_block_manager_bookkeeping() -> None:
    bm = BlockManager(4, 32)
    bm.allocate(1, 33)
    bm.allocate(2, 32)
    assert bm.tables == {1: [0, 1], 2: [2]} and bm.num_free_blocks == 1
    assert bm.check(1, 64) == [0, 1]
    with pytest.raises(KVBlockError, match="needs 65 token slots"):
        bm.check(1, 65)
    with pytest.raises(KVCacheFullError):
        bm.allocate(2, 32 * 3)
    bm.free(1)
    assert bm.num_free_blocks == 3
    bm.tables[2].append(0)  # a freed block forged into a table
    with pytest.raises(KVBlockError, match="which is free"):
        bm.check(2, 1)
    with pytest.raises(KVBlockError, match="which is free"):  # nor forked
        bm.fork(2, 3)


def test_block_check_sees_forgeries_after_a_verified_step() -> None:
    bm = BlockManager(8, 4)
    bm.allocate(1, 8)
    bm.allocate(2, 8)
    bm.check_batch([(1, 8, 7), (2, 8, 7)])  # verified once: later calls test only new blocks
    bm.allocate(1, 9)
    bm.check_batch([(1, 9, 8), (2, 8, 7)])
    bm.tables[1].append(bm.tables[1][0])  # a new entry naming its own first block again
    with pytest.raises(KVBlockError, match="twice"):
        bm.check_batch([(1, 13, 12)])
    bm.tables[1].pop()
    saved = bm.tables[2][1]
    bm.tables[2][1] = bm.tables[1][2]  # in place: another sequence's block
    with pytest.raises(KVBlockError, match="owned by sequence 1"):
        bm.check_batch([(1, 9, 8), (2, 8, 7)])
    bm.tables[2][1] = saved
    assert bm.check_batch([(1, 9, 8), (2, 8, 7)]) == [bm.tables[1], bm.tables[2]]


def test_llm_pipeline_cpu_batch_runs_paged_backend(
    pipelines: Any, stories_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prompts = PROMPTS[:3]
    ours = pipelines("ours", stories_dir, **F32)
    real = pipelines("real", stories_dir, **F32)
    calls: list[int] = []
    run = ours._impl.backend.run
    monkeypatch.setattr(ours._impl.backend, "run", lambda *a, **k: calls.append(1) or run(*a, **k))
    got = ours.generate(prompts, max_new_tokens=30, stop_strings={"park"})
    want = real.generate(prompts, max_new_tokens=30, stop_strings={"park"})
    assert calls == [1]  # the paged backend ran
    assert got.texts == want.texts
    assert got.perf_metrics.get_num_input_tokens() == want.perf_metrics.get_num_input_tokens()
    assert got.perf_metrics.get_num_generated_tokens() == want.perf_metrics.get_num_generated_tokens()
    # beam search is not paged here: the stateful model runs it
    ours.generate("Once upon a time", max_new_tokens=5, num_beams=2)
    assert calls == [1]
    sdpa = genai_shim.LLMPipeline(str(stories_dir), "CPU", ATTENTION_BACKEND="SDPA", **F32)
    assert not isinstance(sdpa._impl, PagedLLM)


def test_llm_pipeline_falls_back_to_stateful_like_the_real(
    stories_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from genai_shim.paged import paged_model

    def broken(model: Any) -> bool:
        raise ConfigError("no paged attention for this model")

    monkeypatch.setattr(paged_model, "prepare_paged_model", broken)
    pipe = genai_shim.LLMPipeline(str(stories_dir), "CPU", **F32)  # default PA: falls back
    assert not isinstance(pipe._impl, PagedLLM)
    assert pipe.generate("Once upon a time", max_new_tokens=5)
    with pytest.raises(ConfigError, match="no paged attention"):  # asked for: re-raised
        genai_shim.LLMPipeline(str(stories_dir), "CPU", ATTENTION_BACKEND="PA", **F32)


def test_generate_templates_prompts_like_the_real(real_genai: Any, tiny_model_dir: Path) -> None:
    # the builder's tokenizer has a chat template: generate(prompts) applies it per prompt
    prompts = ["Once upon a time", "The little dog"]
    out = {}
    for name, mod in (("real", real_genai), ("ours", genai_shim)):
        pipe = mod.ContinuousBatchingPipeline(str(tiny_model_dir), _sched(mod, 16), "CPU", F32)
        cfgs = [mod.GenerationConfig(max_new_tokens=12, ignore_eos=True) for _ in prompts]
        out[name] = [r.m_generation_ids[0] for r in pipe.generate(prompts, cfgs)]
    assert out["ours"] == out["real"]


def test_nothing_is_accepted_and_dropped(stories_dir: Path) -> None:
    with pytest.raises(ConfigError, match="SchedulerConfig has no field 'num_kv_block'"):
        genai_shim.SchedulerConfig(num_kv_block=64)
    with pytest.raises(ConfigError, match="STATIC_PIPELINE is not implemented"):
        genai_shim.ContinuousBatchingPipeline(str(stories_dir), genai_shim.SchedulerConfig(), "CPU",
                                              {**F32, "STATIC_PIPELINE": True})
    with pytest.raises(ConfigError, match="prompt_lookup must be a bool"):
        genai_shim.ContinuousBatchingPipeline(str(stories_dir), genai_shim.SchedulerConfig(), "CPU",
                                              {**F32, "prompt_lookup": "yes"})


def test_cache_eviction_config_is_the_reals_configuration(real_genai: Any) -> None:
    """CacheEvictionConfig / AggregationMode exist with the real's fields, getters and checks;
    using them (use_cache_eviction) stays a ConfigError."""
    for lib in (genai_shim, real_genai):
        c = lib.CacheEvictionConfig(start_size=32, recent_size=64, max_cache_size=512,
                                    aggregation_mode=lib.AggregationMode.SUM, snapkv_window_size=8)
        got = (c.get_start_size(), c.get_recent_size(), c.get_max_cache_size(), c.get_evictable_size(),
               str(c.aggregation_mode), c.apply_rotation, c.snapkv_window_size, int(lib.AggregationMode.ADAPTIVE_RKV))
        assert got == (32, 64, 512, 416, "AggregationMode.SUM", False, 8, 2)
        assert c.to_string().startswith("CacheEvictionConfig { \n  start_size: 32\n")
        with pytest.raises(Exception, match="max_cache_size must be larger than CacheEvictionConfig.start_size"):
            lib.CacheEvictionConfig(32, 64, 90, lib.AggregationMode.NORM_SUM)
    sc = genai_shim.SchedulerConfig()
    sc.use_cache_eviction = True
    sc.cache_eviction_config = genai_shim.CacheEvictionConfig(32, 64, 512, genai_shim.AggregationMode.SUM)
    with pytest.raises(ConfigError, match="cache eviction"):
        genai_shim.ContinuousBatchingPipeline(str(OPTIMUM / "gpt2-fp32"), sc, "CPU")


def _dropped_handle(lib: Any) -> tuple[Any, ...]:
    pipe = lib.ContinuousBatchingPipeline(str(OPTIMUM / "gpt2-fp32"), lib.SchedulerConfig(), "CPU",
                                          {"INFERENCE_PRECISION_HINT": "f32"})
    config = lib.GenerationConfig(max_new_tokens=50, ignore_eos=True)
    pipe.add_request(0, "Hello there", config)  # its handle is gone at once: the real drops it
    handle = pipe.add_request(1, "Hi", config)
    steps = 0
    while pipe.has_non_finished_requests():
        pipe.step()
        steps += 1
    m = pipe.get_metrics()
    return steps, len(handle.read_all()[0].generated_ids), m.requests, round(m.max_cache_usage, 3), \
        round(m.avg_cache_usage, 3)


def test_request_whose_handle_is_gone_is_dropped_as_real(real_genai: Any) -> None:
    ours = _dropped_handle(genai_shim)
    assert ours == _dropped_handle(real_genai)
    assert ours[2] == 1  # one request left running
