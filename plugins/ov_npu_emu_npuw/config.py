"""NPUW LLM configuration: keys, real defaults, alignment rules and validation."""

from __future__ import annotations

import dataclasses
import difflib
import logging
from collections.abc import Mapping
from typing import Any

from ov_npu_emu.errors import ConfigError
from ov_npu_emu.options import as_bool

__all__ = [
    "LLMConfig",
    "align_to",
    "is_npuw_llm_config",
    "generate_rung_sizes",
    "ladder_sizes",
    "parse_config",
    "pyramid_sizes",
    "select_variant",
]

logger = logging.getLogger(__name__)

#: our own key (not in the real NPUW): explicit generate-variant KV sizes, e.g. "256,512,1024,1152"
VARIANTS_KEY = "NPUW_LLM_GENERATE_VARIANTS"
#: our own key: generate variants compute attention as grouped-query MatMul/Softmax/MatMul
GROUPED_ATTENTION_KEY = "NPUW_LLM_GENERATE_GROUPED_ATTENTION"
#: our own key: values per scale/zero point of a u8/u4 KV cache (0: one group per head row)
KV_GROUP_SIZE_KEY = "NPUW_EMU_KV_GROUP_SIZE"
#: our own key: on NPUW_DEVICES=CPU, a whole-prompt (unchunked) prefill runs on the smallest of
#: extra static prefill models of 64·2^k tokens (< MAX_PROMPT_LEN) that holds the prompt, compiled
#: on first use; on the emulated NPU the device skips the padded rows instead (docs/npuw.md)
LADDER_KEY = "NPUW_LLM_PREFILL_LADDER"
#: smallest rung of the prefill ladder (the prompt alignment of NPUW_LLM_MAX_PROMPT_LEN)
LADDER_BASE = 64
#: our own key: extra generate variants of 64·2^k KV slots below the smallest configured one,
#: compiled on first use; a conversation starts on the smallest that holds its prompt and moves
#: up as it grows.  Unset: on for NPUW_DEVICES=CPU when the variants are not explicit and the KV
#: window is a sizeable share of a step's work (compiled_model.generate_ladder_default)
GENERATE_LADDER_KEY = "NPUW_LLM_GENERATE_LADDER"
#: the emulator's own device keys (NPU_EMU_HOST_FUSION, NPU_EMU_WEIGHTS_BANK, ...): given at the
#: top level of an NPUW compile they reach every sub-model's device
EMU_DEVICE_PREFIX = "NPU_EMU_"

#: keys we interpret, with the real defaults (npuw_option_defs.inc) unless marked ours
DEFAULTS: dict[str, Any] = {
    "NPU_USE_NPUW": "NO",
    "NPUW_LLM": "NO",
    "NPUW_LLM_BATCH_DIM": 0,
    "NPUW_LLM_SEQ_LEN_DIM": 2,
    "NPUW_LLM_MAX_PROMPT_LEN": 1024,
    "NPUW_LLM_MIN_RESPONSE_LEN": 128,
    "NPUW_LLM_MAX_GENERATION_TOKEN_LEN": 1,
    "NPUW_LLM_PREFILL_CHUNK_SIZE": 1024,
    "NPUW_LLM_PREFILL_HINT": "DYNAMIC",
    "NPUW_LLM_PREFILL_ATTENTION_HINT": "STATIC",  # PYRAMID (DYNAMIC, HFA): smaller chunk models
    "NPUW_LLM_GENERATE_HINT": "FAST_COMPILE",
    "NPUW_LLM_GENERATE_PYRAMID": True,
    "NPUW_LLM_SHARED_HEAD": True,  # the LM head is a third model shared by prefill and generate
    "NPUW_LLM_OPTIMIZE_V_TENSORS": False,  # real: YES; ours stores V [1,H,D,S] only when asked
    "NPUW_LLM_CACHE_ROPE": True,  # sin/cos tables for positions [0, total KV size)
    "NPUW_LLM_ENABLE_PREFIX_CACHING": False,  # needs chunked prefill
    "NPUW_LLM_PREFIX_CACHING_BLOCK_SIZE": 256,  # forced to the chunk size unless it divides it
    "NPUW_LLM_PREFIX_CACHING_MAX_NUM_BLOCKS": 128,  # LRU capacity per infer request
    "NPUW_LLM_ENABLE_BLOCK_BASED_KV_CACHE": False,  # KV in blocks of the chunk size (blockkv.py)
    "NPUW_DEVICES": "NPU",  # real: "NPU,CPU"; ours means the emulated NPU
    "KV_CACHE_PRECISION": "f16",
    "NPUW_LLM_MAX_LORA_RANK": 32,  # static rank of the LoRA inputs (ov_npu_emu_npuw/lora.py)
    VARIANTS_KEY: "",
    GROUPED_ATTENTION_KEY: None,  # ours; None: YES when the generate device is CPU, else NO
    KV_GROUP_SIZE_KEY: 0,  # ours: u8/u4 KV group size; 0 = head_dim
    LADDER_KEY: True,  # ours; token-proportional prefill for short prompts
    GENERATE_LADDER_KEY: None,  # ours; None: decided per device and model (see the key above)
    "CACHE_DIR": "",
}

