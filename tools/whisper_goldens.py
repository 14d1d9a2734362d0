"""The goldens stage of tools/make_whisper_fixtures.py (``--goldens``, ``--goldens --check``).

golden.json per Whisper fixture from the REAL openvino_genai.WhisperPipeline on "CPU" (f32 hints)
and on "NPU" with NPUW_DEVICES=CPU, on its default (stateful, NPUW_WHISPER) path and with
STATIC_PIPELINE=True; plus the top-1 minus top-2 margins of every greedy step, teacher-forced
through the exported IRs on the OpenVINO CPU plugin in f32 (openvino and numpy only).

The margin check needs the real's log-mel features and decoding rules; both are re-stated here in
numpy from the real's sources (src/cpp/src/whisper/feature_extractor.cpp, whisper.cpp,
logit_processor.cpp), and the teacher-forced argmax must give the real's tokens
("argmax_equals_real"), which checks the re-statement.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ov_npu_emu.testing import WHISPER_AUDIO_SECONDS, whisper_case_kwargs, whisper_test_audio  # noqa: E402

#: a golden's smallest top1-top2 logit margin (f32, among the tokens the rules allow) must be
#: at least this; the timestamp rule's decision (log-sum-exp of the timestamps against the best
#: text token) and the language detection must be at least as clear.  The logits' std is ~14
#: (0.03 is ~0.2% of it; the LLM fixtures ask 0.1 of ~10); torch and the IRs agree to 4e-5.
MIN_MARGIN = 0.03
CPU_PROPS: dict[str, Any] = {"INFERENCE_PRECISION_HINT": "f32"}
F32_SUB = {"INFERENCE_PRECISION_HINT": "f32"}
#: the real NPU path on this machine: NPUW on the CPU plugin, f32 everywhere
NPU_PROPS: dict[str, Any] = {"NPU_USE_NPUW": "YES", "NPUW_DEVICES": "CPU", "INFERENCE_PRECISION_HINT": "f32"}
NPU_SETUPS: dict[str, dict[str, Any]] = {
    "npu_stateful": NPU_PROPS,
    "npu_static": {**NPU_PROPS, "STATIC_PIPELINE": True},
}

# --------------------------------------------------------------------------------------------
# the real's log-mel features (feature_extractor.cpp), numpy
# --------------------------------------------------------------------------------------------


def _hertz_to_mel(f: np.ndarray) -> np.ndarray:
    logstep = 27.0 / math.log(6.4)
    return np.where(f >= 1000.0, 15.0 + np.log(np.maximum(f, 1e-9) / 1000.0) * logstep, 3.0 * f / 200.0)


def _mel_to_hertz(m: np.ndarray) -> np.ndarray:
    logstep = math.log(6.4) / 27.0
    return np.where(m >= 15.0, 1000.0 * np.exp(logstep * (m - 15.0)), 200.0 * m / 3.0)


def mel_filters(n_fft: int = 400, n_mels: int = 80, sr: int = 16000) -> np.ndarray:
    """[n_fft // 2 + 1, n_mels] slaney-normalised triangular filters over 0 .. 8000 Hz."""
    bins = n_fft // 2 + 1
    mel_min, mel_max = _hertz_to_mel(np.array(0.0)), _hertz_to_mel(np.array(8000.0))
    filt = _mel_to_hertz(mel_min + np.arange(n_mels + 2) * (mel_max - mel_min) / (n_mels + 1))
    fft_freqs = np.arange(bins) * (sr // 2) / (bins - 1)
    diff = np.diff(filt)
    slopes = filt[None, :] - fft_freqs[:, None]
    down = -slopes[:, :-2] / diff[:-1]
    up = slopes[:, 2:] / diff[1:]
    fb = np.maximum(0.0, np.minimum(down, up))
    return fb * (2.0 / (filt[2:] - filt[:-2]))[None, :]


def log_mel(audio: np.ndarray, n_fft: int = 400, hop: int = 160, n_mels: int = 80,
            n_samples: int = 480000) -> np.ndarray:
    """[n_mels, n_frames] features as the real's extract(audio) (padded to at least 30 s)."""
    raw = np.asarray(audio, np.float64)
    pad = n_fft // 2
    total = max(raw.size, n_samples) + 2 * pad
    x = np.zeros(total)
    x[pad:pad + raw.size] = raw
    x[:pad] = x[pad + 1:2 * pad + 1][::-1]
    x[total - pad:] = x[total - 2 * pad - 1:total - pad - 1][::-1]
    n_frames = (total - n_fft) // hop
    active = raw.size + pad
    window = 0.5 * (1.0 - np.cos(2.0 * np.pi * np.arange(n_fft) / n_fft))
    computed = min(active // hop + 1, n_frames)
    frames = np.zeros((computed, n_fft))
    for i in range(computed):
        seg = x[i * hop:min(i * hop + n_fft, active)]
        frames[i, :seg.size] = seg
    power = np.abs(np.fft.rfft(frames * window, axis=1)) ** 2
    mel = np.log10(np.maximum(power @ mel_filters(n_fft, n_mels), 1e-10))
    out = np.full((n_mels, n_frames), math.log10(1e-10))
    out[:, :computed] = mel.T
    out = np.maximum(out, out.max() - 8.0)
    return ((out + 4.0) / 4.0).astype(np.float32)


# --------------------------------------------------------------------------------------------
# the real's greedy decoding rules (whisper.cpp, logit_processor.cpp), numpy
# --------------------------------------------------------------------------------------------


def process_logits(logits: np.ndarray, gen: dict, generated: list[int], return_timestamps: bool,
                   n_vocab: int) -> tuple[np.ndarray, float | None]:
    """The real's process_whisper_logits on one row: -> (processed row, timestamp-rule margin).

    The margin is |log-sum-exp(timestamp logprobs) - best text logprob| when the rule is
    evaluated (return_timestamps), else None."""
    row = np.array(logits, np.float64)
    neg = -np.inf
    initial = not generated
    if initial:
        row[gen["begin_suppress_tokens"]] = neg
    row[gen["suppress_tokens"]] = neg
    if not return_timestamps:
        return row, None
    ts_begin = gen["no_timestamps_token_id"] + 1
    row[gen["no_timestamps_token_id"]] = neg
    last_ts = len(generated) >= 1 and generated[-1] >= ts_begin
    penult_ts = len(generated) < 2 or generated[-2] >= ts_begin
    if last_ts:
        if penult_ts:
            row[ts_begin:] = neg
        else:
            row[:gen["eos_token_id"]] = neg
    stamps = [t for t in generated if t >= ts_begin]
    if stamps:
        last = stamps[-1] if (last_ts and not penult_ts) else stamps[-1] + 1
        row[ts_begin:last] = neg
    if initial:
        row[:ts_begin] = neg
        row[ts_begin + gen["max_initial_timestamp_index"] + 1:] = neg
    finite = row[np.isfinite(row)]
    m = finite.max()
    logprobs = row - (m + math.log(np.exp(finite - m).sum()))
    ts = logprobs[ts_begin:]
    ts = ts[np.isfinite(ts)]
    ts_lp = math.log(np.exp(ts).sum()) if ts.size else -np.inf
    text_max = logprobs[:ts_begin].max()
    margin = None
    if np.isfinite(ts_lp) and np.isfinite(text_max):
        margin = abs(ts_lp - text_max)
    if ts_lp > text_max:
        row[:ts_begin] = neg
    return row, margin


def top_margin(row: np.ndarray) -> float:
    finite = np.sort(row[np.isfinite(row)])
    return float(finite[-1] - finite[-2]) if finite.size > 1 else float("inf")


def greedy(step: Callable[[list[int]], np.ndarray], prompt: list[int], gen: dict, return_timestamps: bool,
           max_new_tokens: int, forced: Sequence[int] | None = None) -> dict[str, Any]:
    """Greedy decoding under the real's rules.  ``step(new_ids)`` feeds new ids (the prompt first,
    then one id a call) and returns the last position's logits.  With ``forced`` (teacher forcing)
    those ids are fed instead of the argmax; -> ids, margins, timestamp-rule margins, argmax."""
    ids: list[int] = []
    margins: list[float] = []
    ts_margins: list[float] = []
    argmax: list[int] = []
    logits = step(list(prompt))
    n_vocab = logits.shape[-1]
    while len(ids) < max_new_tokens:
        row, tsm = process_logits(logits, gen, ids, return_timestamps, n_vocab)
        best = int(np.argmax(row))
        argmax.append(best)
        margins.append(top_margin(row))
        if tsm is not None:
            ts_margins.append(tsm)
        tok = best if forced is None else int(forced[len(ids)])
        ids.append(tok)
        if tok == gen["eos_token_id"] or (forced is not None and len(ids) == len(forced)):
            break
        logits = step([tok])
    return {"ids": ids, "margins": margins, "ts_margins": ts_margins, "argmax": argmax}


def sot_prompt(gen: dict, language_id: int, task: str, return_timestamps: bool) -> list[int]:
    p = [gen["decoder_start_token_id"], language_id, gen["task_to_id"][task]]
    return p + ([] if return_timestamps else [gen["no_timestamps_token_id"]])


def load_gen(folder: Path) -> dict:
    return json.loads((folder / "generation_config.json").read_text(encoding="utf-8"))


def segments_offset(tokens: list[int], gen: dict, nb_max_frames: int = 3000) -> int:
    """The frames the real's long-form loop advances after a chunk (extract_segments' last_offset)."""
    ts_begin = gen["no_timestamps_token_id"] + 1
    start = None
    last_offset = 0
    n_segments = 0
    idx_start = 0
    for i, t in enumerate(tokens):
        if t < ts_begin:
            continue
        if start is None:
            start, idx_start = t, i
        elif start != t:
            last_offset = (t - ts_begin) * 2
            n_segments += 1
            start = None
    if start is not None and idx_start < len(tokens) - 1 and n_segments == 0:
        last_offset = nb_max_frames
    if start is None:
        last_offset = nb_max_frames
    return last_offset


# --------------------------------------------------------------------------------------------
# teacher-forced margins through the exported IRs (OpenVINO CPU plugin, f32)
# --------------------------------------------------------------------------------------------


class IRModels:
    """The fixture's encoder and stateful decoder (or decoder + decoder_with_past) on CPU f32."""

    def __init__(self, folder: Path) -> None:
        import openvino as ov

        core = ov.Core()
        self.encoder = core.compile_model(folder / "openvino_encoder_model.xml", "CPU", CPU_PROPS)
        self.stateful = not (folder / "openvino_decoder_with_past_model.xml").exists()
        self.decoder = core.compile_model(folder / "openvino_decoder_model.xml", "CPU", CPU_PROPS)
        self.with_past = None if self.stateful else core.compile_model(
            folder / "openvino_decoder_with_past_model.xml", "CPU", CPU_PROPS)

    def encode(self, features: np.ndarray) -> np.ndarray:
        return self.encoder({"input_features": features[None]})["last_hidden_state"]

    def stepper(self, enc: np.ndarray) -> Callable[[list[int]], np.ndarray]:
        """A step function for greedy(): feeds new ids, keeps the KV cache, -> last logits."""
        if self.stateful:
            req = self.decoder.create_infer_request()
            req.reset_state()

            def step(new: list[int]) -> np.ndarray:
                out = req.infer({"input_ids": np.array([new], np.int64), "encoder_hidden_states": enc,
                                 "beam_idx": np.zeros(1, np.int32)})
                return np.array(out["logits"][0, -1], np.float64)

            return step
        past: dict[str, np.ndarray] = {}

        def step_stateless(new: list[int]) -> np.ndarray:
            ids = np.array([new], np.int64)
            first = not past
            if first:
                req = self.decoder.create_infer_request()
                out = req.infer({"input_ids": ids, "encoder_hidden_states": enc})
                model = self.decoder
            else:
                req = self.with_past.create_infer_request()
                out = req.infer({"input_ids": ids, "encoder_hidden_states": enc,
                                 **{k.replace("present", "past_key_values"): v for k, v in past.items()}})
                model = self.with_past
            for o in model.outputs:
                name = o.get_any_name()
                if name.startswith("present.") and (first or ".decoder." in name):
                    past[name] = np.array(out[name])
            return np.array(out["logits"][0, -1], np.float64)

        return step_stateless

    def detect_language(self, enc: np.ndarray, gen: dict) -> tuple[int, float]:
        """The real's detect_language: argmax over lang_to_id (in key order) after <|startoftranscript|>."""
        logits = self.stepper(enc)([gen["decoder_start_token_id"]])
        scores = [(logits[i], -n, i) for n, (_, i) in enumerate(sorted(gen["lang_to_id"].items()))]
        scores.sort(reverse=True)
        return scores[0][2], float(scores[0][0] - scores[1][0])


def og_encoder(folder: Path) -> Callable[[str], list[int]]:
    """The real tokenizer's encode without special tokens, -> ids."""
    import openvino_genai as og

    tok = og.Tokenizer(str(folder))
    return lambda text: [int(t) for t in tok.encode(text, add_special_tokens=False).input_ids.data[0]]


def context_prompt(encode: Callable[[str], list[int]], gen: dict, case: dict, first_chunk: bool) -> list[int]:
    """The real's get_prompt_tokens: <|startofprev|>, " " + initial_prompt (first chunk only),
    " " + hotwords, each encoded without special tokens (SOT / EOT / no-timestamps dropped)."""
    parts = []
    if case.get("initial_prompt") and first_chunk:
        parts.append(case["initial_prompt"])
    if case.get("hotwords"):
        parts.append(case["hotwords"])
    if not parts:
        return []
    drop = {gen["decoder_start_token_id"], gen["eos_token_id"], gen["no_timestamps_token_id"]}
    out = [gen["prev_sot_token_id"]]
    for text in parts:
        out += [t for t in encode(" " + text) if t not in drop]
    return out


def segment_tokens(tokens: list[int], gen: dict) -> list[int]:
    """The tokens the real keeps of one chunk with timestamps (extract_segments'
    non_timestamp_tokens): those inside closed segments, or of one open segment if none closed."""
    ts_begin = gen["no_timestamps_token_id"] + 1
    out: list[int] = []
    start = None
    idx_start = 0
    closed = 0
    for i, t in enumerate(tokens):
        if t < ts_begin:
            continue
        if start is None:
            start, idx_start = t, i
        elif start != t:
            out += tokens[idx_start + 1:i]
            closed += 1
            start = None
    if start is not None and idx_start < len(tokens) - 1 and not closed:
        out += tokens[idx_start + 1:]
    return out


def chunks_of(tokens: list[int], gen: dict, time_offset: float) -> list[tuple[float, float]]:
    """(start, end) of the segments the real's extract_segments finds in one chunk's tokens."""
    ts_begin = gen["no_timestamps_token_id"] + 1
    out: list[tuple[float, float]] = []
    start = None
    idx_start = 0
    for i, t in enumerate(tokens):
        if t < ts_begin:
            continue
        if start is None:
            start, idx_start = t, i
        elif start != t:
            out.append(((start - ts_begin) * 0.02 + time_offset, (t - ts_begin) * 0.02 + time_offset))
            start = None
    if start is not None and idx_start < len(tokens) - 1 and not out:
        out.append(((start - ts_begin) * 0.02 + time_offset, -1.0))
    return out


# --------------------------------------------------------------------------------------------
# golden cases and the real's runs
# --------------------------------------------------------------------------------------------

#: case name -> audio kind and WhisperGenerationConfig fields
CASES: dict[str, dict[str, Any]] = {
    "short": {"audio": "short"},
    "medium": {"audio": "medium"},
    "long": {"audio": "long"},
    "short_timestamps": {"audio": "short", "return_timestamps": True},
    "medium_timestamps": {"audio": "medium", "return_timestamps": True},
    "long_timestamps": {"audio": "long", "return_timestamps": True},
    "short_en": {"audio": "short", "language": "<|en|>"},
    "medium_en_timestamps": {"audio": "medium", "language": "<|en|>", "return_timestamps": True},
    "short_translate": {"audio": "short", "task": "translate"},
    "medium_en_translate": {"audio": "medium", "language": "<|en|>", "task": "translate"},
    "short_initial_prompt": {"audio": "short", "initial_prompt": "The keeper lit every lamp."},
    "short_hotwords": {"audio": "short", "hotwords": "lamp ship water"},
    "short_max_new_tokens": {"audio": "short", "max_new_tokens": 5},
}
#: cases run on a pipeline constructed with word_timestamps=True (the real decomposes the
#: cross-attention SDPA then, to read the alignment heads' QKs)
WORD_CASES: dict[str, dict[str, Any]] = {
    "short_words": {"audio": "short", "word_timestamps": True},
    "medium_words_timestamps": {"audio": "medium", "word_timestamps": True, "return_timestamps": True},
    # texts that split into words (ov_npu_emu.testing.whisper_case_kwargs: "suppress": "incomplete"
    # suppresses the timestamps and the tokens that decode to an incomplete character)
    "short_en_words_clean": {"audio": "short", "language": "<|en|>", "max_new_tokens": 12, "word_timestamps": True,
                             "suppress": "incomplete"},
    "medium_fr_words_clean": {"audio": "medium", "language": "<|fr|>", "max_new_tokens": 25,
                              "word_timestamps": True, "suppress": "incomplete"},
    "medium_de_words_timestamps_clean": {"audio": "medium", "language": "<|de|>", "max_new_tokens": 20,
                                         "word_timestamps": True, "return_timestamps": True,
                                         "suppress": "incomplete"},
    "long_en_words_clean": {"audio": "long", "language": "<|en|>", "word_timestamps": True,
                            "suppress": "incomplete"},
}


def run_cases(folder: Path, device: str, props: dict, cases: dict[str, dict], word_pipeline: bool = False,
              emit: Callable[[str, dict], None] | None = None) -> dict[str, Any]:
    """The real WhisperPipeline on ``device``: per case texts, scores, language, chunks, words,
    the streamed token ids and the number of generated tokens (or the error); ``emit(name,
    result)`` is called after each case (the child process prints it at once)."""
    import openvino_genai as og

    class Ids(og.StreamerBase):
        def __init__(self) -> None:
            super().__init__()
            self.ids: list[int] = []

        def write(self, token: Any) -> Any:
            self.ids += [int(token)] if isinstance(token, int) else [int(t) for t in token]
            return og.StreamingStatus.RUNNING

        def end(self) -> None:
            pass

    extra = {"word_timestamps": True} if word_pipeline else {}
    out: dict[str, Any] = {}
    try:
        pipe = og.WhisperPipeline(str(folder), device, **props, **extra)
    except Exception as e:  # noqa: BLE001 - the real's refusal is the outcome
        err = {"error": f"{type(e).__name__}: {str(e).strip()}"}
        for name in cases:
            out[name] = err
            if emit:
                emit(name, err)
        return out
    for name, case in cases.items():
        audio = whisper_test_audio(case["audio"])
        streamer = Ids()
        try:
            r = pipe.generate(audio.tolist(), streamer=streamer, **whisper_case_kwargs(case, pipe))
        except Exception as e:  # noqa: BLE001
            out[name] = {"error": f"{type(e).__name__}: {str(e).strip()}"}
        else:
            res: dict[str, Any] = {"texts": list(r.texts), "scores": [round(float(s), 5) for s in r.scores],
                                   "language": r.language, "streamed_ids": streamer.ids,
                                   "num_generated_tokens": int(r.perf_metrics.get_num_generated_tokens())}
            if r.chunks is not None:
                res["chunks"] = [[round(c.start_ts, 4), round(c.end_ts, 4), c.text] for c in r.chunks]
            if r.words is not None:
                res["words"] = [[w.word, round(w.start_ts, 4), round(w.end_ts, 4), [int(t) for t in w.token_ids]]
                                for w in r.words]
            out[name] = res
        if emit:
            emit(name, out[name])
    return out


#: (setup, case) where the real corrupts its heap: NPUW's Whisper prefill copies every prompt id
#: into its 4-slot input (infer_prefill), and <|startofprev|> + a prompt is longer.  What follows
#: is undefined (the process dies, or this and later calls raise): such a case runs alone in its
#: own process and any failure is recorded as this one outcome.
UNDEFINED: dict[tuple[str, str], str] = {
    (setup, case): "fails: the prompt is longer than NPUW's 4-token Whisper prefill; the real overruns "
                   "the prefill's input_ids buffer (heap corruption: the process dies or the call raises)"
    for setup in ("npu_stateful",) for case in ("short_initial_prompt", "short_hotwords")
}


def run_isolated(folder: Path, setup: str, word_pipeline: bool = False, timeout: float = 900.0) -> dict[str, Any]:
    """run_cases in child processes: the real has crashed the process here (heap corruption on
    the NPU path with a context prompt, a segfault with word timestamps); the case that was
    running then gets the crash as its outcome and a new child goes on with the next case.
    Cases in UNDEFINED run last, each alone."""
    names = list(WORD_CASES if word_pipeline else CASES)
    alone = [n for n in names if (setup, n) in UNDEFINED]
    out = _run_children(folder, setup, [n for n in names if n not in alone], word_pipeline, timeout)
    shared = {v.get("error") for v in out.values()}  # e.g. the pipeline refuses the export at all
    for n in alone:
        r = _run_children(folder, setup, [n], word_pipeline, timeout)[n]
        out[n] = {"error": UNDEFINED[(setup, n)]} if "error" in r and r["error"] not in shared else r
    return {n: out[n] for n in names}


def _run_children(folder: Path, setup: str, todo: list[str], word_pipeline: bool, timeout: float) -> dict[str, Any]:
    import subprocess

    out: dict[str, Any] = {}
    while todo:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", setup, str(folder), *todo]
        if word_pipeline:
            cmd.append("--words")
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            out[todo.pop(0)] = {"error": f"timed out after {timeout:.0f} s"}
            continue
        for line in r.stdout.splitlines():
            if line.startswith("{"):
                item = json.loads(line)
                out[item["case"]] = item["result"]
        todo = [n for n in todo if n not in out]
        if todo and r.returncode != 0:
            tail = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
            out[todo.pop(0)] = {"error": f"process died (exit {r.returncode}): {tail}"}
        elif todo:
            raise RuntimeError(f"child for {setup} ended without results for {todo}: {r.stderr[-2000:]}")
    return out


def _setup_props(setup: str) -> tuple[str, dict[str, Any]]:
    return ("CPU", CPU_PROPS) if setup == "cpu" else ("NPU", NPU_SETUPS[setup])


def _child(setup: str, folder: str, names: list[str], words: bool) -> int:
    device, props = _setup_props(setup)
    table = WORD_CASES if words else CASES

    def emit(name: str, result: dict) -> None:
        print(json.dumps({"case": name, "result": result}, ensure_ascii=False), flush=True)

    run_cases(Path(folder), device, props, {n: table[n] for n in names}, words, emit)
    return 0


def comparable(res: dict[str, Any]) -> dict[str, Any]:
    """What must agree between two runs of a case: everything but the timing-free extras."""
    return {k: v for k, v in res.items() if k not in ("num_generated_tokens",)}


def margins_for(encode: Callable[[str], list[int]], models: IRModels, gen: dict, case: dict,
                real: dict[str, Any]) -> dict[str, Any]:
    """Teacher-free greedy through the IRs (the real's rules) for one case, with its margins and
    whether it reproduces the real's language, streamed ids and chunk times."""
    r = greedy_case(encode, models, gen, case)
    ts = r["timestamps"]
    if ts:
        ids = [t for c in r["chunks"] for t in segment_tokens(c["ids"], gen)]
    else:
        ids = [t for c in r["chunks"] for t in c["ids"]]
    out: dict[str, Any] = {
        "ids": [c["ids"] for c in r["chunks"]],
        "chunk_offsets": [c["offset"] for c in r["chunks"]],
        "per_step": [[round(m, 4) for m in c["margins"]] for c in r["chunks"]],
        "min": round(r["min_margin"], 5),
        "timestamp_rule_min": None if r["min_ts_margin"] is None else round(r["min_ts_margin"], 5),
        "language_margin": None if r["language_margin"] is None else round(r["language_margin"], 5),
    }
    checks = {}
    if "error" not in real:
        streamed = real["streamed_ids"]
        checks["streamed_ids"] = ids == streamed
        if "chunks" in real and case.get("return_timestamps"):
            mine = [se for c in r["chunks"] for se in chunks_of(c["ids"], gen, c["offset"] * 0.01)]
            theirs = [(c[0], c[1]) for c in real["chunks"]]
            checks["chunk_times"] = len(mine) == len(theirs) and all(
                abs(a - c) < 1e-3 and abs(b - d) < 1e-3 for (a, b), (c, d) in zip(mine, theirs, strict=False))
    out["reproduces_real"] = checks
    return out


def greedy_case(encode: Callable[[str], list[int]], models: Any, gen: dict, case: dict) -> dict[str, Any]:
    """One case decoded like the real (long-form loop, language detection, context prompt) with
    ``models`` (IRModels, or the fixture tool's torch stand-in: encode / stepper / detect_language)."""
    audio = whisper_test_audio(case["audio"])
    feats = log_mel(audio)
    n_frames = feats.shape[1]
    ts = bool(case.get("return_timestamps")) or n_frames > 3000
    max_new = int(case.get("max_new_tokens") or gen.get("max_length", 448))
    chunks = []
    offset = 0
    lang = None
    lang_margin = None
    while offset < n_frames:
        f = np.zeros((feats.shape[0], 3000), np.float32)
        part = feats[:, offset:offset + 3000]
        f[:, :part.shape[1]] = part
        enc = models.encode(f)
        if lang is None:
            if case.get("language"):
                lang = gen["lang_to_id"][case["language"]]
            else:
                lang, lang_margin = models.detect_language(enc, gen)
        prompt = context_prompt(encode, gen, case, offset == 0)
        prompt += sot_prompt(gen, lang, case.get("task") or "transcribe", ts)
        r = greedy(models.stepper(enc), prompt, gen, ts, max_new)
        r["offset"] = offset
        chunks.append(r)
        offset += segments_offset(r["ids"], gen) if ts else n_frames
    margins = [m for c in chunks for m in c["margins"]]
    ts_margins = [m for c in chunks for m in c["ts_margins"]]
    return {"language_id": lang, "language_margin": lang_margin, "chunks": chunks, "timestamps": ts,
            "min_margin": min(margins), "min_ts_margin": min(ts_margins) if ts_margins else None}


def file_hashes(folder: Path) -> dict[str, str]:
    """sha256 of every fixture file the goldens were recorded from (golden.json aside)."""
    import hashlib

    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(folder.iterdir())
            if f.is_file() and f.name != "golden.json" and not f.name.startswith(".")}


def record(folder: Path, log: Callable[[str], None] = print) -> dict[str, Any]:
    """golden.json content for one fixture folder (see the module docstring)."""
    import hashlib

    import openvino as ov
    import openvino_genai as og

    t0 = time.time()
    gen = load_gen(folder)
    g: dict[str, Any] = {
        "fixture": folder.name,
        "versions": {"openvino": ov.get_version(), "openvino_genai": og.get_version()},
        "audio": {k: {"seconds": s, "samples": int(whisper_test_audio(k).size),
                      "sha256": hashlib.sha256(whisper_test_audio(k).tobytes()).hexdigest()}
                  for k, s in WHISPER_AUDIO_SECONDS.items()},
        "cases": {**CASES, **WORD_CASES},
        "files": file_hashes(folder),
    }
    g["cpu"] = {"device": "CPU", "properties": CPU_PROPS, "results": run_isolated(folder, "cpu")}
    g["cpu_word_timestamps"] = {"device": "CPU", "properties": {**CPU_PROPS, "word_timestamps": True},
                                "results": run_isolated(folder, "cpu", word_pipeline=True)}
    log(f"[{folder.name}] CPU done ({time.time() - t0:.0f} s)")
    cpu = g["cpu"]["results"]
    for setup, props in NPU_SETUPS.items():
        res = run_isolated(folder, setup)
        entry: dict[str, Any] = {"device": "NPU", "properties": props, "results": res}
        entry["equals_cpu"] = {n: comparable(res[n]) == comparable(cpu[n]) for n in CASES}
        g[setup] = entry
        words = run_isolated(folder, setup, word_pipeline=True)
        g[f"{setup}_word_timestamps"] = {"device": "NPU", "properties": {**props, "word_timestamps": True},
                                         "results": words}
        log(f"[{folder.name}] {setup} done ({time.time() - t0:.0f} s)")
    # the real on CPU refuses a --disable-stateful export (its decoder is always the stateful one);
    # STATIC_PIPELINE takes it: then that is the reference the re-stated greedy must reproduce
    g["reference"] = "cpu" if "error" not in cpu["short"] else "npu_static"
    ref = g[g["reference"]]["results"]
    models = IRModels(folder)
    encode = og_encoder(folder)
    g["margins"] = {"source": "greedy under the real's rules (tools/whisper_goldens.py) through the exported "
                    "IRs on the OpenVINO CPU plugin, f32; features by log_mel", "min_required": MIN_MARGIN}
    for name, case in CASES.items():
        g["margins"][name] = margins_for(encode, models, gen, case, ref[name])
    worst = min(g["margins"][n]["min"] for n in CASES)
    g["margins"]["min"] = worst
    log(f"[{folder.name}] margins done ({time.time() - t0:.0f} s): min {worst}")
    return g


def dump(g: dict[str, Any]) -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from fixture_goldens import dump_json

    return dump_json(g)


def check_golden(g: dict[str, Any], log: Callable[[str], None] = print) -> list[str]:
    """Problems that make a golden unfit: small margins, a greedy that misses the real's output."""
    bad = []
    for name in CASES:
        m = g["margins"][name]
        if m["min"] < MIN_MARGIN:
            bad.append(f"{name}: top-1 margin {m['min']} < {MIN_MARGIN}")
        if m["timestamp_rule_min"] is not None and m["timestamp_rule_min"] < MIN_MARGIN:
            bad.append(f"{name}: timestamp-rule margin {m['timestamp_rule_min']} < {MIN_MARGIN}")
        if m["language_margin"] is not None and m["language_margin"] < MIN_MARGIN:
            bad.append(f"{name}: language margin {m['language_margin']} < {MIN_MARGIN}")
        if not all(m["reproduces_real"].values()):
            bad.append(f"{name}: the re-stated greedy differs from the real: {m['reproduces_real']}")
    return bad


def run(folders: list[Path], check: bool = False, log: Callable[[str], None] = print) -> int:
    """Record (or with check: re-record in memory and compare) golden.json for each folder."""
    bad = 0
    for folder in folders:
        g = record(folder, log)
        for problem in check_golden(g):
            log(f"[{folder.name}] WARNING {problem}")
        if check:
            old = json.loads((folder / "golden.json").read_text(encoding="utf-8"))
            for key in ("audio", "cases", "files", "reference", "cpu", "cpu_word_timestamps", *NPU_SETUPS,
                        *[f"{s}_word_timestamps" for s in NPU_SETUPS]):
                if old.get(key) != json.loads(json.dumps(g.get(key))):
                    bad += 1
                    log(f"[{folder.name}] golden differs in {key!r}")
            continue
        tmp = folder / ".golden.json.tmp"
        tmp.write_text(dump(g), encoding="utf-8")
        tmp.rename(folder / "golden.json")
    return 1 if bad else 0


if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0] == "--child":
        raise SystemExit(_child(args[1], args[2], [a for a in args[3:] if a != "--words"], "--words" in args))
    raise SystemExit("run through tools/make_whisper_fixtures.py --goldens")
