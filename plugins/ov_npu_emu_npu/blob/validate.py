"""Checks a blob's metadata and sizes before the runtime uses them (corrupt blobs → BlobFormatError)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ov_npu_emu.errors import BlobFieldError, BlobFormatError, MemoryBudgetError
from ov_npu_emu_npu.blob.format import MAX_DIMS, align_up

__all__ = ["BUDGET_KEY", "DEVICE_MEMORY_LIMIT", "ELEMENT_TYPES", "check_declared_memory", "declared_memory",
           "tensor_bytes", "validate_meta"]

#: The emulated device's memory: the per-request arena must fit below the weights mapping
#: (driver/memory.py: ARENA_BASE 0x1000_0000 .. WEIGHTS_BASE 0x2_0000_0000), and one user tensor
#: or state may not be larger either.  Anything bigger is a corrupt header or a model that does
#: not fit, and must fail before numpy tries to allocate it.
DEVICE_MEMORY_LIMIT = 0x2_0000_0000 - 0x1000_0000

#: element type name (openvino get_type_name()) -> bytes per element; what the runtime can bind
ELEMENT_TYPES: dict[str, int] = {
    "f32": 4, "f16": 2, "bf16": 2, "f64": 8, "i64": 8, "i32": 4, "i16": 2, "i8": 1,
    "u64": 8, "u32": 4, "u16": 2, "u8": 1, "boolean": 1,
}


def tensor_bytes(shape: Any, element_type: str) -> int:
    """Bytes of a static tensor (arbitrary precision, so a corrupt shape cannot overflow)."""
    return math.prod(int(d) for d in shape) * ELEMENT_TYPES[element_type]


def _fail(what: str) -> BlobFormatError:
    return BlobFormatError(f"corrupt NPU blob metadata: {what}; recompile the model and export it again")


def _port(p: Any, where: str) -> None:
    if not isinstance(p, Mapping):
        raise _fail(f"{where} is not an object")
    names = p.get("names")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise _fail(f"{where}.names is not a list of strings")
    et = p.get("element_type")
    if et not in ELEMENT_TYPES:
        raise _fail(f"{where}.element_type {et!r} is not one the NPU runtime supports")
    shape = p.get("shape")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise _fail(f"{where}.shape {shape!r} is not a static shape")
    if (nbytes := tensor_bytes(shape, et)) > DEVICE_MEMORY_LIMIT:
        raise MemoryBudgetError(
            f"corrupt NPU blob metadata: {where} of shape {shape} ({nbytes} bytes) exceeds the emulated device "
            f"memory ({DEVICE_MEMORY_LIMIT} bytes); recompile the model and export it again",
            field=f"{where}.shape", size=nbytes, total=nbytes, budget=DEVICE_MEMORY_LIMIT)
    if "state" in p and p["state"] is not None and not isinstance(p["state"], str):
        raise _fail(f"{where}.state is not a variable id")


def _rows(rows: Any, where: str) -> None:
    """A task's token-row marks (format 1.3): small non-negative integers the device slices by."""
    def count(v: Any) -> bool:
        return type(v) is int and 0 <= v < 2**31

    if not isinstance(rows, Mapping) or not count(rows.get("L")):
        raise _fail(f"{where} is not a token-row record")
    if "min_row" in rows:
        ok = count(rows["min_row"])
    else:
        ok = count(rows.get("off")) and count(rows.get("n"))
        if "bpt" in rows:
            ok = ok and count(rows["bpt"]) and rows["bpt"] > 0
        else:
            axes = rows.get("axes")
            ok = ok and isinstance(axes, list) and all(type(a) is int and -1 <= a < MAX_DIMS for a in axes)
    if not ok:
        raise _fail(f"{where} has fields out of range")


def validate_meta(meta: Any) -> None:
    """Raise BlobFormatError unless ``meta`` has every field the runtime reads, with sane values."""
    if not isinstance(meta, Mapping):
        raise _fail("not a JSON object")
    for key, kind in (("hw", Mapping), ("compiler", Mapping), ("tasks", list), ("inputs", list),
                      ("outputs", list), ("variables", list)):
        if not isinstance(meta.get(key), kind):
            raise _fail(f"field {key!r} is missing or of the wrong type")
    hw = meta["hw"]
    for key in ("clock_mhz", "cmx_size"):
        v = hw.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 2**63:
            raise _fail(f"hw.{key} {v!r} is not a positive number")
    if not isinstance(meta["compiler"].get("version"), str):
        raise _fail("compiler.version is missing")
    for i, t in enumerate(meta["tasks"]):
        if not isinstance(t, Mapping) or not all(k in t for k in ("tid", "node", "op", "engine")):
            raise _fail(f"tasks[{i}] lacks tid/node/op/engine")
        if "rows" in t:
            _rows(t["rows"], f"tasks[{i}].rows")
    for what in ("inputs", "outputs"):
        for i, p in enumerate(meta[what]):
            _port(p, f"{what}[{i}]")
            if "state" not in p:
                raise _fail(f"{what}[{i}].state is missing")
    n_in, n_out = len(meta["inputs"]), len(meta["outputs"])
    for i, v in enumerate(meta["variables"]):
        _variable(v, i, n_in, n_out)


def _variable(v: Any, i: int, n_in: int, n_out: int) -> None:
    """Raise BlobFormatError unless ``v`` (variables[i]) is a state's port pair with its initial value."""
    _port({"names": [], **v} if isinstance(v, Mapping) else v, f"variables[{i}]")
    if not isinstance(v.get("id"), str):
        raise _fail(f"variables[{i}].id is not a string")
    for key, n in (("input", n_in), ("output", n_out)):
        if type(v.get(key)) is not int or not 0 <= v[key] < n:
            raise _fail(f"variables[{i}].{key} {v.get(key)!r} is not a port index")
    if "init" not in v:
        raise _fail(f"variables[{i}].init is missing")
    init = v["init"]
    if init is not None and (not isinstance(init, list) or len(init) != math.prod(v["shape"])
                             or not all(isinstance(x, (int, float)) for x in init)):
        raise _fail(f"variables[{i}].init does not match its shape {v['shape']}")


