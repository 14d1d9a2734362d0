"""NPUW LLM configuration: keys, real defaults, alignment rules and validation."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from ov_npu_emu.errors import ArtefactConfigError, ConfigError
from ov_npu_emu.options import Converter, Option, OptionTable, as_flag, as_int, as_str, did_you_mean

__all__ = [
    "NPUW_OPTIONS",
    "check_stored_config",
    "LLMConfig",
    "LLM_COMPILATION_MODE_PARAMS",
    "LLM_NPU_COMPILER_DEFAULTS",
    "for_device",
    "align_to",
    "is_npuw_llm_config",
    "is_text_embed_config",
    "is_whisper_config",
    "check_plain_npuw_keys",
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

#: The compiler parameter the real NPUW's LLM path puts in its default prefill, generate and LM
#: head sub-configs (``get_baseline_common_config`` in llm_compiled_model.cpp): the RMSNorm's
#: statistics stay in higher precision on an f16 NPU. A sub-config the user replaces
#: (NPUW_LLM_PREFILL_CONFIG, ...) does not get it; a top-level or ``++`` value wins over it.
COMPILATION_MODE_KEY = "NPU_COMPILATION_MODE_PARAMS"
LLM_COMPILATION_MODE_PARAMS = "compute-layers-with-higher-precision=Sqrt,Power,ReduceMean,Add_RMSNorm"
#: the real NPUW adds ``NPUW_DQ=YES, NPUW_DQ_FULL=NO, NPU_COMPILER_DYNAMIC_QUANTIZATION=YES`` to the
#: same baseline when the NPU plugin lists the COMPILER_DYNAMIC_QUANTIZATION capability, which
#: the emulated NPU does (its compiler then multiplies 4-bit weights by int8 activations in f16
#: mode; NPUW_DQ is NPUW's own partitioning key, accepted and ignored here)
DYNAMIC_QUANTIZATION_KEY = "NPU_COMPILER_DYNAMIC_QUANTIZATION"
#: the NPU compiler keys of the default LLM sub-configs: given to NPU sub-models only
LLM_NPU_COMPILER_DEFAULTS = {COMPILATION_MODE_KEY: LLM_COMPILATION_MODE_PARAMS, DYNAMIC_QUANTIZATION_KEY: "YES"}

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


def _positive(key: str, value: Any) -> int:
    return as_int(key, value, minimum=1)


def _bnsd(want: int) -> Converter:
    """The KV layout axes: only BNSD (batch 0, sequence 2) is supported."""

    def convert(key: str, value: Any) -> int:
        if as_int(key, value) != want:
            raise ConfigError(
                f"{key}={value} is not supported: only the BNSD KV layout ({key}={want}) is", key=key
            )
        return want

    return convert


def _upper_choice(*choices: str) -> Converter:
    """One of ``choices`` (any case), upper-cased; the error lists them."""
    listed = f"{', '.join(choices[:-1])} or {choices[-1]}"

    def convert(key: str, value: Any) -> str:
        s = str(value).upper()
        if s not in choices:
            raise ConfigError(f"{key} must be {listed}, got {value!r}", key=key)
        return s

    return convert


def _chunk_size(key: str, value: Any) -> int:
    chunk = as_int(key, value)
    if chunk & (chunk - 1):
        raise ConfigError(
            f"Configuration Error: chunk size ({chunk}) is not power of 2. Please adjust {key}.", key=key
        )
    return chunk


def _kv_precision(key: str, value: Any) -> str:
    """f16 / f32 (any of their spellings, an ov.Type too) or ours, u8 / u4."""
    kv = str(value).lower().replace("<type: '", "").rstrip("'>")
    kv = {"float16_t": "f16", "float": "f32"}.get(kv, kv)
    if kv not in _KV_PRECISIONS:
        raise ConfigError(
            f"{key}={value!r} is not supported by NPUW here; use f16, f32, u8 or u4", key=key
        )
    return _KV_PRECISIONS[kv]


def _devices(key: str, value: Any) -> tuple[str, ...]:
    devices = tuple(d.strip().upper() for d in str(value).split(",") if d.strip())
    if not devices:
        raise ConfigError(f"{key} is empty; name a device, e.g. {key}=CPU", key=key)
    return devices


def _cache_mode(key: str, value: Any) -> str:
    mode = str(value or "").upper()
    if mode and mode not in CACHE_MODES:
        raise ConfigError(f"{key}={value!r} is not one of {', '.join(CACHE_MODES)}", key=key)
    return mode


def _variants(key: str, value: Any) -> tuple[int, ...]:
    """Explicit generate KV sizes ("256,512" or a list), ascending; () when not given."""
    if value in ("", None, [], ()):
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    return tuple(sorted({as_int(key, str(s).strip() if isinstance(s, str) else s, minimum=2) for s in items}))


def _subconfig(key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"{key} must be a dict of device properties, got {type(value).__name__}", key=key
        )
    return dict(value)


#: the keys NPUW interprets, each declared once (the real npuw_option_defs.inc's DEFINE_OPT):
#: real keys keep the real defaults unless the doc says where we differ
NPUW_OPTIONS = OptionTable(
    "NPUW",
    [
        Option(
            "NPU_USE_NPUW",
            as_flag,
            False,
            'YES (with `NPUW_LLM=YES`, or `True`/"true") → NPUW claims the call on "NPU"',
        ),
        Option(
            "NPUW_LLM",
            as_flag,
            False,
            "YES (with `NPU_USE_NPUW=YES`) → NPUW's LLM pipeline",
        ),
        Option(
            "NPUW_TEXT_EMBED",
            as_flag,
            False,
            (
                "YES (with `NPUW_LLM=YES`) → the text-embedding mode openvino.genai's TextEmbeddingPipeline sets on "
                '"NPU" for a dynamic model (`update_npu_config_text_embedding`, with `NPUW_LLM_SHARED_HEAD=NO` and '
                "MAX_PROMPT_LEN = max_length or 1024). Encoder models (no `position_ids`, no KV): one static `[1,P]` "
                "forward, tokens at the front, `token_type_ids` passed through, output `[1,P,hidden]` with the "
                "padding rows zeroed; batch 1 only (the real's error text). Decoder models (Qwen3-Embedding-style): "
                "past/present K/V, `position_ids` and a causal mask added, whole `[1,P]` or chunked prefill without "
                "head, the past in f16; batch 1. **Differs:** the real reads the key back as NO (it pops it "
                'before storing its config); ours answers YES. See "Text-embedding mode"'
            ),
        ),
        Option(
            "NPUW_WHISPER",
            as_flag,
            False,
            (
                "YES (with `NPUW_LLM=YES`) → the Whisper-decoder mode openvino.genai's WhisperPipeline sets on "
                '"NPU" without `STATIC_PIPELINE` (`update_npu_config_whisper`: MAX_PROMPT_LEN 4, MIN_RESPONSE_LEN '
                "444, taken unaligned: KV 448). The stateful decoder becomes a `[1,4]` prefill (the prompt at the "
                "front, its cross-attention K/V as outputs) and a `[1,1]` generate model over 447 past slots with "
                "`cache_position` and a mask; a call of one token after the first is a generate step (the real "
                "routes by `input_ids` length, so a one-token call reads the previous call's KV), the KV (self and "
                "cross) is held in `KV_CACHE_PRECISION` (f16). Batch 1. See \"Whisper mode\""
            ),
        ),
        Option(
            "NPUW_WHISPER_EOS_TOKEN",
            as_int,
            50257,
            (
                "Whisper mode: the token whose logit is set to +inf when a generate step fills the KV cache (the "
                "real's workaround, so the pipeline stops); openvino.genai passes the model's EOS"
            ),
        ),
        Option(
            "NPUW_WHISPER_DECOMPOSE_SDPA",
            as_flag,
            False,
            (
                "Whisper mode: YES (openvino.genai's word timestamps) makes the prefill span the KV size - 1 "
                "tokens (447), masks its padding rows in the cross-attention and decomposes the cross-attention "
                "SDPAs; their masked scores `[1, heads, 447, frames]` of the last prefill are the compiled model's "
                "outputs `cross_attention_qk_scaled_scores_<n>`, padding rows included (as the real's)"
            ),
        ),
        Option(
            "NPUW_LLM_BATCH_DIM",
            _bnsd(0),
            0,
            "Only the BNSD layout is supported (another value is an error)",
        ),
        Option(
            "NPUW_LLM_SEQ_LEN_DIM",
            _bnsd(2),
            2,
            "Only the BNSD layout is supported (another value is an error)",
        ),
        Option(
            "NPUW_LLM_MAX_PROMPT_LEN",
            _positive,
            1024,
            "Aligned up to 64, then to the chunk size when chunking. Positive integer (int or decimal string)",
        ),
        Option(
            "NPUW_LLM_MIN_RESPONSE_LEN",
            _positive,
            128,
            "Aligned up to 64. Total KV = MAX_PROMPT + MIN_RESPONSE",
        ),
        Option(
            "NPUW_LLM_MAX_GENERATION_TOKEN_LEN",
            _positive,
            1,
            (
                "Tokens per generate call M (speculative decoding: candidates, then rollback through `position_ids`); "
                "≠ 1 is aligned up to 8 (real rule). Variants take `input_ids [1,M]`, past `[1,H,K−M,D]`, present "
                "`[1,H,M,D]`; a call of n ≤ M tokens is right-aligned (padding slots masked), its n rows go to the "
                "past, and `logits` are `[1,M,V]` with the valid rows last — the real's shapes and error text (tested "
                "side by side). Capacity becomes total − M; a variant switch happens when the call's rows would not "
                "fit the past. Must not exceed MIN_RESPONSE_LEN nor (with chunking) the chunk size: `ConfigError`s. "
                "With a shared head the prefill outputs its last M hidden states. genai_shim's speculative decoding "
                "(`draft_model`, docs/genai_shim.md) compiles the main model with M = 2 × num_assistant_tokens + 1, "
                "as the real pipeline does"
            ),
        ),
        Option(
            "NPUW_LLM_PREFILL_CHUNK_SIZE",
            _chunk_size,
            1024,
            (
                "Power of two (else the real error text), 0 disables; chunking is off when chunk ≥ MAX_PROMPT (real "
                "rule), so the defaults give a static 1024 prefill"
            ),
        ),
        Option(
            "NPUW_LLM_PREFILL_HINT",
            _upper_choice("DYNAMIC", "STATIC"),
            "DYNAMIC",
            "DYNAMIC = chunked prefill, STATIC = one `[1,P]` prefill",
        ),
        Option(
            "NPUW_LLM_PREFILL_ATTENTION_HINT",
            _upper_choice("STATIC", "DYNAMIC", "PYRAMID", "HFA"),
            "STATIC",
            (
                "With chunking only (real rule). PYRAMID (and DYNAMIC / HFA, which we run the same way) adds "
                "chunk-prefill models of mask length 2C, 4C, … below P (`<name>_prefill_p<size>`, past "
                "`[1,H,size−C,D]`, again prefix views of the one KV buffer): each chunk runs on the smallest model "
                "whose past holds the history so far, and moving up a model migrates the stored tokens to its view. "
                "**Differs:** the real isolates the attention per chunk (`NPUW_ATTN`) instead of compiling whole "
                "models per size; ours costs log2(P/C) − 1 more compiled prefill models — compile time, and memory: "
                "on the CPU device each holds its own copy of the weights (builder `qwen2.5-0.5b-shape`, 4 layers, "
                "vocab 32000, f32, P 1024 / C 64: RSS +1452 MB STATIC vs +2165 MB PYRAMID), on the emulated NPU the "
                "weights bank shares them (+1192 vs +1524 MB, the rest is per-model scratch and f32 caches). Measured "
                'below ("PYRAMID prefill")'
            ),
        ),
        Option(
            "NPUW_LLM_GENERATE_HINT",
            _upper_choice("FAST_COMPILE", "BEST_PERF"),
            "FAST_COMPILE",
            (
                "Validated (FAST_COMPILE/BEST_PERF) and read back; no effect on our devices. With "
                '`NPUW_LLM_GENERATE_CONFIG` → "GENERATE_HINT only works with default generate config!"'
            ),
        ),
        Option(
            "NPUW_LLM_GENERATE_PYRAMID",
            as_flag,
            True,
            "Real pyramid: `1024·2^k + MIN_RESPONSE` while it fits, plus the total",
        ),
        Option(
            "NPUW_LLM_SHARED_HEAD",
            as_flag,
            True,
            (
                "The vocabulary MatMul (and what follows it up to `logits`) is cut into a third model "
                "`<name>_lm_head` (`npuw_output_embed [1,1,E]` → `logits [1,1,V]`), compiled once and run after "
                "prefill and after every generate step; prefill and variants output `npuw_output_embed`. NO keeps the "
                "head in each model (prefill still computes it for the last position only). The real one overlaps the "
                "head with the KV write (async); we run it in line"
            ),
        ),
        Option(
            "NPUW_LLM_OPTIMIZE_V_TENSORS",
            as_flag,
            False,
            (
                "YES stores V as `[1,Hkv,D,S]` (the real layout: past `[1,H,D,K−1]`, present `[1,H,D,n]`), copies run "
                "along axis 3. With grouped attention (the CPU default) the attention reads the stored layout in "
                "place — `Concat(past [1,H,D,K−1], new row transposed)` on axis 3 and `MatMul(probs, V, "
                "transpose_b)`, the real OptimizeValueTensors rewrite; otherwise (emulated NPU) a Transpose at the "
                "model boundary turns the past back. Still off by default: stories260K kv256 variant alone on CPU, "
                "186 µs (NO) vs 197 µs (YES, the axis-3 Concat is strided) vs 306 µs (YES with boundary transposes "
                "and SDPA)"
            ),
            shown_default="NO (real: YES)",
        ),
        Option(
            "NPUW_LLM_CACHE_ROPE",
            as_flag,
            True,
            (
                "Every Sin/Cos that depends on `position_ids` alone becomes `Gather(table, position_ids)`; the tables "
                "are computed at compile time by the CPU plugin in f32 from the model's own sin/cos subgraph, for "
                "positions `[0, total KV size)` (one size for prefill and all variants; the real uses MAX_PROMPT_LEN "
                "for prefill and K per variant). Bit-identical outputs on stories260K; the kv256 variant alone runs "
                "4% faster (173 → 166 µs), end to end it is within noise (TPOT@20 0.361–0.378× with vs 0.340–0.380× "
                "without, three A/B runs). A position at or beyond the table is a `UserInputError` that names NO as "
                "the way out (the Gather would silently read zeros). A sin/cos that reads the call's position range "
                "(longrope's short/long switch on `max(position_ids) + 1`, Phi-3/Phi-4) is found by probing and left "
                "computed per call: the real CPU's ids past `original_max_position_embeddings`, as the real NPUW "
                "gives (its source matches the Phi-3 longrope pattern and binds short- or long-factor tables chosen "
                "on the host instead)"
            ),
        ),
        Option(
            "NPUW_LLM_ENABLE_PREFIX_CACHING",
            as_flag,
            False,
            (
                "YES keeps the KV of prompt blocks per infer request and restores the longest cached chain of blocks "
                "that starts a new prompt, so only the rest is prefilled (chat turns re-send the history). Ours also "
                "caches the tokens a conversation generated (real: prefill-computed blocks only). Chunked prefill "
                "only: with a static prefill it is a `ConfigError` saying how to enable chunking. Used only for "
                "unpadded prompts at consecutive positions (anything else bypasses the cache), and not for a model "
                "whose RoPE reads the call's position range (longrope: a block computed in another call may hold the "
                "other factors' keys). At least the prompt's "
                'last token is always computed. See "Prefix caching" below'
            ),
        ),
        Option(
            "NPUW_LLM_PREFIX_CACHING_BLOCK_SIZE",
            _positive,
            256,
            (
                "Tokens per block; when it does not divide the chunk size, the chunk size is used (real rule) and "
                "read back"
            ),
        ),
        Option(
            "NPUW_LLM_PREFIX_CACHING_MAX_NUM_BLOCKS",
            _positive,
            128,
            (
                "Blocks kept per request; the least recently used *leaf* block goes first, so cached chains never "
                "lose an inner block. Memory: blocks × block size × Σ Hkv·D × KV item size"
            ),
        ),
        Option(
            "NPUW_LLM_ENABLE_BLOCK_BASED_KV_CACHE",
            as_flag,
            False,
            (
                "YES keeps the KV in blocks of the prefill chunk size, allocated as the conversation grows and "
                "released at the next conversation; every sub-model with a past takes it as numbered block inputs "
                'plus a tail, like the real (see "Block-based KV cache" below). Needs chunked prefill (else a '
                "`ConfigError` saying how to enable it); a `ConfigError` with `NPUW_LLM_ENABLE_PREFIX_CACHING=YES` or "
                "u8/u4 KV. Read back by `get_property` and kept by export/import"
            ),
        ),
        Option(
            "NPUW_LLM_MAX_LORA_RANK",
            _positive,
            32,
            (
                "Static rank R of the LoRA inputs (`plugins/ov_npu_emu_npuw/lora.py`, as the real NPUW). "
                "openvino.genai's LoRA (MODE_DYNAMIC, its NPU default) puts variables "
                "`lora_state_<n><node>MatMul.A|.alpha|.B` of dynamic rank into the model; NPUW turns them into inputs "
                "A `[R,in]`, alpha `[1,R]`, B `[out,R]` of every prefill/generate sub-model (the real's "
                "LoraStatefulToStateless + static reshape) and exposes them again as the request's variable states. "
                "At each new conversation an updated state is copied into one zero-padded tensor per input shared by "
                "all sub-models (padding adds nothing), a rank-0 state sets alpha to 0: adapters and alphas change "
                'per generate() without recompiling. Rank > R: `ConfigError(key="NPUW_LLM_MAX_LORA_RANK")` with the '
                "real text (`LoRA tensor low-rank size: 40 is larger than the maximum LoRA low-rank size 32. Please "
                "adjust NPUW_LLM_MAX_LORA_RANK configuration.`), raised at that prefill as the real; a width "
                "mismatch: the real's `LoRA adapter tensor shape: … is not compatible with inference tensor shape: "
                "…`. Any other variable left after lifting the KV cache is a `CompileError`. Tested side by side with "
                "the real NPUW on CPU (tests/genai_shim/test_lora.py)"
            ),
        ),
        Option(
            "NPUW_DEVICES",
            _devices,
            "NPU",
            (
                'Fallback list; the first registered device is used. Real default is "NPU,CPU"; ours "NPU" means the '
                "emulated NPU. A list without any registered device is a typed error: a missing NPU is a "
                "`PluginError` suggesting `NPUW_DEVICES=CPU`, other unknown names a `DeviceNotFoundError`"
            ),
        ),
        Option(
            "KV_CACHE_PRECISION",
            _kv_precision,
            "f16",
            (
                'KV storage type: f16, f32, or (ours) **u8 / u4**: quantised KV, see "Quantised KV cache" below. '
                "Anything else is a `ConfigError`. u8/u4 with `NPUW_LLM_ENABLE_PREFIX_CACHING=YES` or "
                "`NPUW_LLM_OPTIMIZE_V_TENSORS=YES` is a `ConfigError` (not implemented)"
            ),
        ),
        Option(
            "CACHE_DIR",
            as_str,
            "",
            "Cache compiled LLMs on disk (below)",
        ),
        Option(
            "CACHE_MODE",
            _cache_mode,
            "",
            (
                "Unset (like the real NPUW) or `OPTIMIZE_SIZE`: `export_model()` and genai's `EXPORT_BLOB` write "
                "a **weightless** artefact (below, \"Weightless artefacts\"), imported with `WEIGHTS_PATH` or "
                "`MODEL_PTR`; `OPTIMIZE_SPEED`: the artefact holds its weights. `CACHE_DIR` entries are weightless "
                "too (like the real's) on the emulated NPU, restored from the model being compiled; on "
                "`NPUW_DEVICES=CPU` only with `OPTIMIZE_SIZE` (below, \"CACHE_DIR\"). "
                "Unset, a model "
                "that was not read from an IR file (nothing to take the weights back from) or sub-models on "
                "another device than the emulated NPU or CPU keep the weights; `OPTIMIZE_SIZE` there is a "
                "`ConfigError`. Another value is a `ConfigError`. `get_property(\"CACHE_MODE\")` answers only "
                "when it was set (the real: \"Unsupported configuration key\" otherwise). Measured on the real "
                "(stories260K): 836 KB unset/OPTIMIZE_SIZE vs 1.94 MB OPTIMIZE_SPEED"
            ),
            shown_default="(unset)",
        ),
        Option(
            "WEIGHTS_PATH",
            as_str,
            "",
            (
                "At compile: the `.bin` a weightless export refers to, when the model was not read from an IR by our "
                "`Core.read_model` (which records the path in the model's `__weights_path` rt_info); its `.xml` must "
                "sit next to it. At import: where a weightless artefact takes its weights from (or `MODEL_PTR`, an "
                "`openvino.Model`; emulated-NPU sub-blobs only, CPU ones need `WEIGHTS_PATH`). Given for an artefact "
                "that holds its weights it is a `ConfigError` (the real fails too)"
            ),
        ),
        Option(
            "NPUW_WEIGHTS_BANK",
            as_str,
            "",
            (
                "Bank name passed to every sub-model; empty → a fresh `<name>-<random>` per compilation (the real "
                "behaviour). On the emulated NPU, sub-models with one name share bank entries (one copy of the "
                "weights and of the f32 cache); on the CPU device (f32 precision) they read one f32 copy of each "
                'large MatMul/Gather weight ("One weights copy on `NPUW_DEVICES=CPU`"); compilations with different '
                "names never share. Import from an NPUW artefact / `CACHE_DIR` passes no name: the sub-models then "
                "share through the device's anonymous bank (by content)"
            ),
        ),
        Option(
            "NPUW_LLM_PREFILL_CONFIG",
            _subconfig,
            None,
            (
                'Replaces the prefill model\'s device config (write-only, like the real: `get_property` raises "… is '
                'write-only option!")'
            ),
            shown_default="—",
        ),
        Option(
            "NPUW_LLM_GENERATE_CONFIG",
            _subconfig,
            None,
            (
                'Replaces the generate models\' device config (write-only, like the real: `get_property` raises "… is '
                'write-only option!")'
            ),
            shown_default="—",
        ),
        Option(
            "++NPUW_LLM_PREFILL_CONFIG",
            _subconfig,
            None,
            "Merged into the default prefill sub-config",
            shown_default="—",
        ),
        Option(
            "++NPUW_LLM_GENERATE_CONFIG",
            _subconfig,
            None,
            "Merged into the default generate sub-config",
            shown_default="—",
        ),
        Option(
            "NPUW_LLM_SHARED_HEAD_CONFIG",
            _subconfig,
            None,
            (
                "Replace / merge into the shared LM head's sub-config (write-only). **Differs:** our head starts from "
                "the *generate* sub-config (so `++NPUW_LLM_GENERATE_CONFIG={INFERENCE_PRECISION_HINT: f32}` makes the "
                "head f32 too); the real one starts from its own default, which is why its head stays f16 under f32 "
                "generate hints (bug list below)"
            ),
            shown_default="—",
        ),
        Option(
            "++NPUW_LLM_SHARED_HEAD_CONFIG",
            _subconfig,
            None,
            "Merged into the shared LM head's sub-config (see `NPUW_LLM_SHARED_HEAD_CONFIG`)",
            shown_default="—",
        ),
        Option(
            "NPUW_LLM_GENERATE_VARIANTS",
            _variants,
            "",
            (
                'Explicit generate KV sizes, "256,512,1024" or a list; the total is always added; a size above the '
                "total is an error. Overrides the pyramid"
            ),
            origin="ours",
        ),
        Option(
            "NPUW_LLM_GENERATE_GROUPED_ATTENTION",
            as_flag,
            None,
            (
                "Generate variants compute each one-token, non-causal SDPA as grouped-query `MatMul(q [B,Hkv,G,D], K, "
                "transpose_b) · scale + mask → Softmax → MatMul(V)` on the un-repeated KV heads (no GQA Broadcast, no "
                "K transpose). Same values (bit-identical on stories260K here; tests compare with the SDPA form at "
                "1e-5), ~80 fewer runtime nodes on stories260K, −25% per decode step on CPU. Off on the emulated NPU, "
                "where one SDPA SHAVE task is cheaper than five tasks. Read back with the effective value. See "
                '"Grouped attention" below'
            ),
            origin="ours",
            shown_default="YES on `NPUW_DEVICES=CPU`, NO otherwise",
        ),
        Option(
            "NPUW_LLM_PREFILL_LADDER",
            as_flag,
            True,
            (
                "Whole-prompt (unchunked) prefill only. On `NPUW_DEVICES=CPU`: a prompt of n tokens runs on the "
                "smallest extra static prefill `<name>_prefill_l<size>` of 64·2^k < MAX_PROMPT_LEN tokens that holds "
                "it, compiled on first use; on the emulated NPU: the prefill sub-config gets "
                "`NPU_EMU_SKIP_PADDED_ROWS=YES` (docs/npu_device.md). Results bit-identical to NO (tested). NO = the "
                'real behaviour (the full `[1,P]` prefill for every prompt). See "Prefill cost follows the real '
                'tokens"'
            ),
            origin="ours",
        ),
        Option(
            "NPUW_LLM_GENERATE_LADDER",
            as_flag,
            None,
            (
                "Extra generate variants `<name>_kv<K>` of K = 64·2^k slots below the smallest variant (64…1024 with "
                "the real defaults), each compiled on first use; a conversation starts on the smallest rung that "
                "holds its prompt (`K − 2M ≥ prompt`) and migrates up as it grows (the variant switch), so a decode "
                "step attends over ~the conversation instead of MAX_PROMPT + MIN_RESPONSE slots. Same tokens as NO "
                "(tested against NO and the f32 CPU model); logits differ from the kv1152 run by ≤ 2e-5 (the CPU "
                'plugin\'s sums reassociate with K, see "Generate ladder"). YES forces it (any device, explicit '
                "variants too). Read back: whether rungs exist. Not kept by export/`CACHE_DIR` (an imported model has "
                "no source model to compile rungs from)"
            ),
            origin="ours",
            shown_default=(
                "unset: YES on `NPUW_DEVICES=CPU` and on the emulated NPU unless `NPUW_LLM_GENERATE_VARIANTS` "
                "is given or the KV window is < 10% of the weights; NO otherwise"
            ),
        ),
        Option(
            "NPUW_EMU_KV_GROUP_SIZE",
            as_int,
            0,
            (
                "u8/u4 KV group G: values get one scale/zero point per G values of a token's head row, keys one per "
                "channel per block of G tokens. Must divide the head size (else a `CompileError` naming this key)"
            ),
            origin="ours",
            shown_default="0 (= head_dim)",
        ),
    ],
    prefixes=("NPUW_LLM", "++NPUW_LLM"),
    accepted=IGNORED_KEYS,
    unknown="Unsupported NPUW LLM property {key}{hint}",
    hint="; did you mean {close}?",
)
#: name -> default of every key NPUW interprets
DEFAULTS: dict[str, Any] = NPUW_OPTIONS.defaults()

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


def is_npuw_llm_config(device_name: str, config: Mapping[str, Any]) -> bool:
    """True when the call asks for NPUW's LLM pipeline (what openvino.genai sets for "NPU")."""
    if device_name != "NPU":
        return False
    try:
        return as_flag("NPU_USE_NPUW", config.get("NPU_USE_NPUW", "NO")) and as_flag(
            "NPUW_LLM", config.get("NPUW_LLM", "NO")
        )
    except ConfigError:
        return False


