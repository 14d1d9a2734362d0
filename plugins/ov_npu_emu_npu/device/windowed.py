"""Token-row windows (NPU_EMU_SKIP_PADDED_ROWS): a task the compiler marked row-wise runs on
the request's real rows only.

The compiler's token-axis analysis (compiler/tokens.py) stores per task, in the blob's task
metadata, ``rows`` = {"L": prompt axis length, "off": first token row this task's operands
hold, "n": rows they hold, "axes": token axis per operand (-1: none)} for DPU/SHAVE tasks, or
{"L", "off", "n", "bpt": bytes per token row} for a contiguous DMA of token rows, or
{"L", "min_row"} for a task that only reads rows from ``min_row`` on (a last-rows Slice).
Such a task computes each token row from the same row of its inputs, so with a window starting
at token ``s`` it runs on views sliced to rows ``>= s`` - the views handed to the kernel maker
are sliced, the kernels are unchanged - and leaves the padding rows before ``s`` as they are
(nobody reads them: the caller's contract, and attention proves its own window).  The cost
model's cycles stay the descriptor's full static cost.

Kernels whose sums could depend on the row count are probed (``_PROBED``).  A prefill matmul_dq
on the block kernel (kernels/gemm.py) instead binds its own window (``window_from``: just the
window's rows, exact by construction since that kernel's per-row sums do not depend on the other
rows), so no probe passes over the real weights; any other matmul_dq window keeps more than
STORED_FORMAT_MAX_ROWS rows when its tile has more, so that it binds the same kernel as the full
run.
"""

from __future__ import annotations

import functools
import logging
import operator
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ov_npu_emu_npu.device.kernels.attention import RowWindow
from ov_npu_emu_npu.device.kernels.dequant import STORED_FORMAT_MAX_ROWS
from ov_npu_emu_npu.device.kernels.registry import Runner

__all__ = ["LazyRunner", "bind_dma_window", "bind_task_window"]

logger = logging.getLogger(__name__)

#: kernels whose per-row results could depend on how many rows run (BLAS blocking, reduction
#: order): a window size is used for them only after a probe on random data gives the full
#: run's rows bit for bit (attention instead repeats the full run's own row-block calls)
_PROBED = ("matmul", "matmul_dq", "conv", "softmax", "log_softmax", "mvn", "cumsum", "reduce_")
_PROBES: dict[tuple[Any, ...], bool] = {}
#: kernels that write their output only through ufunc ``out=`` / ``np.copyto`` (never a reshape
#: of it, which would copy a strided view): a window of theirs may write a strided output
_STRIDED_OUT_OK = frozenset({
    "transpose", "broadcast", "add", "subtract", "multiply", "maximum", "minimum", "power", "equal",
    "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and", "logical_or", "divide",
    "squared_difference", "select", "swish", "tanh", "exp", "log", "sqrt", "negative", "abs", "sin", "cos",
    "logical_not",
})
_PROBE_LOCK = threading.Lock()


def _local_start(window: RowWindow, length: int, off: int, n: int) -> int | None:
    """Rows of the operand to skip, or None when the window is off for this task."""
    if window.size != length or window.start <= 0:
        return None
    return min(max(window.start - off, 0), n)


def _kernel_start(name: str, n: int, ls: int) -> int:
    """Where the window's operands start for the kernel: a matmul_dq of more than
    STORED_FORMAT_MAX_ROWS rows keeps more than that many (padding rows included), or its window
    would read the weight as stored (kernels/gemv.py) where the full run uses BLAS on
    decompressed weights, whose sums differ in the last bits."""
    if name == "matmul_dq" and n > STORED_FORMAT_MAX_ROWS:
        return min(ls, n - STORED_FORMAT_MAX_ROWS - 1)
    return ls


def _sliced(views: Sequence[np.ndarray], axes: Sequence[int], ls: int) -> list[np.ndarray]:
    out = []
    for v, a in zip(views, axes, strict=True):
        if a < 0:
            out.append(v)
        else:
            sl = [slice(None)] * v.ndim
            sl[a] = slice(ls, None)
            out.append(v[tuple(sl)])
    return out


def _probe(name: str, make: Callable[[list[np.ndarray], list[np.ndarray]], Runner], ins: Sequence[np.ndarray],
           outs: Sequence[np.ndarray], axes: Sequence[int], n_in: int, ls: int, params: np.ndarray) -> bool:
    """Whether the kernel on rows [ls:) gives the full run's rows bit for bit, on random data
    (marked inputs and outputs are scratch copies; unmarked inputs, e.g. weights, are the real
    read-only views).  Checked once per shapes/parameters/window."""
    key = (name, tuple((v.shape, str(v.dtype), a) for v, a in zip([*ins, *outs], axes, strict=True)), ls,
           params.tobytes())
    with _PROBE_LOCK:
        hit = _PROBES.get(key)
        if hit is not None:
            return hit
        rng = np.random.default_rng(0)

        def scratch(v: np.ndarray, a: int, fill: bool) -> np.ndarray:
            if a < 0:
                return v
            if not fill or v.dtype.kind not in "fc":
                return np.zeros(v.shape, v.dtype)
            return rng.standard_normal(v.shape).astype(v.dtype)

        fi = [scratch(v, a, True) for v, a in zip(ins, axes[:n_in], strict=True)]
        fo = [scratch(v, a, False) for v, a in zip(outs, axes[n_in:], strict=True)]
        wo = [np.array(o) if a >= 0 else o for o, a in zip(fo, axes[n_in:], strict=True)]
        ok = True
        try:
            make(fi, fo)()
            ws = _sliced([*fi, *wo], axes, ls)
            make(ws[:n_in], ws[n_in:])()
            for f, w, a in zip(fo, wo, axes[n_in:], strict=True):
                if a >= 0:
                    ok = ok and np.array_equal(_sliced([f], [a], ls)[0], _sliced([w], [a], ls)[0], equal_nan=True)
        except Exception:  # noqa: BLE001 - a kernel that rejects the sliced views runs full
            ok = False
        _PROBES[key] = ok
        return ok


