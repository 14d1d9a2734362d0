"""golden.json for the RAG fixtures from the REAL openvino_genai pipelines (openvino_genai only).

The cases (shared with tests/genai_shim/test_text_embedding_pipeline.py): every pooling type,
normalisation on and off, query and embed instructions, truncation to ``max_length``, padding to
it, left padding, and the static ``batch_size`` x ``max_length`` shape, each on a batch of
documents of different lengths (or one query), on CPU under f32 hints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CPU_PROPS = {"INFERENCE_PRECISION_HINT": "f32"}
DOCUMENTS = (
    "The keeper lit every lamp and watched the small ship on the water.",
    "Bread.",
    "Two fishermen rowed out in the strongest boat they owned, and they came back with a rope "
    "tied to the ship.",
)
QUERY = "Who rowed out to the ship?"

#: name -> (config keys, "documents" / "query" / "embed" (documents with a prompt))
EMBED_CASES: dict[str, tuple[dict[str, Any], str]] = {
    "cls": ({}, "documents"),
    "cls_raw": ({"normalize": False}, "documents"),
    "mean": ({"pooling_type": "MEAN"}, "documents"),
    "mean_raw": ({"pooling_type": "MEAN", "normalize": False}, "documents"),
    "last_token": ({"pooling_type": "LAST_TOKEN"}, "documents"),
    "last_token_left": ({"pooling_type": "LAST_TOKEN", "padding_side": "left"}, "documents"),
    "mean_left": ({"pooling_type": "MEAN", "padding_side": "left"}, "documents"),
    "query": ({"pooling_type": "MEAN", "query_instruction": "Represent this question: "}, "query"),
    "query_plain": ({}, "query"),
    "embed_instruction": ({"embed_instruction": "passage: ", "pooling_type": "MEAN"}, "documents"),
    "embed_prompt": ({"pooling_type": "MEAN"}, "embed"),
    "truncate_8": ({"max_length": 8, "pooling_type": "MEAN"}, "documents"),
    "pad_to_32": ({"max_length": 32, "pad_to_max_length": True, "pooling_type": "MEAN"}, "documents"),
    "static_batch": ({"max_length": 24, "pad_to_max_length": True, "batch_size": 3,
                      "pooling_type": "MEAN"}, "documents"),
    "batch_1_query": ({"batch_size": 1, "pooling_type": "LAST_TOKEN"}, "query"),
}
EMBED_PROMPT = "document: "


def config_kwargs(lib: Any, keys: dict[str, Any]) -> dict[str, Any]:
    """The case's keys with pooling_type as ``lib``'s enum value (lib: openvino_genai or genai_shim)."""
    out = dict(keys)
    if "pooling_type" in out:
        out["pooling_type"] = getattr(lib.TextEmbeddingPipeline.PoolingType, out["pooling_type"])
    return out


def embed_pipeline(lib: Any, folder: Path, case: str, device: str = "CPU", **props: Any) -> Any:
    keys, _ = EMBED_CASES[case]
    return lib.TextEmbeddingPipeline(str(folder), device, **config_kwargs(lib, keys), **CPU_PROPS, **props)


def run_embed_case(pipe: Any, case: str) -> list[list[float]]:
    """The case's embeddings as a list of vectors (a query gives one)."""
    kind = EMBED_CASES[case][1]
    if kind == "query":
        return [list(pipe.embed_query(QUERY))]
    if kind == "embed":
        return [list(v) for v in pipe.embed(list(DOCUMENTS), EMBED_PROMPT)]
    return [list(v) for v in pipe.embed_documents(list(DOCUMENTS))]


def record(folder: Path) -> None:
    import openvino_genai as og

    golden: dict[str, Any] = {
        "fixture": folder.name,
        "openvino_genai": og.get_version(),
        "device": "CPU",
        "properties": CPU_PROPS,
        "documents": list(DOCUMENTS),
        "query": QUERY,
        "embed_prompt": EMBED_PROMPT,
        "cases": {},
    }
    if "embed" in folder.name:
        for case, (keys, kind) in EMBED_CASES.items():
            vectors = run_embed_case(embed_pipeline(og, folder, case), case)
            golden["cases"][case] = {"config": keys, "call": kind, "embeddings": vectors}
    (folder / "golden.json").write_text(json.dumps(golden, indent=1) + "\n", encoding="utf-8")
    print(f"[{folder.name}] golden.json: {len(golden['cases'])} cases")