#: real NPUW keys about partitioning/folding that have no meaning here: accepted and ignored
IGNORED_KEYS = frozenset(
    {
        "NPUW_ONLINE_PIPELINE",
        "NPUW_FOLD",
        "NPUW_CWAI",
        "NPUW_DCOFF_TYPE",
        "NPUW_DCOFF_SCALE",
        "NPUW_FUNCALL_FOR_ALL",
        "NPUW_FUNCALL_ASYNC",
        "NPUW_UNFOLD_IREQS",
        "NPUW_WEIGHTS_BANK",
        "NPUW_WEIGHTS_BANK_ALLOC",
        "NPUW_SLICE_OUT",
        "NPUW_PMM",
        "NPUW_DQ",
        "NPUW_DQ_FULL",
        "NPUW_ONLINE_ISOLATE",
        "NPUW_ONLINE_KEEP_BLOCK_SIZE",
        "NPUW_CACHE_DIR",
        "NPUW_ACC_CHECK",
        "NPUW_LLM_OPTIMIZE_FP8",
        "NPUW_LLM_GENERATE_ATTENTION_HINT",
    }
)
#: keys NPUW itself consumes for export/import (weightless artefacts, serialize.py); never
#: passed on to the sub-model devices
CACHE_MODES = ("OPTIMIZE_SPEED", "OPTIMIZE_SIZE")
EXPORT_KEYS = frozenset({"CACHE_MODE", "WEIGHTS_PATH"})
SUBCONFIG_KEYS = ("NPUW_LLM_PREFILL_CONFIG", "NPUW_LLM_GENERATE_CONFIG")
HEAD_CONFIG_KEY = "NPUW_LLM_SHARED_HEAD_CONFIG"
_KV_PRECISIONS = {
    "f16": "f16",
    "f32": "f32",
    "fp16": "f16",
    "fp32": "f32",
    "float16": "f16",
    "float32": "f32",
    # ours (quantised KV, ov_npu_emu_npuw/kvquant.py): u8 per-group asymmetric, u4 packed
    "u8": "u8",
    "u4": "u4",
    "uint8": "u8",
    "uint4": "u4",
}


def align_to(value: int, alignment: int) -> int:
    """Round ``value`` up to a multiple of ``alignment``."""
    return (value + alignment - 1) // alignment * alignment


def _bool(key: str, value: Any) -> bool:
    # "" reads as NO here: genai passes empty strings for keys it does not set
    return False if isinstance(value, str) and not value.strip() else as_bool(key, value)


def _uint(key: str, value: Any, *, minimum: int = 0) -> int:
    """A non-negative integer from an int or a decimal string; anything else is a typed error."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, str))
        and not hasattr(value, "__index__")
    ):
        raise ConfigError(
            f"{key} must be an integer, got {type(value).__name__} {value!r}", key=key
        )
    try:
        n = int(value) if not isinstance(value, str) else int(value.strip(), 10)
    except ValueError as e:
        raise ConfigError(
            f'{key} must be an integer, got {value!r}; pass e.g. {key}="256"', key=key
        ) from e
    if n < minimum:
        what = "positive" if minimum > 0 else "non-negative"
        raise ConfigError(f"{key} must be a {what} integer, got {n}", key=key)
    return n


def is_npuw_llm_config(device_name: str, config: Mapping[str, Any]) -> bool:
    """True when the call asks for NPUW's LLM pipeline (what openvino.genai sets for "NPU")."""
    if device_name != "NPU":
        return False
    try:
        return _bool("NPU_USE_NPUW", config.get("NPU_USE_NPUW", "NO")) and _bool(
            "NPUW_LLM", config.get("NPUW_LLM", "NO")
        )
    except ConfigError:
        return False


