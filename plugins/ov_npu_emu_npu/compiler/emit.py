"""Emission: tasks, barriers, memory plan and metadata -> ELF sections and relocations."""

from __future__ import annotations

import logging
import struct
from typing import Any

import numpy as np

from ov_npu_emu.errors import CompileError
from ov_npu_emu_npu.arch import DTYPE_CODES
from ov_npu_emu_npu.blob.format import (
    BARRIER,
    BLOB_VERSION,
    DMA_DESC,
    DMA_DST_OFFSET,
    DMA_SRC_OFFSET,
    ELFOSABI_NPU_EMU,
    EM_NPU_EMU,
    KERNEL_ENTRY,
    MAX_DIMS,
    MAX_OPERANDS,
    OPERAND,
    R_NPU_64,
    SEC_BARRIER_LISTS,
    SEC_BARRIERS,
    SEC_CMX,
    SEC_DMA,
    SEC_DPU,
    SEC_KERNELS,
    SEC_META,
    SEC_PARAMS,
    SEC_SCRATCH,
    SEC_SHAVE,
    SEC_WEIGHTS,
    TASK_HEAD,
    VPU_SHF_USERINPUT,
    VPU_SHF_USEROUTPUT,
    TaskKind,
    operand_addr_offset,
    rela_name,
)
from ov_npu_emu_npu.blob.kernel_params import MatMulDqParams
from ov_npu_emu_npu.blob.reader import SplitBlob, pack_meta
from ov_npu_emu_npu.blob.writer import BlobWriter, RelocEntry, Symbol
from ov_npu_emu_npu.compiler.graph import Place, Value
from ov_npu_emu_npu.compiler.lower import Lowered
from ov_npu_emu_npu.compiler.memory import MemoryPlan
from ov_npu_emu_npu.compiler.schedule import Schedule

__all__ = ["emit_blob", "in_symbol", "out_symbol"]

logger = logging.getLogger(__name__)

_PLACE_SECTION = {Place.CONST: SEC_WEIGHTS, Place.SCRATCH: SEC_SCRATCH, Place.CMX: SEC_CMX}
#: the unused dimension slots of an operand descriptor
_ZEROS = (0,) * MAX_DIMS


def in_symbol(port: int) -> str:
    return f"in.{port}"


def out_symbol(port: int) -> str:
    return f"out.{port}"


