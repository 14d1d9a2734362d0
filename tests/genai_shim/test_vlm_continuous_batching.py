"""genai_shim.ContinuousBatchingPipeline on a VLM folder (tests/fixtures/vlm/*-fp32), side by side
with the real openvino_genai.ContinuousBatchingPipeline 2026.4.1 on the same folder under f32
hints, and with our own VLMPipeline: several prompts with 0, 1 and 2 images in one generate(),
add_request / step / read_all, start_chat() and ChatHistory chats, CDPruner settings, videos with
their metadata, beam search, penalties, stop strings, preemption, and the real's error texts."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import pytest

import genai_shim
from ov_npu_emu.errors import ConfigError, UserInputError

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "vlm"
sys.path.insert(0, str(ROOT / "tools"))
from vlm_goldens import CPU_PROPS  # noqa: E402
from vlm_goldens import test_image as make_image  # noqa: E402
from vlm_goldens import test_video as make_video  # noqa: E402

og = pytest.importorskip("openvino_genai")

FAMILIES = ("qwen2vl-fp32", "qwen2_5vl-fp32", "qwen3vl-fp32", "llava-fp32", "llava_next-fp32",
            "llava_next_video-fp32", "gemma3-fp32")
PROMPTS = ["Describe the picture.", "What is it?", "Compare them."]


def _image(h: int = 80, w: int = 80) -> ov.Tensor:
    return ov.Tensor(make_image(h, w))


def _images() -> list[list[ov.Tensor]]:
    return [[], [_image()], [_image(), _image(64, 96)]]


def _pipe(lib: Any, family: str, **scheduler: Any) -> Any:
    sc = lib.SchedulerConfig()
    for k, v in scheduler.items():
        setattr(sc, k, v)
    return lib.ContinuousBatchingPipeline(str(FIXTURES / family), sc, "CPU", CPU_PROPS)


def _config(lib: Any, max_new_tokens: int = 12, **kwargs: Any) -> Any:
    cfg = lib.GenerationConfig()
    cfg.max_new_tokens = max_new_tokens
    for k, v in kwargs.items():
        setattr(cfg, k, v)
    return cfg


def _vlm_results(results: list[Any]) -> list[tuple[Any, ...]]:
    return [(list(r.texts), [round(s, 4) for s in r.scores], [int(f) for f in r.finish_reasons],
             r.perf_metrics.get_num_input_tokens()) for r in results]


@pytest.mark.parametrize("family", FAMILIES)
def test_batch_of_prompts_with_0_1_2_images_matches_real_and_vlm_pipeline(family: str) -> None:
    got = {}
    for lib in (genai_shim, og):
        res = _pipe(lib, family).generate(PROMPTS, images=_images(), generation_config=[_config(lib)] * 3)
        assert type(res) is list and all(type(r).__name__ == "VLMDecodedResults" for r in res)
        got[lib.__name__] = _vlm_results(res)
    assert got["genai_shim"] == got["openvino_genai"]
    vlm = genai_shim.VLMPipeline(str(FIXTURES / family), "CPU", **CPU_PROPS)
    alone = [vlm.generate(p, images=ims, generation_config=_config(genai_shim)).texts
             for p, ims in zip(PROMPTS, _images(), strict=True)]
    assert alone == [g[0] for g in got["genai_shim"]]


def test_add_request_overloads_step_and_read_all_match_real() -> None:
    out = {}
    for lib in (genai_shim, og):
        pipe = _pipe(lib, "qwen2vl-fp32")
        cfg = _config(lib, 8)
        handles = [pipe.add_request(0, "What is it?", [_image()], cfg),
                   pipe.add_request(1, "Describe", images=[_image(), _image(64, 96)], generation_config=cfg),
                   pipe.add_request(2, "Text only", cfg),
                   pipe.add_request(3, "Both", [_image()], [], cfg)]
        assert pipe.has_non_finished_requests()
        while pipe.has_non_finished_requests():
            pipe.step()
        m = pipe.get_metrics()
        assert 0 < m.max_cache_usage <= 100 and 0 < m.avg_cache_usage <= m.max_cache_usage
        out[lib.__name__] = [(int(h.get_status()), [list(o.generated_ids) for o in h.read_all()]) for h in handles]
    assert out["genai_shim"] == out["openvino_genai"]


def test_text_only_generate_returns_generation_results_as_real() -> None:
    out = {}
    for lib in (genai_shim, og):
        pipe = _pipe(lib, "llava-fp32")
        listed = pipe.generate(["Hi there", "Hello"], [_config(lib)] * 2)
        single = pipe.generate("Hi there", _config(lib))
        assert all(type(r).__name__ == "GenerationResult" for r in listed + single)
        out[lib.__name__] = [list(r.m_generation_ids) for r in listed + single]
    assert out["genai_shim"] == out["openvino_genai"]


def _chat(lib: Any) -> list[Any]:
    pipe = _pipe(lib, "qwen2vl-fp32")
    cfg = _config(lib, 8)
    out: list[Any] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pipe.start_chat("You are nice.")
        for prompt, images in (("What is it?", [[_image()]]), ("And now?", [[_image(64, 96)]])):
            out += _vlm_results(pipe.generate([prompt], images=images, generation_config=[cfg]))
        r = pipe.generate(["Total?"], generation_config=[cfg])[0]  # no images: a GenerationResult
        out.append((type(r).__name__, list(r.m_generation_ids), r.perf_metrics.get_num_input_tokens()))
        with pytest.raises(Exception, match="Can't chat with multiple prompts"):
            pipe.generate(["a", "b"], images=[[], []], generation_config=[cfg, cfg])
        pipe.finish_chat()
        h = lib.ChatHistory()
        h.append({"role": "user", "content": "What is in this image?"})
        r1 = pipe.generate([h], images=[[_image()]], generation_config=[cfg])
        out += _vlm_results(r1)
        h.append({"role": "assistant", "content": r1[0].texts[0]})
        h.append({"role": "user", "content": "Now this."})
        out += _vlm_results(pipe.generate([h], images=[[_image(64, 96)]], generation_config=[cfg]))
        # as the real's, a ChatHistory generate leaves the pipeline in chat mode until finish_chat()
        out += _vlm_results(pipe.generate(["Hey"], images=[[_image()]], generation_config=[cfg]))
        pipe.finish_chat()
        out += _vlm_results(pipe.generate(["Hey"], images=[[_image()]], generation_config=[cfg]))
    return out


def test_start_chat_and_chat_history_match_real() -> None:
    assert _chat(genai_shim) == _chat(og)


def _pruning(lib: Any) -> list[Any]:
    pipe = _pipe(lib, "qwen2vl-fp32")
    pruned, plain = _config(lib, 8, pruning_ratio=30), _config(lib, 8)
    out = []
    for configs in ([pruned, plain], [plain, pruned]):  # the real prunes every prompt as the first config says
        out += _vlm_results(pipe.generate(["What is it?", "x"], images=[[_image()], [_image(64, 96)]],
                                          generation_config=configs))
    handle = pipe.add_request(0, "What is it?", [_image()], pruned)  # add_request: the last generate's setting
    while pipe.has_non_finished_requests():
        pipe.step()
    out.append([list(o.generated_ids) for o in handle.read_all()])
    return out


def test_pruning_settings_match_real() -> None:
    ours = _pruning(genai_shim)
    assert ours == _pruning(og)
    assert ours[0][3] < ours[2][3]  # pruned: fewer input tokens


def _videos(lib: Any, family: str) -> list[Any]:
    pipe = _pipe(lib, family)
    cfg = _config(lib, 8)
    video = ov.Tensor(make_video(8, 56, 56))
    meta = lib.VideoMetadata()
    meta.frames_indices = [0, 2, 4, 6]
    presampled = ov.Tensor(np.ascontiguousarray(make_video(8, 56, 56)[[0, 2, 4, 6]]))
    cases = ((video, None), (presampled, None), (video, meta))
    out = []
    for v, m in cases:
        out += _vlm_results(pipe.generate(["Describe the video."], videos=[[v]],
                                          videos_metadata_batches=[[m]] if m else [], generation_config=[cfg]))
    handles = [pipe.add_request(i, "Describe the video.", images=[], videos=[v], videos_metadata=[m] if m else [],
                                generation_config=cfg) for i, (v, m) in enumerate(cases)]
    while pipe.has_non_finished_requests():
        pipe.step()
    out.append([[list(o.generated_ids) for o in h.read_all()] for h in handles])
    out += _vlm_results(pipe.generate(["Both"], images=[[_image()]], videos=[[video]], generation_config=[cfg]))
    return out


@pytest.mark.parametrize("family", ["qwen2vl-fp32", "qwen3vl-fp32", "llava_next_video-fp32"])
def test_videos_and_their_metadata_match_real(family: str) -> None:
    ours = _videos(genai_shim, family)
    assert ours == _videos(og, family)
    assert ours[1][0] == ours[2][0]  # presampled frames == the metadata's frames_indices


def _decoding(lib: Any) -> list[Any]:
    pipe = _pipe(lib, "qwen2vl-fp32")
    out = []
    for kwargs in ({"num_beams": 3, "num_return_sequences": 2}, {"repetition_penalty": 1.5},
                   {"presence_penalty": 1.0, "frequency_penalty": 0.5}, {"stop_strings": {"oat"}}):
        out += _vlm_results(pipe.generate(["What is it?", "Hi"], images=[[_image()], []],
                                          generation_config=[_config(lib, 10, **kwargs)] * 2))
    small = _pipe(lib, "qwen2vl-fp32", num_kv_blocks=2, max_num_batched_tokens=16)  # preemption
    out += _vlm_results(small.generate(["What is it?", "Hi there you"], images=[[_image()], [_image(64, 96)]],
                                       generation_config=[_config(lib, 10)] * 2))
    streamed: list[str] = []
    res = pipe.generate(["What is it?"], images=[[_image()]], generation_config=[_config(lib, 10)],
                        streamer=lambda s: streamed.append(s) and False)
    out.append((res[0].texts[0], "".join(streamed)))
    return out


def test_beam_search_penalties_stop_strings_preemption_streaming_match_real() -> None:
    assert _decoding(genai_shim) == _decoding(og)


def test_vlm_perf_metrics() -> None:
    pipe = _pipe(genai_shim, "qwen2vl-fp32")
    res = pipe.generate(["What is it?"], images=[[_image()]], generation_config=[_config(genai_shim, 4)])
    pm = res[0].perf_metrics
    assert type(pm).__name__ == "VLMPerfMetrics"
    assert pm.get_prepare_embeddings_duration().mean > 0 and pm.get_vision_encoding_duration().mean > 0
    assert pm.get_num_generated_tokens() == 4 and pm.get_ttft().mean > 0
    assert len(pipe.get_tokenizer().encode("a b").input_ids.data[0]) > 0 and pipe.get_config().eos_token_id >= 0


def test_wrong_inputs_raise_the_reals_texts() -> None:
    pipe = _pipe(genai_shim, "qwen2vl-fp32")
    cfg = _config(genai_shim, 4)
    with pytest.raises(UserInputError, match="Number of prompts should be equal to the number of images and videos"):
        pipe.generate(["a", "b"], images=[[_image()]], generation_config=[cfg, cfg])
    with pytest.raises(UserInputError, match="Number of prompts should be equal to the number of generation configs"):
        pipe.generate(["a", "b"], images=[[], []], generation_config=[cfg])
    with pytest.raises(UserInputError, match="list of GenerationConfig"):  # the real: no such overload
        pipe.generate(["a"], images=[[_image()]], generation_config=cfg)
    with pytest.raises(UserInputError, match="takes a list of str prompts or a list of ChatHistory"):
        pipe.generate([ov.Tensor(np.array([[1, 2, 3]], np.int64))], [cfg])
    with pytest.raises(UserInputError, match="Chat history must not be empty"):
        pipe.generate([genai_shim.ChatHistory()], images=[[]], generation_config=[cfg])
    with pytest.raises(ConfigError, match="Video preprocessing isn't implemented for this model"):
        _pipe(genai_shim, "llava-fp32").generate(["x"], videos=[[ov.Tensor(make_video(2, 56, 56))]],
                                                 generation_config=[cfg])
    with pytest.raises(UserInputError, match="takes a list of prompts"):  # the real: a TypeError
        pipe.generate("a", images=[[_image()]], generation_config=[cfg])
    with pytest.raises(ConfigError, match="Speculative decoding is not supported for models with"):
        genai_shim.ContinuousBatchingPipeline(str(FIXTURES / "qwen2vl-fp32"), genai_shim.SchedulerConfig(),
                                              "CPU", {"draft_model": object()})


@pytest.mark.parametrize("family", ["qwen2vl-fp32", "llava-fp32"])
def test_prefix_caching_tells_images_apart(family: str) -> None:
    """enable_prefix_caching on a VLM folder: one long text asked about image a, b, then a again.
    The prompts' ids are equal (the same number of pad tokens), so a cache keyed on ids alone
    would answer b with a's blocks; ours keys each position on its embedding row too, as the real
    tells them apart (texts equal the real's with prefix caching, and ours without). The text
    comes first (a universal tag places the image after it): the second call restores only the
    blocks before the image, the third a's whole prompt."""
    text = "Look at this picture carefully and describe every detail you can see in it. " * 3 + "<ov_genai_image_0>"
    a, b = _image(), ov.Tensor(np.ascontiguousarray(make_image(80, 80)[:, ::-1]))
    out = {}
    for lib, caching in ((genai_shim, True), (og, True), (genai_shim, False)):
        # a fixed cache that holds both prompts (a dynamic one evicts a's blocks for b's)
        pipe = _pipe(lib, family, enable_prefix_caching=caching, num_kv_blocks=64)
        texts, hits = [], []
        for im in (a, b, a):
            texts.append(pipe.generate([text], images=[[im]], generation_config=[_config(lib)])[0].texts[0])
            hits.append(getattr(pipe.get_metrics(), "prefix_cache_hits", 0))
        out[(lib.__name__, caching)] = texts
        if lib is genai_shim and caching:
            assert 0 < hits[1] < hits[2] - hits[1], hits  # b: the prefix before the image; a again: more
    assert out[("genai_shim", True)] == out[("openvino_genai", True)] == out[("genai_shim", False)]
    assert out[("genai_shim", True)][0] != out[("genai_shim", True)][1]  # the images matter


def test_text_llm_folder_refuses_images() -> None:
    pipe = genai_shim.ContinuousBatchingPipeline(str(ROOT / "tests" / "fixtures" / "optimum" / "gpt2-fp32"),
                                                 genai_shim.SchedulerConfig(), "CPU")
    cfg = _config(genai_shim, 2)
    with pytest.raises(UserInputError, match="Model doesn't support embeddings"):
        pipe.generate(["a"], images=[[_image()]], generation_config=[cfg])
    with pytest.raises(UserInputError, match="Model doesn't support embeddings"):
        pipe.add_request(0, "a", [_image()], cfg)


def _usage(lib: Any) -> list[Any]:
    def metrics(p: Any) -> tuple[float, float, int]:
        m = p.get_metrics()
        return round(m.max_cache_usage, 3), round(m.avg_cache_usage, 3), m.kv_cache_size_in_bytes

    out = []
    pipe = _pipe(lib, "qwen2vl-fp32")  # the dynamic cache
    pipe.generate(PROMPTS, images=_images(), generation_config=[_config(lib, 40)] * 3)
    out.append(metrics(pipe))
    pipe.generate(["Hi"], images=[[_image()]], generation_config=[_config(lib, 100, ignore_eos=True)])
    out.append(metrics(pipe))
    beams = _config(lib, 30, num_beams=3, num_return_sequences=2)
    pipe.generate(["Hi", "a b"], images=[[_image()], []], generation_config=[beams, beams])
    out.append(metrics(pipe))
    # (the handles kept: the real drops a request whose handle is gone)
    handles = [pipe.add_request(0, "What is it?", [_image()], _config(lib, 40)),
               pipe.add_request(1, "Hey", [_image(64, 96), _image()], _config(lib, 100, ignore_eos=True))]
    while pipe.has_non_finished_requests():
        pipe.step()
    out.append(metrics(pipe))
    assert all(h.get_status() == lib.GenerationStatus.FINISHED for h in handles)
    fixed = _pipe(lib, "qwen2vl-fp32", num_kv_blocks=16, max_num_batched_tokens=32)
    fixed.generate(PROMPTS, images=_images(), generation_config=[_config(lib, 40)] * 3)
    out.append(metrics(fixed))
    text = lib.ContinuousBatchingPipeline(str(ROOT / "tests" / "fixtures" / "optimum" / "gpt2-fp32"),
                                          lib.SchedulerConfig(), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    text.generate(["Once upon a time there" * 20, "Hi", "The dog is"],
                  [_config(lib, 40), _config(lib, 100, ignore_eos=True), _config(lib, 40)])
    out.append(metrics(text))
    return out


def test_cache_usage_matches_real() -> None:
    """max / avg cache usage and the cache size: the real's dynamic cache (sized per generate(),
    grown 256 tokens at a time, cleared after) and a fixed one, VLM and text folders."""
    ours = _usage(genai_shim)
    assert ours == _usage(og)
    assert ours[0][0] == 100.0 and 0 < ours[-2][1] < ours[-2][0] <= 100



def _lora(lib: Any, family: str, path: Path) -> list[Any]:
    adapters = lib.AdapterConfig()
    adapters.add(lib.Adapter(str(path)), 0.7)
    pipe = lib.ContinuousBatchingPipeline(str(FIXTURES / family), lib.SchedulerConfig(), "CPU",
                                          dict(CPU_PROPS, adapters=adapters))
    with_lora = pipe.generate(["Describe the picture.", "Hi"], images=[[_image()], []],
                              generation_config=[_config(lib)] * 2)
    off = _config(lib, adapters=lib.AdapterConfig())  # an empty AdapterConfig in the config: no LoRA
    without = pipe.generate(["Describe the picture."], images=[[_image()]], generation_config=[off])
    return [r.texts for r in with_lora + without]


@pytest.mark.parametrize("family", ["llava_next-fp32", "qwen2vl-fp32"])
def test_lora_adapters_match_real(family: str, tmp_path: Path) -> None:
    """adapters=AdapterConfig at construction: a PEFT-style rank-4 LoRA on the language model's q,
    v and down projections (tools/make_lora_fixture.py's writer), applied per generate()."""
    from make_lora_fixture import write_vlm_lora

    path = write_vlm_lora(tmp_path / "lora.safetensors")
    ours = _lora(genai_shim, family, path)
    assert ours == _lora(og, family, path)
    assert ours[0] != ours[2]  # the LoRA changes the answer


def _chunked(lib: Any, family: str) -> list[Any]:
    out = []
    for scheduler in ({"max_num_batched_tokens": 7}, {"dynamic_split_fuse": False}):
        pipe = _pipe(lib, family, **scheduler)
        out += _vlm_results(pipe.generate(["What is it?", "Compare"], images=[[_image()], [_image(), _image(64, 96)]],
                                          generation_config=[_config(lib, 10)] * 2))
    return out


@pytest.mark.parametrize("family", ["qwen3vl-fp32", "gemma3-fp32", "llava_next-fp32"])
def test_prompts_cut_into_chunks_and_vllm_mode_match_real(family: str) -> None:
    """A 7-token budget cuts the prompts (their vision rows, Qwen3-VL's DeepStack rows, Gemma 3's
    token types) across steps; dynamic_split_fuse=False schedules whole prompts."""
    assert _chunked(genai_shim, family) == _chunked(og, family)


def _lookup(lib: Any, family: str) -> list[Any]:
    pipe = lib.ContinuousBatchingPipeline(str(FIXTURES / family), lib.SchedulerConfig(), "CPU",
                                          dict(CPU_PROPS, prompt_lookup=True))
    config = _config(lib, 30, num_assistant_tokens=5, max_ngram_size=3, ignore_eos=True)
    out = []
    for prompt in ("Describe the picture.", "What is it?"):
        streamed: list[str] = []
        res = pipe.generate([prompt], images=[[_image()]], generation_config=[config],
                            streamer=lambda s, streamed=streamed: streamed.append(s) and False)
        out += _vlm_results(res) + [list(res[0].perf_metrics.raw_metrics.m_batch_sizes), "".join(streamed)]
    handle = pipe.add_request(0, "What is it?", [_image()], config)
    while pipe.has_non_finished_requests():
        pipe.step()
    out.append([list(o.generated_ids) for o in handle.read_all()])
    with pytest.raises(Exception, match="`max_ngram_size` && `num_assistant_tokens` should be specified"):
        pipe.generate(["x"], images=[[_image()]], generation_config=[_config(lib, 4)])
    return out


@pytest.mark.parametrize("family", ["qwen2vl-fp32", "qwen3vl-fp32", "gemma3-fp32"])
def test_prompt_lookup_matches_real(family: str) -> None:
    """prompt_lookup=True on a VLM folder: texts, input tokens, the tokens per model call (the
    candidates accepted), streaming and add_request equal the real's (one prompt per call: the
    real 2026.4.1 crashes with a segmentation fault on two)."""
    ours = _lookup(genai_shim, family)
    assert ours == _lookup(og, family)
    assert len(ours[1]) < 30  # candidates were accepted: fewer model calls than tokens


def test_prompt_lookup_batch_gives_plain_decodings_texts() -> None:
    prompts, images = ["Describe the picture.", "Compare them.", "Hi"], [[_image()], [_image(), _image(64, 96)], []]
    plain = _pipe(genai_shim, "qwen2vl-fp32").generate(prompts, images=images,
                                                      generation_config=[_config(genai_shim, 30, ignore_eos=True)] * 3)
    lookup = genai_shim.ContinuousBatchingPipeline(str(FIXTURES / "qwen2vl-fp32"), genai_shim.SchedulerConfig(), "CPU",
                                                   dict(CPU_PROPS, prompt_lookup=True))
    config = _config(genai_shim, 30, num_assistant_tokens=5, max_ngram_size=3, ignore_eos=True)
    got = lookup.generate(prompts, images=images, generation_config=[config] * 3)
    assert [r.texts for r in got] == [r.texts for r in plain]
