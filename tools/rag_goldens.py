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


# Qwen3-Reranker-style prompts (the recipe's layout: ChatML, an instruction, the query, then each
# document and the assistant turn; the caller formats them, the pipeline concatenates query + document)
RERANK_QUERY = ("<|im_start|>system\nAnswer \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n"
                "<Query>: Who rowed out to the ship?\n")
RERANK_DOCUMENTS = tuple(f"<Document>: {d}<|im_end|>\n<|im_start|>assistant\n" for d in (
    "The keeper lit every lamp and watched the small ship on the water.",
    "Bread.",
    "Two fishermen rowed out in the strongest boat they owned.",
    "The children watched the waves break white against the rocks.",
))
#: name -> config keys, on CPU (the tokenizer pads on the left, as the Qwen3-Reranker recipe's)
RERANK_CASES: dict[str, dict[str, Any]] = {
    "all": {"top_n": 4},
    "top_n_default": {},
    "right": {"top_n": 4, "padding_side": "right"},
    "truncate_64": {"top_n": 4, "max_length": 64},
    "pad_to_112": {"top_n": 4, "max_length": 112, "pad_to_max_length": True},
}
#: the static NPU case: a stateless copy of the model reshaped to [4, 112], the pipeline padding to 112
RERANK_STATIC = RERANK_CASES["pad_to_112"]
RERANK_STATIC_SHAPE = (4, 112)
NPUW_CPU = {"NPU_USE_NPUW": "YES", "NPUW_DEVICES": "CPU", "NPUW_ONLINE_PIPELINE": "NONE"}


def stateless_static_copy(folder: Path, out: Path, batch: int, length: int) -> Path:
    """A user's way onto NPU for a stateful ``text-generation-with-past`` reranker: each state
    read replaced by its initial value (an empty past), the state writes dropped, the inputs
    reshaped to [batch, length] ([batch] for beam_idx); the other files linked.  Returns ``out``."""
    import openvino as ov

    model = ov.Core().read_model(folder / "openvino_model.xml")
    for node in model.get_ordered_ops():
        if node.get_type_name() == "ReadValue":
            node.output(0).replace(node.input_value(0))
    for sink in list(model.get_sinks()):
        model.remove_sink(sink)
    shapes = {p.get_any_name(): [batch, length] for p in model.inputs if p.get_any_name() != "beam_idx"}
    shapes.update({"beam_idx": [batch]} if any(p.get_any_name() == "beam_idx" for p in model.inputs) else {})
    model.reshape(shapes)
    out.mkdir(parents=True, exist_ok=True)
    ov.save_model(model, out / "openvino_model.xml", compress_to_fp16=False)
    for f in folder.iterdir():
        if not f.name.startswith("openvino_model.") and not (out / f.name).exists():
            (out / f.name).symlink_to(f.resolve())
    return out


def record_qwen3_rerank(folder: Path) -> None:
    """golden.json of a Qwen3 reranker: each RERANK_CASES on CPU, and the static case on CPU and
    on the real NPU plugin through NPUW on CPU (f32 hints)."""
    import tempfile

    import openvino_genai as og

    def run(path: Path, device: str, keys: dict[str, Any], **props: Any) -> list[list[float]]:
        pipe = og.TextRerankPipeline(str(path), device, **keys, **CPU_PROPS, **props)
        return [[i, s] for i, s in pipe.rerank(RERANK_QUERY, list(RERANK_DOCUMENTS))]

    golden: dict[str, Any] = {
        "fixture": folder.name, "openvino_genai": og.get_version(), "properties": CPU_PROPS,
        "query": RERANK_QUERY, "documents": list(RERANK_DOCUMENTS), "cases": {},
    }
    for case, keys in RERANK_CASES.items():
        golden["cases"][case] = {"config": keys, "device": "CPU", "results": run(folder, "CPU", keys)}
    with tempfile.TemporaryDirectory() as tmp:
        static = stateless_static_copy(folder, Path(tmp), *RERANK_STATIC_SHAPE)
        golden["cases"]["static_cpu"] = {"config": RERANK_STATIC, "device": "CPU",
                                         "results": run(static, "CPU", RERANK_STATIC)}
        golden["cases"]["static_npuw_cpu"] = {"config": RERANK_STATIC, "device": "NPU", "properties": NPUW_CPU,
                                              "results": run(static, "NPU", RERANK_STATIC, **NPUW_CPU)}
    (folder / "golden.json").write_text(json.dumps(golden, indent=1) + "\n", encoding="utf-8")
    print(f"[{folder.name}] golden.json: {len(golden['cases'])} cases")


def record(folder: Path) -> None:
    import openvino_genai as og

    if "qwen3-rerank" in folder.name:
        record_qwen3_rerank(folder)
        return

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
