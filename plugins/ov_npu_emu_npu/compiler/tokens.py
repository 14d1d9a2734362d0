"""Token-axis analysis: which tasks compute each token row from the same row of their inputs.

An LLM prefill's ``input_ids`` / ``position_ids`` are [1, L]: one row per token.  Walking the
tasks in order, a value gets a *mark* (axis, first token) when its rows along ``axis`` are
token rows and every row was computed from the same token row of the inputs (embedding gather,
norms over the hidden axis, elementwise ops, rope, weight MatMuls, transposes, row-tile DMAs).
Such tasks get ``Task.rows`` (stored in the blob's task metadata) and the device may run them on
the real rows only (NPU_EMU_SKIP_PADDED_ROWS, device/windowed.py), leaving the padding rows
before the window uncomputed ("partial").  That is safe only if no task reads a partial value's
padding rows into a real row: the readers allowed are row-wise tasks, attention (it proves its
own window and reads only the window's K/V rows), and a last-rows Slice (checked at run time
through ``min_row``).  Any other reader of a partial value - or a model with state - drops every
mark: the blob then runs as before.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence

from ov_npu_emu_npu.blob.format import TaskKind
from ov_npu_emu_npu.compiler.graph import Place, Task, Value

__all__ = ["TOKEN_INPUTS", "mark_token_rows", "prefill_length"]

logger = logging.getLogger(__name__)

#: inputs whose last axis is the token axis; their padding entries are one token at one position
TOKEN_INPUTS = ("input_ids", "position_ids")
#: a value's bytes as [P, n, Q] elements: n token rows (tokens off, off + 1, ...) between P outer
#: blocks and Q inner elements; a reshape keeps it, so aliases share their root's mark
Mark = tuple[int, int, int, int]  # (P, n, Q, off)

_ELEMENTWISE = frozenset({
    "add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "squared_difference", "equal",
    "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and", "logical_or", "logical_xor",
    "floor_mod", "mod", "bitwise_and", "bitwise_or", "bitwise_xor", "relu", "sigmoid", "tanh", "exp", "log",
    "sqrt", "negative", "abs", "sin", "cos", "erf", "floor", "ceiling", "logical_not", "softplus", "hswish",
    "hsigmoid", "sign", "mish", "tan", "atan", "bitwise_not", "convert", "gelu", "swish", "clamp", "select",
    "elu", "broadcast",
})
_ALONG_AXIS = frozenset({"softmax", "log_softmax"})  # params[0]: the one axis they mix


def _axis(shape: tuple[int, ...], mark: Mark | None) -> int:
    """The axis of ``shape`` that holds the token rows of ``mark`` (-1: none does)."""
    if mark is None:
        return -1
    p, n = mark[0], mark[1]
    for a in range(len(shape)):
        pre = math.prod(shape[:a])
        if pre == p and shape[a] == n:
            return a
        if pre > p:
            break
    return -1


def _at(shape: tuple[int, ...], a: int, n: int, off: int) -> Mark:
    return (math.prod(shape[:a]), n, math.prod(shape[a + 1 :]), off)

def _rowwise_matmul(t: Task, marks: list[Mark | None], n_marked: int, in_axes: list[int], n: int, off: int
                    ) -> tuple[list[int], list[Mark]] | None:
    """MatMul: token rows of the activation (its only marked operand) are the output's rows."""
    a, o = t.ins[0], t.outs[0]
    ma = marks[0]
    if n_marked != 1 or ma is None or t.params[0] or len(a.shape) < 2 or ma[2] != a.shape[-1]:
        return None
    b = t.ins[1] if t.kernel == "matmul" else None
    if b is not None and math.prod(b.shape[:-2]) != 1:
        return None  # a batched right operand could broadcast rows
    return in_axes, [(ma[0], n, o.shape[-1], off)]


def _rowwise_gather(t: Task, marks: list[Mark | None], marked: list[tuple[int, Mark]], in_axes: list[int], n: int,
                    off: int) -> tuple[list[int], list[Mark]] | None:
    """Gather: token rows of the indices select the output's rows."""
    k = t.kernel
    if len(marked) != 1 or marked[0][0] != 1 or (k == "gather" and int(t.params[1]) != 0):
        return None
    axis = int(t.params[0]) if k == "gather" else 0
    data, mi = t.ins[0], marks[1]
    assert mi is not None
    return in_axes, [(math.prod(data.shape[:axis]) * mi[0], n, mi[2] * math.prod(data.shape[axis + 1 :]), off)]


