"""Structure-aware mutants for tools/fuzz_blobs.py: edits that keep every checksum valid.

Byte-level damage never gets past the integrity checks (the NPU blob's CRC table, the NPUW
artefact's SHA-256s), so these mutants edit *fields* -- sizes, offsets, counts, shapes, element
types, the NPUW configuration -- and then recompute the checksums the way a buggy or hostile writer
would (``integrity.seal`` over the edited image; the artefact header's and sub-blobs' SHA-256).
They reach the checks behind the checksums: each must end in a typed error, or run correctly,
within the time limit and without a large allocation.

:data:`KINDS` is the named catalogue (what a kind edits, the typed error and the field it must
name); :func:`random_field_mutant` picks a numeric field at random and gives it an edge value.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import struct
from collections.abc import Callable
from typing import Any

__all__ = ["KINDS", "Kind", "meta_of", "npuw_edit", "random_field_mutant", "reseal_image", "section_headers",
           "set_meta", "symbol_entries"]

#: Elf64_Shdr field offsets
SH_OFFSET, SH_SIZE = 24, 32
#: Elf64_Sym: st_name u32, st_info u8, st_other u8, st_shndx u16, st_value u64, st_size u64
SYM = struct.Struct("<IBBHQQ")
#: values a random field edit tries: the edges of every integer width the parsers meet
EDGES = (0, 1, 2, 7, 255, 256, 4097, 2**16 - 1, 2**16, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**40, 2**62, 2**63 - 1)


# -- NPU blob helpers -------------------------------------------------------------------------
def reseal_image(image: bytes | bytearray) -> bytes:
    """Checksums recomputed over an edited image (plain 1 MiB pieces: the edit may have broken
    the section headers a by-section table is built from)."""
    from ov_npu_emu_npu.blob.integrity import seal

    return seal(bytes(image), by_section=False)  # edited headers need not describe the image


def _image(blob: bytes) -> bytearray:
    from ov_npu_emu_npu.blob.integrity import strip

    return bytearray(strip(blob))


def section_headers(image: bytes | bytearray) -> dict[str, tuple[int, int, int, int]]:
    """name -> (header offset, sh_type, sh_offset, sh_size), read with the writer's own structs."""
    from ov_npu_emu_npu.blob.format import ELF_HEADER, SECTION_HEADER

    h = ELF_HEADER.unpack_from(image, 0)
    shoff, shentsize, shnum, shstrndx = h[6], h[11], h[12], h[13]
    heads = [SECTION_HEADER.unpack_from(image, shoff + i * shentsize) for i in range(shnum)]
    strtab = heads[shstrndx]
    names = bytes(image[strtab[4]:strtab[4] + strtab[5]])
    out = {}
    for i, s in enumerate(heads):
        name = names[s[0]:names.index(b"\0", s[0])].decode()
        out[name] = (shoff + i * shentsize, s[1], s[4], s[5])
    return out


def symbol_entries(image: bytes | bytearray) -> dict[str, int]:
    """Global symbol name -> file offset of its Elf64_Sym entry."""
    from ov_npu_emu_npu.blob.format import ELF_HEADER, SECTION_HEADER

    h = ELF_HEADER.unpack_from(image, 0)
    shoff, shentsize = h[6], h[11]
    hdr = section_headers(image)[".symtab"][0]
    symtab = SECTION_HEADER.unpack_from(image, hdr)
    strtab = SECTION_HEADER.unpack_from(image, shoff + symtab[6] * shentsize)  # sh_link
    names = bytes(image[strtab[4]:strtab[4] + strtab[5]])
    out = {}
    for pos in range(symtab[4], symtab[4] + symtab[5], SYM.size):
        st_name, info = SYM.unpack_from(image, pos)[:2]
        if info >> 4 == 1:  # STB_GLOBAL
            out[names[st_name:names.index(b"\0", st_name)].decode()] = pos
    return out


