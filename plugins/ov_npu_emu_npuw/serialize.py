"""Export/import of a compiled NPUW LLM as one artefact, and the CACHE_DIR cache built on it.

Layout: ``MAGIC`` | u32 format version | u64 header length | SHA-256 of the header | header (UTF-8
JSON: versions, config, KV descriptor, ports, sub-blob table with sizes and SHA-256) | the sub-blobs
back to back (each one is what the sub-model's device wrote with ``export_model``; for the emulated
NPU, its ELF blob). Every byte is covered by a hash, checked before it is parsed or used.

A weightless artefact (CACHE_MODE=OPTIMIZE_SIZE, see weightless.py) holds the weightless
sub-blobs the devices exported themselves; the header names the IR's ``.bin`` (and, for devices
that check nothing, its SHA-256), and import hands WEIGHTS_PATH or MODEL_PTR to each device.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import struct
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import openvino as ov

from ov_npu_emu.errors import ArtefactConfigError, BlobFieldError, BlobFormatError, ConfigError, NpuEmuError
from ov_npu_emu.runtime.device import PortInfo
from ov_npu_emu.runtime.model_cache import model_hash, read_entry, write_entry
from ov_npu_emu.version import package_version
from ov_npu_emu_npuw.blockkv import has_past_input
from ov_npu_emu_npuw.config import VARIANTS_KEY, LLMConfig, parse_config, skip_padded_rows
from ov_npu_emu_npuw.model_io import KVLayout
from ov_npu_emu_npuw.weightless import bin_identity, check_bin_identity

if TYPE_CHECKING:
    from ov_npu_emu.api.core import Core
    from ov_npu_emu_npuw.compiled_model import LLMCompiledModel
    from ov_npu_emu_npuw.whisper import WhisperCompiledModel

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "WHISPER_MAGIC",
    "cache_key",
    "export_llm",
    "export_whisper",
    "ImportedLLM",
    "read_llm",
    "read_whisper",
    "load_cached",
    "load_cached_whisper",
    "store_cached",
    "store_cached_whisper",
]

logger = logging.getLogger("ov_npu_emu_npuw")
T = TypeVar("T")

MAGIC = b"\x13\x37OVNPUEMU-NPUWLLM\x00"
#: a Whisper decoder's artefact (NPUW_WHISPER): the LLM's layout, its own magic and header fields
WHISPER_MAGIC = b"\x13\x37OVNPUEMU-NPUWWSP\x00"
#: 2: SHA-256 of the header; 3: weightless sub-blobs (CACHE_MODE=OPTIMIZE_SIZE); 4: the devices
#: write the weightless sub-blobs themselves (no weight references in NPUW's header)
FORMAT_VERSION = 4
_FIXED = struct.Struct("<IQ")


def _versions() -> dict[str, str]:
    return {
        "openvino": ov.get_version(),
        "ov_npu_emu": package_version(),
        "format": str(FORMAT_VERSION),
    }


def _port_json(p: PortInfo) -> dict[str, Any]:
    return {
        "names": list(p.names),
        "type": str(p.element_type.to_dtype()),
        "shape": str(p.partial_shape),
    }


def _port(i: int, d: Mapping[str, Any]) -> PortInfo:
    return PortInfo(i, tuple(d["names"]), ov.Type(np.dtype(d["type"])), ov.PartialShape(d["shape"]))


def export_llm(cm: LLMCompiledModel) -> bytes:
    """One artefact: config, KV descriptor and every sub-blob (generate variants, then prefill)."""
    parts = [
        (f"kv{k}", sub.export_model().getvalue()) for k, sub in sorted(cm.subs.generate.items())
    ]
    parts += [
        (f"prefill_p{p}", sub.export_model().getvalue())
        for p, sub in sorted(cm.subs.prefill_pyramid.items())
    ]
    parts.append(("prefill", cm.subs.prefill.export_model().getvalue()))
    if cm.subs.lm_head is not None:
        parts.append(("lm_head", cm.subs.lm_head.export_model().getvalue()))
    table = _blob_table(parts)
    weightless = None
    if cm.cfg.weightless and cm.device == "CPU":
        # the sub-models were compiled with CACHE_MODE=OPTIMIZE_SIZE, so their devices wrote
        # weightless blobs; the CPU plugin reads the weights back by offset without checking
        # them, so the whole .bin is hashed
        weightless = {"by": "device", **bin_identity(cm.weights_path)}
    elif cm.cfg.weightless:
        # the device checks each constant it takes back itself (the emulated NPU does)
        weightless = {
            "by": "device",
            "bin_size": os.path.getsize(cm.weights_path),
            "bin_name": os.path.basename(cm.weights_path),
        }
        logger.info("weightless export: the sub-blobs refer to %s", cm.weights_path)
    header = {
        "versions": _versions(),
        "name": cm.name,
        "device": cm.device,
        "config": cm.cfg.to_json(),
        "kv": {
            "past": list(cm.kv.past_names),
            "present": list(cm.kv.present_names),
            "heads": list(cm.kv.num_heads),
            "dims": list(cm.kv.head_dims),
            "v_transposed": cm.kv.v_transposed,
        },
        "sub_defaults": cm.sub_defaults,
        "inputs": [_port_json(p) for p in cm.inputs],
        "outputs": [_port_json(p) for p in cm.outputs],
        "weightless": weightless,
        "blobs": table,
    }
    return _pack(MAGIC, header, parts)


def _blob_table(parts: list[tuple[str, bytes]]) -> list[dict[str, Any]]:
    return [{"role": r, "size": len(b), "sha256": hashlib.sha256(b).hexdigest()} for r, b in parts]


def _pack(magic: bytes, header: Mapping[str, Any], parts: list[tuple[str, bytes]]) -> bytes:
    h = json.dumps(header, sort_keys=True).encode()
    return b"".join(
        [magic, _FIXED.pack(FORMAT_VERSION, len(h)), hashlib.sha256(h).digest(), h, *(b for _, b in parts)]
    )


def export_whisper(cm: WhisperCompiledModel) -> bytes:
    """A Whisper decoder (NPUW_WHISPER) as one artefact: config, lengths, ports, the prefill and
    generate sub-blobs (each holding its weights)."""
    parts = [("prefill", cm.prefill.export_model().getvalue()), ("generate", cm.generate.export_model().getvalue())]
    header = {
        "versions": _versions(),
        "name": cm.name,
        "device": cm.device,
        # the keys the compilation was given: a Whisper decoder's config is parse_config's, with
        # none of the fields an LLM compilation settles (variants, grouped attention, ...)
        "config": {"raw": cm.cfg.to_json()["raw"]},
        "whisper": {"prompt_len": cm.prompt_len, "total": cm.total, "eos": cm.eos, "decompose": cm.decompose},
        "inputs": [_port_json(p) for p in cm.inputs],
        "outputs": [_port_json(p) for p in cm.outputs],
        "weightless": None,
        "blobs": _blob_table(parts),
    }
    return _pack(WHISPER_MAGIC, header, parts)


def read_whisper(core: Core, blob: bytes, config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """An exported Whisper decoder's parts (WhisperCompiledModel's constructor arguments), its
    sub-models imported; a damaged or foreign artefact is a typed error."""
    with _typed_header_errors("Whisper"):
        header, off = _read_header(blob, WHISPER_MAGIC)
        _check_versions(header)
        cfg_in = dict(config or {})
        _import_device_keys(header, cfg_in.pop("WEIGHTS_PATH", None), cfg_in.pop("MODEL_PTR", None))
        parts = _sub_blobs(blob, header, off)
        if sorted(parts) != ["generate", "prefill"]:
            raise BlobFormatError(f"NPUW Whisper artefact holds sub-blobs {sorted(parts)}; re-export it")
        sub_cfg = {k: v for k, v in cfg_in.items()
                   if not k.startswith(("NPU", "++NPUW", "CACHE_DIR")) and k != "CACHE_MODE"}
        w = header["whisper"]
        prompt, total, eos, decompose = int(w["prompt_len"]), int(w["total"]), int(w["eos"]), bool(w["decompose"])
        if not 0 < prompt < total <= 1 << 16:
            raise BlobFormatError(f"NPUW Whisper artefact lengths {prompt} / {total} are corrupt; re-export it")
        return {
            "name": str(header["name"]),
            "cfg": parse_config(header["config"]["raw"]),
            "device": str(header["device"]),
            "prefill": core.import_model(parts["prefill"], header["device"], dict(sub_cfg)),
            "generate": core.import_model(parts["generate"], header["device"], dict(sub_cfg)),
            "prompt_len": prompt,
            "total": total,
            "eos": eos,
            "inputs": [_port(i, d) for i, d in enumerate(header["inputs"])],
            "outputs": [_port(i, d) for i, d in enumerate(header["outputs"])],
            "decompose": decompose,
        }


@dataclasses.dataclass(frozen=True)
class ImportedLLM:
    """What an artefact holds: the compiled model's constructor arguments, sub-models imported."""

    name: str
    cfg: LLMConfig
    kv: KVLayout
    device: str
    prefill: Any
    generate: dict[int, Any]
    lm_head: Any
    prefill_pyramid: dict[int, Any]
    inputs: list[PortInfo]
    outputs: list[PortInfo]
    sub_defaults: dict[str, dict[str, Any]]


