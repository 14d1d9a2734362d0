#!/usr/bin/env python3
# A sync_benchmark-style sample for ov-npu-emu: latency of one model on one device, with
# random inputs. Same shape as OpenVINO's classic Python sample; the runtime is imported as `ov`.

import logging as log
import statistics
import sys
from time import perf_counter

import numpy as np

import ov_npu_emu as ov


def fill_tensor_random(tensor):
    """Fill a tensor with random values of its element type (ints stay small and non-negative)."""
    dtype = tensor.data.dtype
    rs = np.random.RandomState(np.random.MT19937(np.random.SeedSequence(0)))
    if np.issubdtype(dtype, np.integer):
        tensor.data[:] = rs.randint(0, 8, tensor.data.shape).astype(dtype)
    else:
        tensor.data[:] = rs.uniform(-1, 1, tensor.data.shape).astype(dtype)


def main():
    log.basicConfig(format='[ %(levelname)s ] %(message)s', level=log.INFO, stream=sys.stdout)
    if len(sys.argv) < 2:
        log.info(f'Usage: {sys.argv[0]} <path_to_model> [device_name] [seconds_to_run]')
        return 1
    device_name = sys.argv[2] if len(sys.argv) > 2 else 'NPU'
    seconds_to_run = float(sys.argv[3]) if len(sys.argv) > 3 else 10.0
    # Optimize for latency: most of the devices are configured for that by default.
    latency = {'PERFORMANCE_HINT': 'LATENCY'}

    # Create Core and compile the model for the device.
    core = ov.Core()
    compiled_model = core.compile_model(sys.argv[1], device_name, latency)
    ireq = compiled_model.create_infer_request()
    # Fill input data for the ireq.
    for model_input in compiled_model.inputs:
        fill_tensor_random(ireq.get_tensor(model_input))
    # Warm up.
    ireq.infer()
    # Benchmark for seconds_to_run seconds and at least niter iterations.
    niter = 10
    latencies = []
    start = perf_counter()
    time_point = start
    time_point_to_finish = start + seconds_to_run
    while time_point < time_point_to_finish or len(latencies) < niter:
        ireq.infer()
        iter_end = perf_counter()
        latencies.append((iter_end - time_point) * 1e3)
        time_point = iter_end
    end = time_point
    duration = end - start
    # Report results.
    fps = len(latencies) / duration
    log.info(f'Count:          {len(latencies)} iterations')
    log.info(f'Duration:       {duration * 1e3:.2f} ms')
    log.info('Latency:')
    log.info(f'    Median:     {statistics.median(latencies):.2f} ms')
    log.info(f'    Average:    {sum(latencies) / len(latencies):.2f} ms')
    log.info(f'    Min:        {min(latencies):.2f} ms')
    log.info(f'    Max:        {max(latencies):.2f} ms')
    log.info(f'Throughput: {fps:.2f} FPS')
    return 0


if __name__ == '__main__':
    sys.exit(main())