def meta_of(blob: bytes) -> dict[str, Any]:
    """The metadata JSON of a sealed NPU blob."""
    from ov_npu_emu_npu.blob.reader import META_HEAD

    image = _image(blob)
    _, _, off, _ = section_headers(image)[".npu.meta"]
    length = META_HEAD.unpack_from(image, off)[3]
    return dict(json.loads(bytes(image[off + META_HEAD.size:off + META_HEAD.size + length])))


def set_meta(blob: bytes, edit: Callable[[dict[str, Any]], Any], *, symbols: dict[str, int] | None = None,
             version: tuple[int, int] | None = None) -> bytes:
    """``blob`` with its metadata JSON edited in place (same length: ``config_hash``, informational,
    makes room), user symbols' ``st_size`` set from ``symbols``, resealed."""
    from ov_npu_emu_npu.blob.reader import META_HEAD

    image = _image(blob)
    _, _, off, _ = section_headers(image)[".npu.meta"]
    magic, major, minor, length = META_HEAD.unpack_from(image, off)
    meta = json.loads(bytes(image[off + META_HEAD.size:off + META_HEAD.size + length]))
    meta.pop("config_hash", None)
    edit(meta)
    js = json.dumps(meta, separators=(",", ":")).encode()
    if len(js) > length:
        raise ValueError(f"edited metadata grew by {len(js) - length} bytes")
    major, minor = version or (major, minor)
    image[off:off + META_HEAD.size + length] = META_HEAD.pack(magic, major, minor, length) + js.ljust(length)
    entries = symbol_entries(image)
    for name, size in (symbols or {}).items():
        struct.pack_into("<Q", image, entries[name] + 16, size)
    return reseal_image(image)


def _shdr(blob: bytes, section: str, field: int, value: int) -> bytes:
    image = _image(blob)
    struct.pack_into("<Q", image, section_headers(image)[section][0] + field, value)
    return reseal_image(image)


def _ehdr(blob: bytes, fmt: str, at: int, value: int) -> bytes:
    image = _image(blob)
    struct.pack_into(fmt, image, at, value)
    return reseal_image(image)


def _section_bytes(blob: bytes, section: str, at: int, fmt: str, value: int) -> bytes:
    """``value`` packed at byte ``at`` of ``section``'s data."""
    image = _image(blob)
    struct.pack_into(fmt, image, section_headers(image)[section][2] + at, value)
    return reseal_image(image)


def _move_weights_onto_meta(blob: bytes) -> bytes:
    image = _image(blob)
    secs = section_headers(image)
    struct.pack_into("<Q", image, secs[".npu.weights"][0] + SH_OFFSET, secs[".npu.meta"][2])
    return reseal_image(image)


def _first_rela(blob: bytes) -> int:
    """File offset of the first relocation entry of a non-empty .rela section."""
    secs = section_headers(_image(blob))
    return min(off for name, (_, _, off, size) in secs.items() if name.startswith(".rela") and size)


def _first_task_section(blob: bytes) -> str:
    secs = section_headers(_image(blob))
    return next(n for n in (".npu.shave", ".npu.dpu") if secs.get(n, (0, 0, 0, 0))[3])


# -- NPUW artefact helpers ---------------------------------------------------------------------
def _npuw_split(blob: bytes) -> tuple[dict[str, Any], bytes]:
    from ov_npu_emu_npuw.serialize import _FIXED, MAGIC

    _, hlen = _FIXED.unpack_from(blob, len(MAGIC))
    start = len(MAGIC) + _FIXED.size + 32
    return json.loads(blob[start:start + hlen]), blob[start + hlen:]


