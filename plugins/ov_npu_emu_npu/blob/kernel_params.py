"""Typed kernel parameters: one frozen record per DPU/SHAVE kernel, packed as the f64 vector a task
descriptor points at in ``.npu.params``.

The compiler builds records and packs them (:func:`pack_params`); the device unpacks the vector by
kernel name (:func:`unpack_params`) before a kernel reads a field.  A vector that does not fit its
record (wrong length, a non-integral count or index, a flag other than 0/1) raises
:class:`~ov_npu_emu.errors.KernelParamsError` naming the kernel, instead of a kernel computing
with the wrong numbers.  The layout of every record is generated into docs/npu_blob_format.md
(:func:`markdown`; ``python tools/kernel_params_doc.py --write``).

A field is a scalar, a vector whose length is an earlier field (``nd``), or a trailing vector
taking the rest of the parameters (shared equally when there are several, in groups of
``group`` values).  A trailing scalar with a default may be absent (blobs written before it).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, TypeVar

import numpy as np

from ov_npu_emu.errors import KernelParamsError

__all__ = [
    "DOC_BEGIN",
    "DOC_END",
    "KERNEL_PARAMS",
    "AdaptiveMaxParams",
    "AvgPoolParams",
    "AxisParams",
    "ClampParams",
    "ConvParams",
    "CumSumParams",
    "DQ_ACT_BLOCK",
    "DeconvParams",
    "DetectionOutputParams",
    "DivideParams",
    "EluParams",
    "GatherDqParams",
    "GatherParams",
    "GeluParams",
    "KernelParams",
    "LrnParams",
    "MatMulDqParams",
    "MatMulParams",
    "MaxPoolParams",
    "MvnParams",
    "NO_PARAMS",
    "NoParams",
    "NormalizeL2Params",
    "PadParams",
    "ReduceParams",
    "ResampleParams",
    "SdpaKvParams",
    "SdpaParams",
    "SliceParams",
    "SwishParams",
    "TopKParams",
    "TransposeParams",
    "markdown",
    "pack_params",
    "unpack_params",
]

#: ``count`` of a trailing vector that takes the remaining parameters
REST = "*"
_KIND_NAMES = {"i": "int", "f": "float", "b": "flag"}

P = TypeVar("P", bound="KernelParams")


def _field(kind: str, doc: str, *, count: str | None = None, group: int = 1, default: Any = dataclasses.MISSING
           ) -> Any:
    """A record field: ``kind`` i (integer) / f (float) / b (flag 0 or 1); ``count`` makes it a vector."""
    return dataclasses.field(default=default, metadata={"kind": kind, "count": count, "group": group, "doc": doc})


def _int(doc: str, **kw: Any) -> Any:
    return _field("i", doc, **kw)


def _float(doc: str, **kw: Any) -> Any:
    return _field("f", doc, **kw)


def _flag(doc: str, **kw: Any) -> Any:
    return _field("b", doc, **kw)


def _ints(doc: str, count: str, group: int = 1) -> Any:
    return _field("i", doc, count=count, group=group)


def _flags(doc: str, count: str) -> Any:
    return _field("b", doc, count=count)


def _scalar(kind: str, v: Any) -> Any:
    return int(v) if kind == "i" else bool(v) if kind == "b" else float(v)


@dataclasses.dataclass(frozen=True)
class KernelParams:
    """Base of the records; a subclass lists the kernels it serves and the engine they run on."""

    KERNELS: ClassVar[tuple[str, ...]] = ()
    ENGINE: ClassVar[str] = "SHAVE"
    #: per class, set by _specs(): its fields' (name, kind, count, group)
    _SPECS: ClassVar[tuple[tuple[str, str, Any, int], ...] | None] = None

    @classmethod
    def _specs(cls) -> tuple[tuple[str, str, Any, int], ...]:
        """(name, kind, count, group) per field, read once per class: the compiler and the
        command-list build make thousands of records for a large prefill."""
        specs = cls.__dict__.get("_SPECS")
        if specs is None:
            specs = tuple((f.name, f.metadata["kind"], f.metadata["count"], f.metadata["group"])
                          for f in dataclasses.fields(cls))
            cls._SPECS = specs
        return specs

    def __post_init__(self) -> None:
        # normalise (numpy scalars, lists) so equal records compare and hash equal, then check the
        # vector lengths the layout implies: a bad record fails where the compiler builds it
        specs = self._specs()
        for name, kind, count, group in specs:
            v = getattr(self, name)
            if count is None:
                v = _scalar(kind, v)
            elif group > 1:
                v = tuple(tuple(_scalar(kind, x) for x in item) for item in v)
                if any(len(item) != group for item in v):
                    raise self._error(f"{name} must hold groups of {group} values")
            else:
                v = tuple(_scalar(kind, x) for x in v)
            object.__setattr__(self, name, v)
        rest_lengths = set()
        for name, _kind, count, _group in specs:
            n = len(getattr(self, name)) if count is not None else None
            if count == REST:
                rest_lengths.add(n)
            elif count is not None and n != getattr(self, count):
                raise self._error(f"{name} has {n} values, {count} is {getattr(self, count)}")
        if len(rest_lengths) > 1:
            raise self._error("its trailing vectors differ in length")

    @classmethod
    def _error(cls, what: str, kernel: str | None = None) -> KernelParamsError:
        name = kernel or "/".join(cls.KERNELS)
        return KernelParamsError(
            f"kernel {name!r}: {what}; its parameters are ({cls.layout()}). A blob whose parameters do not fit "
            "is corrupt or from another compiler version: recompile the model", kernel=name)

    @classmethod
    def layout(cls) -> str:
        """The packed order, e.g. ``groups, nd, strides[nd], ...``."""
        parts = []
        for f in dataclasses.fields(cls):
            count, group = f.metadata["count"], f.metadata["group"]
            if count is None:
                parts.append(f.name if f.default is dataclasses.MISSING else f"[{f.name}]")
            else:
                parts.append(f"{f.name}[{count if group == 1 else f'{count}×{group}'}]")
        return ", ".join(parts)

    def pack(self) -> tuple[float, ...]:
        """The f64 values the descriptor's parameter block holds, in field order."""
        out: list[float] = []
        for name, _kind, count, group in self._specs():
            v = getattr(self, name)
            if count is None:
                out.append(float(v))
            elif group > 1:
                out.extend(float(x) for item in v for x in item)
            else:
                out.extend(float(x) for x in v)
        return tuple(out)

    @classmethod
    def unpack(cls: type[P], values: Sequence[float] | np.ndarray, kernel: str | None = None) -> P:
        """The record a parameter block holds; KernelParamsError (naming ``kernel``) when it does not fit."""
        vals = np.asarray(values, dtype=np.float64).reshape(-1).tolist()
        fields = dataclasses.fields(cls)
        kw: dict[str, Any] = {}
        pos = 0
        rest = [f for f in fields if f.metadata["count"] == REST]
        rest_n: int | None = None
        for f in fields:
            kind, count, group = f.metadata["kind"], f.metadata["count"], f.metadata["group"]
            if count is None:
                if pos == len(vals) and f.default is not dataclasses.MISSING:
                    kw[f.name] = f.default
                    continue
                if pos == len(vals):
                    raise cls._error(f"{len(vals)} parameters end before {f.name}", kernel)
                kw[f.name] = cls._value(kind, vals[pos], f.name, kernel)
                pos += 1
                continue
            if count == REST:
                if rest_n is None:  # the trailing vectors share what is left equally
                    left = len(vals) - pos
                    if left % (len(rest) * group):
                        raise cls._error(f"{left} trailing parameters do not split into {len(rest)} vector(s) "
                                         f"of {group}-value groups", kernel)
                    rest_n = left // len(rest) // group
                n = rest_n
            else:
                n = kw[count]
                if n < 0 or pos + n * group > len(vals):
                    raise cls._error(f"{count}={n} runs past the {len(vals)} parameters", kernel)
            items = [cls._value(kind, x, f.name, kernel) for x in vals[pos:pos + n * group]]
            pos += n * group
            kw[f.name] = tuple(items) if group == 1 else tuple(
                tuple(items[i:i + group]) for i in range(0, len(items), group))
        if pos != len(vals):
            raise cls._error(f"{len(vals)} parameters where the record takes {pos}", kernel)
        return cls(**kw)

    @classmethod
    def _value(cls, kind: str, x: float, name: str, kernel: str | None) -> Any:
        if kind == "f":
            return x
        if kind == "b":
            if x not in (0.0, 1.0):
                raise cls._error(f"{name} is {x!r}, not a flag (0 or 1)", kernel)
            return x == 1.0
        if not math.isfinite(x) or x != int(x):
            raise cls._error(f"{name} is {x!r}, not an integer", kernel)
        return int(x)


