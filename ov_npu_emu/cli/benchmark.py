"""``ov-npu-emu benchmark``: OpenVINO's benchmark_app for our devices, and the real CPU beside it.

It prints what benchmark_app prints at its last step (execution devices, count, duration, latency
median / average / min / max, throughput), measured the same way: random inputs, a pool of infer
requests (``-api async``, the default: ``AsyncInferQueue`` sized by the compiled model's
``OPTIMAL_NUMBER_OF_INFER_REQUESTS`` unless ``-nireq``) or one request in a loop (``-api sync``),
for ``-niter`` iterations or ``-t`` seconds.  ``--baseline`` runs the same on the real OpenVINO CPU
plugin in the same process and prints the ratios (this machine is shared: compare side by side).
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ov_npu_emu.errors import UserInputError

#: benchmark_app's default run time when neither -niter nor -t is given
DEFAULT_SECONDS = 60.0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "benchmark",
        help="benchmark_app for our devices: latency and throughput of one model",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-m", dest="model", required=True, help="model: an IR .xml (or anything openvino reads)")
    p.add_argument("-d", dest="device", default="CPU", help="device: NPU, CPU, AUTO:NPU,CPU ... (default CPU)")
    p.add_argument("-hint", choices=("throughput", "latency", "cumulative_throughput", "none"), default=None,
                   help="PERFORMANCE_HINT (default: throughput for -api async, latency for -api sync)")
    p.add_argument("-api", choices=("async", "sync"), default="async", help="infer requests (default async)")
    p.add_argument("-niter", type=int, default=None, help="number of iterations")
    p.add_argument("-t", dest="seconds", type=float, default=None,
                   help=f"seconds to run (default {DEFAULT_SECONDS:g} when -niter is not given either)")
    p.add_argument("-nireq", type=int, default=0, help="infer requests for -api async (0: the device's optimum)")
    p.add_argument("-shape", default="", help='input shapes for a dynamic model: "[1,3,224,224]" or '
                   '"input_ids[1,16],attention_mask[1,16]"')
    p.add_argument("-infer_precision", default=None, help="INFERENCE_PRECISION_HINT (e.g. f32)")
    p.add_argument("--baseline", action="store_true",
                   help="also run on the real OpenVINO CPU plugin in this process and print the ratios")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.set_defaults(func=run)


@dataclass
class Report:
    device: str
    execution_devices: list[str]
    count: int
    duration_ms: float
    latencies_ms: list[float]

    @property
    def throughput(self) -> float:
        return self.count * 1000.0 / self.duration_ms if self.duration_ms > 0 else 0.0

    def lines(self) -> list[str]:
        lat = self.latencies_ms
        return [
            f"[ INFO ] Execution Devices:{self.execution_devices}",
            f"[ INFO ] Count:            {self.count} iterations",
            f"[ INFO ] Duration:         {self.duration_ms:.2f} ms",
            "[ INFO ] Latency:",
            f"[ INFO ]    Median:        {statistics.median(lat):.2f} ms",
            f"[ INFO ]    Average:       {statistics.fmean(lat):.2f} ms",
            f"[ INFO ]    Min:           {min(lat):.2f} ms",
            f"[ INFO ]    Max:           {max(lat):.2f} ms",
            f"[ INFO ] Throughput:   {self.throughput:.2f} FPS",
        ]


def parse_shapes(text: str) -> dict[str, list[int]] | list[int] | None:
    """``-shape``: one ``[d0,d1,...]`` for every input, or ``name[d0,...]`` per input."""
    text = text.strip()
    if not text:
        return None
    if text.startswith("["):
        return _dims(text, text)
    out = {}
    for name, dims in re.findall(r"([^\[\],]+)(\[[^\]]*\])", text):
        out[name.strip()] = _dims(dims, text)
    if not out:
        raise UserInputError(f'-shape {text!r}: expected "[1,3,224,224]" or "name[1,3,224,224],other[...]"')
    return out


def _dims(dims: str, text: str) -> list[int]:
    try:
        return [int(d) for d in dims.strip("[]").split(",") if d.strip()]
    except ValueError:
        raise UserInputError(f"-shape {text!r}: dimensions are whole numbers, e.g. [1,3,224,224]") from None


def random_inputs(model: Any, rng: np.random.Generator) -> dict[int, np.ndarray]:
    """benchmark_app's random fill: integers in a small range, floats in [0, 1)."""
    out = {}
    for i, port in enumerate(model.inputs):
        ps = port.get_partial_shape()
        if not ps.is_static:
            raise UserInputError(
                f"input {port.get_any_name()!r} has the dynamic shape {ps}: give -shape, "
                'e.g. -shape "[1,3,224,224]"'
            )
        dtype = np.dtype(port.get_element_type().to_dtype())
        shape = tuple(int(d) for d in ps.to_shape())
        if dtype.kind in "iu":
            out[i] = rng.integers(0, 10, size=shape).astype(dtype)
        elif dtype.kind == "b":
            out[i] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            out[i] = rng.random(size=shape, dtype=np.float32).astype(dtype)
    return out