def npuw_edit(blob: bytes, edit: Callable[[dict[str, Any]], Any],
              sub: tuple[str, Callable[[bytes], bytes]] | None = None) -> bytes:
    """An NPUW artefact with its header edited (and, with ``sub``, one sub-blob replaced by
    ``sub[1](old)``), every SHA-256 recomputed."""
    from ov_npu_emu_npuw.serialize import _FIXED, FORMAT_VERSION, MAGIC

    header, rest = _npuw_split(blob)
    parts, off = [], 0
    for e in header["blobs"]:
        parts.append(rest[off:off + e["size"]])
        off += e["size"]
    if sub is not None:
        i = next(i for i, e in enumerate(header["blobs"]) if e["role"] == sub[0])
        parts[i] = sub[1](parts[i])
        header["blobs"][i].update(size=len(parts[i]), sha256=hashlib.sha256(parts[i]).hexdigest())
    edit(header)
    h = json.dumps(header, sort_keys=True).encode()
    return b"".join([MAGIC, _FIXED.pack(FORMAT_VERSION, len(h)), hashlib.sha256(h).digest(), h, *parts])


def _cfg(**values: Any) -> Callable[[dict[str, Any]], None]:
    def edit(h: dict[str, Any]) -> None:
        h["config"].update(values)
    return edit


def _raw(**values: Any) -> Callable[[dict[str, Any]], None]:
    def edit(h: dict[str, Any]) -> None:
        h["config"]["raw"].update(values)
    return edit


def _huge_prompt(h: dict[str, Any]) -> None:
    """MAX_PROMPT_LEN 2^30 made consistent through the whole configuration (the raw keys, every
    field parse_config derives from them, the generate variant's role): only the sub-models can
    tell."""
    from ov_npu_emu_npuw.config import _DERIVED, parse_config

    c = h["config"]
    old = c["variants"][-1]
    c["raw"].update(NPUW_LLM_MAX_PROMPT_LEN=1 << 30, NPUW_LLM_PREFILL_CHUNK_SIZE=0, NPUW_LLM_GENERATE_PYRAMID="NO")
    ref = parse_config(c["raw"]).to_json()
    c.update({k: ref[k] for k in _DERIVED})
    for e in h["blobs"]:
        if e["role"] == f"kv{old}":
            e["role"] = f"kv{c['variants'][-1]}"


# -- the catalogue ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Kind:
    """One named structure-aware mutant."""

    name: str
    target: str  # "npu" (a stateful NPU blob), "npu-llm" (a generate variant), "npuw" (the artefact)
    make: Callable[[bytes], bytes]
    expect: str  # the error class it must end in, or "ran"
    field: str = ""  # a regex its ``field`` (else ``key``, else message) must match
    config: dict[str, Any] | None = None  # import config (a smaller memory budget)
    what: str = ""  # one line for the docs table


def _state_shape(shape: list[int], sym: int | None = None) -> Callable[[bytes], bytes]:
    def make(b: bytes) -> bytes:
        def edit(m: dict[str, Any]) -> None:
            v = m["variables"][0]
            v["shape"] = shape
            m["inputs"][v["input"]]["shape"] = shape
            m["outputs"][v["output"]]["shape"] = shape
        meta = meta_of(b)
        v = meta["variables"][0]
        syms = None if sym is None else {meta["inputs"][v["input"]]["symbol"]: sym,
                                         meta["outputs"][v["output"]]["symbol"]: sym}
        return set_meta(b, edit, symbols=syms)
    return make


def _port(what: str, i: int, key: str, value: Any, sym: int | None = None) -> Callable[[bytes], bytes]:
    def make(b: bytes) -> bytes:
        name = meta_of(b)[what][i]["symbol"]
        return set_meta(b, lambda m: m[what][i].__setitem__(key, value),
                        symbols=None if sym is None else {name: sym})
    return make


def _var(key: str, value: Any) -> Callable[[bytes], bytes]:
    return lambda b: set_meta(b, lambda m: m["variables"][0].__setitem__(key, value))


