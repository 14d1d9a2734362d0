"""Everything the blob writer and reader share: section names, flags, relocation types, structs."""

from __future__ import annotations

import dataclasses
import enum
import struct
from typing import ClassVar

__all__ = [
    "WEIGHT_FORMATS",
    "BARRIER",
    "BLOB_MAGIC",
    "BLOB_VERSION",
    "DMA_DESC",
    "DMA_DST_OFFSET",
    "DMA_SRC_OFFSET",
    "ELF_HEADER",
    "ELFOSABI_NPU_EMU",
    "EM_NPU_EMU",
    "KERNEL_ENTRY",
    "LOADABLE_SECTIONS",
    "MAX_DIMS",
    "MAX_OPERANDS",
    "MemKind",
    "OPERAND",
    "Operand",
    "R_NPU_64",
    "RELOC_TYPES",
    "SEC_BARRIERS",
    "SEC_BARRIER_LISTS",
    "SEC_CMX",
    "SEC_DMA",
    "SEC_DPU",
    "SEC_KERNELS",
    "SEC_META",
    "SEC_PARAMS",
    "SEC_SCRATCH",
    "SEC_SHAVE",
    "SEC_WEIGHTS",
    "SECTION_HEADER",
    "SHT_NOBITS",
    "SHT_PROGBITS",
    "SHT_RELA",
    "SHT_STRTAB",
    "SHT_SYMTAB",
    "SLICE_NONE",
    "SUPPORTED_VERSIONS",
    "TASK_HEAD",
    "TASK_SIZE",
    "TaskKind",
    "VPU_SHF_USERINPUT",
    "VPU_SHF_USEROUTPUT",
    "align_up",
    "operand_addr_offset",
    "rela_name",
]

#: first bytes of .npu.meta; the ELF header alone does not tell our blobs from other ELF files
BLOB_MAGIC = b"OVNPUEMU"
#: (major, minor); a reader accepts the same major and any minor <= its own
#: 1.1: compressed weights (matmul_dq, gather_dq, weights_format); 1.2: integrity trailer;
#: 1.3: token-row marks in the task metadata (tasks[i].rows, NPU_EMU_SKIP_PADDED_ROWS)
#: 1.4: the sdpa_kv kernel (attention reading a past KV stored as f16, NPU_EMU_FUSE_KV)
BLOB_VERSION = (1, 4)
SUPPORTED_VERSIONS = {1}
#: e_machine: no registered machine fits, so we use a value from the unassigned range
EM_NPU_EMU = 0x4E50  # "NP"
ELFOSABI_NPU_EMU = 0xFF  # ELFOSABI_STANDALONE: an embedded image, not an OS process

# Section names.  Loadable ones are allocated in device memory of the kind given below.
SEC_META = ".npu.meta"
SEC_WEIGHTS = ".npu.weights"
SEC_KERNELS = ".npu.kernels"
SEC_PARAMS = ".npu.params"
SEC_DMA = ".npu.dma"
SEC_DPU = ".npu.dpu"
SEC_SHAVE = ".npu.shave"
SEC_BARRIERS = ".npu.barriers"
SEC_BARRIER_LISTS = ".npu.barrier_lists"
SEC_SCRATCH = ".npu.scratch"  # SHT_NOBITS: DDR activation scratch
SEC_CMX = ".npu.cmx"  # SHT_NOBITS: on-chip scratchpad

#: Section flags in the SHF_MASKOS range, marking relocation sections whose symbols are user
#: tensors resolved per inference (the idea of vpux_elf's VPU_SHF_USERINPUT/USEROUTPUT).
VPU_SHF_USERINPUT = 0x01000000
VPU_SHF_USEROUTPUT = 0x02000000

#: the only relocation type: write the 64-bit value S + A at r_offset
R_NPU_64 = 1
RELOC_TYPES = {R_NPU_64: "R_NPU_64"}


class MemKind(enum.IntEnum):
    """Device memory kinds the driver allocates (after Level Zero's buffer kinds in vpux_elf)."""

    WRITE_COMBINE_FW = 1  # kernel table, task descriptors, barriers (firmware-visible)
    WRITE_COMBINE_SHAVE = 2  # SHAVE kernel data (per-task parameters)
    WRITE_COMBINE_DMA = 3  # DMA descriptors
    WEIGHTS = 4  # constants
    SCRATCH = 5  # DDR activations
    CMX = 6  # on-chip scratchpad
    IO = 7  # user tensors mapped into the device address space