@contextlib.contextmanager
def _typed_header_errors(kind: str) -> Iterator[None]:
    """A header field of the wrong type or shape becomes a BlobFormatError (the header is hashed,
    so it was written wrong, or edited and re-hashed); typed errors pass as they are."""
    try:
        yield
    except NpuEmuError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RuntimeError) as e:
        raise BlobFormatError(
            f"NPUW {kind} artefact header is corrupt ({type(e).__name__}: {e}); re-export it"
        ) from e


def read_llm(core: Core, blob: bytes, config: Mapping[str, Any] | None = None) -> ImportedLLM:
    """Import the sub-models without recompiling; foreign, truncated or version-mismatched
    artefacts are typed errors."""
    with _typed_header_errors("LLM"):
        return _read_llm(core, blob, config)


def _read_llm(core: Core, blob: bytes, config: Mapping[str, Any] | None) -> ImportedLLM:
    header, off = _read_header(blob)
    _check_versions(header)
    cfg_in = dict(config or {})
    weights_path = cfg_in.pop("WEIGHTS_PATH", None)
    model_ptr = cfg_in.pop("MODEL_PTR", None)
    parts = _sub_blobs(blob, header, off)
    device_keys = _import_device_keys(header, weights_path, model_ptr)
    cfg = LLMConfig.from_json(header["config"])
    device = header["device"]
    sub_cfg = {
        k: v
        for k, v in cfg_in.items()
        if not k.startswith(("NPU", "++NPUW", "CACHE_DIR")) and k != "CACHE_MODE"
    }
    sub_cfg.update(device_keys)
    # a device blob does not carry runtime settings such as the thread count: re-apply NPUW's
    # defaults the compilation chose, unless the import config sets them itself
    sub_defaults: dict[str, dict[str, Any]] = {
        role: {k: v for k, v in extra.items() if k not in sub_cfg}
        for role, extra in header.get("sub_defaults", {}).items()
    }
    prefill, generate, pyramid, head = _import_sub_models(core, parts, cfg, device, sub_cfg, sub_defaults)
    kv = _kv_layout(header["kv"], prefill, generate)
    _check_sub_models(cfg, kv, prefill, generate, pyramid)
    ins = [_port(i, d) for i, d in enumerate(header["inputs"])]
    outs = [_port(i, d) for i, d in enumerate(header["outputs"])]
    logger.info("imported NPUW LLM %s (%d sub-models on %s)", header["name"], len(parts), device)
    return ImportedLLM(header["name"], cfg, kv, device, prefill, generate, head, pyramid, ins, outs, sub_defaults)