#: the NPUW keys the real accepts on a plain (non-LLM) model compiled with NPU_USE_NPUW=YES
#: (measured on 2026.4.1: every other NPUW_* key, the LLM / Whisper / text-embedding ones
#: included, is "Option '...' is not supported for current configuration")
PLAIN_NPUW_KEYS = frozenset({
    "NPUW_ACC_CHECK", "NPUW_ACC_DEVICE", "NPUW_ACC_THRESH", "NPUW_ATTN", "NPUW_ATTN_DYN", "NPUW_ATTN_NO_COPY",
    "NPUW_CACHE_DIR", "NPUW_CWAI", "NPUW_DCOFF_SCALE", "NPUW_DCOFF_TYPE", "NPUW_DEVICES", "NPUW_DQ",
    "NPUW_DQ_FULL", "NPUW_F16IC", "NPUW_FOLD", "NPUW_FUNCALL_ASYNC", "NPUW_FUNCALL_FOR_ALL", "NPUW_HOST_GATHER",
    "NPUW_ONLINE_AVOID", "NPUW_ONLINE_DUMP_PLAN", "NPUW_ONLINE_ISOLATE", "NPUW_ONLINE_KEEP_BLOCK_SIZE",
    "NPUW_ONLINE_MIN_SIZE", "NPUW_ONLINE_PIPELINE", "NPUW_PARALLEL_COMPILE", "NPUW_PLAN", "NPUW_PMM",
    "NPUW_SLICE_OUT", "NPUW_SPATIAL", "NPUW_SPATIAL_DYN", "NPUW_SPATIAL_NWAY", "NPUW_SUBMODEL_DEVICE",
    "NPUW_UNFOLD_IREQS", "NPUW_WEIGHTS_BANK", "NPUW_WEIGHTS_BANK_ALLOC",
})


