"""Stop strings, the real's match_stop_string rules: shared by the stateful and paged pipelines."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["match_stop_string", "stop_window"]


def stop_window(tokenizer: Any, config: Any) -> tuple[int, list[str]]:
    """(stream window = the longest stop string in tokens, the stop strings sorted)."""
    if not config.stop_strings:
        return 0, []
    window = 0
    for s in config.stop_strings:
        enc = tokenizer.encode(s, add_special_tokens=False)
        window = max(window, int(np.asarray(enc.input_ids.data).shape[1]))
    return window, sorted(config.stop_strings)


def match_stop_string(tokenizer: Any, tokens: list[int], window: int, stops: list[str], include: bool) -> int | None:
    """Number of trailing tokens to drop when a stop string occurs in the decoded last ``window``
    tokens (None: no match)."""
    buffer = tokens[len(tokens) - window :]
    text = tokenizer.decode(buffer)
    for stop in stops:
        pos = text.find(stop)
        if pos == -1:
            continue
        kept = text[: pos + (len(stop) if include else 0)].rstrip(" \n")
        if not kept:
            return len(buffer)
        for i in range(len(buffer)):
            if kept in tokenizer.decode(buffer[: i + 1]):
                return len(buffer) - i - 1
        return 0
    return None
