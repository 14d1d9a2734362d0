"""The upstream rag samples (samples/python/rag/, ported with the import line changed only) run as
subprocesses under genai_shim and under the real openvino_genai on the RAG fixtures: the same
output (the rerank sample prints its scores to 4 decimals; the embeddings sample prints nothing)."""

from __future__ import annotations

from pathlib import Path

from tests.samples.sample_runner import only_import_and_device_differ, run

RAG = Path(__file__).resolve().parents[1] / "fixtures" / "rag"
TEXTS = ["The keeper lit every lamp.", "Two fishermen rowed out in the strongest boat.", "Bread.",
         "The children watched the waves."]


def test_text_rerank_sample(real_genai):
    only_import_and_device_differ("text_rerank.py")
    args = [str(RAG / "bert-rerank-fp32"), "Who rowed out to the ship?", *TEXTS]
    ours = run("ours", "-", "text_rerank.py", *args)
    assert ours == run("real", "-", "text_rerank.py", *args)
    assert ours.startswith("Reranked documents:\n") and ours.count("\nDocument ") == 3


def test_text_embeddings_sample(real_genai):
    only_import_and_device_differ("text_embeddings.py")
    args = [str(RAG / "bert-embed-fp32"), *TEXTS]
    assert run("ours", "-", "text_embeddings.py", *args) == run("real", "-", "text_embeddings.py", *args) == ""