def check_plain_npuw_keys(device_name: str, config: Mapping[str, Any]) -> None:
    """On "NPU" with NPU_USE_NPUW=YES but not NPUW_LLM=YES (a plain model through NPUW), an NPUW_*
    key the real does not take there is a ConfigError in the real's words (ours used to ignore it)."""
    if device_name != "NPU":
        return
    try:
        if not as_flag("NPU_USE_NPUW", config.get("NPU_USE_NPUW", "NO")) or as_flag(
                "NPUW_LLM", config.get("NPUW_LLM", "NO")):
            return
    except ConfigError:
        return
    for key in config:
        if isinstance(key, str) and key.startswith("NPUW_") and key not in PLAIN_NPUW_KEYS:
            llm = key in NPUW_OPTIONS or key.startswith("NPUW_LLM")
            hint = ("; it is an LLM-pipeline key: add NPUW_LLM=YES (what openvino.genai's pipelines set for an LLM "
                    "or a Whisper decoder), or drop it" if llm else f"; drop it{did_you_mean(key, PLAIN_NPUW_KEYS)}")
            raise ConfigError(f"Option '{key}' is not supported for current configuration (NPUW on a plain model: "
                              f"NPU_USE_NPUW=YES without NPUW_LLM=YES){hint}", key=key)