def _symbol(i: int, size: int) -> Callable[[bytes], bytes]:
    def make(b: bytes) -> bytes:
        return set_meta(b, lambda m: None, symbols={meta_of(b)["inputs"][i]["symbol"]: size})
    return make


def _constants(edit: Callable[[list[list[int]], int], None]) -> Callable[[bytes], bytes]:
    def make(b: bytes) -> bytes:
        size = section_headers(_image(b))[".npu.weights"][3]
        return set_meta(b, lambda m: edit(m["constants"], size))
    return make


def _last(table: list[list[int]]) -> list[int]:
    """The constant-table entry with the largest offset."""
    return max(table, key=lambda e: e[0])


def _llm_past_huge(b: bytes) -> bytes:
    """The first past-KV input of a generate variant grown to 2^34 bytes, symbol and all."""
    meta = meta_of(b)
    i = next(i for i, p in enumerate(meta["inputs"]) if p["names"][0].startswith("past_key_values"))
    p = meta["inputs"][i]
    shape = [1, p["shape"][1], 1 << 30, p["shape"][3]]
    n = 1 << 30
    for d in shape:
        n = n if d == 1 << 30 else n * d
    return set_meta(b, lambda m: m["inputs"][i].__setitem__("shape", shape), symbols={p["symbol"]: n * 4})


def _sub_port(dim: int) -> Callable[[bytes], bytes]:
    """A generate sub-blob's past-KV port with its token axis set to ``dim`` in its metadata only,
    the sub-blob's CRCs and SHA-256 recomputed."""
    def make(b: bytes) -> bytes:
        header, _ = _npuw_split(b)
        role = next(e["role"] for e in header["blobs"] if e["role"].startswith("kv"))

        def edit(sub: bytes) -> bytes:
            meta = meta_of(sub)
            i = next(i for i, p in enumerate(meta["inputs"]) if p["names"][0].startswith("past_key_values"))
            return set_meta(sub, lambda m: m["inputs"][i]["shape"].__setitem__(2, dim))
        return npuw_edit(b, lambda h: None, sub=(role, edit))
    return make


def _two_ports(b: bytes) -> bytes:
    """An input and an output of 5 GB each, metadata and symbols: each fits the device's address
    window, together they exceed the default budget."""
    meta = meta_of(b)
    n = 1_250_000_000

    def edit(m: dict[str, Any]) -> None:
        m["inputs"][0]["shape"] = [1, n]
        m["outputs"][0]["shape"] = [1, n]
    return set_meta(b, edit, symbols={meta["inputs"][0]["symbol"]: 4 * n, meta["outputs"][0]["symbol"]: 4 * n})


SMALL_BUDGET = {"NPU_EMU_DEVICE_MEMORY_MB": 256}
HUGE = 2_500_000_000  # f32 elements: 10 GB, over the default budget (7936 MiB)