def _reshaped(model: Any, shapes: dict[str, list[int]] | list[int] | None) -> Any:
    if shapes is None:
        return model
    if isinstance(shapes, list):
        model.reshape({p.get_any_name(): shapes for p in model.inputs})
    else:
        known = {n for p in model.inputs for n in p.get_names()}
        unknown = sorted(set(shapes) - known)
        if unknown:
            raise UserInputError(f"-shape names {unknown}, which the model does not have (inputs: {sorted(known)})")
        model.reshape(shapes)
    return model


def measure(core: Any, queue_cls: Callable[..., Any], model: Any, device: str, args: argparse.Namespace) -> Report:
    """Compile ``model`` on ``device`` with ``core`` and run it as benchmark_app does."""
    hint = args.hint or ("throughput" if args.api == "async" else "latency")
    config: dict[str, Any] = {}
    if hint != "none":
        config["PERFORMANCE_HINT"] = hint.upper()
    if args.infer_precision:
        config["INFERENCE_PRECISION_HINT"] = args.infer_precision
    compiled = core.compile_model(model, device, config)
    inputs = random_inputs(compiled, np.random.default_rng(args.seed))
    seconds = args.seconds if args.seconds is not None else (None if args.niter else DEFAULT_SECONDS)
    niter = args.niter
    latencies: list[float] = []
    if args.api == "sync":
        request = compiled.create_infer_request()
        request.infer(inputs)  # warm-up (benchmark_app reports its time apart)
        start = time.perf_counter()
        while (niter is None or len(latencies) < niter) and (
            seconds is None or time.perf_counter() - start < seconds
        ):
            t0 = time.perf_counter()
            request.infer(inputs)
            latencies.append((time.perf_counter() - t0) * 1e3)
    else:
        queue = queue_cls(compiled, args.nireq)
        for request in queue:  # warm-up: one inference per request
            request.infer(inputs)
        queue.set_callback(lambda request, _: latencies.append(request.latency))
        start, started = time.perf_counter(), 0
        while (niter is None or started < niter) and (seconds is None or time.perf_counter() - start < seconds):
            queue.start_async(inputs)
            started += 1
        queue.wait_all()
    duration = (time.perf_counter() - start) * 1e3
    if not latencies:
        raise UserInputError("nothing ran: give -niter >= 1 or -t > 0")
    try:
        execution = list(compiled.get_property("EXECUTION_DEVICES"))
    except Exception:  # a device without the property: name what was asked
        execution = [device]
    return Report(device, execution, len(latencies), duration, latencies)


def run(args: argparse.Namespace) -> int:
    import openvino

    import ov_npu_emu as ov

    shapes = parse_shapes(args.shape)
    ours = measure(ov.Core(), ov.AsyncInferQueue, _reshaped(ov.Core().read_model(args.model), shapes),
                   args.device, args)
    print(f"[Step 11/11] Dumping statistics report ({args.device}, ov_npu_emu)")
    print("\n".join(ours.lines()))
    if args.baseline:
        real = measure(openvino.Core(), openvino.AsyncInferQueue,
                       _reshaped(openvino.Core().read_model(args.model), shapes), "CPU", args)
        print("[Step 11/11] Dumping statistics report (CPU, the real OpenVINO plugin)")
        print("\n".join(real.lines()))
        latency = statistics.median(ours.latencies_ms) / statistics.median(real.latencies_ms)
        throughput = ours.throughput / real.throughput
        print(f"[ INFO ] ours / real: median latency {latency:.2f}x, throughput {throughput:.2f}x")
    return 0