@dataclasses.dataclass(frozen=True)
class NoParams(KernelParams):
    """Kernels configured by their operands alone."""

    KERNELS = (
        # binary element-wise (numpy broadcasting of the two inputs)
        "add", "subtract", "multiply", "power", "maximum", "minimum", "squared_difference",
        "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
        "logical_and", "logical_or", "logical_xor", "floor_mod", "mod", "bitwise_and", "bitwise_or", "bitwise_xor",
        # unary element-wise
        "relu", "sigmoid", "tanh", "exp", "log", "sqrt", "negative", "abs", "sin", "cos", "erf", "floor",
        "ceiling", "logical_not", "softplus", "hswish", "hsigmoid", "sign", "mish", "tan", "atan", "bitwise_not",
        "round_even",
        # the rest
        "convert", "select", "prelu", "broadcast", "take", "scatter_nd",
    )


#: the (only) NoParams record
NO_PARAMS = NoParams()


@dataclasses.dataclass(frozen=True)
class DivideParams(KernelParams):
    KERNELS = ("divide",)
    python_division: bool = _flag("integer division floors (Divide's m_pythondiv) instead of truncating")


@dataclasses.dataclass(frozen=True)
class GeluParams(KernelParams):
    KERNELS = ("gelu",)
    tanh_approximation: bool = _flag("approximation_mode TANH (0: ERF)")