class LazyRunner:
    """A row-wise task's full-run kernel, bound on its first call: a prefill's row tiles wholly
    before every window that comes are never bound (a large int4 prefill has thousands of
    matmul_dq tiles, each costly to bind, and a short prompt's window runs only a few of them
    per MatMul; docs/performance.md, "Large models on the emulated NPU").  ``bind``
    raises what binding raises, at that first call."""

    __slots__ = ("_bind", "_run")

    def __init__(self, bind: Callable[[], Runner]) -> None:
        self._bind = bind
        self._run: Runner | None = None

    def bound(self) -> Runner:
        if self._run is None:
            self._run = self._bind()
        return self._run

    def __call__(self) -> None:
        (self._run or self.bound())()


def bind_task_window(name: str, rows: Mapping[str, Any], window: RowWindow, ins: Sequence[np.ndarray],
                     outs: Sequence[np.ndarray], params: np.ndarray, full: Runner,
                     make: Callable[[list[np.ndarray], list[np.ndarray]], Runner]) -> Runner:
    """The task's runner: ``full`` without a window, else the kernel made (once per window
    start) on views sliced to the window's rows.  ``make(ins, outs)`` binds the kernel."""
    if "min_row" in rows:
        return _bind_min_row(rows, window, full)
    length, off, n = int(rows["L"]), int(rows["off"]), int(rows["n"])
    axes = [int(a) for a in rows["axes"]]
    n_in = len(ins)
    views = [*ins, *outs]
    if len(axes) != len(views) or any(a >= v.ndim or (a >= 0 and v.shape[a] != n) for v, a in zip(views, axes,
                                                                                                  strict=False)):
        return full  # metadata that does not fit the operands: the full run is always right
    probed = name.startswith(_PROBED)
    # a runner that computes its own window exactly (kernels/gemm.py: matmul_dq on prefill
    # rows) needs no probe; its rows are the leading axis of the [M, K] / [M, N] operands
    own_window = (n_in >= 2 and axes[0] >= 0 and axes[-1] >= 0 and all(a < 0 for a in axes[1:n_in])
                  and ins[0].size == n * ins[0].shape[-1] and outs[-1].size == n * outs[-1].shape[-1])
    made: dict[int, Runner] = {}

    def runner_for(ls: int) -> Runner:
        r = made.get(ls)
        if r is None:
            r = full
            # the full kernel is bound here if it was not yet: this tile runs either way
            window_from = getattr(full.bound() if isinstance(full, LazyRunner) else full, "window_from", None)
            try:
                if window_from is not None and own_window:
                    made[ls] = r = window_from(ls) or full
                    return r
                sv = _sliced(views, axes, _kernel_start(name, n, ls))
                # a kernel may reshape its output; only a view reshapes without a copy
                strided_ok = name in _STRIDED_OUT_OK
                if all(strided_ok or o.flags.c_contiguous for o, a in zip(sv[n_in:], axes[n_in:], strict=True)
                       if a >= 0) and (
                    not probed or _probe(name, make, ins, outs, axes, n_in, _kernel_start(name, n, ls), params)
                ):
                    r = make(sv[:n_in], sv[n_in:])
            except Exception as e:  # noqa: BLE001 - the full run is always right
                logger.debug("%s: no window of %d rows (%s)", name, n - ls, e)
            made[ls] = r
        return r

    def run() -> None:
        ls = _local_start(window, length, off, n)
        if ls is None or ls == 0:
            full()
            return
        window.rows_full += n
        if ls >= n:  # all of this task's rows are padding
            window.windowed_tasks += 1
            return
        r = runner_for(ls)
        if r is not full:
            window.windowed_tasks += 1
            window.rows_computed += n - ls
        else:
            window.rows_computed += n
        r()

    return run


def _bind_min_row(rows: Mapping[str, Any], window: RowWindow, full: Runner) -> Runner:
    """A task that reads token rows from ``min_row`` on: a window starting later would hand it
    padding rows nobody computed, so the inference runs again without the window."""
    length, min_row = int(rows["L"]), int(rows["min_row"])

    def run() -> None:
        if window.size == length and window.start > min_row:
            window.violated = True
        full()

    return run


def bind_dma_window(rows: Mapping[str, Any], window: RowWindow, dst: np.ndarray, src: np.ndarray,
                    full: Runner) -> Runner:
    """A contiguous copy of token rows [off, off + n), ``bpt`` bytes each: only the window's rows."""
    length, off, n, bpt = int(rows["L"]), int(rows["off"]), int(rows["n"]), int(rows["bpt"])
    if dst.ndim != 1 or src.ndim != 1 or dst.size != n * bpt or src.size != n * bpt:
        return full
    made: dict[int, Runner] = {}

    def run() -> None:
        ls = _local_start(window, length, off, n)
        if ls is None or ls == 0:
            full()
            return
        window.rows_full += n
        window.windowed_tasks += 1
        if ls >= n:
            return
        r = made.get(ls)
        if r is None:
            r = made[ls] = functools.partial(operator.setitem, dst[ls * bpt:], Ellipsis, src[ls * bpt:])
        window.rows_computed += n - ls
        r()

    return run