def _elementwise_axis(t: Task, marks: list[Mark | None], marked: list[tuple[int, Mark]], in_axes: list[int],
                      n: int) -> int | None:
    """The output axis of an element-wise task's token rows; None when the operands disagree."""
    o = t.outs[0]
    rank = len(o.shape)
    pos = {in_axes[i] + rank - len(t.ins[i].shape) for i, _ in marked}
    if len(pos) != 1:
        return None
    p = pos.pop()
    if o.shape[p] != n:
        return None
    for v, m in zip(t.ins, marks, strict=True):
        q = p - (rank - len(v.shape))
        if m is None and 0 <= q < len(v.shape) and v.shape[q] != 1:
            return None  # a row-free operand that varies along the token axis
    return p


def _single_input_axis(t: Task, a: int) -> int | None:
    """The output axis of token axis ``a`` of a one-input task's operand (-1 when it mixes it)."""
    k = t.kernel
    if k == "transpose":
        perm = [int(x) for x in t.params]
        return perm.index(a) if a in perm else -1
    if k in _ALONG_AXIS:
        return a if int(t.params[0]) != a else -1
    if k == "mvn":
        return a if a not in {int(x) for x in t.params[3:]} else -1
    if k.startswith("reduce_"):
        axes = {int(x) for x in t.params}
        if a in axes:
            return None
        return a if len(t.outs[0].shape) == len(t.ins[0].shape) else a - sum(1 for x in axes if x < a)
    return None


