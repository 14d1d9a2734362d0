"""WhisperPipeline's default decoder on "NPU" (no STATIC_PIPELINE): the stateful decoder compiled
through NPUW's Whisper mode, as openvino.genai's ``WhisperStatefullDecoder`` does on "NPU"
(``whisper/models/statefull_decoder.cpp``, ``utils.cpp`` ``update_npu_config_whisper``).

The decoder's ``encoder_hidden_states`` is made static at the encoder's frame count, then compiled
on "NPU" with the user's properties and, where the user did not set them, ``NPU_USE_NPUW=YES``,
``NPUW_LLM=YES``, ``NPUW_WHISPER=YES``, ``NPUW_ONLINE_PIPELINE=NONE``, ``NPUW_FUNCALL_FOR_ALL=NO``,
``NPUW_FOLD=NO``, ``NPUW_LLM_PREFILL_HINT=STATIC``, the KV axes, ``NPUW_LLM_MAX_PROMPT_LEN``
(``MAX_PROMPT_LEN``, 4) and ``NPUW_LLM_MIN_RESPONSE_LEN`` (``MIN_RESPONSE_LEN``, 444); and always
``NPUW_WHISPER_EOS_TOKEN`` (the model's EOS).  What NPUW does with it (a [1, 4] prefill, a one-token
generate model over a 448-token KV in f16, a one-token call after the first continuing the previous
sequence) is ov_npu_emu_npuw.whisper; this runner only feeds it, as the real's decoder does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from genai_shim.npu_compile import import_or_compile
from genai_shim.whisper.models import DECODER_XML, alignment_heads
from ov_npu_emu.errors import ConfigError, NpuEmuError, UnsupportedFeatureError
from ov_npu_emu.options import as_bool

__all__ = ["GENAI_KEYS", "NpuwDecoder", "npuw_whisper_properties"]

#: the real's Whisper defaults (utils.cpp get_npu_model_config): KV 448 = Whisper's max_target_positions
MAX_PROMPT_LEN = 4
MIN_RESPONSE_LEN = 444
#: keys openvino.genai reads for the decoder (they do not reach the encoder here)
GENAI_KEYS = frozenset({"MAX_PROMPT_LEN", "MIN_RESPONSE_LEN", "WHISPER_EOS_TOKEN", "WHISPER_DECOMPOSE_SDPA",
                        "BLOB_PATH", "EXPORT_BLOB"})


def _set_default(config: dict[str, Any], key: str, value: Any) -> None:
    config.setdefault(key, value)


def _length(props: dict[str, Any], key: str, default: int) -> int:
    """The real's pop_int_and_cast: an int (not a string), not negative."""
    if key not in props:
        return default
    value = props.pop(key)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ConfigError(f"Failed to extract {key}. Type mismatch: expected types: int or int64_t", key=key)
    if value < 0:
        raise ConfigError(f"{key} cannot be negative!", key=key)
    return int(value)


def npuw_whisper_properties(properties: dict[str, Any], eos_token_id: int,
                            word_timestamps: bool = False) -> dict[str, Any]:
    """The decoder's compile properties on "NPU" (the real's update_npu_config_whisper); with
    ``word_timestamps`` ``WHISPER_DECOMPOSE_SDPA`` too (the real inserts it unless given, then renames
    it to ``NPUW_WHISPER_DECOMPOSE_SDPA``). ``BLOB_PATH`` / ``EXPORT_BLOB`` pass through, for
    :class:`NpuwDecoder` to take."""
    props = dict(properties)
    max_prompt = _length(props, "MAX_PROMPT_LEN", MAX_PROMPT_LEN)
    min_response = _length(props, "MIN_RESPONSE_LEN", MIN_RESPONSE_LEN)
    props["NPUW_WHISPER_EOS_TOKEN"] = props.pop("WHISPER_EOS_TOKEN", eos_token_id)
    if word_timestamps:
        props.setdefault("WHISPER_DECOMPOSE_SDPA", True)
    if "WHISPER_DECOMPOSE_SDPA" in props:
        props["NPUW_WHISPER_DECOMPOSE_SDPA"] = props.pop("WHISPER_DECOMPOSE_SDPA")
    for key, value in (("NPU_USE_NPUW", "YES"), ("NPUW_ONLINE_PIPELINE", "NONE"), ("NPUW_FUNCALL_FOR_ALL", "NO"),
                       ("NPUW_FOLD", "NO"), ("NPUW_LLM", "YES"), ("NPUW_WHISPER", "YES"),
                       # Whisper's K/V are [batch, heads, seq, head size]; the real reads the axes from the
                       # first 4-D ReadValue, which on an export whose first state is a cross-attention one
                       # says batch 2 (docs/genai_shim.md): NPUW's Whisper mode does not use the value
                       ("NPUW_LLM_BATCH_DIM", 0), ("NPUW_LLM_SEQ_LEN_DIM", 2),
                       ("NPUW_LLM_MAX_PROMPT_LEN", max_prompt), ("NPUW_LLM_MIN_RESPONSE_LEN", min_response),
                       ("NPUW_LLM_PREFILL_HINT", "STATIC")):
        _set_default(props, key, value)
    return props


