"""Lowering of Einsum (maxvit's and other attention blocks write their products so) into tasks the
device has: a ``reduce_sum`` for a label only one operand has and the output lacks, a
``transpose`` per operand to [batch, free, contracted] order, one DPU ``matmul`` per pair of
operands (batch labels collapsed into one batch axis, free and contracted labels into one axis
each), and a final ``transpose`` to the output's label order.  Three or more operands are
contracted left to right, keeping the labels a later operand or the output still needs.
Reshapes between these steps are aliases.  This is the CPU plugin's own decomposition
(EinsumDecomposition: transposes, reshapes and MatMul), so the sums run in the same order.

Refused by name (``UnsupportedOpError``): a label repeated within one operand (a diagonal) and a
shared label whose sizes differ between operands (broadcasting of ellipsis dimensions).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import openvino as ov

from ov_npu_emu.errors import UnsupportedOpError
from ov_npu_emu_npu.blob.kernel_params import MatMulParams, ReduceParams, TransposeParams
from ov_npu_emu_npu.compiler.graph import Value, dims

if TYPE_CHECKING:
    from ov_npu_emu_npu.compiler.lower import Handler, _Lowerer

__all__ = ["HANDLERS", "parse_equation"]

_ELLIPSIS = "0123456789"  # labels for ellipsis dimensions (digits never are einsum labels)


def _refuse(node: ov.Node, why: str) -> UnsupportedOpError:
    return UnsupportedOpError(f"Einsum {node.get_friendly_name()!r}: {why} is not supported on NPU",
                              op_type="Einsum", node_name=node.get_friendly_name())


def parse_equation(equation: str, ranks: list[int]) -> tuple[list[str], str]:
    """The labels of each operand and of the output, one character per dimension; an ellipsis
    becomes digit labels aligned from the right, an implicit output is the labels seen once
    (alphabetical) after the ellipsis dimensions."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ValueError(f"equation {equation!r} has {len(terms)} operands, the node {len(ranks)}")
    ell = max((r - len(t.replace("...", "")) for t, r in zip(terms, ranks, strict=True) if "..." in t), default=0)
    ell_labels = _ELLIPSIS[len(_ELLIPSIS) - ell:] if ell else ""
    out_terms = []
    for t, r in zip(terms, ranks, strict=True):
        n = r - len(t.replace("...", ""))
        out_terms.append(t.replace("...", ell_labels[len(ell_labels) - n:] if n else ""))
    if arrow:
        out = rhs.replace("...", ell_labels)
    else:
        letters = "".join(t.replace("...", "") for t in terms)
        out = ell_labels + "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    return out_terms, out


def _transpose(lw: _Lowerer, v: Value, labels: str, order: str, node: ov.Node) -> Value:
    if labels == order:
        return v
    perm = tuple(labels.index(c) for c in order)
    o = lw.scratch(tuple(v.shape[p] for p in perm), v.dtype)
    lw.shave("transpose", [v], [o], TransposeParams(perm), node)
    return o


def _reduce(lw: _Lowerer, v: Value, labels: str, keep: str, node: ov.Node) -> tuple[Value, str]:
    axes = tuple(i for i, c in enumerate(labels) if c not in keep)
    if not axes:
        return v, labels
    o = lw.scratch(tuple(d for i, d in enumerate(v.shape) if i not in axes), v.dtype)
    lw.shave("reduce_sum", [v], [o], ReduceParams(axes), node)
    return o, "".join(c for c in labels if c in keep)


def op_einsum(lw: _Lowerer, node: ov.Node) -> None:
    vals = [lw.inp(node, i) for i in range(node.get_input_size())]
    terms, out = parse_equation(str(node.get_attributes()["equation"]), [len(v.shape) for v in vals])
    size: dict[str, int] = {}
    for t, v in zip(terms, vals, strict=True):
        if len(set(t)) != len(t):
            raise _refuse(node, f"a label repeated within operand {t!r} (a diagonal)")
        for c, d in zip(t, v.shape, strict=True):
            if size.setdefault(c, d) != d:
                raise _refuse(node, f"label {c!r} of size {size[c]} and {d} (broadcasting)")
    cur, lab = vals[0], terms[0]
    for j in range(len(vals)):
        later = out + "".join(terms[j + 1:])
        if j == 0:
            cur, lab = _reduce(lw, cur, lab, later, node)
            continue
        b, bl = _reduce(lw, vals[j], terms[j], later + lab, node)
        cur, lab = _reduce(lw, cur, lab, later + bl, node)
        batch = "".join(c for c in lab if c in bl and c in later)
        contr = "".join(c for c in lab if c in bl and c not in later)
        fa = "".join(c for c in lab if c not in bl)
        fb = "".join(c for c in bl if c not in lab)
        nb, na, nk, nn = (int(np.prod([size[c] for c in s], dtype=np.int64)) for s in (batch, fa, contr, fb))
        a3 = lw.alias(_transpose(lw, cur, lab, batch + fa + contr, node), (nb, na, nk))
        b3 = lw.alias(_transpose(lw, b, bl, batch + contr + fb, node), (nb, nk, nn))
        o3 = lw.scratch((nb, na, nn), cur.dtype)
        lw.mm(a3, b3, o3, MatMulParams(False, False), node, nb * na * nk * nn)
        lab = batch + fa + fb
        cur = lw.alias(o3, tuple(size[c] for c in lab))
    res = _transpose(lw, cur, lab, out, node)
    lw.vals[(node.get_name(), 0)] = lw.alias(res, dims(node.get_output_shape(0)))


HANDLERS: dict[str, Handler] = {"Einsum": op_einsum}