class _Analysis:
    def __init__(self, tasks: Sequence[Task], length: int) -> None:
        self.tasks = tasks
        self.length = length
        self.root_mark: dict[int, Mark | None] = {}  # root vid -> mark
        self.partial: set[int] = set()  # root vids whose padding rows may be uncomputed
        self.failure = ""
        self.windowed_attention: list[Task] = []  # attentions that take the window

    def demand_rows(self) -> int:
        """Windows for the attention masks' element-wise chains (no token input: the forward
        marks miss them).  A windowed attention reads only its mask's rows from the window on
        (axis -2); walking back from it, an element-wise task whose output only such readers
        read may compute just those rows too, slicing the operands that have L entries on the
        aligned axis.  Returns how many tasks got windows this way."""
        length = self.length
        readers: dict[int, list[tuple[Task, int]]] = {}
        for t in self.tasks:
            for i, v in enumerate(t.ins):
                readers.setdefault(v.root.vid, []).append((t, i))
        sliced_by: dict[int, tuple[Task, int]] = {}  # tid -> (task, axis) chosen below
        n = 0
        for t in reversed(self.tasks):
            if t.rows is not None or t.kind is TaskKind.DMA or t.kernel not in _ELEMENTWISE or len(t.outs) != 1:
                continue
            o = t.outs[0]
            if o.alias is not None or o.place is not Place.SCRATCH or len(o.root.producers) != 1:
                continue
            # every reader must be a windowed attention's mask or a task sliced on this axis
            axes = set()
            for r, i in readers.get(o.vid, []):
                if r in self.windowed_attention and i == 3 and r.ins[3] is o:
                    axes.add(len(o.shape) - 2)
                elif r.tid in sliced_by and r.ins[i] is o and r.rows and r.rows["axes"][i] >= 0:
                    axes.add(r.rows["axes"][i])
                else:
                    axes.add(-1)
            if len(axes) != 1 or -1 in axes:
                continue
            a = axes.pop()
            if o.shape[a] != length:
                continue
            rank = len(o.shape)
            in_axes = []
            for v in t.ins:
                q = a - (rank - len(v.shape))
                in_axes.append(q if 0 <= q < len(v.shape) and v.shape[q] == length else -1)
            t.rows = {"L": length, "off": 0, "n": length, "axes": [*in_axes, a]}
            sliced_by[t.tid] = (t, a)
            n += 1
        return n

    def mark(self, v: Value) -> Mark | None:
        r = v.root
        if r.place is Place.CONST:
            return None
        return self.root_mark.get(r.vid)

    def set_mark(self, v: Value, m: Mark | None, partial: bool) -> None:
        r = v.root
        if r.vid in self.root_mark and self.root_mark[r.vid] != m:
            # written by several tasks (tiles, concat inputs) that disagree: no token rows
            m = None
            if r.vid in self.partial or partial:
                self.failure = self.failure or f"value {r.vid} {r.shape} gets conflicting token rows"
        self.root_mark[r.vid] = m
        if partial and m is not None:
            self.partial.add(r.vid)

    def is_partial(self, v: Value) -> bool:
        return v.root.vid in self.partial

    # -- per task ------------------------------------------------------------------------
    def run(self) -> None:
        for t in self.tasks:
            marks = [self.mark(v) for v in t.ins]
            if all(m is None for m in marks):
                for o in t.outs:
                    self.set_mark(o, None, False)
                continue
            partial_in = any(self.is_partial(v) for v in t.ins)
            if t.kind is TaskKind.DMA:
                self._dma(t, marks[0], partial_in)
            elif t.kernel == "sdpa":
                self._sdpa(t, marks)
            elif t.kernel == "slice":
                self._slice(t, marks[0], partial_in)
            else:
                res = self._rowwise(t, marks)
                if res is None:
                    self._mixing(t, partial_in)
                    continue
                in_axes, out_marks = res
                out_axes = [_axis(o.shape, m) for o, m in zip(t.outs, out_marks, strict=True)]
                m0 = out_marks[0]
                if all(a >= 0 or m is None for a, m in zip(in_axes, marks, strict=True)) and all(
                        a >= 0 for a in out_axes):
                    t.rows = {"L": self.length, "off": m0[3], "n": m0[1], "axes": [*in_axes, *out_axes]}
                for o, m in zip(t.outs, out_marks, strict=True):
                    self.set_mark(o, m, True if t.rows is not None else partial_in)
            if self.failure:
                return

    def _mixing(self, t: Task, partial_in: bool) -> None:
        """``t`` mixes token rows: fine on fully computed inputs, fatal on partial ones."""
        if partial_in:
            self.failure = (f"task {t.tid} ({t.kernel}, {t.node!r}) mixes token rows of a windowed value "
                            f"({[(v.shape, self.mark(v)) for v in t.ins]} -> {[o.shape for o in t.outs]})")
        for o in t.outs:
            self.set_mark(o, None, False)

    def _rowwise(self, t: Task, marks: list[Mark | None]) -> tuple[list[int], list[Mark]] | None:
        """(token axis per input (-1: none or not an axis), output marks) when every output
        row comes from the same token row of the inputs; None when ``t`` mixes rows."""
        k = t.kernel
        marked = [(i, m) for i, m in enumerate(marks) if m is not None]
        if len({(m[1], m[3]) for _, m in marked}) != 1:
            return None
        n, off = marked[0][1][1], marked[0][1][3]
        in_axes = [_axis(v.shape, m) for v, m in zip(t.ins, marks, strict=True)]
        if k in ("matmul", "matmul_dq"):
            return _rowwise_matmul(t, marks, len(marked), in_axes, n, off)
        if k in ("gather", "gather_dq"):
            return _rowwise_gather(t, marks, marked, in_axes, n, off)
        if any(in_axes[i] < 0 for i, _ in marked):
            return None  # token rows that are no axis of the operand: the rules below need one
        if len(t.outs) != 1:
            return None
        o = t.outs[0]
        if k in _ELEMENTWISE:
            pe = _elementwise_axis(t, marks, marked, in_axes, n)
            return None if pe is None else (in_axes, [_at(o.shape, pe, n, off)])
        if len(t.ins) != 1:
            return None
        p = _single_input_axis(t, in_axes[0])
        if p is None or p < 0 or p >= len(o.shape) or o.shape[p] != n:
            return None
        return in_axes, [_at(o.shape, p, n, off)]

    def _sdpa(self, t: Task, marks: list[Mark | None]) -> None:
        """Attention mixes rows, but under a window it reads only the window's Q/K/V rows and
        proves the rest irrelevant (kernels/attention.py; it reads the mask's window rows too);
        its output rows before the window are zeros (partial).  Only an attention whose query
        and key axes both have L rows takes the window, so only that one may read partial values."""
        q, k, o = t.ins[0], t.ins[1], t.outs[0]
        if (marks[0] is None or _axis(q.shape, marks[0]) != len(q.shape) - 2 or marks[0][3] != 0
                or len(o.shape) != len(q.shape) or q.shape[-2] != self.length or k.shape[-2] != self.length):
            self._mixing(t, any(self.is_partial(v) for v in t.ins))
            return
        for v, m in zip(t.ins, marks, strict=True):
            # the window reads rows [w0:) of axis -2
            if self.is_partial(v) and (m is None or _axis(v.shape, m) != len(v.shape) - 2 or m[3] != 0):
                self._mixing(t, True)
                return
        self.windowed_attention.append(t)
        self.set_mark(o, _at(o.shape, len(o.shape) - 2, self.length, 0), True)

    def _slice(self, t: Task, mark: Mark | None, partial_in: bool) -> None:
        """A per-axis strided slice: token rows from ``start`` with step 1 stay token rows."""
        x, o = t.ins[0], t.outs[0]
        a = _axis(x.shape, mark)
        p = [int(v) for v in t.params]
        if mark is None or a < 0 or len(p) != 3 * len(x.shape):
            self._mixing(t, partial_in)
            return
        start, step = p[3 * a], p[3 * a + 2]
        if step != 1 or start < 0:
            self._mixing(t, partial_in)
            return
        b = _axis(o.shape, _at(o.shape, a, o.shape[a], 0))
        if start == 0 and o.shape[a] == x.shape[a] and b == a:
            # every token row, sliced along other axes (rotate_half's halves): row-wise; on a
            # window the token axis' bounds (0, n) clamp to the sliced view
            t.rows = {"L": self.length, "off": mark[3], "n": mark[1], "axes": [a, a]}
            self.set_mark(o, _at(o.shape, a, mark[1], mark[3]), True)
            return
        if partial_in:
            t.rows = {"L": self.length, "min_row": mark[3] + start}
        self.set_mark(o, _at(o.shape, a, o.shape[a], mark[3] + start), partial_in)

    def _dma(self, t: Task, mark: Mark | None, partial_in: bool) -> None:
        d = t.dma
        assert d is not None
        src, dst = t.ins[0], t.outs[0]
        if mark is None or src.dtype != dst.dtype:
            self._mixing(t, partial_in)
            return
        pm, n, q, off = mark
        bpt = q * src.dtype.itemsize
        contiguous = d.d0 == 1 and (d.d1 == 1 or (d.src_strides[1] == d.row == d.dst_strides[1]))
        total = d.d0 * d.d1 * d.row
        if contiguous and total == src.nbytes == dst.nbytes and d.src_off == 0 and d.dst_off == 0:
            # the whole value: same bytes, same rows
            if pm == 1:
                t.rows = {"L": self.length, "off": off, "n": n, "bpt": bpt}
            self.set_mark(dst, mark, True if t.rows is not None else partial_in)
            return
        if d.d0 == d.d1 == 1 and bpt and d.src_off % bpt == 0 and d.row % bpt == 0 and d.dst_off % bpt == 0:
            # a run of whole rows: a staged MatMul's row tiles in and out of CMX
            f0, fr, g0 = d.src_off // bpt, d.row // bpt, d.dst_off // bpt
            if (pm == 1 and n == self.length and f0 == 0 and fr == n and g0 % n == 0 and dst.nbytes > n * bpt
                    and dst.nbytes % (n * bpt) == 0):
                # one whole [n, Q] block into its slot of several (a Concat of per-head blocks
                # along an outer axis, e.g. the query heads at L=1024): blocks of n token rows
                self.set_mark(dst, (dst.nbytes // (n * bpt), n, q, off), partial_in)
                return
            if pm == 1 and dst.nbytes % bpt == 0:
                t.rows = {"L": self.length, "off": off + f0, "n": fr, "bpt": bpt}
                self.set_mark(dst, (1, dst.nbytes // bpt, q, off + f0 - g0), True)
                return
            if f0 % n == 0 and fr % n == 0 and g0 % n == 0 and dst.nbytes % (n * bpt) == 0:
                self.set_mark(dst, (dst.nbytes // (n * bpt), n, q, off), partial_in)
                return
        if d.d0 == 1 and t.op in ("Concat", "Split", "VariadicSplit"):
            # blocks joined or split along an axis after the token axis: rows keep their rows
            a = _axis(src.shape, mark)
            diff = [i for i, (x, y) in enumerate(zip(src.shape, dst.shape, strict=False)) if x != y]
            if a >= 0 and len(src.shape) == len(dst.shape) and len(diff) <= 1 and all(i > a for i in diff):
                self.set_mark(dst, _at(dst.shape, a, n, off), partial_in)
                return
        self._mixing(t, partial_in)


def prefill_length(ids_shape: Sequence[int] | None, has_state: bool) -> int:
    """L of an LLM prefill (a stateless model fed ``input_ids`` [1, L > 1]), else 0: only such
    a model has token rows to window."""
    if has_state or ids_shape is None or len(ids_shape) != 2 or ids_shape[0] != 1 or ids_shape[1] < 2:
        return 0
    return int(ids_shape[1])


def mark_token_rows(tasks: Sequence[Task], inputs: Sequence[Value], input_names: Iterable[Iterable[str]],
                    has_state: bool) -> int:
    """Set ``Task.rows`` on every task that may run on a window of token rows; returns how many.

    :param inputs: the model's input values by port; ``input_names``: each port's tensor names.
    """
    for t in tasks:
        t.rows = None
    names = [set(n) for n in input_names]
    ids = next((v for v, n in zip(inputs, names, strict=False) if "input_ids" in n), None)
    length = prefill_length(ids.shape if ids is not None else None, has_state)
    if not length:
        return 0
    an = _Analysis(tasks, length)
    for v, n in zip(inputs, names, strict=False):
        if n & set(TOKEN_INPUTS) and v.shape and v.shape[-1] == length:
            an.root_mark[v.root.vid] = (math.prod(v.shape[:-1]), length, 1, 0)
    an.run()
    if an.failure:
        logger.debug("no token-row windows: %s", an.failure)
        for t in tasks:
            t.rows = None
        return 0
    if an.windowed_attention:
        an.demand_rows()
    windowed = sum(1 for t in tasks if t.rows is not None and "min_row" not in t.rows)
    logger.debug("token-row windows: %d of %d tasks (L=%d)", windowed, len(tasks), length)
    return windowed