@dataclasses.dataclass(frozen=True)
class SwishParams(KernelParams):
    KERNELS = ("swish",)
    beta: float = _float("x · sigmoid(beta · x)")


@dataclasses.dataclass(frozen=True)
class ClampParams(KernelParams):
    KERNELS = ("clamp",)
    min_value: float = _float("lower bound (integer outputs: rounded up)")
    max_value: float = _float("upper bound (integer outputs: rounded down)")


@dataclasses.dataclass(frozen=True)
class EluParams(KernelParams):
    KERNELS = ("elu",)
    alpha: float = _float("alpha · (exp(x) - 1) for x <= 0")


@dataclasses.dataclass(frozen=True)
class AxisParams(KernelParams):
    KERNELS = ("softmax", "log_softmax", "gather_elements", "scatter_elements", "scatter_update")
    axis: int = _int("the axis, normalised to 0..rank-1")


@dataclasses.dataclass(frozen=True)
class ReduceParams(KernelParams):
    KERNELS = ("reduce_mean", "reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_l2")
    axes: tuple[int, ...] = _ints("reduced axes, sorted, 0..rank-1", REST)


@dataclasses.dataclass(frozen=True)
class MvnParams(KernelParams):
    KERNELS = ("mvn",)
    normalize_variance: bool = _flag("divide by the standard deviation")
    eps: float = _float("epsilon")
    eps_inside_sqrt: bool = _flag("eps_mode INSIDE_SQRT (0: OUTSIDE_SQRT)")
    axes: tuple[int, ...] = _ints("normalised axes, sorted", REST)


@dataclasses.dataclass(frozen=True)
class NormalizeL2Params(KernelParams):
    KERNELS = ("normalize_l2",)
    eps: float = _float("epsilon")
    eps_add: bool = _flag("eps_mode ADD: sqrt(sum + eps) (0: MAX, sqrt(max(sum, eps)))")
    axes: tuple[int, ...] = _ints("axes summed over, sorted", REST)


@dataclasses.dataclass(frozen=True)
class LrnParams(KernelParams):
    KERNELS = ("lrn",)
    alpha: float = _float("scale of the windowed sum of squares (divided by size^len(axes))")
    beta: float = _float("exponent")
    bias: float = _float("added before the exponent")
    size: int = _int("window length along each axis")
    axes: tuple[int, ...] = _ints("axes the window spans, sorted", REST)


