"""PerfMetrics: the real formulas on synthetic series, accumulation, and values from a run."""

from __future__ import annotations

import math

import pytest

import genai_shim
from genai_shim.perf_metrics import PerfMetrics
from ov_npu_emu.errors import UserInputError
from tests.genai_shim.conftest import F32


def _metrics(
    start=10.0, token_times=(10.5, 10.6, 10.8), sizes=(1, 1, 1), infer_us=(400.0, 90.0, 110.0)
):
    pm = PerfMetrics()
    pm.load_time = 123.0
    raw = pm.raw_metrics
    raw.m_new_token_times = list(token_times)
    raw.m_batch_sizes = list(sizes)
    raw.m_token_infer_durations = list(infer_us)
    raw.m_inference_durations = [sum(infer_us)]
    raw.generate_durations = [900_000.0]
    raw.tokenization_durations = [1000.0]
    raw.detokenization_durations = [3000.0]
    pm.evaluate_statistics(start)
    return pm


def test_formulas():
    pm = _metrics()
    assert pm.get_ttft().mean == pytest.approx(500.0)  # ms from generate() start to the first token
    assert pm.get_tpot().mean == pytest.approx(150.0)  # mean of 100 ms and 200 ms
    assert pm.get_tpot().std == pytest.approx(50.0)
    assert pm.get_throughput().mean == pytest.approx(1000.0 / 150.0)
    assert pm.get_throughput().std == pytest.approx(50.0 * 1000.0 / 150.0**2)
    assert pm.get_ipot().mean == pytest.approx(0.2)
    assert pm.get_num_generated_tokens() == 3
    assert pm.get_generate_duration().mean == pytest.approx(900.0)
    assert pm.get_tokenization_duration().mean == pytest.approx(1.0)
    assert pm.get_detokenization_duration().mean == pytest.approx(3.0)
    assert pm.get_inference_duration().mean == pytest.approx(0.6)
    assert pm.get_load_time() == 123.0
    mean, std = pm.get_ttft()
    assert (mean, std) == (pm.get_ttft().mean, pm.get_ttft().std)


def test_batch_sizes_weight_tpot():
    pm = _metrics(token_times=(1.0, 1.2), sizes=(2, 2), start=0.5)
    assert pm.get_num_generated_tokens() == 4
    assert pm.raw_metrics.m_durations == pytest.approx([100_000.0, 100_000.0])


def test_empty_series_are_minus_one():
    pm = PerfMetrics()
    assert tuple(pm.get_ttft()) == (-1.0, -1.0)
    assert pm.get_throughput().mean == pytest.approx(-1000.0)  # 1000 / -1, as the real one


def test_accumulate():
    a, b = _metrics(), _metrics(start=10.3)
    c = a + b
    assert c.get_num_generated_tokens() == 6
    assert len(c.raw_metrics.m_times_to_first_token) == 2
    assert c.get_ttft().mean == pytest.approx((500.0 + 200.0) / 2)
    assert c.get_ttft().std == pytest.approx(150.0)
    a += b
    assert a.get_num_generated_tokens() == 6
    other = _metrics()
    other.load_time = 1.0
    with pytest.raises(UserInputError, match="same pipeline"):
        _ = a + other


def test_metrics_from_generate(pipelines, stories_dir):
    pipe = pipelines("ours", stories_dir, **F32)
    r = pipe.generate(["Once upon a time"], max_new_tokens=20)
    pm = r.perf_metrics
    assert pm.get_num_generated_tokens() == 20
    assert pm.get_num_input_tokens() == 5
    assert pm.get_load_time() > 0
    ttft, tpot = pm.get_ttft().mean, pm.get_tpot().mean
    assert 0 < ttft < pm.get_generate_duration().mean
    assert tpot > 0 and math.isclose(pm.get_throughput().mean, 1000.0 / tpot, rel_tol=1e-6)
    assert pm.get_tokenization_duration().mean > 0 and pm.get_detokenization_duration().mean > 0
    assert len(pm.raw_metrics.m_token_infer_durations) == 20
    total = r.perf_metrics + pipe.generate(["Hi"], max_new_tokens=5).perf_metrics
    assert total.get_num_generated_tokens() == 25


def test_metrics_shape_like_real(pipelines, stories_dir):
    ours = pipelines("ours", stories_dir, **F32)
    real = pipelines("real", stories_dir, ATTENTION_BACKEND="SDPA", **F32)
    a = ours.generate(["Once upon a time"], max_new_tokens=20).perf_metrics
    b = real.generate(["Once upon a time"], max_new_tokens=20).perf_metrics
    assert a.get_num_generated_tokens() == b.get_num_generated_tokens()
    assert a.get_num_input_tokens() == b.get_num_input_tokens()
    assert len(a.raw_metrics.m_times_to_first_token) == len(b.raw_metrics.m_times_to_first_token)
    assert len(a.raw_metrics.token_infer_durations) == len(b.raw_metrics.token_infer_durations)
    assert genai_shim.MeanStdPair is type(a.get_ttft())