class _Relocs:
    """Collects static / user-input / user-output relocations per target section."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], list[RelocEntry]] = {}

    def add(self, target: str, offset: int, value: Value, extra: int = 0) -> None:
        root = value.alias if value.alias is not None else value
        place = root.place
        if place is Place.INPUT:
            key, sym, addend = (target, "userin"), in_symbol(root.port), extra
        elif place is Place.OUTPUT:
            key, sym, addend = (target, "userout"), out_symbol(root.port), extra
        else:
            if root.offset < 0:
                raise CompileError(f"value {root.vid} has no address", stage="reloc")
            key, sym, addend = (target, ""), _PLACE_SECTION[place], root.offset + extra
        entries = self.entries.get(key)
        if entries is None:
            entries = self.entries[key] = []
        entries.append(RelocEntry(offset, sym, R_NPU_64, addend))

    def raw(self, target: str, offset: int, section: str, addend: int) -> None:
        self.entries.setdefault((target, ""), []).append(RelocEntry(offset, section, R_NPU_64, addend))


def _dtype_code(dtype: np.dtype) -> int:
    code = DTYPE_CODES.get(np.dtype(dtype))
    if code is None:
        raise CompileError(f"element type {dtype} has no NPU code", stage="emit")
    return code


def _decompressed_bytes(lw: Lowered) -> int:
    """The f32 bytes of every weight a matmul_dq task reads compressed, each weight once: what
    the driver's decompressed-weights cache would hold for this blob (it caches only when all
    of it fits its budget, hpi.py)."""
    weights: dict[int, int] = {}
    for t in lw.tasks:
        # row tiles of one MatMul read one weight: its parameters are read once (a large prefill
        # has thousands of tiles over a few hundred weights; docs/performance.md, "Large models
        # on the emulated NPU")
        if t.kernel == "matmul_dq" and id(t.ins[1].root) not in weights:
            p = MatMulDqParams.unpack(np.asarray(t.params, np.float64), "matmul_dq")
            weights[id(t.ins[1].root)] = 4 * p.n * p.k
    return sum(weights.values())


def emit_blob(lw: Lowered, plan: MemoryPlan, sched: Schedule, meta: dict[str, Any], *,
              split: bool = False) -> bytes | SplitBlob:
    """Write the ELF blob (see docs/npu_blob_format.md)."""
    relocs = _Relocs()
    kernels: dict[str, int] = {}
    for t in lw.tasks:
        if t.kind is not TaskKind.DMA and t.kernel not in kernels:
            kernels[t.kernel] = len(kernels)
    ktab = b"".join(KERNEL_ENTRY.pack(k.encode()[:23], 0) for k in kernels)

    # barrier configs and the u32 lists tasks index into
    barriers = b"".join(BARRIER.pack(b.bid, len(b.producers), len(b.consumers)) for b in sched.barriers)
    lists: list[int] = []
    params = bytearray()
    secs: dict[str, bytearray] = {SEC_DMA: bytearray(), SEC_DPU: bytearray(), SEC_SHAVE: bytearray()}
    task_meta: list[dict[str, Any]] = []
    codes: dict[np.dtype, int] = {}  # element type -> code, looked up once per type
    kind_names = {k: k.name for k in TaskKind}
    pad = bytes(OPERAND.size)
    for t in lw.tasks:
        waits, posts = sched.waits.get(t.tid, ()), sched.posts.get(t.tid, ())
        wait_off = len(lists)
        lists += waits
        post_off = len(lists)
        lists += posts
        if t.kind is TaskKind.DMA:
            sec = secs[SEC_DMA]
            base = len(sec)
            d = t.dma
            assert d is not None  # a DMA task carries its spec
            sec += DMA_DESC.pack(t.tid, int(t.kind), t.lane, 0, 0, len(waits), len(posts), wait_off, post_off,
                                 t.cycles, 0, 0, d.d0, d.d1, d.row, 0, *d.src_strides, *d.dst_strides)
            relocs.add(SEC_DMA, base + DMA_SRC_OFFSET, d.src, d.src_off)
            relocs.add(SEC_DMA, base + DMA_DST_OFFSET, d.dst, d.dst_off)
            name = SEC_DMA
        else:
            name = SEC_DPU if t.kind is TaskKind.DPU else SEC_SHAVE
            sec = secs[name]
            base = len(sec)
            p_off = len(params)
            n_par = len(t.params)
            if n_par:
                params += struct.pack(f"<{n_par}d", *t.params)
            operands = t.ins + t.outs
            sec += TASK_HEAD.pack(t.tid, int(t.kind), len(t.ins), len(t.outs), 0, n_par, len(waits),
                                  len(posts), 0, wait_off, post_off, 0, 0, t.cycles)
            for v in operands:
                code = codes.get(v.dtype)
                if code is None:
                    code = codes[v.dtype] = _dtype_code(v.dtype)
                shape = v.shape
                sec += OPERAND.pack(0, code, len(shape), 0, 0, *shape, *_ZEROS[len(shape):])
            sec += pad * (MAX_OPERANDS - len(operands))
            # kernel_addr and params_addr are the fields right before est_cycles
            relocs.raw(name, base + TASK_HEAD.size - 24, SEC_KERNELS, kernels[t.kernel] * KERNEL_ENTRY.size)
            if n_par:
                relocs.raw(name, base + TASK_HEAD.size - 16, SEC_PARAMS, p_off)
            for i, v in enumerate(operands):
                relocs.add(name, base + operand_addr_offset(i), v)
        entry = {"tid": t.tid, "engine": kind_names[t.kind], "kernel": t.kernel, "node": t.node, "op": t.op,
                 "section": name, "offset": base, "lane": t.lane, "cycles": t.cycles}
        if t.rows is not None:
            entry["rows"] = t.rows
        task_meta.append(entry)
    meta = dict(meta)
    meta["tasks"] = task_meta
    meta["memory"] = {"weights": len(plan.weights), "scratch": plan.scratch_size, "cmx": plan.cmx_used}
    # the constant table: the driver's weights bank shares constants across blobs one by one
    meta["constants"] = [[off, n] for off, n in plan.constants]
    meta["dq_bytes"] = _decompressed_bytes(lw)
    meta["barriers"] = [{"id": b.bid, "producers": b.producers, "consumers": b.consumers} for b in sched.barriers]
    # the memory plan as placed: [region, offset, bytes, first task, last task] per activation
    # buffer (what `profile --html` draws as the CMX/DDR map over time)
    meta["buffers"] = [[v.place.name.lower(), v.offset, v.nbytes, min(v.producers + v.readers),
                        max(v.producers + v.readers)]
                       for v in lw.values if v.alias is None and v.place in (Place.SCRATCH, Place.CMX)
                       and v.offset >= 0 and (v.producers or v.readers)]

    w = BlobWriter()
    w.write_header(EM_NPU_EMU, ELFOSABI_NPU_EMU, BLOB_VERSION[0])
    w.add_section(SEC_META, pack_meta(meta), align=8)
    w.add_section(SEC_KERNELS, ktab, alloc=True, align=64)
    w.add_section(SEC_DPU, bytes(secs[SEC_DPU]), alloc=True, writable=True, align=64)
    w.add_section(SEC_SHAVE, bytes(secs[SEC_SHAVE]), alloc=True, writable=True, align=64)
    w.add_section(SEC_BARRIERS, barriers, alloc=True, align=64, entsize=BARRIER.size)
    w.add_section(SEC_BARRIER_LISTS, struct.pack(f"<{len(lists)}I", *lists), alloc=True, align=64, entsize=4)
    w.add_section(SEC_PARAMS, bytes(params), alloc=True, align=64, entsize=8)
    w.add_section(SEC_DMA, bytes(secs[SEC_DMA]), alloc=True, writable=True, align=64, entsize=DMA_DESC.size)
    w.add_section(SEC_WEIGHTS, plan.weights, alloc=True, align=64)
    w.add_section(SEC_SCRATCH, None, nobits_size=plan.scratch_size, alloc=True, writable=True, align=64)
    w.add_section(SEC_CMX, None, nobits_size=plan.cmx_used, alloc=True, writable=True, align=64)
    syms = [Symbol(in_symbol(i), v.nbytes) for i, v in enumerate(lw.inputs)]
    syms += [Symbol(out_symbol(j), v.nbytes) for j, v in enumerate(lw.outputs)]
    w.write_symtab(syms)
    flags = {"": 0, "userin": VPU_SHF_USERINPUT, "userout": VPU_SHF_USEROUTPUT}
    for (target, kind), entries in sorted(relocs.entries.items()):
        w.add_relocations(target, entries, name=rela_name(target, kind), flags=flags[kind])
    # split: the weights stay where they are (views of the model's constants) for an in-process load
    return w.finish(SEC_WEIGHTS if split else None)