@dataclasses.dataclass(frozen=True)
class CumSumParams(KernelParams):
    KERNELS = ("cumsum",)
    axis: int = _int("the axis, 0..rank-1")
    exclusive: bool = _flag("exclude the current element")
    reverse: bool = _flag("sum from the end")


@dataclasses.dataclass(frozen=True)
class TransposeParams(KernelParams):
    KERNELS = ("transpose",)
    perm: tuple[int, ...] = _ints("output axis i is input axis perm[i]", REST)


@dataclasses.dataclass(frozen=True)
class SliceParams(KernelParams):
    KERNELS = ("slice",)
    bounds: tuple[tuple[int, int, int], ...] = _ints(
        "(start, stop, step) per input axis; stop SLICE_NONE (-2^31): to the end", REST, group=3)


@dataclasses.dataclass(frozen=True)
class GatherParams(KernelParams):
    KERNELS = ("gather",)
    axis: int = _int("gathered axis of the data, 0..rank-1")
    batch_dims: int = _int("leading dims shared by data and indices")


@dataclasses.dataclass(frozen=True)
class TopKParams(KernelParams):
    KERNELS = ("topk",)
    axis: int = _int("the axis, 0..rank-1")
    k: int = _int("values kept")
    largest: bool = _flag("mode max (0: min)")
    sort_by_index: bool = _flag("sort index (0: by value; ties keep the lower index)")


@dataclasses.dataclass(frozen=True)
class PadParams(KernelParams):
    KERNELS = ("pad",)
    mode: int = _int("0 constant, 1 edge, 2 reflect, 3 symmetric")
    value: float = _float("the constant mode's fill value")
    pads_begin: tuple[int, ...] = _ints("per axis", REST)
    pads_end: tuple[int, ...] = _ints("per axis", REST)


@dataclasses.dataclass(frozen=True)
class MatMulParams(KernelParams):
    KERNELS = ("matmul", "matmul_acc")  # matmul_acc adds into its output (K-split chunks)
    ENGINE = "DPU"
    transpose_a: bool = _flag("transpose the last two dims of the activation")
    transpose_b: bool = _flag("transpose the last two dims of the weight")


#: the activation block NPU_COMPILER_DYNAMIC_QUANTIZATION compiles (``MatMulDqParams.act_block``):
#: 32 columns per int8 scale, the CPU plugin's default DYNAMIC_QUANTIZATION_GROUP_SIZE too
DQ_ACT_BLOCK = 32


@dataclasses.dataclass(frozen=True)
class MatMulDqParams(KernelParams):
    KERNELS = ("matmul_dq",)
    ENGINE = "DPU"
    transpose_a: bool = _flag("transpose the activation")
    transpose_b: bool = _flag("the weight is [N, K] with K contracted (0: [N, K] with N contracted)")
    weight_format: int = _int("WEIGHT_FORMATS code: 1 u8, 2 i8, 3 u4, 4 i4, 5 f16")
    has_zero_point: bool = _flag("a zero-point operand follows the scale")
    f16_rounding: bool = _flag("round (q - zp)·scale to f16 (0: decompress in f32)")
    n: int = _int("weight rows N")
    k: int = _int("weight columns K")
    act_block: int = _int("NPU_COMPILER_DYNAMIC_QUANTIZATION: each activation row quantized to int8 per block "
                          "of this many columns, symmetric (0: float activations)", default=0)


@dataclasses.dataclass(frozen=True)
class GatherDqParams(KernelParams):
    KERNELS = ("gather_dq",)
    weight_format: int = _int("WEIGHT_FORMATS code")
    has_zero_point: bool = _flag("a zero-point operand follows the scale")
    f16_rounding: bool = _flag("round (q - zp)·scale to f16")
    n: int = _int("table rows N")
    k: int = _int("row length K")