def pyramid_sizes(max_prompt: int, min_response: int) -> list[int]:
    """Real NPUW pyramid: 1024·2^k + min_response while it fits, then the total."""
    total = max_prompt + min_response
    sizes: list[int] = []
    base = 1024
    while base + min_response <= total:
        sizes.append(base + min_response)
        base *= 2
    if not sizes or sizes[-1] != total:
        sizes.append(total)
    return sizes


def ladder_sizes(max_prompt: int) -> tuple[int, ...]:
    """Prefill ladder rungs: 64, 128, 256, … below ``max_prompt`` (which is the top rung)."""
    sizes, size = [], LADDER_BASE
    while size < max_prompt:
        sizes.append(size)
        size *= 2
    return tuple(sizes)


def generate_rung_sizes(smallest_variant: int, max_gen: int) -> tuple[int, ...]:
    """Generate-ladder rungs: 64, 128, 256, … below the smallest variant, each with room for a
    prompt and one call of ``max_gen`` tokens."""
    sizes, size = [], LADDER_BASE
    while size < smallest_variant:
        if size > 2 * max_gen:
            sizes.append(size)
        size *= 2
    return tuple(sizes)


def select_variant(sizes: list[int], prompt_len: int, min_response: int) -> int:
    """Smallest KV size ≥ prompt + MIN_RESPONSE_LEN (the largest when none fits), as NPUW does."""
    need = prompt_len + min_response
    for s in sorted(sizes):
        if s >= need:
            return s
    logger.warning("no generate variant holds %d tokens; using the largest (%d)", need, max(sizes))
    return max(sizes)