def _read_header(blob: bytes, magic: bytes = MAGIC) -> tuple[dict[str, Any], int]:
    """The artefact's checked JSON header and the offset of its first sub-blob."""
    if not blob.startswith(magic):
        kind = "Whisper decoder" if magic == WHISPER_MAGIC else "LLM"
        raise BlobFormatError(
            f"This blob wasn't serialized via NPUW! (no ov_npu_emu NPUW {kind} magic); "
            f"export it with CompiledModel.export_model() of an NPUW {kind}"
        )
    off = len(magic)
    if len(blob) < off + _FIXED.size:
        raise BlobFormatError("NPUW LLM artefact is truncated (header incomplete); re-export it")
    fmt, hlen = _FIXED.unpack_from(blob, off)
    off += _FIXED.size
    if fmt != FORMAT_VERSION:
        raise BlobFormatError(
            f"NPUW LLM artefact format {fmt} is not supported (this build reads {FORMAT_VERSION}); "
            "re-export it with this version"
        )
    if len(blob) < off + 32 + hlen:
        raise BlobFormatError("NPUW LLM artefact is truncated (header incomplete); re-export it")
    digest = blob[off : off + 32]
    off += 32
    if hashlib.sha256(blob[off : off + hlen]).digest() != digest:
        raise BlobFormatError(
            f"NPUW LLM artefact header (bytes {off}..{off + hlen - 1}) is corrupt (SHA-256 mismatch); re-export it"
        )
    try:
        header = json.loads(blob[off : off + hlen])
    except ValueError as e:
        raise BlobFormatError(f"NPUW LLM artefact header is corrupt: {e}") from e
    return header, off + hlen