@dataclasses.dataclass(frozen=True)
class ConvParams(KernelParams):
    KERNELS = ("conv",)
    ENGINE = "DPU"
    groups: int = _int("1, or the group count of GroupConvolution")
    nd: int = _int("spatial dims")
    strides: tuple[int, ...] = _ints("per spatial dim", "nd")
    dilations: tuple[int, ...] = _ints("per spatial dim", "nd")
    pads_begin: tuple[int, ...] = _ints("auto_pad resolved", "nd")
    pads_end: tuple[int, ...] = _ints("auto_pad resolved", "nd")


@dataclasses.dataclass(frozen=True)
class DeconvParams(KernelParams):
    """(Group)ConvolutionBackpropData: the weight is [groups, C_in/groups, C_out/groups, kernel...]."""

    KERNELS = ("deconv",)
    ENGINE = "DPU"
    groups: int = _int("1, or the group count of GroupConvolutionBackpropData")
    nd: int = _int("spatial dims")
    strides: tuple[int, ...] = _ints("per spatial dim", "nd")
    dilations: tuple[int, ...] = _ints("per spatial dim", "nd")
    pads_begin: tuple[int, ...] = _ints("output positions cropped at the start (auto_pad resolved)", "nd")


@dataclasses.dataclass(frozen=True)
class MaxPoolParams(KernelParams):
    KERNELS = ("maxpool",)
    nd: int = _int("spatial dims")
    kernel: tuple[int, ...] = _ints("window size", "nd")
    strides: tuple[int, ...] = _ints("per spatial dim", "nd")
    dilations: tuple[int, ...] = _ints("per spatial dim", "nd")
    pads_begin: tuple[int, ...] = _ints("auto_pad resolved", "nd")
    pads_end: tuple[int, ...] = _ints("with the ceil rounding's overhang", "nd")


@dataclasses.dataclass(frozen=True)
class AvgPoolParams(KernelParams):
    KERNELS = ("avgpool",)
    nd: int = _int("spatial dims")
    kernel: tuple[int, ...] = _ints("window size", "nd")
    strides: tuple[int, ...] = _ints("per spatial dim", "nd")
    dilations: tuple[int, ...] = _ints("per spatial dim", "nd")
    pads_begin: tuple[int, ...] = _ints("auto_pad resolved", "nd")
    pads_end: tuple[int, ...] = _ints("with the ceil rounding's overhang", "nd")
    exclude_pad: bool = _flag("average over real elements only")
    node_pads_end: tuple[int, ...] = _ints("the node's own end pads (counted unless exclude_pad)", "nd")


@dataclasses.dataclass(frozen=True)
class ResampleParams(KernelParams):
    """Interpolate and AdaptiveAvgPool: one linear map per axis, applied axis after axis."""

    KERNELS = ("resample",)
    axes: tuple[int, ...] = _ints("resampled axes in the order applied; operand 1+i is axis i's table", REST)
    gather: tuple[bool, ...] = _flags("table i is an index vector [out] (a copy: nearest) instead of a "
                                      "weight matrix [out, in]", REST)


@dataclasses.dataclass(frozen=True)
class AdaptiveMaxParams(KernelParams):
    KERNELS = ("adaptive_max",)
    axes: tuple[int, ...] = _ints("pooled axes; operand 1+i is axis i's [out, 2] table of (start, end) bins",
                                  REST)


@dataclasses.dataclass(frozen=True)
class DetectionOutputParams(KernelParams):
    """DetectionOutput (SSD): decode boxes, per-class top-k and NMS, keep_top-k over classes."""

    KERNELS = ("detection_output",)
    num_classes: int = _int("classes including the background")
    background_label_id: int = _int("class skipped (-1: none)")
    top_k: int = _int("boxes per class entering NMS (-1: all)")
    keep_top_k: int = _int("boxes per image kept after NMS (-1: all)")
    center_size: bool = _flag("code_type CENTER_SIZE (0: CORNER)")
    share_location: bool = _flag("one box per prior for all classes")
    variance_encoded_in_target: bool = _flag("the deltas are already scaled by the variances")
    nms_threshold: float = _float("IoU above which a box is suppressed")
    confidence_threshold: float = _float("scores at or below it are dropped")
    clip_after_nms: bool = _flag("clip output boxes to [0, 1]")
    clip_before_nms: bool = _flag("clip decoded boxes to [0, 1] before NMS")
    decrease_label_id: bool = _flag("MXNet style: one best class per prior, labels shifted down by one")
    normalized: bool = _flag("priors are in [0, 1] (0: pixels, 5 values per prior)")
    input_height: int = _int("image height dividing pixel priors")
    input_width: int = _int("image width dividing pixel priors")