def is_whisper_config(config: Mapping[str, Any]) -> bool:
    """True when an NPUW LLM call asks for the Whisper-decoder mode (NPUW_WHISPER=YES); a bad
    value is the option's ConfigError."""
    return bool(NPUW_OPTIONS["NPUW_WHISPER"].read(config))


def is_text_embed_config(config: Mapping[str, Any]) -> bool:
    """True when an NPUW LLM call asks for the text-embedding mode (NPUW_TEXT_EMBED=YES); a bad
    value is the option's ConfigError."""
    return bool(NPUW_OPTIONS["NPUW_TEXT_EMBED"].read(config))


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
    # CACHE_MODE unset and the IR's .bin known: the export is weightless, as the real's is unless
    # OPTIMIZE_SPEED is asked for (set at compile, once the model and the device are known)
    weightless_by_default: bool = False

    @property
    def weightless(self) -> bool:
        return self.cache_mode == "OPTIMIZE_SIZE" or (not self.cache_mode and self.weightless_by_default)

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
        """The configuration an artefact stored, validated like a compilation's: its ``raw`` keys
        go through :func:`parse_config` (the same rules, the same errors), and every stored field
        must be what they give (:func:`check_stored_config`). Raises ArtefactConfigError naming
        the key."""
        if not isinstance(d, Mapping):
            raise _stored("the stored configuration is not an object", "config", "config")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - set(fields))
        if unknown:
            raise _stored(f"unknown field {unknown[0]!r}", "config", f"config.{unknown[0]}")
        required = [n for n, f in fields.items()
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        missing = [n for n in required if n not in d]
        if missing:
            raise _stored(f"field {missing[0]!r} is missing", _FIELD_KEYS.get(missing[0], "config"),
                          f"config.{missing[0]}")
        d = dict(d)
        for name in ("variants", "devices", "prefill_pyramid", "ladder", "generate_rungs"):
            if not isinstance(d.get(name, ()), (list, tuple)):
                raise _stored(f"{name} {d[name]!r} is not a list", _FIELD_KEYS[name], f"config.{name}")
            d[name] = tuple(d.get(name, ()))
        d.setdefault("grouped_attention", False)  # artefacts written before the key existed
        cfg = cls(**d)
        check_stored_config(cfg)
        return cfg


#: stored LLMConfig field -> the key parse_config derives it from (what an artefact error names)
_FIELD_KEYS: dict[str, str] = {
    "max_prompt_len": "NPUW_LLM_MAX_PROMPT_LEN", "min_response_len": "NPUW_LLM_MIN_RESPONSE_LEN",
    "chunk_size": "NPUW_LLM_PREFILL_CHUNK_SIZE", "prefill_hint": "NPUW_LLM_PREFILL_HINT",
    "generate_hint": "NPUW_LLM_GENERATE_HINT", "pyramid": "NPUW_LLM_GENERATE_PYRAMID",
    "variants": VARIANTS_KEY, "kv_precision": "KV_CACHE_PRECISION", "optimize_v": "NPUW_LLM_OPTIMIZE_V_TENSORS",
    "shared_head": "NPUW_LLM_SHARED_HEAD", "devices": "NPUW_DEVICES", "cache_dir": "CACHE_DIR",
    "grouped_attention": GROUPED_ATTENTION_KEY, "cache_rope": "NPUW_LLM_CACHE_ROPE",
    "prefix_block": "NPUW_LLM_PREFIX_CACHING_BLOCK_SIZE",
    "prefix_max_blocks": "NPUW_LLM_PREFIX_CACHING_MAX_NUM_BLOCKS",
    "block_kv": "NPUW_LLM_ENABLE_BLOCK_BASED_KV_CACHE", "max_gen_len": "NPUW_LLM_MAX_GENERATION_TOKEN_LEN",
    "prefill_attention_hint": "NPUW_LLM_PREFILL_ATTENTION_HINT",
    "prefill_pyramid": "NPUW_LLM_PREFILL_ATTENTION_HINT", "kv_group_size": KV_GROUP_SIZE_KEY,
    "prefill_ladder": LADDER_KEY, "ladder": LADDER_KEY, "max_lora_rank": "NPUW_LLM_MAX_LORA_RANK",
    "generate_ladder": GENERATE_LADDER_KEY, "generate_rungs": GENERATE_LADDER_KEY, "cache_mode": "CACHE_MODE",
    "weights_path": "WEIGHTS_PATH", "weightless_by_default": "CACHE_MODE",
    "prefill_config": "NPUW_LLM_PREFILL_CONFIG", "generate_config": "NPUW_LLM_GENERATE_CONFIG",
    "head_config": HEAD_CONFIG_KEY, "raw": "config",
}
#: fields parse_config alone decides: a stored one must equal what the stored raw keys give
_DERIVED = ("max_prompt_len", "min_response_len", "chunk_size", "prefill_hint", "generate_hint", "pyramid",
            "variants", "kv_precision", "optimize_v", "devices", "cache_dir", "cache_rope", "prefix_block",
            "prefix_max_blocks", "block_kv", "max_gen_len", "prefill_attention_hint", "prefill_pyramid",
            "kv_group_size", "prefill_ladder", "max_lora_rank", "generate_ladder", "cache_mode", "weights_path")


def _stored(what: str, key: str, field: str) -> ArtefactConfigError:
    return ArtefactConfigError(
        f"NPUW LLM artefact configuration is corrupt: {what} ({key}); re-export the model or delete the "
        "CACHE_DIR entry", key=key, field=field)


def check_stored_config(cfg: LLMConfig) -> None:
    """An imported artefact's configuration against the rules of a compilation: ``raw`` (the keys
    the user passed) through :func:`parse_config`; every field parse_config decides equal to its
    result, and the few the compilation adjusts to the device (``grouped_attention``, ``ladder``,
    ``shared_head``, ``generate_rungs``, ``weightless_by_default``, sub-configs) of the right kind."""
    raw = cfg.raw
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, (str, int, float, bool))
                                            for k, v in raw.items()):
        raise _stored("raw is not an object of scalar keys", "config", "config.raw")
    try:
        ref = parse_config(raw)
    except ConfigError as e:
        key = e.key or "config"
        raise ArtefactConfigError(
            f"NPUW LLM artefact configuration is corrupt: {e}; re-export the model or delete the CACHE_DIR entry",
            key=key, field=f"config.raw.{key}") from e
    for name in _DERIVED:
        have, want = getattr(cfg, name), getattr(ref, name)
        if have != want or type(have) is not type(want):
            raise _stored(f"{name} {have!r} is not what the stored keys give ({want!r})", _FIELD_KEYS[name],
                          f"config.{name}")
    adjusted = {
        "ladder": cfg.ladder in (ref.ladder, ()),
        "shared_head": cfg.shared_head in (ref.shared_head, False) and type(cfg.shared_head) is bool,
        "grouped_attention": cfg.grouped_attention == ref.grouped_attention if ref.grouped_attention is not None
        else type(cfg.grouped_attention) is bool,
        "generate_rungs": all(type(r) is int and 0 < r < cfg.variants[0] for r in cfg.generate_rungs)
        and list(cfg.generate_rungs) == sorted(set(cfg.generate_rungs)),
        "weightless_by_default": type(cfg.weightless_by_default) is bool,
        "prefill_config": isinstance(cfg.prefill_config, dict),
        "generate_config": isinstance(cfg.generate_config, dict),
        "head_config": cfg.head_config is None or isinstance(cfg.head_config, dict),
    }
    for name, ok in adjusted.items():
        if not ok:
            raise _stored(f"{name} {getattr(cfg, name)!r} is not a value a compilation sets", _FIELD_KEYS[name],
                          f"config.{name}")


