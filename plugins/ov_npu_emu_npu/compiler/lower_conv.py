"""Lowering of Convolution / GroupConvolution (DPU, output channels tiled through CMX) and pooling."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import openvino as ov

from ov_npu_emu.errors import UnsupportedOpError
from ov_npu_emu_npu.blob.kernel_params import AvgPoolParams, ConvParams, DeconvParams, MaxPoolParams
from ov_npu_emu_npu.compiler.graph import Place, dims

if TYPE_CHECKING:
    from ov_npu_emu_npu.compiler.lower import Handler, _Lowerer

__all__ = ["HANDLERS"]


def _conv_pads(
    node: ov.Node, x_shape: tuple[int, ...], kshape: tuple[int, ...], strides: list[int], dil: list[int]
) -> tuple[list[int], list[int]]:
    """(pads_begin, pads_end) with auto_pad resolved."""
    at = node.get_attributes()
    pb, pe = (
        [int(p) for p in at.get("pads_begin", [0] * len(kshape))],
        [int(p) for p in at.get("pads_end", [0] * len(kshape))],
    )
    auto = str(at.get("auto_pad", "explicit")).lower()
    if auto == "valid":
        return [0] * len(kshape), [0] * len(kshape)
    if auto in ("same_upper", "same_lower"):
        pb, pe = [], []
        for d, k, s, dl in zip(x_shape[2:], kshape, strides, dil, strict=False):
            out = -(-d // s)
            total = max(0, (out - 1) * s + (k - 1) * dl + 1 - d)
            lo = total // 2 if auto == "same_upper" else total - total // 2
            pb.append(lo)
            pe.append(total - lo)
    return pb, pe


def op_conv(lw: _Lowerer, node: ov.Node) -> None:
    x, w = lw.inp(node, 0), lw.inp(node, 1)
    at = node.get_attributes()
    group = node.get_type_name() == "GroupConvolution"
    kshape = w.shape[3:] if group else w.shape[2:]
    nd = len(kshape)
    strides, dil = [int(s) for s in at["strides"]], [int(d) for d in at["dilations"]]
    pb, pe = _conv_pads(node, x.shape, kshape, strides, dil)
    groups = w.shape[0] if group else 1
    o = lw.node_out(node)
    macs = int(np.prod(o.shape)) * int(np.prod(w.shape)) // max(w.shape[0] * (w.shape[1] if group else 1), 1)
    params = ConvParams(groups, nd, tuple(strides), tuple(dil), tuple(pb), tuple(pe))
    lw.vals[(node.get_name(), 0)] = o
    half = lw.hw.cmx_size // 2
    per_channel = o.nbytes // max(o.shape[1], 1)
    if not (
        lw.stage
        and not group
        and o.shape[0] == 1
        and w.root.place is Place.CONST
        and w.alias is None
        and x.dtype == o.dtype
        and x.nbytes + per_channel <= half
    ):
        lw.dpu("conv", [x, w], [o], params, node, macs)
        return
    # input resident in CMX; output channels tiled so each tile's result fits beside it
    cx = lw.new_value(x.shape, x.dtype, Place.CMX)
    lw.dma(x, 0, cx, 0, 1, 1, x.nbytes, (0, 0), (0, 0), node)
    tile = max(1, (half - x.nbytes) // per_channel)
    assert w.data is not None  # CONST
    for c0 in range(0, o.shape[1], tile):
        c = min(tile, o.shape[1] - c0)
        wt = lw.new_value((c, *w.shape[1:]), w.dtype, Place.CONST, data=w.data[c0 : c0 + c])
        co = lw.new_value((1, c, *o.shape[2:]), o.dtype, Place.CMX)
        lw.dpu("conv", [cx, wt], [co], params, node, macs * c // o.shape[1])
        lw.dma(co, 0, o, c0 * per_channel, 1, 1, co.nbytes, (0, 0), (0, 0), node)


def op_pool(lw: _Lowerer, node: ov.Node) -> None:
    x = lw.inp(node, 0)
    at = node.get_attributes()
    t = node.get_type_name()
    kshape = [int(k) for k in at["kernel"]]
    strides = [int(s) for s in at["strides"]]
    dil = [int(d) for d in at.get("dilations", [1] * len(kshape))]
    pb, pe = _conv_pads(node, x.shape, tuple(kshape), strides, dil)
    o = lw.node_out(node)
    # ceil rounding: pad the end so the kernel's sliding window yields the node's output size
    for i, d in enumerate(x.shape[2:]):
        need = (o.shape[2 + i] - 1) * strides[i] + (kshape[i] - 1) * dil[i] + 1 - (d + pb[i] + pe[i])
        pe[i] += max(0, need)
    vecs = (tuple(kshape), tuple(strides), tuple(dil), tuple(pb), tuple(pe))
    if t == "MaxPool":
        if node.get_output_size() > 1 and node.output(1).get_target_inputs():
            raise UnsupportedOpError(
                "MaxPool indices output is not supported", op_type=t, node_name=node.get_friendly_name()
            )
        lw.shave("maxpool", [x], [o], MaxPoolParams(len(kshape), *vecs), node)
    else:
        excl = bool(at.get("exclude-pad", at.get("exclude_pad", False)))
        node_pe = _conv_pads(node, x.shape, tuple(kshape), strides, dil)[1]
        lw.shave("avgpool", [x], [o], AvgPoolParams(len(kshape), *vecs, excl, tuple(node_pe)), node)
    lw.vals[(node.get_name(), 0)] = o


def op_deconv(lw: _Lowerer, node: ov.Node) -> None:
    """(Group)ConvolutionBackpropData on the DPU: the uncropped transposed convolution, cropped by
    the start padding (pads_begin, 0 for valid, or the same_* split of what the output shape
    leaves)."""
    x, w = lw.inp(node, 0), lw.inp(node, 1)
    at = node.get_attributes()
    group = node.get_type_name() == "GroupConvolutionBackpropData"
    wshape = w.shape if group else (1, *w.shape)
    nd = len(wshape) - 3
    strides, dil = [int(v) for v in at["strides"]], [int(v) for v in at["dilations"]]
    out = dims(node.get_output_shape(0))
    auto = str(at.get("auto_pad", "explicit")).lower()
    uncropped = [(i - 1) * s + (k - 1) * d + 1 + int(p) for i, s, k, d, p in
                 zip(x.shape[2:], strides, wshape[3:], dil, at.get("output_padding") or [0] * nd, strict=True)]
    total = [max(0, u - m) for u, m in zip(uncropped, out[2:], strict=True)]
    # the split of the cropped total as the CPU plugin makes it (measured with an output_shape
    # input: same_upper crops more at the start; without one same_* keep the whole, total 0)
    more_first = auto == "same_upper"
    if auto == "valid":
        pb = [0] * nd
    elif auto in ("same_upper", "same_lower"):
        pb = [t - t // 2 if more_first else t // 2 for t in total]
    else:
        pb = [int(v) for v in at["pads_begin"]]
    o = lw.node_out(node)
    macs = int(np.prod(x.shape, dtype=np.int64)) * int(np.prod(wshape[2:], dtype=np.int64))
    lw.dpu("deconv", [x, lw.alias(w, wshape)], [o], DeconvParams(wshape[0], nd, tuple(strides), tuple(dil), tuple(pb)),
           node, macs)
    lw.vals[(node.get_name(), 0)] = o


HANDLERS: dict[str, Handler] = {
    "Convolution": op_conv,
    "GroupConvolution": op_conv,
    "MaxPool": op_pool,
    "AvgPool": op_pool,
    "ConvolutionBackpropData": op_deconv,
    "GroupConvolutionBackpropData": op_deconv,
}
