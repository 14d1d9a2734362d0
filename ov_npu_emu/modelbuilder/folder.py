"""Writes a complete model folder (IR, tokenizer IR, HF configs) that openvino_genai can load."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from pathlib import Path
from typing import Any

import openvino as ov

from ov_npu_emu.errors import ConfigError, IRReadError
from ov_npu_emu.modelbuilder.config import LlamaConfig, get_preset
from ov_npu_emu.modelbuilder.graph import build_model
from ov_npu_emu.modelbuilder.reference import LlamaReference
from ov_npu_emu.modelbuilder.tokenizer import (
    BOS_ID,
    EOS_ID,
    MIN_VOCAB_SIZE,
    PAD_ID,
    build_tokenizer,
)
from ov_npu_emu.modelbuilder.weights import (
    LlamaWeights,
    StreamedWeights,
    WeightSpill,
    check_dtype,
    init_weights,
)
from ov_npu_emu.runtime.files import write_file

__all__ = [
    "MANIFEST_NAME",
    "MODEL_FILES",
    "load_reference",
    "load_weights",
    "make_model_folder",
    "normalize_node_names",
    "read_manifest",
]

logger = logging.getLogger(__name__)

#: Builder manifest: how the folder was made, so weights (and the reference) can be regenerated.
MANIFEST_NAME = "ov_npu_emu_model.json"
MANIFEST_VERSION = 1
#: scratch file of streamed weights while a folder is written (removed afterwards)
SCRATCH_NAME = ".ov_npu_emu_weights.scratch"
#: Files every builder folder contains.
MODEL_FILES: tuple[str, ...] = (
    "openvino_model.xml",
    "openvino_model.bin",
    "openvino_tokenizer.xml",
    "openvino_tokenizer.bin",
    "openvino_detokenizer.xml",
    "openvino_detokenizer.bin",
    "config.json",
    "generation_config.json",
    MANIFEST_NAME,
)

_AUTO_NAME = re.compile(r"^[A-Za-z0-9]+_\d+$")


def normalize_node_names(model: ov.Model) -> None:
    """Rename auto-named nodes (``Constant_1234``: a process-global counter) by graph order.

    Makes the saved XML byte-identical between builds of the same spec, in any process.
    """
    for index, node in enumerate(model.get_ordered_ops()):
        if _AUTO_NAME.match(node.get_friendly_name()):
            node.set_friendly_name(f"{node.get_type_name()}_{index}")


def _spec(
    preset: str,
    dtype: str,
    seed: int,
    overrides: dict[str, Any],
    config: LlamaConfig,
    group_size: int = 128,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "manifest_version": MANIFEST_VERSION,
        "preset": preset,
        "dtype": dtype,
        "seed": seed,
        "overrides": dict(sorted(overrides.items())),
        "config": dataclasses.asdict(config),
        "num_parameters": config.num_parameters(),
    }
    if dtype == "int4":  # only int4 has a group size; other manifests stay as they were
        spec["group_size"] = group_size
    return spec


def make_model_folder(
    path: str | Path,
    preset: str = "tiny",
    dtype: str = "f32",
    seed: int = 0,
    *,
    overwrite: bool = False,
    group_size: int = 128,
    **overrides: Any,
) -> Path:
    """Build preset ``preset`` (with ``overrides`` of :class:`LlamaConfig` fields) into ``path``.

    Writes ``openvino_model.xml/.bin`` (saved with ``compress_to_fp16=False``: the weight storage
    is exactly ``dtype``), ``openvino_tokenizer/detokenizer.xml/.bin``, HF-style ``config.json``
    and ``generation_config.json`` and the builder manifest.  ``group_size`` applies to
    ``dtype="int4"`` (16, 32, 64, 128 or -1 = channel-wise).  If ``path`` already holds a complete
    folder with the same spec it is reused (cheap cached fixtures) unless ``overwrite``.

    :returns: ``path`` as a :class:`~pathlib.Path`.
    :raises ConfigError: unknown preset / field / dtype, or a vocabulary too small for the
        tokenizer.
    """
    folder = Path(path)
    config = get_preset(preset, **overrides)
    if config.vocab_size < MIN_VOCAB_SIZE:
        raise ConfigError(
            f"vocab_size {config.vocab_size} is too small for the byte-level tokenizer "
            f"(need >= {MIN_VOCAB_SIZE}: 3 specials + 256 bytes)",
            key="vocab_size",
        )
    check_dtype(dtype, group_size)
    spec = _spec(preset, dtype, seed, overrides, config, group_size)
    if not overwrite and all((folder / f).is_file() for f in MODEL_FILES):
        try:
            if read_manifest(folder) == json.loads(json.dumps(spec)):
                logger.debug("reusing model folder %s", folder)
                return folder
        except IRReadError:
            pass

    folder.mkdir(parents=True, exist_ok=True)
    # Weights are drawn layer by layer and streamed to a scratch file whose memmapped bytes the
    # model's Constants share, so building an 8B folder holds about one layer in memory.  The
    # order model, tokenizer, save is kept: the tokenizer IRs hold auto names from the
    # process-global node counter, which save_model advances.
    spill = WeightSpill(folder / SCRATCH_NAME)
    try:
        weights = StreamedWeights(config, seed, dtype, group_size, spill)
        model = build_model(weights, name=f"ov_npu_emu_{preset}")
        tokenizer, detokenizer = build_tokenizer(
            config.vocab_size, model_max_length=config.max_position_embeddings
        )
        for m in (model, tokenizer, detokenizer):
            normalize_node_names(m)
        ov.save_model(model, folder / "openvino_model.xml", compress_to_fp16=False)
        del model, weights
    finally:
        spill.close()
    ov.save_model(tokenizer, folder / "openvino_tokenizer.xml", compress_to_fp16=False)
    ov.save_model(detokenizer, folder / "openvino_detokenizer.xml", compress_to_fp16=False)
    _write_json(folder / "config.json", config.to_hf_dict())
    # No max_new_tokens: as in optimum exports callers choose it.  max_length = the model's
    # context, so a random-weight model that never emits EOS cannot generate forever.
    _write_json(
        folder / "generation_config.json",
        {
            "_from_model_config": True,
            "bos_token_id": BOS_ID,
            "eos_token_id": EOS_ID,
            "pad_token_id": PAD_ID,
            "max_length": config.max_position_embeddings,
        },
    )
    # Written last: its presence marks the folder complete.
    _write_json(folder / MANIFEST_NAME, spec)
    logger.info("wrote %s model (%s, seed %d) to %s", preset, dtype, seed, folder)
    return folder


def _write_json(path: Path, data: dict[str, Any]) -> None:
    write_file(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The builder manifest of a folder made by :func:`make_model_folder`."""
    file = Path(path) / MANIFEST_NAME
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise IRReadError(f"{file} not found: not a folder made by ov-npu-emu make-model") from e
    except json.JSONDecodeError as e:
        raise IRReadError(f"{file} is not valid JSON: {e}") from e
    if data.get("manifest_version") != MANIFEST_VERSION:
        raise IRReadError(f"{file}: unsupported manifest version {data.get('manifest_version')!r}")
    return data


def load_weights(path: str | Path) -> LlamaWeights:
    """Regenerate the exact weights of a builder folder from its manifest (seed, dtype, config)."""
    data = read_manifest(path)
    try:
        config = LlamaConfig(**data["config"])
    except TypeError as e:
        raise ConfigError(f"{Path(path) / MANIFEST_NAME}: bad config: {e}") from e
    return init_weights(
        config, int(data["seed"]), str(data["dtype"]), int(data.get("group_size", 128))
    )


def load_reference(path: str | Path, **kwargs: Any) -> LlamaReference:
    """A :class:`LlamaReference` for a builder folder (kwargs go to its constructor)."""
    return LlamaReference(load_weights(path), **kwargs)