def parse_config(config: Mapping[str, Any]) -> LLMConfig:
    """Validate ``config`` and apply the real alignment rules; bad values raise ConfigError.

    Every key is read through :data:`NPUW_OPTIONS` (an unknown ``NPUW_LLM*`` key fails with a
    suggestion); the rule functions below tie keys together.
    """
    raw = dict(config)
    o = NPUW_OPTIONS.parse(raw)
    _check_generate_hint(raw)
    max_gen = o["NPUW_LLM_MAX_GENERATION_TOKEN_LEN"]
    if max_gen != 1:
        max_gen = align_to(max_gen, 8)  # real rule: several tokens per call are aligned to 8
    max_prompt, min_response, chunk = _lengths(o)
    _check_max_gen(max_gen, chunk, min_response)
    prefix_block = _prefix_block(o, chunk, max_prompt)
    block_kv = _block_kv(o["NPUW_LLM_ENABLE_BLOCK_BASED_KV_CACHE"], chunk, max_prompt, bool(prefix_block))
    attention_hint = o["NPUW_LLM_PREFILL_ATTENTION_HINT"]
    ladder = o[LADDER_KEY]
    variants = _generate_variants(o, max_prompt, min_response)
    generate_ladder = _generate_ladder(o[GENERATE_LADDER_KEY], bool(o[VARIANTS_KEY]), block_kv)
    kv_precision = o["KV_CACHE_PRECISION"]
    subs, head = _subconfigs(raw, o, getattr(config, "explicit_keys", None))
    _check_quantised_kv(
        kv_precision,
        {
            "NPUW_LLM_ENABLE_BLOCK_BASED_KV_CACHE": block_kv,
            "NPUW_LLM_ENABLE_PREFIX_CACHING": bool(prefix_block),
            "NPUW_LLM_OPTIMIZE_V_TENSORS": o["NPUW_LLM_OPTIMIZE_V_TENSORS"],
        },
    )
    return LLMConfig(
        max_prompt_len=max_prompt,
        min_response_len=min_response,
        chunk_size=chunk,
        prefill_hint=o["NPUW_LLM_PREFILL_HINT"],
        generate_hint=o["NPUW_LLM_GENERATE_HINT"],
        pyramid=o["NPUW_LLM_GENERATE_PYRAMID"],
        variants=variants,
        kv_precision=kv_precision,
        shared_head=o["NPUW_LLM_SHARED_HEAD"],
        optimize_v=o["NPUW_LLM_OPTIMIZE_V_TENSORS"],
        devices=o["NPUW_DEVICES"],
        prefill_config=subs[0],
        generate_config=subs[1],
        cache_dir=o["CACHE_DIR"] or "",
        raw=_plain_raw(raw, o),
        grouped_attention=o[GROUPED_ATTENTION_KEY],
        head_config=head,
        cache_rope=o["NPUW_LLM_CACHE_ROPE"],
        prefix_block=prefix_block,
        prefix_max_blocks=o["NPUW_LLM_PREFIX_CACHING_MAX_NUM_BLOCKS"],
        block_kv=block_kv,
        max_gen_len=max_gen,
        prefill_attention_hint=attention_hint,
        prefill_pyramid=_prefill_pyramid(attention_hint, chunk, max_prompt),
        kv_group_size=o[KV_GROUP_SIZE_KEY],
        prefill_ladder=ladder,
        generate_ladder=generate_ladder,
        ladder=ladder_sizes(max_prompt) if ladder and not chunk else (),
        max_lora_rank=o["NPUW_LLM_MAX_LORA_RANK"],
        cache_mode=o["CACHE_MODE"],
        weights_path=o["WEIGHTS_PATH"] or "",
    )