def _is_whisper_decoder(compiled: Any) -> bool:
    try:
        return bool(compiled.get_property("NPUW_WHISPER"))
    except (NpuEmuError, RuntimeError):  # a compiled model without the key is not one
        return False


class NpuwDecoder:
    """The ``WhisperDecoder`` of the default NPU path: batch 1, greedy or sampled decoding."""

    def __init__(self, core: Any, folder: Path, props: dict[str, Any], frames: int,
                 word_timestamps: bool = False) -> None:
        """``props``: npuw_whisper_properties' result; ``word_timestamps``: the pipeline's (the real's
        decoder reads the alignment heads' scores only then)."""
        props = dict(props)
        blob_path = props.pop("BLOB_PATH", None)
        export_blob = as_bool("EXPORT_BLOB", props.pop("EXPORT_BLOB", False))
        model = core.read_model(folder / DECODER_XML)
        names = {n for p in model.inputs for n in p.get_names()}
        if "beam_idx" not in names:
            # the real: "Stateful models without beam_idx input are not supported in StatefulToStateless"
            raise ConfigError(
                f"{folder / DECODER_XML} is not a stateful decoder (no beam_idx input): the default NPU path "
                "compiles the stateful export through NPUW; pass STATIC_PIPELINE=True for a --disable-stateful "
                "export, or export without --disable-stateful", key="models_path")
        shape = model.input("encoder_hidden_states").get_partial_shape()
        shape[1] = frames
        model.reshape({"encoder_hidden_states": shape})
        # the real's compile_decoder_for_npu: BLOB_PATH alone imports the decoder's blob, EXPORT_BLOB
        # writes it (to BLOB_PATH or ./openvino_model.blob); the encoder is compiled either way
        blob = str(blob_path) if blob_path not in (None, "") else None
        compiled = import_or_compile(core, lambda: core.compile_model(model, "NPU", props), props, blob, export_blob)
        if not _is_whisper_decoder(compiled):
            raise ConfigError(
                f"BLOB_PATH {blob} holds no NPUW Whisper decoder (an LLM's or another model's blob); pass the "
                "blob a WhisperPipeline exported with EXPORT_BLOB=True", key="BLOB_PATH")
        self._request = compiled.create_infer_request()
        self._word_timestamps = word_timestamps
        #: NPUW's cross-attention score outputs (NPUW_WHISPER_DECOMPOSE_SDPA)
        self.scores_outputs = sum(1 for o in compiled.outputs
                                  if o.get_any_name().startswith("cross_attention_qk_scaled_scores_"))
        self._beam = np.zeros(1, dtype=np.int32)

    def infer(self, encoder_hidden_states: np.ndarray, input_ids: list[int]) -> np.ndarray:
        out = self._request.infer({"input_ids": np.asarray([input_ids], dtype=np.int64),
                                   "encoder_hidden_states": encoder_hidden_states, "beam_idx": self._beam})
        return np.array(np.asarray(out["logits"])[0, -1], dtype=np.float32, copy=True)

    def infer_beams(self, encoder_hidden_states: np.ndarray, input_ids: list[int], beam_idx: list[int]) -> np.ndarray:
        raise UnsupportedFeatureError(
            "beam search is not implemented on the default NPU Whisper path (NPUW's Whisper mode runs batch 1); "
            "use greedy or sampled decoding, or the device \"CPU\"", key="num_beams")

    def alignment_scores(self, encoder_hidden_states: np.ndarray, input_ids: list[int],
                         heads: list[tuple[int, int]]) -> list[np.ndarray]:
        """Run ``input_ids`` (a prefill through NPUW) and return, per (layer, head), NPUW's
        cross-attention scores [rows, frames]: all of its prefill's rows (447), the padding rows at
        the f32 minimum, as the real's ``get_whisper_alignments_heads_qks`` reads them."""
        if not self._word_timestamps:
            # the real's check
            raise ConfigError(
                "Encoder attention heads are not decomposed. Cannot get encoder attention QKs.; create the "
                "pipeline with word_timestamps=True to get word-level timestamps", key="word_timestamps")
        self.infer(encoder_hidden_states, input_ids)
        return alignment_heads(self._request.get_tensor, self.scores_outputs, heads)

    def reset_state(self) -> None:
        # the real resets the request's states (NPUW's Whisper mode keeps its stored count: a one-token
        # call next continues the previous sequence, which is what the real's language detection meets)
        self._request.reset_state()
