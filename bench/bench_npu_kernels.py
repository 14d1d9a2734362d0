"""Decode GEMV on stored weights (plugins/ov_npu_emu_npu/device/kernels/gemv.py) against the bandwidth floor.

Usage: python bench/bench_npu_kernels.py [--mb 256] [--rows 1,4,16] [--repeat 5]
       [--formats f32,f16,u8,i8,u4,i4,u4a8,i4a8]
       [--group4 128] [--group8 0] [--baseline OLD/gemv.py]

For each weight format, one weight of ``--mb`` stored bytes (more than the host's caches hold,
so every product streams it from DRAM) shaped like an LLM's MLP (K = 896, N as needed) is
multiplied by 1..16 activation rows, in this process and side by side:

* ``floor``: numpy reading the same stored bytes once (``np.add.reduce`` over a u64 view, and
  a memcpy of them; the faster counts): the host's read bandwidth *right now*, on one core and
  on both (each half on one thread: the gemv pool's and this one);
* ``stored``: the stored-format kernel (both cores), as the emulated NPU runs decode matmul_dq;
  ``u4a8`` / ``i4a8``: the 4-bit weight times int8 activations (NPU_COMPILER_DYNAMIC_QUANTIZATION,
  what NPUW compiles its LLM sub-models with; one row only), checked against BLAS on the
  quantized activation's values;
* ``baseline`` (with ``--baseline``): the stored-format kernel of another checkout's gemv.py
  (e.g. a ``git worktree`` of main), copied to a temporary directory so that numba's cache
  files of the two stay apart;
* ``dq+BLAS``: the previous path for weights over the cache budget: decompress 256 KiB f32 tiles
  (TileDequantizer) and BLAS each tile; for ``f32`` (the matmul kernel's decode path) plain
  single-threaded BLAS, as before that path.

Printed: milliseconds (median of ``--repeat``), GB/s of *stored* bytes, and stored / floor (1.0
= at the measured bandwidth). Setups alternate every repeat so that load from other jobs on
this shared host hits them alike; the JIT compile is paid before timing (and reported).
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # see docs/performance_log.md, numpy's BLAS threads

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ov_npu_emu_npu.blob.format import WEIGHT_FORMATS  # noqa: E402
from ov_npu_emu_npu.device.kernels.act_quant import ACT_BLOCK, fake_quantize_rows  # noqa: E402
from ov_npu_emu_npu.device.kernels.dequant import DQ_TILE_BYTES, TileDequantizer  # noqa: E402

K = 896


def _weight(fmt: str, stored_bytes: int, rng: np.random.Generator, group4: int = 128, group8: int = 0):
    """(q, scale, zp) of about ``stored_bytes`` in the layout the blob keeps; group sizes 0 are
    channel-wise (one group of K: optimum's int8; 128 is optimum's int4 default). u4 and u8
    carry zero points, i4 and i8 are symmetric."""
    if fmt in ("f16", "f32"):
        dt = np.float16 if fmt == "f16" else np.float32
        n = stored_bytes // (np.dtype(dt).itemsize * K)
        return rng.standard_normal((n, K)).astype(dt), None, None
    four = fmt.endswith("4")
    gs = (group4 if four else group8) or K
    n = stored_bytes // (K // 2 if four else K)
    q = rng.integers(0, 256, (n, K // gs, gs // 2 if four else gs), dtype=np.uint8)
    if fmt == "i8":
        q = q.view(np.int8)
    scale = (rng.random((n, K // gs, 1)) * 0.01).astype(np.float16)
    zp = rng.integers(0, 16 if four else 256, (n, K // gs, 1), dtype=np.uint8) if fmt.startswith("u") else None
    return q, scale, zp


def _dq_blas(fmt: str, q, scale, zp, x: np.ndarray, out: np.ndarray):
    if fmt == "f32":  # the previous f32 decode path: BLAS on the calling thread
        return functools.partial(np.matmul, x, q.T, out=out)
    n = q.shape[0]
    tile = max(1, DQ_TILE_BYTES // (4 * K))
    rows = TileDequantizer(WEIGHT_FORMATS[fmt], q, scale, zp, False, K, tile).rows

    def run() -> None:
        for r0 in range(0, n, tile):
            r1 = min(n, r0 + tile)
            out[:, r0:r1] = x @ rows(r0, r1).T

    return run


def _both_cores(fn, *arrays: np.ndarray) -> None:  # type: ignore[no-untyped-def]
    """``fn`` over the first half of every array on the gemv pool's thread and the second half
    here (numpy releases the GIL in both): the 2-core read floor."""
    from ov_npu_emu_npu.device.kernels.gemv import _pool

    half = arrays[0].shape[0] // 2
    other = _pool().submit(fn, *(a[:half] for a in arrays))
    fn(*(a[half:] for a in arrays))
    other.result()


def _baseline_module(path: str) -> ModuleType:
    """Another checkout's gemv.py, imported under its own name from a copy (its numba cache
    files, keyed by module name and path, then never meet this checkout's)."""
    import importlib.util
    import shutil
    import tempfile

    copy = Path(tempfile.mkdtemp(prefix="bench_gemv_")) / "gemv_baseline.py"
    shutil.copyfile(path, copy)
    spec = importlib.util.spec_from_file_location("gemv_baseline", copy)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gemv_baseline"] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=256.0, help="stored MB of each weight")
    ap.add_argument("--rows", default="1,4,16")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--formats", default="f32,f16,u8,i8,u4,i4,u4a8,i4a8")
    ap.add_argument("--group4", type=int, default=128, help="4-bit group size (0: channel-wise)")
    ap.add_argument("--group8", type=int, default=0, help="8-bit group size (0: channel-wise)")
    ap.add_argument("--baseline", help="another checkout's kernels/gemv.py, timed alongside")
    args = ap.parse_args()
    from ov_npu_emu_npu.device.kernels.gemv import gemv_runner

    base = _baseline_module(args.baseline) if args.baseline else None

    rng = np.random.default_rng(0)
    print(f"os.sched_getaffinity: {len(os.sched_getaffinity(0))} cores, load average {os.getloadavg()[0]:.1f}, "
          f"4-bit group {args.group4 or 'K'}, 8-bit group {args.group8 or 'K'}")
    print("| format | rows | stored MB | floor 1 core GB/s | floor 2 cores GB/s | stored ms | stored GB/s "
          "| / floor 1 core | / floor 2 cores | dq+BLAS ms | dq+BLAS / stored | first call s | baseline / stored |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for setup in args.formats.split(","):
        fmt, a8 = setup.removesuffix("a8"), setup.endswith("a8")
        q, scale, zp = _weight(fmt, int(args.mb * 2**20), rng, args.group4, args.group8)
        nbytes = sum(a.nbytes for a in (q, scale, zp) if a is not None)
        flat = q.reshape(-1).view(np.uint8)
        flat = flat[: flat.size // 8 * 8]
        copy_dst = np.empty_like(flat)
        for m in (int(r) for r in args.rows.split(",")):
            if a8 and m != 1:
                continue
            x = rng.standard_normal((m, K)).astype(np.float32)
            out, out_ref = np.empty((m, q.shape[0]), np.float32), np.empty((m, q.shape[0]), np.float32)
            x_ref = x.copy()
            if a8:
                fake_quantize_rows(x_ref, ACT_BLOCK)
            t0 = time.perf_counter()
            stored = gemv_runner(fmt, x, q, scale, zp, out, K, int8_activations=a8)
            assert stored is not None
            stored()
            first = time.perf_counter() - t0
            setups = {
                "sum2": functools.partial(_both_cores, np.add.reduce, flat.view(np.uint64)),
                "copy2": functools.partial(_both_cores, np.copyto, copy_dst, flat),
                "sum": functools.partial(np.add.reduce, flat.view(np.uint64)),
                "copy": functools.partial(np.copyto, copy_dst, flat),
                "stored": stored,
                "dq": _dq_blas(fmt, q, scale, zp, x_ref, out_ref),
            }
            if base is not None:
                out_base = np.empty_like(out)
                setups["base"] = base.gemv_runner(fmt, x, q, scale, zp, out_base, K)
                setups["base"]()
            times: dict[str, list[float]] = {k: [] for k in setups}
            for _ in range(args.repeat):
                for name, fn in setups.items():
                    t = time.perf_counter()
                    fn()
                    times[name].append(time.perf_counter() - t)
            med = {k: statistics.median(v) for k, v in times.items()}
            scale_ref = max(float(np.abs(out_ref).max()), 1e-30)
            assert float(np.abs(out - out_ref).max()) <= 1e-4 * scale_ref, "stored-format result differs"
            floor = max(flat.nbytes / med["sum"], flat.nbytes / med["copy"]) / 1e9
            floor2 = max(flat.nbytes / med["sum2"], flat.nbytes / med["copy2"]) / 1e9
            gbs = nbytes / med["stored"] / 1e9
            print(f"| {setup} | {m} | {nbytes / 2**20:.0f} | {floor:.1f} | {floor2:.1f} | {med['stored'] * 1e3:.1f} "
                  f"| {gbs:.1f} | {gbs / floor:.2f} | {gbs / floor2:.2f} | {med['dq'] * 1e3:.1f} "
                  f"| {med['dq'] / med['stored']:.1f} | {first:.2f} "
                  f"| {med['base'] / med['stored'] if base is not None else float('nan'):.2f} |")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
