"""The compiler's task graph: tensor values placed in memory and tasks on engines."""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
from typing import Any

import numpy as np
import openvino as ov

from ov_npu_emu_npu.blob.format import TaskKind

__all__ = ["DmaSpec", "Packed", "Place", "Task", "Value", "dims", "np_dtype"]


def dims(shape: ov.Shape) -> tuple[int, ...]:
    """An openvino Shape as a tuple of ints, by index: iterating one ends in an IndexError that
    pybind raises and catches per shape, which made the conversion a visible part of a large
    model's compile (docs/performance_log.md, "Load work")."""
    return tuple(map(shape.__getitem__, range(len(shape))))


def np_dtype(t: ov.Type) -> np.dtype:
    """The numpy dtype of an OpenVINO element type (boolean included)."""
    if t == ov.Type.boolean:
        return np.dtype(np.bool_)
    return np.dtype(t.to_dtype())


class Place(enum.Enum):
    """Where a value's bytes live."""

    CONST = "weights"  # .npu.weights
    INPUT = "input"  # a user input tensor (relocated per inference)
    OUTPUT = "output"  # a user output tensor (relocated per inference)
    SCRATCH = "scratch"  # DDR activations (.npu.scratch)
    CMX = "cmx"  # on-chip scratchpad (.npu.cmx)


@dataclasses.dataclass(eq=False)
class Value:
    """A tensor; aliases (Reshape/Squeeze/...) share their root's bytes under another shape."""

    vid: int  # unique id
    shape: tuple[int, ...]  # static shape
    dtype: np.dtype  # element type
    place: Place  # memory region
    port: int = -1  # port index for INPUT/OUTPUT
    data: np.ndarray | None = None  # contents for CONST
    alias: Value | None = None  # root value when this is a view of another
    offset: int = -1  # byte offset in its region (memory planner; weights by the emitter)
    producers: list[int] = dataclasses.field(default_factory=list)  # task ids writing it
    readers: list[int] = dataclasses.field(default_factory=list)  # task ids reading it
    #: a compressed weight: the f32 value exists only inside matmul_dq / gather_dq, which read
    #: (q, scale[, zero point]) values listed here; the value itself is never placed
    comp: Packed | None = None
    #: a CMX slot rewritten tile by tile (compiler/tiling.py): ordered by its write/read history
    #: (a read waits for the latest write, a write for the readers of the previous contents)
    slot: bool = False

    @functools.cached_property
    def nbytes(self) -> int:  # a value's shape and type never change once it exists
        return math.prod(self.shape) * self.dtype.itemsize

    @property
    def root(self) -> Value:
        return self.alias if self.alias is not None else self


@dataclasses.dataclass(eq=False)
class Packed:
    """How a compressed weight value is stored: its operands and decompression parameters."""

    fmt: str  # u8 | i8 | u4 | i4 | f16 (WEIGHT_FORMATS)
    operands: list[Value]  # q, then scale and zero point when present (CONST values)
    has_zp: bool
    mul_f16: bool  # scale multiply rounds to f16
    info: dict[str, object]  # metadata record


@dataclasses.dataclass
class DmaSpec:
    """A 3-D strided copy: d0 x d1 rows of ``row`` bytes."""

    src: Value
    src_off: int  # bytes added to the source address
    dst: Value
    dst_off: int
    d0: int
    d1: int
    row: int
    src_strides: tuple[int, int]
    dst_strides: tuple[int, int]


@dataclasses.dataclass(eq=False)
class Task:
    """One unit of work on one engine."""

    tid: int  # index in the global (topological) task order
    kind: TaskKind
    kernel: str  # kernel-table name (DPU/SHAVE); "dma" for DMA
    ins: list[Value]
    outs: list[Value]
    params: list[float]  # kernel parameters (f64)
    node: str  # source node friendly name (for errors and profiling)
    op: str  # source op type
    dma: DmaSpec | None = None
    cycles: int = 0  # cost-model estimate
    lane: int = 0  # engine lane (DMA channel / DPU / SHAVE)
    deps: set[int] = dataclasses.field(default_factory=set)  # task ids that must finish first
    #: token-row metadata when the task may run on a window of rows (compiler/tokens.py)
    rows: dict[str, Any] | None = None