@dataclasses.dataclass(frozen=True)
class LLMConfig:
    """Validated NPUW LLM configuration (all lengths already aligned)."""

    max_prompt_len: int
    min_response_len: int
    chunk_size: int  # 0: whole-prompt (static) prefill
    prefill_hint: str
    generate_hint: str
    pyramid: bool
    variants: tuple[int, ...]  # generate KV sizes, ascending; the last is the total
    kv_precision: str  # "f16" | "f32" | "u8" | "u4"
    optimize_v: bool  # store V transposed [1, H, D, S]
    shared_head: bool  # LM head cut into its own model
    devices: tuple[str, ...]
    prefill_config: dict[str, Any]
    generate_config: dict[str, Any]
    cache_dir: str
    raw: dict[str, Any]  # every key the user passed (for get_property and export)
    # generate variants: SDPA → grouped-query MatMul/Softmax/MatMul; None until the device is known
    grouped_attention: bool | None = None
    cache_rope: bool = False  # artefacts from before the key default to what they were built with
    prefix_block: int = 0  # prefix-cache block size in tokens; 0: prefix caching off
    prefix_max_blocks: int = 128
    block_kv: bool = False  # NPUW_LLM_ENABLE_BLOCK_BASED_KV_CACHE: blocks of chunk_size tokens
    max_gen_len: int = 1  # tokens per generate call (NPUW_LLM_MAX_GENERATION_TOKEN_LEN, aligned)
    prefill_attention_hint: str = "STATIC"
    prefill_pyramid: tuple[int, ...] = ()  # mask lengths of the smaller chunk-prefill models
    # shared LM head sub-config; None: the generate sub-config (see parse_config)
    head_config: dict[str, Any] | None = None
    kv_group_size: int = 0  # u8/u4 KV: values per scale/zero point; 0 = head_dim
    # ours: token-proportional prefill (NPUW_LLM_PREFILL_LADDER); the rungs are the static
    # prefill sizes below max_prompt_len (CPU device, whole-prompt prefill only)
    prefill_ladder: bool = False
    ladder: tuple[int, ...] = ()
    max_lora_rank: int = 32  # NPUW_LLM_MAX_LORA_RANK: LoRA inputs' static rank
    # ours: NPUW_LLM_GENERATE_LADDER as given (None: unset) and the effective generate-ladder
    # rungs, KV sizes below variants[0] (set once the device and the model are known)
    generate_ladder: bool | None = None
    generate_rungs: tuple[int, ...] = ()
    # CACHE_MODE as given ("" = unset): OPTIMIZE_SIZE exports without the IR's weights
    cache_mode: str = ""
    weights_path: str = ""  # WEIGHTS_PATH at compile: the .bin a weightless export refers to

    @property
    def weightless(self) -> bool:
        return self.cache_mode == "OPTIMIZE_SIZE"

    @property
    def total_size(self) -> int:
        return self.variants[-1]

    @property
    def use_chunking(self) -> bool:
        return self.chunk_size > 0

    def properties(self) -> dict[str, Any]:
        """What ``get_property`` answers (the effective values, like the real compiled model)."""
        return {
            "NPU_USE_NPUW": True,
            "NPUW_LLM": True,
            "NPUW_LLM_BATCH_DIM": 0,
            "NPUW_LLM_SEQ_LEN_DIM": 2,
            "NPUW_LLM_MAX_PROMPT_LEN": self.max_prompt_len,
            "NPUW_LLM_MIN_RESPONSE_LEN": self.min_response_len,
            "NPUW_LLM_MAX_GENERATION_TOKEN_LEN": self.max_gen_len,
            "NPUW_LLM_MAX_LORA_RANK": self.max_lora_rank,
            "NPUW_LLM_PREFILL_CHUNK_SIZE": self.chunk_size
            if self.chunk_size
            else int(self.raw.get("NPUW_LLM_PREFILL_CHUNK_SIZE", 1024)),
            "NPUW_LLM_PREFILL_HINT": self.prefill_hint,
            "NPUW_LLM_PREFILL_ATTENTION_HINT": self.prefill_attention_hint,
            "NPUW_LLM_GENERATE_HINT": self.generate_hint,
            "NPUW_LLM_GENERATE_PYRAMID": self.pyramid,
            VARIANTS_KEY: ",".join(map(str, self.variants)),
            GROUPED_ATTENTION_KEY: self.grouped_attention,
            LADDER_KEY: self.prefill_ladder,
            GENERATE_LADDER_KEY: bool(self.generate_rungs),
            "NPUW_LLM_SHARED_HEAD": self.shared_head,
            "NPUW_LLM_OPTIMIZE_V_TENSORS": self.optimize_v,
            "NPUW_LLM_CACHE_ROPE": self.cache_rope,
            "NPUW_LLM_ENABLE_PREFIX_CACHING": bool(self.prefix_block),
            "NPUW_LLM_PREFIX_CACHING_BLOCK_SIZE": self.prefix_block
            or int(self.raw.get("NPUW_LLM_PREFIX_CACHING_BLOCK_SIZE", 256)),
            "NPUW_LLM_PREFIX_CACHING_MAX_NUM_BLOCKS": self.prefix_max_blocks,
            "NPUW_LLM_ENABLE_BLOCK_BASED_KV_CACHE": self.block_kv,
            "NPUW_DEVICES": ",".join(self.devices),
            "KV_CACHE_PRECISION": self.kv_precision,
            KV_GROUP_SIZE_KEY: self.kv_group_size,
            "CACHE_DIR": self.cache_dir,
            # the real answers CACHE_MODE only when it was set (else "Unsupported configuration key")
            **({"CACHE_MODE": self.cache_mode} if self.cache_mode else {}),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(self).items()
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> LLMConfig:
        d = dict(d)
        d["variants"] = tuple(d["variants"])
        d["devices"] = tuple(d["devices"])
        d["prefill_pyramid"] = tuple(d.get("prefill_pyramid", ()))
        d.setdefault("grouped_attention", False)  # artefacts written before the key existed
        d["ladder"] = tuple(d.get("ladder", ()))
        d["generate_rungs"] = tuple(d.get("generate_rungs", ()))
        return cls(**d)


def _subconfig(key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"{key} must be a dict of device properties, got {type(value).__name__}", key=key
        )
    return dict(value)


def parse_config(config: Mapping[str, Any]) -> LLMConfig:
    """Validate ``config`` and apply the real alignment rules; bad values raise ConfigError."""
    raw = dict(config)
    # the keys the caller gave (a Core call's config also holds the NPU device's defaults)
    given = getattr(config, "explicit_keys", None)
    # Unknown NPUW LLM keys are almost always typos: fail early with a suggestion.
    subconfig_keys = (*SUBCONFIG_KEYS, HEAD_CONFIG_KEY)
    known = set(DEFAULTS) | IGNORED_KEYS | set(subconfig_keys) | {"++" + k for k in subconfig_keys}
    for key in raw:
        if key.startswith(("NPUW_LLM", "++NPUW_LLM")) and key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise ConfigError(f"Unsupported NPUW LLM property {key}{hint}", key=key)
    def get(k: str) -> Any:
        return raw.get(k, DEFAULTS[k])

    cache_mode = str(raw.get("CACHE_MODE", "") or "").upper()
    if cache_mode and cache_mode not in CACHE_MODES:
        raise ConfigError(
            f"CACHE_MODE={raw['CACHE_MODE']!r} is not one of {', '.join(CACHE_MODES)}", key="CACHE_MODE"
        )
    for key, want in (("NPUW_LLM_BATCH_DIM", 0), ("NPUW_LLM_SEQ_LEN_DIM", 2)):
        if _uint(key, get(key)) != want:
            raise ConfigError(
                f"{key}={raw[key]} is not supported: only the BNSD KV layout ({key}={want}) is",
                key=key,
            )
    max_gen = _uint(
        "NPUW_LLM_MAX_GENERATION_TOKEN_LEN", get("NPUW_LLM_MAX_GENERATION_TOKEN_LEN"), minimum=1
    )
    if max_gen != 1:
        max_gen = align_to(max_gen, 8)  # real rule: several tokens per call are aligned to 8

    prefill_hint = str(get("NPUW_LLM_PREFILL_HINT")).upper()
    if prefill_hint not in ("DYNAMIC", "STATIC"):
        raise ConfigError(
            f"NPUW_LLM_PREFILL_HINT must be DYNAMIC or STATIC, got {get('NPUW_LLM_PREFILL_HINT')!r}",
            key="NPUW_LLM_PREFILL_HINT",
        )
    generate_hint = str(get("NPUW_LLM_GENERATE_HINT")).upper()
    if generate_hint not in ("FAST_COMPILE", "BEST_PERF"):
        raise ConfigError(
            f"NPUW_LLM_GENERATE_HINT must be FAST_COMPILE or BEST_PERF, got {get('NPUW_LLM_GENERATE_HINT')!r}",
            key="NPUW_LLM_GENERATE_HINT",
        )
    if "NPUW_LLM_GENERATE_HINT" in raw and "NPUW_LLM_GENERATE_CONFIG" in raw:
        # Real text; the hint only edits the default generate config, so both together is ambiguous.
        raise ConfigError(
            "GENERATE_HINT only works with default generate config! "
            "Remove NPUW_LLM_GENERATE_HINT or NPUW_LLM_GENERATE_CONFIG (or use ++NPUW_LLM_GENERATE_CONFIG).",
            key="NPUW_LLM_GENERATE_HINT",
        )

    max_prompt = align_to(
        _uint("NPUW_LLM_MAX_PROMPT_LEN", get("NPUW_LLM_MAX_PROMPT_LEN"), minimum=1), 64
    )
    min_response = align_to(
        _uint("NPUW_LLM_MIN_RESPONSE_LEN", get("NPUW_LLM_MIN_RESPONSE_LEN"), minimum=1), 64
    )
    chunk = _uint("NPUW_LLM_PREFILL_CHUNK_SIZE", get("NPUW_LLM_PREFILL_CHUNK_SIZE"))
    if chunk & (chunk - 1):
        raise ConfigError(
            f"Configuration Error: chunk size ({chunk}) is not power of 2. "
            "Please adjust NPUW_LLM_PREFILL_CHUNK_SIZE.",
            key="NPUW_LLM_PREFILL_CHUNK_SIZE",
        )
    if prefill_hint == "STATIC" or chunk == 0 or chunk >= max_prompt:
        chunk = 0  # real rule: chunking is off when the chunk covers the whole prompt
    else:
        max_prompt = align_to(max_prompt, chunk)
    total = max_prompt + min_response
    if max_gen > 1 and chunk and chunk < max_gen:
        raise ConfigError(
            f"NPUW_LLM_PREFILL_CHUNK_SIZE {chunk} is smaller than NPUW_LLM_MAX_GENERATION_TOKEN_LEN "
            f"{max_gen} (aligned to 8): the prefill could not produce that many positions for "
            "the shared LM head; use a chunk of at least that size",
            key="NPUW_LLM_PREFILL_CHUNK_SIZE",
        )
    if max_gen > min_response:
        raise ConfigError(
            f"NPUW_LLM_MAX_GENERATION_TOKEN_LEN {max_gen} (aligned to 8) exceeds "
            f"NPUW_LLM_MIN_RESPONSE_LEN {min_response}: a generate variant picked for a prompt "
            "could not take one call; raise MIN_RESPONSE_LEN or lower MAX_GENERATION_TOKEN_LEN",
            key="NPUW_LLM_MAX_GENERATION_TOKEN_LEN",
        )

    prefix_block = 0
    max_blocks = _uint(
        "NPUW_LLM_PREFIX_CACHING_MAX_NUM_BLOCKS",
        get("NPUW_LLM_PREFIX_CACHING_MAX_NUM_BLOCKS"),
        minimum=1,
    )
    block = _uint(
        "NPUW_LLM_PREFIX_CACHING_BLOCK_SIZE", get("NPUW_LLM_PREFIX_CACHING_BLOCK_SIZE"), minimum=1
    )
    if _bool("NPUW_LLM_ENABLE_PREFIX_CACHING", get("NPUW_LLM_ENABLE_PREFIX_CACHING")):
        if not chunk:
            raise ConfigError(
                "NPUW_LLM_ENABLE_PREFIX_CACHING works with chunked prefill only: set "
                "NPUW_LLM_PREFILL_HINT=DYNAMIC and NPUW_LLM_PREFILL_CHUNK_SIZE below "
                f"NPUW_LLM_MAX_PROMPT_LEN ({max_prompt})",
                key="NPUW_LLM_ENABLE_PREFIX_CACHING",
            )
        # real rule: a block must not straddle chunks, so a block size that does not divide
        # the chunk becomes the chunk size
        prefix_block = block if chunk % block == 0 else chunk
        if prefix_block != block:
            logger.info(
                "NPUW_LLM_PREFIX_CACHING_BLOCK_SIZE %d does not divide the chunk size %d: using %d",
                block,
                chunk,
                chunk,
            )

    block_kv = _block_kv(get, chunk, max_prompt, bool(prefix_block))

    attention_hint = str(get("NPUW_LLM_PREFILL_ATTENTION_HINT")).upper()
    if attention_hint not in ("STATIC", "DYNAMIC", "PYRAMID", "HFA"):
        raise ConfigError(
            "NPUW_LLM_PREFILL_ATTENTION_HINT must be STATIC, DYNAMIC, PYRAMID or HFA, got "
            f"{get('NPUW_LLM_PREFILL_ATTENTION_HINT')!r}",
            key="NPUW_LLM_PREFILL_ATTENTION_HINT",
        )
    prefill_pyramid: tuple[int, ...] = ()
    if attention_hint != "STATIC" and chunk:
        # Ours: chunk-prefill models of mask length 2C, 4C, … below P, so a chunk attends over
        # a past about the size of its history instead of P − C (real: attention isolated per
        # chunk; it applies with chunking only).
        sizes, size = [], 2 * chunk
        while size < max_prompt:
            sizes.append(size)
            size *= 2
        prefill_pyramid = tuple(sizes)

    pyramid = _bool("NPUW_LLM_GENERATE_PYRAMID", get("NPUW_LLM_GENERATE_PYRAMID"))
    ladder = _bool(LADDER_KEY, get(LADDER_KEY))
    explicit = get(VARIANTS_KEY)
    if explicit not in ("", None, [], ()):
        items = explicit.split(",") if isinstance(explicit, str) else list(explicit)
        sizes = sorted(
            {
                _uint(VARIANTS_KEY, str(s).strip() if isinstance(s, str) else s, minimum=2)
                for s in items
            }
        )
        if sizes[-1] > total:
            raise ConfigError(
                f"{VARIANTS_KEY}: size {sizes[-1]} exceeds the total KV size {total} "
                f"(= NPUW_LLM_MAX_PROMPT_LEN {max_prompt} + NPUW_LLM_MIN_RESPONSE_LEN {min_response})",
                key=VARIANTS_KEY,
            )
        if sizes[-1] != total:
            sizes.append(total)
        variants = tuple(sizes)
    elif pyramid:
        variants = tuple(pyramid_sizes(max_prompt, min_response))
    else:
        variants = (total,)

    # unset: decided once the device and the model are known, but explicit variants are the
    # user's exact choice (compiled_model.generate_ladder_on)
    generate_ladder = get(GENERATE_LADDER_KEY)
    if generate_ladder is not None:
        generate_ladder = _bool(GENERATE_LADDER_KEY, generate_ladder)
    elif explicit not in ("", None, [], ()):
        generate_ladder = False
    if generate_ladder and block_kv:
        raise ConfigError(
            f"{GENERATE_LADDER_KEY}=YES with NPUW_LLM_ENABLE_BLOCK_BASED_KV_CACHE=YES: the block KV "
            "binds its blocks to the configured generate variants only; drop one of the two keys",
            key=GENERATE_LADDER_KEY,
        )

    kv = str(get("KV_CACHE_PRECISION")).lower().replace("<type: '", "").rstrip("'>")
    kv = {"float16_t": "f16", "float": "f32"}.get(kv, kv)
    if kv not in _KV_PRECISIONS:
        raise ConfigError(
            f"KV_CACHE_PRECISION={get('KV_CACHE_PRECISION')!r} is not supported by NPUW here; "
            "use f16, f32, u8 or u4",
            key="KV_CACHE_PRECISION",
        )

    devices = tuple(d.strip().upper() for d in str(get("NPUW_DEVICES")).split(",") if d.strip())
    if not devices:
        raise ConfigError(
            "NPUW_DEVICES is empty; name a device, e.g. NPUW_DEVICES=CPU", key="NPUW_DEVICES"
        )

    # Base sub-config: top-level non-NPUW keys (e.g. INFERENCE_PRECISION_HINT) flow to the
    # devices, and so do the emulator's device keys the caller set (NPU_EMU_*, not the NPU
    # device's defaults: the emulated NPU validates them, the CPU device keeps the ones it
    # knows), which the NPU plugin's own keys do not
    base = {
        k: v
        for k, v in raw.items()
        if ((k.startswith(EMU_DEVICE_PREFIX) and (given is None or k in given))
            or not k.startswith(("NPU", "++NPUW", "KV_CACHE_PRECISION", "CACHE_DIR")))
        and k not in IGNORED_KEYS
        and k not in EXPORT_KEYS
    }
    subs: list[dict[str, Any]] = []
    for key in SUBCONFIG_KEYS:
        sub = _subconfig(key, raw[key]) if key in raw else dict(base)
        if "++" + key in raw:
            sub.update(_subconfig("++" + key, raw["++" + key]))
        subs.append(sub)
    # The head runs after every generate step, so by default it gets the generate sub-config
    # (the real one starts it from its own default: see docs/npuw.md on f32 hints).
    head: dict[str, Any] | None = None
    if HEAD_CONFIG_KEY in raw or "++" + HEAD_CONFIG_KEY in raw:
        head = (
            _subconfig(HEAD_CONFIG_KEY, raw[HEAD_CONFIG_KEY])
            if HEAD_CONFIG_KEY in raw
            else dict(subs[1])
        )
        if "++" + HEAD_CONFIG_KEY in raw:
            head.update(_subconfig("++" + HEAD_CONFIG_KEY, raw["++" + HEAD_CONFIG_KEY]))
    kv_precision = _KV_PRECISIONS[kv]
    if kv_precision in ("u8", "u4"):
        for key, on in (
            ("NPUW_LLM_ENABLE_BLOCK_BASED_KV_CACHE", block_kv),
            ("NPUW_LLM_ENABLE_PREFIX_CACHING", bool(prefix_block)),
            (
                "NPUW_LLM_OPTIMIZE_V_TENSORS",
                _bool("NPUW_LLM_OPTIMIZE_V_TENSORS", get("NPUW_LLM_OPTIMIZE_V_TENSORS")),
            ),
        ):
            if on:
                raise ConfigError(
                    f"KV_CACHE_PRECISION={kv_precision} cannot be combined with {key}=YES here "
                    f"(not implemented for the quantised KV cache); set {key}=NO or use f16 KV",
                    key="KV_CACHE_PRECISION",
                )
    return LLMConfig(
        max_prompt_len=max_prompt,
        min_response_len=min_response,
        chunk_size=chunk,
        prefill_hint=prefill_hint,
        generate_hint=generate_hint,
        pyramid=pyramid,
        variants=variants,
        kv_precision=kv_precision,
        shared_head=_bool("NPUW_LLM_SHARED_HEAD", get("NPUW_LLM_SHARED_HEAD")),
        optimize_v=_bool("NPUW_LLM_OPTIMIZE_V_TENSORS", get("NPUW_LLM_OPTIMIZE_V_TENSORS")),
        devices=devices,
        prefill_config=subs[0],
        generate_config=subs[1],
        cache_dir=str(get("CACHE_DIR") or ""),
        raw={k: v for k, v in raw.items() if isinstance(v, (str, int, float, bool))},
        grouped_attention=None
        if get(GROUPED_ATTENTION_KEY) is None
        else _bool(GROUPED_ATTENTION_KEY, get(GROUPED_ATTENTION_KEY)),
        head_config=head,
        cache_rope=_bool("NPUW_LLM_CACHE_ROPE", get("NPUW_LLM_CACHE_ROPE")),
        prefix_block=prefix_block,
        prefix_max_blocks=max_blocks,
        block_kv=block_kv,
        max_gen_len=max_gen,
        prefill_attention_hint=attention_hint,
        prefill_pyramid=prefill_pyramid,
        kv_group_size=_uint(KV_GROUP_SIZE_KEY, get(KV_GROUP_SIZE_KEY)),
        prefill_ladder=ladder,
        generate_ladder=generate_ladder,
        ladder=ladder_sizes(max_prompt) if ladder and not chunk else (),
        max_lora_rank=_uint("NPUW_LLM_MAX_LORA_RANK", get("NPUW_LLM_MAX_LORA_RANK"), minimum=1),
        cache_mode=cache_mode,
        weights_path=str(raw.get("WEIGHTS_PATH", "") or ""),
    )


def _block_kv(get: Any, chunk: int, max_prompt: int, prefix_caching: bool) -> bool:
    """NPUW_LLM_ENABLE_BLOCK_BASED_KV_CACHE, with the combinations the block cache cannot take."""
    key = "NPUW_LLM_ENABLE_BLOCK_BASED_KV_CACHE"
    if not _bool(key, get(key)):
        return False
    if not chunk:
        # The real NPUW on CPU ignores the key here (its blocks come from the chunked prefill):
        # ours says so instead of dropping it.
        raise ConfigError(
            f"{key}=YES needs chunked prefill (the block size is the chunk size): set "
            "NPUW_LLM_PREFILL_HINT=DYNAMIC and NPUW_LLM_PREFILL_CHUNK_SIZE to a power of 2 below "
            f"NPUW_LLM_MAX_PROMPT_LEN ({max_prompt}), or leave {key}=NO",
            key=key,
        )
    if prefix_caching:
        raise ConfigError(
            f"{key}=YES cannot be combined with NPUW_LLM_ENABLE_PREFIX_CACHING=YES here (the prefix "
            "cache restores into the contiguous buffer); turn one of them off",
            key=key,
        )
    return True


def skip_padded_rows(cfg: LLMConfig, device: str) -> bool:
    """Whether the whole-prompt prefill gets NPU_EMU_SKIP_PADDED_ROWS=YES on the emulated NPU.

    With the shared head the prefill outputs its last MAX_GENERATION_TOKEN_LEN rows: the
    device's window always reaches back to them (a last-rows Slice bounds its start).
    """
    return device == "NPU" and cfg.prefill_ladder and not cfg.chunk_size