def _check_versions(header: Mapping[str, Any]) -> None:
    want, have = header.get("versions", {}), _versions()
    if want.get("openvino") != have["openvino"] or want.get("ov_npu_emu") != have["ov_npu_emu"]:
        raise BlobFormatError(
            f"This blobs was serialized with different OV version! artefact: openvino {want.get('openvino')}, "
            f"ov_npu_emu {want.get('ov_npu_emu')}; "
            f"running: openvino {have['openvino']}, ov_npu_emu {have['ov_npu_emu']}. "
            "Recompile the model (or delete the CACHE_DIR entry)."
        )


def _sub_blobs(blob: bytes, header: Mapping[str, Any], off: int) -> dict[str, bytes]:
    """role -> device sub-blob, each checked against its SHA-256; nothing may follow the last."""
    parts: dict[str, bytes] = {}
    for entry in header["blobs"]:
        data = blob[off : off + entry["size"]]
        if len(data) != entry["size"]:
            raise BlobFormatError(f"NPUW LLM artefact is truncated in sub-blob {entry['role']}; re-export it")
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise BlobFormatError(f"NPUW LLM artefact sub-blob {entry['role']} is corrupt (SHA-256 mismatch)")
        parts[entry["role"]] = data
        off += entry["size"]
    if off != len(blob):
        raise BlobFormatError(
            f"NPUW LLM artefact has {len(blob) - off} unexpected bytes after its last sub-blob "
            "(spliced or extended); re-export it"
        )
    return parts


def _import_device_keys(header: Mapping[str, Any], weights_path: Any, model_ptr: Any) -> dict[str, Any]:
    """The device keys a weightless artefact needs; a blob with its weights refuses them."""
    if header.get("weightless"):
        return _device_weights(header["device"], header["weightless"], weights_path, model_ptr)
    if weights_path or model_ptr is not None:
        # the real fails here too (its weights bank finds nothing to load): never ignore the key
        raise ConfigError(
            f"{'WEIGHTS_PATH' if weights_path else 'MODEL_PTR'} was given but this NPUW blob holds its "
            "weights (exported with CACHE_MODE=OPTIMIZE_SPEED); import it without the key",
            key="WEIGHTS_PATH" if weights_path else "MODEL_PTR",
        )
    return {}


def _import_sub_models(
    core: Core,
    parts: Mapping[str, bytes],
    cfg: LLMConfig,
    device: str,
    sub_cfg: dict[str, Any],
    sub_defaults: Mapping[str, dict[str, Any]],
) -> tuple[Any, dict[int, Any], dict[int, Any], Any]:
    """(prefill, generate variants, pyramid prefills, LM head) imported on ``device``, in the
    order generate variants, prefill, pyramid, head."""
    sub = lambda role: {**sub_cfg, **sub_defaults.get(role, {})}  # noqa: E731
    try:
        generate = {k: core.import_model(parts[f"kv{k}"], device, sub(f"kv{k}")) for k in cfg.variants}
        pf_cfg = dict(sub_cfg)
        if skip_padded_rows(cfg, device):
            pf_cfg.setdefault("NPU_EMU_SKIP_PADDED_ROWS", "YES")  # as compile_llm set it
        prefill = core.import_model(parts["prefill"], device, pf_cfg)
        pyramid = {p: core.import_model(parts[f"prefill_p{p}"], device, sub_cfg) for p in cfg.prefill_pyramid}
        head = core.import_model(parts["lm_head"], device, sub("lm_head")) if cfg.shared_head else None
    except KeyError as e:
        raise BlobFormatError(f"NPUW LLM artefact lacks sub-blob {e}") from e
    return prefill, generate, pyramid, head


def _kv_layout(k: Mapping[str, Any], prefill: Any, generate: Mapping[int, Any]) -> KVLayout:
    """The header's KV descriptor; the KV names must be ports of the sub-models, or the first
    create_infer_request fails."""
    kv = KVLayout(
        tuple(k["past"]),
        tuple(k["present"]),
        tuple(k["heads"]),
        tuple(k["dims"]),
        bool(k["v_transposed"]),
    )
    pf_out = {n for p in prefill.outputs for n in p.get_names()}
    gen_in = [{n for p in g.inputs for n in p.get_names()} for g in generate.values()]
    bad = [n for n in kv.present_names if n not in pf_out]
    bad += [n for n in kv.past_names if not all(has_past_input(n, names) for names in gen_in)]
    sizes = (*kv.num_heads, *kv.head_dims)
    if not all(type(x) is int and 0 < x < 1 << 16 for x in sizes) or len(kv.num_heads) != len(kv.past_names):
        bad.append(f"heads/dims {sizes}")
    if bad or len(kv.past_names) != len(kv.present_names):
        raise BlobFormatError(f"NPUW LLM artefact KV descriptor does not match its sub-models {bad}; re-export it")
    return kv