def _plain_raw(raw: Mapping[str, Any], o: Mapping[str, Any]) -> dict[str, Any]:
    """The keys the user passed as JSON scalars (what an artefact stores and import re-parses):
    a value of another type (``ov.Type.f32``, ``np.int64(64)``, ``np.bool_``) of a key the table
    read is kept as its converted value (a tuple as a comma list); others are left out."""
    out: dict[str, Any] = {}
    for k, v in raw.items():
        if isinstance(v, (str, int, float, bool)):
            out[k] = v
        elif isinstance(o.get(k), (str, int, float, bool)):
            out[k] = o[k]
        elif isinstance(o.get(k), tuple) and all(isinstance(x, (str, int)) for x in o[k]):
            out[k] = ",".join(map(str, o[k]))
    return out


def _check_generate_hint(raw: Mapping[str, Any]) -> None:
    if "NPUW_LLM_GENERATE_HINT" in raw and "NPUW_LLM_GENERATE_CONFIG" in raw:
        # Real text; the hint only edits the default generate config, so both together is ambiguous.
        raise ConfigError(
            "GENERATE_HINT only works with default generate config! "
            "Remove NPUW_LLM_GENERATE_HINT or NPUW_LLM_GENERATE_CONFIG (or use ++NPUW_LLM_GENERATE_CONFIG).",
            key="NPUW_LLM_GENERATE_HINT",
        )


