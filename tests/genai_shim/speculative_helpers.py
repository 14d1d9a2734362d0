"""Draft models and counters shared by the speculative-decoding tests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

_TOKENIZER_FILES = (
    "openvino_tokenizer",
    "openvino_detokenizer",
    "tokenizer",
    "special_tokens_map",
    "generation_config",
)


def build_draft(tmp: Path, stories: Path, own_tokenizer: bool) -> Path:
    from ov_npu_emu.modelbuilder import make_model_folder

    folder = make_model_folder(tmp, preset="tiny", vocab_size=512, seed=1)
    if not own_tokenizer:
        for f in stories.iterdir():
            if f.name.startswith(_TOKENIZER_FILES):
                shutil.copy(f, folder / f.name)
        # The real compares BOS / EOS / PAD ids too; stories260K has no pad token.
        config = json.loads((folder / "config.json").read_text())
        config.pop("pad_token_id", None)
        (folder / "config.json").write_text(json.dumps(config))
    return folder


def counters(res: Any) -> dict[str, Any]:
    e = res.extended_perf_metrics
    return {
        "main_batches": list(e.main_model_metrics.raw_metrics.m_batch_sizes),
        "batches": list(res.perf_metrics.raw_metrics.m_batch_sizes),
        "accepted": e.get_num_accepted_tokens(),
        "draft_tokens": e.get_num_draft_tokens(),
        "rejected": e.get_num_rejected_tokens(),
        "draft_processed": e.get_num_draft_processed_tokens(),
        "generated": res.perf_metrics.get_num_generated_tokens(),
        "main_generated": e.main_model_metrics.get_num_generated_tokens(),
        "input": res.perf_metrics.get_num_input_tokens(),
    }