#: loadable section -> memory kind; order is the load order
LOADABLE_SECTIONS: dict[str, MemKind] = {
    SEC_KERNELS: MemKind.WRITE_COMBINE_FW,
    SEC_DPU: MemKind.WRITE_COMBINE_FW,
    SEC_SHAVE: MemKind.WRITE_COMBINE_FW,
    SEC_BARRIERS: MemKind.WRITE_COMBINE_FW,
    SEC_BARRIER_LISTS: MemKind.WRITE_COMBINE_FW,
    SEC_PARAMS: MemKind.WRITE_COMBINE_SHAVE,
    SEC_DMA: MemKind.WRITE_COMBINE_DMA,
    SEC_WEIGHTS: MemKind.WEIGHTS,
    SEC_SCRATCH: MemKind.SCRATCH,
    SEC_CMX: MemKind.CMX,
}


def rela_name(target: str, kind: str = "") -> str:
    """`.rela.npu.dpu` (static) or `.rela.npu.dpu.userin` / `.userout` (user I/O)."""
    return f".rela{target}" + (f".{kind}" if kind else "")


def align_up(x: int, n: int) -> int:
    """Round ``x`` up to a multiple of ``n`` (a power of two or any positive integer)."""
    return (x + n - 1) // n * n


class TaskKind(enum.IntEnum):
    """Engine a task runs on."""

    DMA = 1
    DPU = 2
    SHAVE = 3


MAX_OPERANDS = 6
#: compressed-weight formats of the matmul_dq / gather_dq kernels (param 2 / 1 of the task):
#: 4-bit payloads are packed two per byte, the first value in the low nibble (OpenVINO's order)
WEIGHT_FORMATS: dict[str, int] = {"u8": 1, "i8": 2, "u4": 3, "i4": 4, "f16": 5}
#: "stop" of a slice parameter meaning "to the end" (negative steps that run past index 0)
SLICE_NONE = -(2**31)
MAX_DIMS = 6

#: Elf64_Ehdr and Elf64_Shdr (written by writer.py, walked by integrity.py before pyelftools runs)
ELF_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
SECTION_HEADER = struct.Struct("<IIQQQQIIQQ")
SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_RELA, SHT_NOBITS = 1, 2, 3, 4, 8

#: DPU/SHAVE task header: task_id, kind, n_in, n_out, flags, n_params, n_wait, n_post, pad,
#: wait_off, post_off (u32 indices into .npu.barrier_lists), kernel_addr, params_addr, est_cycles
TASK_HEAD = struct.Struct("<IBBBBHHHHIIQQQ")
#: operand: device address, dtype code, ndim, pad, reserved, dims[MAX_DIMS]
OPERAND = struct.Struct(f"<QBBHI{MAX_DIMS}I")
TASK_SIZE = TASK_HEAD.size + MAX_OPERANDS * OPERAND.size
#: DMA descriptor: task_id, kind, channel, flags, dst_dtype, n_wait, n_post, wait_off, post_off,
#: est_cycles, pad, src, dst, d0, d1, row_bytes, pad, src_stride0, src_stride1, dst_stride0,
#: dst_stride1 (a 3-D strided copy: d0 x d1 rows of row_bytes)
DMA_DESC = struct.Struct("<IBBBBHHIIQ4xQQIIIIQQQQ")
DMA_SRC_OFFSET = 32
DMA_DST_OFFSET = 40
#: kernel table entry: name (NUL padded), code size (for the cost model / inspect)
KERNEL_ENTRY = struct.Struct("<24sQ")
#: barrier config: id, producer count, consumer count, pad
BARRIER = struct.Struct("<III4x")


def operand_addr_offset(i: int) -> int:
    """Byte offset of operand ``i``'s address field inside a DPU/SHAVE task descriptor."""
    return TASK_HEAD.size + i * OPERAND.size


@dataclasses.dataclass(frozen=True)
class Operand:
    """A tensor operand as a task descriptor carries it."""

    addr: int  # device virtual address (0 until relocated)
    dtype: int  # element-type code (arch.DTYPES)
    shape: tuple[int, ...]  # static dims, len <= MAX_DIMS

    SIZE: ClassVar[int] = OPERAND.size

    def pack(self) -> bytes:
        dims = list(self.shape) + [0] * (MAX_DIMS - len(self.shape))
        return OPERAND.pack(self.addr, self.dtype, len(self.shape), 0, 0, *dims)

    @classmethod
    def unpack(cls, buf: bytes | memoryview, offset: int = 0) -> Operand:
        addr, dtype, ndim, _, _, *dims = OPERAND.unpack_from(buf, offset)
        return cls(addr, dtype, tuple(dims[:ndim]))
