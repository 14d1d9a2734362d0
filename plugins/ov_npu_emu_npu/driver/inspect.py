"""A readelf-like description of a blob, plus the memory map the driver would load it into."""

from __future__ import annotations

from typing import Any

from ov_npu_emu_npu.blob.format import LOADABLE_SECTIONS, RELOC_TYPES
from ov_npu_emu_npu.blob.reader import BlobReader
from ov_npu_emu_npu.driver.hpi import HostParsedInference, ParsedBlob

__all__ = ["describe_blob"]


def describe_blob(blob: bytes) -> dict[str, Any]:
    """Header, sections, symbols, relocations, tasks by engine, barriers and memory map as a dict."""
    reader = BlobReader(blob)
    elf = reader.elf
    h = elf.header
    header = {
        "class": elf.elfclass, "machine": h["e_machine"], "type": h["e_type"],
        "osabi": h["e_ident"]["EI_OSABI"], "abi_version": h["e_ident"]["EI_ABIVERSION"],
        "blob_version": ".".join(map(str, reader.version)), "sections": h["e_shnum"],
        "size": len(blob),
    }
    sections = [{"index": s.index, "name": s.name, "size": s.size, "nobits": s.nobits, "alloc": s.alloc,
                 "kind": LOADABLE_SECTIONS[s.name].name if s.name in LOADABLE_SECTIONS else None}
                for s in reader.iter_sections() if s.index]
    symbols = [{"name": n, "value": v, "size": sz} for n, v, sz in reader.iter_symbols()]
    relocs = [{"section": r.section, "target": r.target, "offset": r.offset,
               "type": RELOC_TYPES.get(r.rtype, str(r.rtype)), "symbol": r.symbol, "addend": r.addend,
               "user": r.user} for r in reader.iter_relocations()]
    meta = reader.meta
    tasks: dict[str, list[dict[str, Any]]] = {}
    for t in meta.get("tasks", []):
        tasks.setdefault(t["engine"], []).append(t)
    hpi = HostParsedInference(ParsedBlob(blob))
    memory: list[dict[str, Any]] = [{"section": name, "kind": kind.name, "address": hpi.section_addr[name],
               "size": hpi.parsed.sections[name].size} for name, kind in LOADABLE_SECTIONS.items()]
    memory.sort(key=lambda m: m["address"])
    return {
        "header": header,
        "metadata": {k: meta[k] for k in ("compiler", "config_hash", "model_name", "precision", "hw", "inputs",
                                          "outputs", "variables", "memory", "weights_format") if k in meta},
        "sections": sections,
        "symbols": symbols,
        "relocations": relocs,
        "tasks": tasks,
        "barriers": meta.get("barriers", []),
        "memory_map": memory,
    }