KINDS: list[Kind] = [
    # -- an NPU blob's metadata, symbols and section headers (the example first)
    Kind("state-shape-huge", "npu", _state_shape([1, 500_000_000]), "BlobFieldError", r"inputs\[1\]\.shape",
         what="a state's shape [1, 5e8] f32 in .npu.meta only (issue 30's example)"),
    Kind("state-shape-huge-consistent", "npu", _state_shape([1, HUGE], 4 * HUGE), "MemoryBudgetError",
         r"inputs\[1\]\.shape", what="a 10 GB state in the metadata and the state symbols' st_size"),
    Kind("two-ports-5GB-consistent", "npu", _two_ports, "MemoryBudgetError", r"inputs\[0\]|outputs\[0\]",
         what="an input and an output of 5 GB each (each fits, the total is over the default budget)"),
    Kind("state-shape-2GB-consistent", "npu", _state_shape([1, 500_000_000], 2_000_000_000), "MemoryBudgetError",
         r"variables\[0\]", SMALL_BUDGET, "a consistent 2 GB state under NPU_EMU_DEVICE_MEMORY_MB=256"),
    Kind("input-shape-huge", "npu", _port("inputs", 0, "shape", [1 << 20, 1 << 20]), "MemoryBudgetError",
         r"inputs\[0\]\.shape", what="an input of 2^40 elements (over the device's address window)"),
    Kind("input-shape-huge-consistent", "npu", _port("inputs", 0, "shape", [1, HUGE], 4 * HUGE),
         "MemoryBudgetError", r"inputs\[0\]", what="a 10 GB input, metadata and symbol"),
    Kind("input-shape-shrunk", "npu", _port("inputs", 0, "shape", [1, 1]), "BlobFieldError", r"inputs\[0\]\.shape",
         what="an input shape smaller than its symbol"),
    Kind("input-shape-zero", "npu", _port("inputs", 0, "shape", [0, 4]), "BlobFieldError", r"inputs\[0\]\.shape",
         what="an input with a zero dim"),
    Kind("input-rank-grown", "npu", _port("inputs", 0, "shape", [1, 4, 1]), "ran",
         what="an input of the same bytes, one more unit dim (consistent: runs)"),
    Kind("input-dtype-f16", "npu", _port("inputs", 0, "element_type", "f16"), "BlobFieldError",
         r"inputs\[0\]\.shape", what="an input's element type f32 -> f16 (half the bytes)"),
    Kind("input-dtype-unknown", "npu", _port("inputs", 0, "element_type", "u4"), "BlobFormatError",
         r"inputs\[0\]\.element_type", what="an element type the runtime cannot bind"),
    Kind("output-shape-huge-consistent", "npu", _port("outputs", 0, "shape", [1, HUGE], 4 * HUGE),
         "MemoryBudgetError", r"outputs\[0\]", what="a 10 GB output, metadata and symbol"),
    Kind("symbol-size-huge", "npu", _symbol(0, 1 << 40), "BlobFieldError", r"inputs\[0\]\.shape",
         what="an input symbol's st_size 2^40"),
    Kind("symbol-size-zero", "npu", _symbol(0, 0), "BlobFieldError", r"inputs\[0\]\.shape",
         what="an input symbol's st_size 0"),
    Kind("variable-shape", "npu", _var("shape", [1, 8]), "BlobFieldError", r"variables\[0\]\.shape",
         what="a variable's shape unlike its ports'"),
    Kind("variable-dtype", "npu", _var("element_type", "f16"), "BlobFieldError", r"variables\[0\]\.shape",
         what="a variable's element type unlike its ports'"),
    Kind("variable-port-range", "npu", _var("input", 7), "BlobFormatError", r"variables\[0\]\.input",
         what="a variable's port index past the ports"),
    Kind("variable-port-not-state", "npu", _var("input", 0), "BlobFieldError", r"variables\[0\]\.input",
         what="a variable bound to a plain input"),
    Kind("variable-init-length", "npu", _var("init", [0, 0, 0]), "BlobFormatError", r"variables\[0\]\.init",
         what="an initial value of the wrong length"),
    Kind("hw-cmx-zero", "npu", lambda b: set_meta(b, lambda m: m["hw"].__setitem__("cmx_size", 0)),
         "BlobFormatError", r"hw\.cmx_size", what="hw.cmx_size 0"),
    Kind("meta-version-newer", "npu", lambda b: set_meta(b, lambda m: None, version=(1, 99)), "BlobFormatError",
         r"version 1\.99", what="a newer minor format version"),
    Kind("scratch-size-4TB", "npu", lambda b: _shdr(b, ".npu.scratch", SH_SIZE, 1 << 42), "BlobFormatError",
         r"device memory", what=".npu.scratch (NOBITS) sh_size 2^42"),
    Kind("scratch-size-2GB", "npu", lambda b: _shdr(b, ".npu.scratch", SH_SIZE, 1 << 31), "MemoryBudgetError",
         r"section \.npu\.scratch", SMALL_BUDGET, ".npu.scratch sh_size 2 GiB under NPU_EMU_DEVICE_MEMORY_MB=256"),
    Kind("scratch-size-2GB-default", "npu", lambda b: _shdr(b, ".npu.scratch", SH_SIZE, 1 << 31), "ran",
         what=".npu.scratch sh_size 2 GiB, default budget (runs: pages committed as written)"),
    Kind("cmx-size-huge", "npu", lambda b: _shdr(b, ".npu.cmx", SH_SIZE, 1 << 40), "BlobFormatError",
         r"device memory", what=".npu.cmx sh_size 2^40"),
    Kind("section-offset-past-end", "npu", lambda b: _shdr(b, ".npu.dma", SH_OFFSET, 1 << 40), "BlobFormatError",
         r"runs past the end", what=".npu.dma sh_offset past the file"),
    Kind("section-offset-overlap", "npu-llm", _move_weights_onto_meta, "BlobFieldError",
         r"section \.npu\.(weights|meta) \(sh_offset\)", what=".npu.weights sh_offset moved onto .npu.meta's bytes"),
    Kind("section-size-past-end", "npu", lambda b: _shdr(b, ".npu.params", SH_SIZE, 1 << 30), "BlobFormatError",
         r"runs past the end", what=".npu.params sh_size 1 GiB (past the file)"),
    Kind("shnum-huge", "npu", lambda b: _ehdr(b, "<H", 60, 0xFFFF), "BlobFormatError", r"ELF structure unreadable",
         what="e_shnum 65535"),
    Kind("shoff-past-end", "npu", lambda b: _ehdr(b, "<Q", 40, 1 << 40), "BlobFormatError", r"past EOF",
         what="e_shoff past the file"),
    Kind("reloc-offset-huge", "npu", lambda b: _ehdr(b, "<Q", _first_rela(b), 1 << 40), "RelocationError",
         r"outside \.npu\.\w+", what="a relocation's r_offset 2^40"),
    Kind("reloc-symbol-huge", "npu", lambda b: _ehdr(b, "<Q", _first_rela(b) + 8, (0xFFFFFF << 32) | 1),
         "BlobFormatError", r"corrupt NPU blob relocations", what="a relocation's symbol index 2^24-1"),
    Kind("dma-rows-huge", "npu", lambda b: _section_bytes(b, ".npu.dma", 48, "<I", 0x8000_0001), "ExecutionError",
         r"the descriptor is corrupt", what="a DMA descriptor's row count 2^31+1"),
    Kind("task-operand-dims-huge", "npu",
         lambda b: _section_bytes(b, _first_task_section(b), 64, "<I", 1 << 30), "ExecutionError", r"not mapped",
         what="a task operand's first dim 2^30"),
    # -- an LLM generate variant (weights, constant table, past-KV ports)
    Kind("llm-past-kv-huge-consistent", "npu-llm", _llm_past_huge, "MemoryBudgetError", r"inputs\[\d+\]",
         what="a past-KV input of 2^30 tokens, metadata and symbol"),
    Kind("llm-constants-outside", "npu-llm", _constants(lambda c, n: _last(c).__setitem__(1, n)), "BlobFieldError",
         r"constants\[\d+\]", what="the last constant-table view grown past .npu.weights"),
    Kind("llm-constants-shrunk", "npu-llm", _constants(lambda c, n: _last(c).__setitem__(1, 7)), "BlobFieldError",
         r"constants\[\d+\]", what="a constant-table view shrunk to 7 bytes (a kernel would read its neighbour)"),
    Kind("llm-constants-overlap", "npu-llm", _constants(lambda c, n: c[1].__setitem__(0, c[0][0])),
         "BlobFieldError", r"constants\[\d+\]", what="two constant-table views on the same bytes"),
    # -- an NPUW artefact: header edited, SHA-256 recomputed
    Kind("npuw-max-prompt-huge", "npuw", lambda b: npuw_edit(b, _cfg(max_prompt_len=1 << 40)),
         "ArtefactConfigError", "NPUW_LLM_MAX_PROMPT_LEN", what="config.max_prompt_len 2^40"),
    Kind("npuw-max-prompt-huge-consistent", "npuw", lambda b: npuw_edit(b, _huge_prompt), "ArtefactConfigError",
         "NPUW_LLM_MAX_PROMPT_LEN", what="MAX_PROMPT_LEN 2^30 in the raw key, the field, variants and roles"),
    Kind("npuw-variants-huge", "npuw", lambda b: npuw_edit(b, _cfg(variants=[1 << 30])), "ArtefactConfigError",
         "NPUW_LLM_GENERATE_VARIANTS", what="config.variants [2^30]"),
    Kind("npuw-min-response-huge", "npuw", lambda b: npuw_edit(b, _cfg(min_response_len=1 << 40)),
         "ArtefactConfigError", "NPUW_LLM_MIN_RESPONSE_LEN", what="config.min_response_len 2^40"),
    Kind("npuw-chunk-size", "npuw", lambda b: npuw_edit(b, _cfg(chunk_size=7)), "ArtefactConfigError",
         "NPUW_LLM_PREFILL_CHUNK_SIZE", what="config.chunk_size 7"),
    Kind("npuw-lora-rank-huge", "npuw", lambda b: npuw_edit(b, _cfg(max_lora_rank=1 << 30)), "ArtefactConfigError",
         "NPUW_LLM_MAX_LORA_RANK", what="config.max_lora_rank 2^30"),
    Kind("npuw-prefix-blocks-huge", "npuw", lambda b: npuw_edit(b, _cfg(prefix_max_blocks=1 << 40)),
         "ArtefactConfigError", "NPUW_LLM_PREFIX_CACHING_MAX_NUM_BLOCKS", what="config.prefix_max_blocks 2^40"),
    Kind("npuw-kv-precision", "npuw", lambda b: npuw_edit(b, _cfg(kv_precision="u2")), "ArtefactConfigError",
         "KV_CACHE_PRECISION", what="config.kv_precision u2"),
    Kind("npuw-raw-bad-value", "npuw", lambda b: npuw_edit(b, _raw(KV_CACHE_PRECISION="bogus")),
         "ArtefactConfigError", "KV_CACHE_PRECISION", what="a stored raw key parse_config refuses"),
    Kind("npuw-raw-rule", "npuw", lambda b: npuw_edit(b, _raw(NPUW_LLM_ENABLE_PREFIX_CACHING="YES")),
         "ArtefactConfigError", "NPUW_LLM_ENABLE_PREFIX_CACHING", what="stored raw keys breaking a parse_config rule"),
    Kind("npuw-unknown-field", "npuw", lambda b: npuw_edit(b, _cfg(kv_slots=1 << 40)), "ArtefactConfigError",
         r"config\.kv_slots", what="an unknown config field"),
    Kind("npuw-missing-field", "npuw", lambda b: npuw_edit(b, lambda h: h["config"].pop("max_prompt_len")),
         "ArtefactConfigError", "NPUW_LLM_MAX_PROMPT_LEN", what="config.max_prompt_len missing"),
    Kind("npuw-generate-rungs", "npuw", lambda b: npuw_edit(b, _cfg(generate_rungs=[1 << 30])),
         "ArtefactConfigError", "NPUW_LLM_GENERATE_LADDER", what="config.generate_rungs [2^30]"),
    Kind("npuw-kv-heads", "npuw", lambda b: npuw_edit(b, lambda h: h["kv"]["heads"].__setitem__(0, 1000)),
         "BlobFieldError", r"kv\.heads\[0\]", what="kv.heads[0] 1000 (the KV buffer's size)"),
    Kind("npuw-kv-dims", "npuw", lambda b: npuw_edit(b, lambda h: h["kv"]["dims"].__setitem__(0, 4096)),
         "BlobFieldError", r"kv\.dims\[0\]", what="kv.dims[0] 4096"),
    Kind("npuw-blob-size-huge", "npuw", lambda b: npuw_edit(b, lambda h: h["blobs"][0].__setitem__("size", 1 << 40)),
         "BlobFormatError", r"truncated in sub-blob", what="a sub-blob size 2^40"),
    Kind("npuw-blob-role", "npuw", lambda b: npuw_edit(b, lambda h: h["blobs"][-1].__setitem__("role", "kv1")),
         "BlobFormatError", r"lacks sub-blob", what="a sub-blob's role renamed"),
    Kind("npuw-sub-blob-port-huge", "npuw", _sub_port(1 << 28), "MemoryBudgetError", r"inputs\[\d+\]\.shape",
         what="a generate sub-blob's past-KV port of 2^28 tokens (its CRCs and SHA-256 recomputed)"),
    Kind("npuw-sub-blob-port-shrunk", "npuw", _sub_port(1), "BlobFieldError", r"inputs\[\d+\]\.shape",
         what="a generate sub-blob's past-KV port of 1 token, unlike its symbol"),
]


