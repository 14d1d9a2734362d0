"""Chat cost per turn: NPU re-prefills the whole templated history, CPU continues its KV cache.

Usage: python bench/bench_genai_chat.py [MODEL_DIR] [--turns N] [--tokens N] [--block N]
Prints, per turn, the prompt tokens each device had to prefill and the time of the turn, then the
ratios NPU/CPU side by side; a third column runs NPU with NPUW prefix caching (chunked prefill,
NPUW_LLM_ENABLE_PREFIX_CACHING=YES), which restores the history blocks of the previous turns. The
model folder needs a chat template; without one a simple
Question/Answer template is added in a temporary copy.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "plugins")]

from ov_npu_emu.models import find_model

F32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
NPU = {"NPUW_DEVICES": "CPU", "MAX_PROMPT_LEN": 512, "MIN_RESPONSE_LEN": 128}
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}Question: {{ m['content'] }}\n"
    "{% else %}Answer: {{ m['content'] }}{{ eos_token }}\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}Answer:{% endif %}"
)
QUESTIONS = [
    "Who is Lily?",
    "What did she find?",
    "Where did they go?",
    "What happened next?",
    "How did it end?",
    "Did they play again?",
]


def with_template(folder: Path, tmp: Path) -> Path:
    cfg_path = folder / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text()) if cfg_path.is_file() else {}
    if cfg.get("chat_template"):
        return folder
    for f in folder.iterdir():
        if f.is_file() and f.name != "tokenizer_config.json":
            (tmp / f.name).symlink_to(f)
    cfg["chat_template"] = TEMPLATE
    (tmp / "tokenizer_config.json").write_text(json.dumps(cfg))
    return tmp


def run_chat(pipe: Any, turns: int, tokens: int) -> list[tuple[int, float]]:
    import genai_shim

    fed: list[int] = []
    impl = pipe._impl  # the implementation LLMPipeline chose (genai_shim/llm)
    orig = impl._infer

    def spy(ids, mask, pos, beam, perf):  # count prefill tokens (the first call of each turn)
        fed.append(ids.shape[1])
        return orig(ids, mask, pos, beam, perf)

    impl._infer = spy
    history = genai_shim.ChatHistory()
    out = []
    for q in QUESTIONS[:turns]:
        history.append({"role": "user", "content": q})
        fed.clear()
        t0 = time.perf_counter()
        r = pipe.generate(history, max_new_tokens=tokens, ignore_eos=True)
        out.append((fed[0], (time.perf_counter() - t0) * 1000))
        history.append({"role": "assistant", "content": r.texts[0]})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir", nargs="?", default=str(find_model("stories260K")))
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--block", type=int, default=16, help="prefix-cache block (= chunk) size")
    args = ap.parse_args()
    cached = {
        "NPUW_LLM_PREFILL_CHUNK_SIZE": args.block,
        "NPUW_LLM_ENABLE_PREFIX_CACHING": "YES",
        "NPUW_LLM_PREFIX_CACHING_BLOCK_SIZE": args.block,
    }
    import genai_shim

    with tempfile.TemporaryDirectory() as tmp:
        folder = with_template(Path(args.model_dir), Path(tmp))
        # the stateful CPU pipeline (ATTENTION_BACKEND=SDPA): the paged default has no per-turn
        # prefill call to count
        cpu = run_chat(genai_shim.LLMPipeline(str(folder), "CPU", ATTENTION_BACKEND="SDPA", **F32),
                       args.turns, args.tokens)
        try:
            npu = run_chat(genai_shim.LLMPipeline(str(folder), "NPU", **F32, **NPU), args.turns, args.tokens)
            npu_pc = run_chat(
                genai_shim.LLMPipeline(str(folder), "NPU", **F32, **NPU, **cached),
                args.turns,
                args.tokens,
            )
        except Exception as e:  # noqa: BLE001 - e.g. NPUW not installed
            print(f"NPU unavailable: {e}")
            return 1
    print(
        f"{'turn':>4} {'CPU prefill':>12} {'NPU prefill':>12} {'ratio':>6} {'CPU ms':>8} "
        f"{'NPU ms':>8} {'ratio':>6} {'NPU+prefix ms':>14} {'ratio':>6}"
    )
    for i, ((pc, tc), (pn, tn), (_, tp)) in enumerate(zip(cpu, npu, npu_pc, strict=False), 1):
        print(
            f"{i:>4} {pc:>12} {pn:>12} {pn / pc:>6.1f} {tc:>8.1f} {tn:>8.1f} {tn / tc:>6.1f} "
            f"{tp:>14.1f} {tp / tc:>6.1f}"
        )
    total_c, total_n = sum(p for p, _ in cpu), sum(p for p, _ in npu)
    print(f"total prefilled tokens: CPU {total_c}, NPU {total_n} (ratio {total_n / total_c:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