def _dims(model: Any, name: str) -> list[int] | None:
    """The static dims of ``model``'s input ``name`` (None: no such input, or not static)."""
    for p in model.inputs:
        if name in p.get_names():
            ps = p.get_partial_shape()
            return [d.get_length() for d in ps] if ps.is_static else None
    return None


def _check_sub_models(cfg: LLMConfig, kv: KVLayout, prefill: Any, generate: Mapping[int, Any],
                      pyramid: Mapping[int, Any]) -> None:
    """The stored lengths and KV sizes must be the sub-models' own: the request sizes its KV
    buffer and staging from the configuration, so a configuration that declares more than the
    sub-models (each within its device's memory budget) is refused before anything is allocated."""
    def bad(key: str, field: str, have: Any, want: Any, model: str) -> ArtefactConfigError:
        return ArtefactConfigError(
            f"NPUW LLM artefact configuration is corrupt: {field} gives {want} but sub-model {model} has "
            f"{have} ({key}); re-export the model or delete the CACHE_DIR entry", key=key, field=field)

    ids = _dims(prefill, "input_ids")
    want = cfg.chunk_size or cfg.max_prompt_len
    if ids is not None and ids[-1] != want:
        key = "NPUW_LLM_PREFILL_CHUNK_SIZE" if cfg.chunk_size else "NPUW_LLM_MAX_PROMPT_LEN"
        raise bad(key, "config.chunk_size" if cfg.chunk_size else "config.max_prompt_len",
                  f"input_ids {ids}", want, "prefill")
    mask = _dims(prefill, "attention_mask")
    if mask is not None and mask[-1] != cfg.max_prompt_len:
        raise bad("NPUW_LLM_MAX_PROMPT_LEN", "config.max_prompt_len", f"attention_mask {mask}",
                  cfg.max_prompt_len, "prefill")
    for p, model in pyramid.items():
        mask = _dims(model, "attention_mask")
        if mask is not None and mask[-1] != p:
            raise bad("NPUW_LLM_PREFILL_ATTENTION_HINT", "config.prefill_pyramid", f"attention_mask {mask}", p,
                      f"prefill_p{p}")
    for k, model in generate.items():
        mask = _dims(model, "attention_mask")
        if mask is not None and mask[-1] != k:
            raise bad(VARIANTS_KEY, "config.variants", f"attention_mask {mask}", k, f"kv{k}")
        if cfg.block_kv:
            continue  # its past is a list of blocks
        for i, name in enumerate(kv.past_names):
            dims = _dims(model, name)
            if dims is None or len(dims) != 4:
                continue
            seq = dims[3] if kv.transposed(i) else dims[2]
            if seq != k - cfg.max_gen_len:
                raise bad(VARIANTS_KEY, "config.variants", f"{name} {dims}", f"{k - cfg.max_gen_len} past tokens",
                          f"kv{k}")
            if dims[1] != kv.num_heads[i] or (cfg.kv_precision not in ("u8", "u4")
                                              and (dims[2] if kv.transposed(i) else dims[3]) != kv.head_dims[i]):
                field = f"kv.heads[{i}]" if dims[1] != kv.num_heads[i] else f"kv.dims[{i}]"
                raise BlobFieldError(
                    f"NPUW LLM artefact KV descriptor is corrupt: kv.heads[{i}] {kv.num_heads[i]} / kv.dims[{i}] "
                    f"{kv.head_dims[i]} disagree with {name} {dims} of sub-model kv{k}; re-export it",
                    field=field)


#: why an artefact is weightless, and how to export one that is not (import errors say both)
_WEIGHTLESS_WHY = "NPUW exports without the IR's weights unless CACHE_MODE=OPTIMIZE_SPEED"
_KEEP_WEIGHTS = "or export with CACHE_MODE=OPTIMIZE_SPEED to keep the weights in the blob"