def random_field_mutant(blob: bytes, target: str, rng: random.Random) -> tuple[str, bytes]:
    """(description, mutant): one numeric field picked at random -- a metadata leaf, a section
    header field or a symbol size of an NPU blob; a header leaf of an NPUW artefact -- set to
    an edge value, every checksum recomputed."""
    value = rng.choice(EDGES) if rng.random() < 0.8 else rng.randrange(-8, 1 << 20)
    if target == "npuw":
        header, _ = _npuw_split(blob)
        path = rng.choice(_int_leaves({k: header[k] for k in ("config", "kv", "blobs")}))
        return f"header {_fmt(path)} = {value}", npuw_edit(blob, lambda h: _set(h, path, value))
    pick = rng.random()
    image = _image(blob)
    if pick < 0.5:
        meta = meta_of(blob)
        leaves = _int_leaves({k: meta[k] for k in ("inputs", "outputs", "variables", "hw", "constants", "tasks")
                              if k in meta})
        path = rng.choice(leaves)
        try:
            return f"meta {_fmt(path)} = {value}", set_meta(blob, lambda m: _set(m, path, value))
        except ValueError:  # the JSON would grow past its section: a smaller edit instead
            return f"meta {_fmt(path)} = 0", set_meta(blob, lambda m: _set(m, path, 0))
    if pick < 0.8:
        name = rng.choice(sorted(section_headers(image)))
        field = rng.choice((SH_OFFSET, SH_SIZE, 56))
        return f"{name} shdr+{field} = {value}", _shdr(blob, name, field, value % 2**64)
    name = rng.choice(sorted(symbol_entries(image)))
    return f"symbol {name}.st_size = {value}", set_meta(blob, lambda m: None, symbols={name: value % 2**64})


def _int_leaves(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(node, bool):
        return []
    if isinstance(node, int):
        return [path]
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    return [p for k, v in items for p in _int_leaves(v, (*path, k))]


def _set(root: Any, path: tuple[Any, ...], value: Any) -> None:
    for k in path[:-1]:
        root = root[k]
    root[path[-1]] = value


def _fmt(path: tuple[Any, ...]) -> str:
    return "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path).lstrip(".")


def describe(e: BaseException, pattern: str = "") -> str:
    """What the table shows of a typed error: its class and the field or key it names (else the
    part of its message ``pattern`` finds)."""
    import re

    named = getattr(e, "field", None) or getattr(e, "key", None)
    if not named and pattern and (m := re.search(pattern, str(e))):
        named = f'"{m.group(0)}"'
    return f"{type(e).__name__}" + (f" ({named})" if named else "")