def _lengths(o: Mapping[str, Any]) -> tuple[int, int, int]:
    """MAX_PROMPT_LEN, MIN_RESPONSE_LEN and the chunk (0: whole-prompt prefill), aligned as the real."""
    max_prompt = align_to(o["NPUW_LLM_MAX_PROMPT_LEN"], 64)
    min_response = align_to(o["NPUW_LLM_MIN_RESPONSE_LEN"], 64)
    chunk = int(o["NPUW_LLM_PREFILL_CHUNK_SIZE"])
    if o["NPUW_LLM_PREFILL_HINT"] == "STATIC" or chunk == 0 or chunk >= max_prompt:
        chunk = 0  # real rule: chunking is off when the chunk covers the whole prompt
    else:
        max_prompt = align_to(max_prompt, chunk)
    return max_prompt, min_response, chunk


def _check_max_gen(max_gen: int, chunk: int, min_response: int) -> None:
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


def _prefix_block(o: Mapping[str, Any], chunk: int, max_prompt: int) -> int:
    """The prefix-cache block size in tokens; 0: prefix caching off."""
    if not o["NPUW_LLM_ENABLE_PREFIX_CACHING"]:
        return 0
    if not chunk:
        raise ConfigError(
            "NPUW_LLM_ENABLE_PREFIX_CACHING works with chunked prefill only: set "
            "NPUW_LLM_PREFILL_HINT=DYNAMIC and NPUW_LLM_PREFILL_CHUNK_SIZE below "
            f"NPUW_LLM_MAX_PROMPT_LEN ({max_prompt})",
            key="NPUW_LLM_ENABLE_PREFIX_CACHING",
        )
    # real rule: a block must not straddle chunks, so a block size that does not divide the
    # chunk becomes the chunk size
    block = int(o["NPUW_LLM_PREFIX_CACHING_BLOCK_SIZE"])
    if chunk % block == 0:
        return block
    logger.info("NPUW_LLM_PREFIX_CACHING_BLOCK_SIZE %d does not divide the chunk size %d: using %d",
                block, chunk, chunk)
    return chunk