@dataclasses.dataclass(frozen=True)
class SdpaParams(KernelParams):
    KERNELS = ("sdpa",)
    causal: bool = _flag("causal mask")
    has_mask: bool = _flag("a mask operand follows v")
    scale: float = _float("0: 1/sqrt(D)")
    kv_groups: int = _int("query heads per K/V head (grouped-query attention; absent in blobs before it: 1)",
                          default=1)


@dataclasses.dataclass(frozen=True)
class SdpaKvParams(KernelParams):
    """Attention over a past KV stored as f16, joined with the new rows by the kernel (the
    compiler's fuse_kv pass: operands q, past K, past V, the new K and V rows stacked, mask)."""

    KERNELS = ("sdpa_kv",)
    causal: bool = _flag("causal mask")
    has_mask: bool = _flag("a mask operand follows the new K/V rows")
    scale: float = _float("0: 1/sqrt(D)")
    kv_groups: int = _int("query heads per K/V head (grouped-query attention; 1 = plain)")
    past_len: int = _int("rows of the past K/V (the joined K/V has past_len + the new rows)")


def _records() -> Iterator[type[KernelParams]]:
    stack = list(KernelParams.__subclasses__())
    while stack:
        cls = stack.pop(0)
        stack.extend(cls.__subclasses__())
        yield cls


#: kernel name -> its parameter record
KERNEL_PARAMS: dict[str, type[KernelParams]] = {k: cls for cls in _records() for k in cls.KERNELS}


def _record(kernel: str) -> type[KernelParams]:
    cls = KERNEL_PARAMS.get(kernel)
    if cls is None:
        raise KernelParamsError(f"kernel {kernel!r} has no parameter record; add one in "
                                "plugins/ov_npu_emu_npu/blob/kernel_params.py", kernel=kernel)
    return cls


def pack_params(kernel: str, params: KernelParams) -> tuple[float, ...]:
    """The f64 parameter block of a task running ``kernel``; the record must be that kernel's."""
    cls = _record(kernel)
    if type(params) is not cls:
        raise KernelParamsError(f"kernel {kernel!r} takes {cls.__name__}, not {type(params).__name__}",
                                kernel=kernel)
    return params.pack()


def unpack_params(kernel: str, values: Sequence[float] | np.ndarray | KernelParams) -> KernelParams:
    """The record of ``kernel`` from its parameter block (a record passes through, type-checked)."""
    cls = _record(kernel)
    if isinstance(values, KernelParams):
        pack_params(kernel, values)
        return values
    return cls.unpack(values, kernel)


#: the generated table sits between these lines of docs/npu_blob_format.md
DOC_BEGIN = "<!-- kernel-params:begin -->"
DOC_END = "<!-- kernel-params:end -->"


def markdown() -> str:
    """The kernel parameter table of docs/npu_blob_format.md, generated from the records."""
    rows = ["| kernels | engine | record | params (f64, in order) |", "|---|---|---|---|"]
    for cls in sorted(_records(), key=lambda c: (c is not NoParams, c.KERNELS[0])):
        names = ", ".join(f"`{k}`" for k in cls.KERNELS)
        fields = []
        for f in dataclasses.fields(cls):
            count, group = f.metadata["count"], f.metadata["group"]
            shape = "" if count is None else f"[{count if group == 1 else f'{count}×{group}'}]"
            opt = f" (optional, default {f.default})" if f.default is not dataclasses.MISSING else ""
            fields.append(f"`{f.name}{shape}` {_KIND_NAMES[f.metadata['kind']]}: {f.metadata['doc']}{opt}")
        rows.append(f"| {names} | {cls.ENGINE} | `{cls.__name__}` | {'; '.join(fields) or 'none'} |")
    return "\n".join(rows)