def _device_weights(device: str, desc: Mapping[str, Any], weights_path: Any, model_ptr: Any) -> dict[str, Any]:
    """The import keys that let the device restore its weightless sub-blobs: WEIGHTS_PATH or
    MODEL_PTR.  For a device that checks nothing (the artefact holds the .bin's SHA-256), the .bin
    is proven to be the one they were exported from first, and only WEIGHTS_PATH will do."""
    if "bin_sha256" not in desc:
        if model_ptr is not None and not isinstance(model_ptr, ov.Model):
            raise ConfigError(
                f"MODEL_PTR must be an openvino.Model, got {type(model_ptr).__name__}", key="MODEL_PTR"
            )
        if weights_path:
            return {"WEIGHTS_PATH": os.fspath(weights_path), "CACHE_MODE": "OPTIMIZE_SIZE"}
        if model_ptr is not None:
            return {"MODEL_PTR": model_ptr, "CACHE_MODE": "OPTIMIZE_SIZE"}
        raise ConfigError(
            "Blob is weightless but no WEIGHTS_PATH nor MODEL_PTR property is provided! "
            f"({_WEIGHTLESS_WHY}): pass WEIGHTS_PATH=<path of {desc.get('bin_name') or 'the .bin'}> of "
            f"the IR it was compiled from; {_KEEP_WEIGHTS}",
            key="WEIGHTS_PATH",
        )
    if model_ptr is not None:
        raise ConfigError(
            f"MODEL_PTR cannot restore weightless {device} sub-blobs (the "
            f"{device} plugin reads them from the .bin only); pass WEIGHTS_PATH=<model>.bin instead",
            key="MODEL_PTR",
        )
    if not weights_path:
        raise ConfigError(
            f"Blob is weightless but no WEIGHTS_PATH nor MODEL_PTR property is provided! ({_WEIGHTLESS_WHY}; "
            f"its {device} sub-blobs take their weights from WEIGHTS_PATH=<path of "
            f"{desc.get('bin_name') or 'the .bin'}> only); {_KEEP_WEIGHTS}",
            key="WEIGHTS_PATH",
        )
    check_bin_identity(os.fspath(weights_path), desc)
    return {"WEIGHTS_PATH": os.fspath(weights_path), "CACHE_MODE": "OPTIMIZE_SIZE"}


def cache_key(model: ov.Model, cfg: LLMConfig) -> str:
    """Model hash + effective config + versions: any change gives a new entry."""
    conf = cfg.to_json()
    conf.pop("cache_dir", None)
    conf["raw"] = {k: v for k, v in conf["raw"].items() if k != "CACHE_DIR"}
    payload = json.dumps(
        {"model": model_hash(model), "config": conf, "versions": _versions()},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def _path(cache_dir: str, key: str) -> str:
    return os.path.join(cache_dir, f"npuw_llm_{key}.blob")


def _load_entry(path: str, read: Callable[[bytes], T]) -> T | None:
    """``read`` of the entry at ``path``, or None: no entry, or a broken one (reported and
    ignored, never fatal)."""
    blob = read_entry(path)
    if blob is None:
        return None
    try:
        parts = read(blob)
    except NpuEmuError as e:
        logger.warning("CACHE_DIR entry %s could not be loaded (%s); compiling instead", path, e)
        return None
    logger.info("loaded NPUW model from CACHE_DIR %s", path)
    return parts


def load_cached(core: Core, cache_dir: str, key: str, config: Mapping[str, Any]) -> ImportedLLM | None:
    """The cached compilation, or None (a broken entry is reported and ignored, never fatal)."""
    return _load_entry(_path(cache_dir, key), lambda blob: read_llm(core, blob, config))


def store_cached(cache_dir: str, key: str, cm: LLMCompiledModel) -> None:
    """Write atomically (temp file + rename) so a crash never leaves half an entry."""
    write_entry(_path(cache_dir, key), export_llm(cm))


def load_cached_whisper(core: Core, cache_dir: str, key: str, config: Mapping[str, Any]) -> dict[str, Any] | None:
    """A cached Whisper decoder's parts (:func:`read_whisper`), or None (a broken entry is
    reported and ignored)."""
    return _load_entry(os.path.join(cache_dir, f"npuw_whisper_{key}.blob"),
                       lambda blob: read_whisper(core, blob, config))


def store_cached_whisper(cache_dir: str, key: str, cm: WhisperCompiledModel) -> None:
    write_entry(os.path.join(cache_dir, f"npuw_whisper_{key}.blob"), export_whisper(cm))