def _block_kv(on: bool, chunk: int, max_prompt: int, prefix_caching: bool) -> bool:
    """NPUW_LLM_ENABLE_BLOCK_BASED_KV_CACHE, with the combinations the block cache cannot take."""
    key = "NPUW_LLM_ENABLE_BLOCK_BASED_KV_CACHE"
    if not on:
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


def _prefill_pyramid(attention_hint: str, chunk: int, max_prompt: int) -> tuple[int, ...]:
    """Ours: chunk-prefill models of mask length 2C, 4C, … below P, so a chunk attends over a past
    about the size of its history instead of P − C (real: attention isolated per chunk; it
    applies with chunking only)."""
    if attention_hint == "STATIC" or not chunk:
        return ()
    sizes, size = [], 2 * chunk
    while size < max_prompt:
        sizes.append(size)
        size *= 2
    return tuple(sizes)


def _generate_variants(o: Mapping[str, Any], max_prompt: int, min_response: int) -> tuple[int, ...]:
    """Generate KV sizes: explicit (ours; the total is added), the real pyramid, or the total alone."""
    total = max_prompt + min_response
    sizes = list(o[VARIANTS_KEY])
    if sizes:
        if sizes[-1] > total:
            raise ConfigError(
                f"{VARIANTS_KEY}: size {sizes[-1]} exceeds the total KV size {total} "
                f"(= NPUW_LLM_MAX_PROMPT_LEN {max_prompt} + NPUW_LLM_MIN_RESPONSE_LEN {min_response})",
                key=VARIANTS_KEY,
            )
        if sizes[-1] != total:
            sizes.append(total)
        return tuple(sizes)
    if o["NPUW_LLM_GENERATE_PYRAMID"]:
        return tuple(pyramid_sizes(max_prompt, min_response))
    return (total,)


def _generate_ladder(given: bool | None, explicit_variants: bool, block_kv: bool) -> bool | None:
    """Unset: decided once the device and the model are known, but explicit variants are the
    user's exact choice (compiled_model.generate_ladder_on)."""
    ladder = given
    if ladder is None and explicit_variants:
        ladder = False
    if ladder and block_kv:
        raise ConfigError(
            f"{GENERATE_LADDER_KEY}=YES with NPUW_LLM_ENABLE_BLOCK_BASED_KV_CACHE=YES: the block KV "
            "binds its blocks to the configured generate variants only; drop one of the two keys",
            key=GENERATE_LADDER_KEY,
        )
    return ladder


def _check_quantised_kv(kv_precision: str, features: Mapping[str, bool]) -> None:
    if kv_precision not in ("u8", "u4"):
        return
    for key, on in features.items():
        if on:
            raise ConfigError(
                f"KV_CACHE_PRECISION={kv_precision} cannot be combined with {key}=YES here "
                f"(not implemented for the quantised KV cache); set {key}=NO or use f16 KV",
                key="KV_CACHE_PRECISION",
            )


def _subconfigs(
    raw: Mapping[str, Any], o: Mapping[str, Any], given: frozenset[str] | None
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The prefill and generate sub-model device configs, and the shared head's (None: the
    generate one, see LLMConfig.head_config)."""
    # Base sub-config: the top-level keys the caller gave (e.g. INFERENCE_PRECISION_HINT), and
    # the emulator's device keys (NPU_EMU_*), flow to the devices; the NPU plugin's own keys do
    # not, nor do the NPU device's defaults: like the real NPUW, a sub-model left at defaults
    # gets its own device's defaults (the CPU plugin's bf16 on a host with AMX/AVX512-BF16)
    base = {
        k: v
        for k, v in raw.items()
        if (given is None or k in given)
        and (k.startswith(EMU_DEVICE_PREFIX) or k in LLM_NPU_COMPILER_DEFAULTS
             or not k.startswith(("NPU", "++NPUW", "KV_CACHE_PRECISION", "CACHE_DIR")))
        and k not in IGNORED_KEYS
        and k not in EXPORT_KEYS
    }
    subs: list[dict[str, Any]] = []
    for key in SUBCONFIG_KEYS:
        sub = dict(o[key]) if o[key] is not None else {**LLM_NPU_COMPILER_DEFAULTS, **base}
        sub.update(o["++" + key] or {})
        subs.append(sub)
    # The head runs after every generate step, so by default it gets the generate sub-config
    # (the real one starts it from its own default: see docs/npuw.md on f32 hints).
    head: dict[str, Any] | None = None
    if o[HEAD_CONFIG_KEY] is not None or o["++" + HEAD_CONFIG_KEY] is not None:
        head = dict(o[HEAD_CONFIG_KEY]) if o[HEAD_CONFIG_KEY] is not None else dict(subs[1])
        head.update(o["++" + HEAD_CONFIG_KEY] or {})
    return subs, head


def for_device(sub: Mapping[str, Any], device: str) -> dict[str, Any]:
    """A sub-config as sent to ``device``: NPU_COMPILATION_MODE_PARAMS and
    NPU_COMPILER_DYNAMIC_QUANTIZATION are NPU compiler keys, left out for the CPU device (which
    does not know them)."""
    return {k: v for k, v in sub.items() if device == "NPU" or k not in LLM_NPU_COMPILER_DEFAULTS}


def skip_padded_rows(cfg: LLMConfig, device: str) -> bool:
    """Whether the whole-prompt prefill gets NPU_EMU_SKIP_PADDED_ROWS=YES on the emulated NPU.

    With the shared head the prefill outputs its last MAX_GENERATION_TOKEN_LEN rows: the
    device's window always reaches back to them (a last-rows Slice bounds its start).
    """
    return device == "NPU" and cfg.prefill_ladder and not cfg.chunk_size