#: the device key that sets the budget check_declared_memory enforces
BUDGET_KEY = "NPU_EMU_DEVICE_MEMORY_MB"


def _field(what: str, field: str) -> BlobFieldError:
    return BlobFieldError(
        f"corrupt NPU blob metadata: {what}; recompile the model and export it again", field=field)


def declared_memory(meta: Mapping[str, Any], arena: Mapping[str, int], weights_size: int,
                    symbols: Mapping[str, int]) -> list[tuple[str, int]]:
    """(field, bytes) of everything one request of a blob allocates, after checking that the
    fields agree with each other (``meta`` already passed :func:`validate_meta`).

    ``arena``: size of every loadable section but the weights (the request's device arena, NOBITS
    scratch and CMX included); ``weights_size``: bytes of ``.npu.weights`` (file-backed, so
    bounded by the file: not counted, but every constant-table view must lie inside it);
    ``symbols``: the user-I/O symbols' ``st_size`` -- a port's shape must declare exactly the
    bytes its symbol does, and a variable exactly its state ports' shape and type. Raises
    :class:`BlobFieldError` naming the first field that disagrees.
    """
    items = [(f"section {name} (sh_size)", int(size)) for name, size in arena.items()]
    for what in ("inputs", "outputs"):
        for i, p in enumerate(meta[what]):
            nbytes = tensor_bytes(p["shape"], p["element_type"])
            sym = p.get("symbol")
            if sym is not None:
                if sym not in symbols:
                    raise _field(f"{what}[{i}].symbol {sym!r} is not a symbol of the blob", f"{what}[{i}].symbol")
                if symbols[sym] != nbytes:
                    raise _field(
                        f"{what}[{i}].shape {p['shape']} {p['element_type']} is {nbytes} bytes, but its "
                        f"symbol {sym} declares {symbols[sym]}", f"{what}[{i}].shape")
            if p["state"] is None:  # state ports are bound to the variable's buffer
                items.append((f"{what}[{i}] ({(p['names'] or ['?'])[0]})", nbytes))
    for i, v in enumerate(meta["variables"]):
        for key in ("input", "output"):
            port = meta[f"{key}s"][v[key]]
            if port["state"] != v["id"]:
                raise _field(f"variables[{i}].{key} {v[key]} is not the port of state {v['id']!r}",
                             f"variables[{i}].{key}")
            if list(port["shape"]) != list(v["shape"]) or port["element_type"] != v["element_type"]:
                raise _field(
                    f"variables[{i}] {v['id']!r} is {v['shape']} {v['element_type']} but its {key} port "
                    f"{key}s[{v[key]}] is {port['shape']} {port['element_type']}", f"variables[{i}].shape")
        items.append((f"variables[{i}] ({v['id']})", tensor_bytes(v["shape"], v["element_type"])))
    _constants(meta.get("constants"), weights_size)
    return items


#: the compiler packs constants at this alignment (compiler/memory.py ALIGN), from offset 0
CONSTANT_ALIGN = 64


def _constants(table: Any, size: int) -> None:
    """The constant table's views tile ``.npu.weights`` as the compiler packs them: ascending, each
    at the 64-byte-aligned end of the one before, the last ending at the section's end (a view
    shrunk, grown or moved would hand a kernel bytes of another constant)."""
    if table is None:
        return
    if not isinstance(table, list):
        raise _field("constants is not a list of [offset, size] spans", "constants")
    for i, e in enumerate(table):
        if not (isinstance(e, list) and len(e) == 2 and all(type(x) is int and x >= 0 for x in e)):
            raise _field(f"constants[{i}] {e!r} is not an [offset, size] pair", f"constants[{i}]")
    end = 0
    for i, (off, n) in sorted(enumerate(table), key=lambda ie: ie[1][0]):
        if off != align_up(end, CONSTANT_ALIGN) or off + n > size:
            raise _field(f"constants[{i}] [{off}, {n}] does not follow the constant before it (which ends at "
                         f"{end}) inside .npu.weights ({size} bytes)", f"constants[{i}]")
        end = off + n
    if table and end != size:
        raise _field(f"the constant table ends at {end}, not at the end of .npu.weights ({size} bytes)",
                     f"constants[{len(table) - 1}]")


def check_declared_memory(items: list[tuple[str, int]], budget: int | None) -> int:
    """The declared total; :class:`MemoryBudgetError` when it exceeds ``budget`` bytes (None: no
    budget; each tensor and the arena stay bounded by DEVICE_MEMORY_LIMIT), naming the largest item."""
    total = sum(n for _, n in items)
    if budget is None or total <= budget:
        return total
    limit = budget
    field, size = max(items, key=lambda it: it[1])
    mib = lambda n: f"{n / 2**20:.1f} MiB"  # noqa: E731
    raise MemoryBudgetError(
        f"NPU blob declares {total} bytes ({mib(total)}) of device memory per request, over the budget of "
        f"{limit} bytes ({mib(limit)}, {BUDGET_KEY}); "
        f"the largest item is {field} with {size} bytes. If the model really needs it, raise {BUDGET_KEY} "
        "(core.set_property('NPU', {'" + BUDGET_KEY + "': MiB})); otherwise the blob is corrupt: recompile "
        "and export it again",
        field=field, size=size, total=total, budget=limit)
