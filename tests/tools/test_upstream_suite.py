"""tools/upstream_suite.py's own logic, without the upstream suite: junit parsing, hub-id scan,
stand-in choice, failure grouping and the generated table (the long run itself is a tool)."""

import json

from tools import upstream_suite as us

JUNIT = """<?xml version="1.0"?>
<testsuites><testsuite name="pytest">
<testcase classname="test_a" file="test_a.py" name="test_ok[1]"/>
<testcase classname="test_a" file="test_a.py" name="test_ok[2]"/>
<testcase classname="test_a" file="test_a.py" name="test_bad[3]">
  <failure message="E   TypeError: cannot pickle 'X' object at 0x7f">trace</failure></testcase>
<testcase classname="test_a" file="test_a.py" name="test_skip"><skipped message="no model"/></testcase>
<testcase classname="test_a" file="test_a.py" name="test_err">
  <error message="failed on setup with &quot;OSError: gone&quot;"/></testcase>
</testsuite></testsuites>
"""


def _results(tmp_path, side, text):
    d = tmp_path / "results" / side
    d.mkdir(parents=True)
    (d / "test_a.py.xml").write_text(text)


def test_parse_junit_outcomes_and_first_error_line(tmp_path):
    _results(tmp_path, "real", JUNIT)
    r = us.parse_junit(tmp_path / "results" / "real" / "test_a.py.xml")
    assert r["test_a.py::test_ok[1]"] == ("passed", "")
    assert r["test_a.py::test_bad[3]"][0] == "failed"
    assert r["test_a.py::test_bad[3]"][1].startswith("E   TypeError: cannot pickle")
    assert r["test_a.py::test_skip"][0] == "skipped"
    assert r["test_a.py::test_err"][0] == "error"


def test_table_counts_real_passes_and_lists_ours_failures(tmp_path):
    real = JUNIT.replace('<failure message="E   TypeError: cannot pickle \'X\' object at 0x7f">trace</failure>', "")
    ours = JUNIT.replace('name="test_ok[2]"/>', 'name="test_ok[2]"><failure message="AssertionError: 1 == 2"/>'
                         "</testcase>")
    _results(tmp_path, "real", real)
    _results(tmp_path, "ours", ours)
    (tmp_path / "results" / "meta.json").write_text(json.dumps({"commit": "abc", "versions": {"x": "1"}}))
    doc = tmp_path / "doc.md"

    class Args:
        work = tmp_path

    Args.doc = doc
    assert us.cmd_table(Args) == 0
    text = doc.read_text()
    assert "| test_a.py | 5 | 3 | 1 | 0 |" in text  # real passes ok[1], ok[2], bad[3]; ours only ok[1]
    assert "`test_ok[2]`" in text and "`test_bad[3]`" in text
    assert "(2 tests, 2 groups)" in text


def test_normalise_folds_numbers_and_quotes():
    assert us.normalise("assert 'abc' == 'd' at 12") == us.normalise("assert 'x' == 'yy' at 7")


def test_hub_ids_and_standin_arch(tmp_path):
    (tmp_path / "utils").mkdir()
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "models.py").write_text('M = ("Qwen/Qwen2-0.5B-Instruct",)\n')
    (tmp_path / "test_x.py").write_text(
        'a = "optimum-intel-internal-testing/tiny-random-Phi3ForCausalLM"\n'
        'b = "openai/whisper-tiny"\nc = "data/short_prompts.txt"\nd = "BAAI/bge-small-en-v1.5"\n'
        'e = "optimum-intel-internal-testing/tiny-random-qwen3-asr"\n')
    ids = us.hub_ids(tmp_path, ["test_x.py"])
    assert ids == ["BAAI/bge-small-en-v1.5", "Qwen/Qwen2-0.5B-Instruct",
                   "optimum-intel-internal-testing/tiny-random-Phi3ForCausalLM"]
    assert [us.standin_arch(i) for i in ids] == ["bert", "qwen2", "phi3"]
    assert us.standin_arch("TinyLlama/TinyLlama-1.1B-Chat-v1.0") == "llama"


def test_rag_standin_kinds(tmp_path):
    """test_rag.py's embedding and reranker ids get RAG stand-ins (the Qwen3 seq-cls reranker
    before the generative one); a VL embedding model and an LLM get none."""
    kinds = {i: us.rag_standin_kind(i) for i in (
        "BAAI/bge-small-en-v1.5", "mixedbread-ai/mxbai-embed-xsmall-v1", "cross-encoder/ms-marco-TinyBERT-L2-v2",
        "tomaarsen/Qwen3-Reranker-0.6B-seq-cls", "Qwen/Qwen3-Reranker-0.6B", "Qwen/Qwen3-Embedding-0.6B",
        "optimum-intel-internal-testing/tiny-random-qwen3-vl-embedding", "Qwen/Qwen2-0.5B-Instruct")}
    assert list(kinds.values()) == ["bert-embed", "bert-embed", "bert-cross-encoder", "qwen3-seqcls",
                                    "qwen3-rerank", "qwen3-embed", None, None]
    (tmp_path / "test_rag.py").write_text('A = "Qwen/Qwen3-Reranker-0.6B"\nB = "Qwen/Qwen2-0.5B-Instruct"\n')
    assert us.rag_hub_ids(tmp_path, ["test_rag.py"]) == ["Qwen/Qwen3-Reranker-0.6B"]


def test_table_keep_carries_rows_of_files_without_results(tmp_path):
    """--keep: a file the doc lists and the work dir has no results for keeps its rows and groups
    (and the doc says so); the files with results are recounted; the totals add up."""
    _results(tmp_path, "real", JUNIT)
    _results(tmp_path, "ours", JUNIT)
    (tmp_path / "results" / "meta.json").write_text(json.dumps({"commit": "abc", "versions": {}}))
    doc = tmp_path / "doc.md"
    doc.write_text("- generated: 2026-01-01 00:00 UTC\n\n| upstream test file | a | b | c | d |\n|---|\n"
                   "| test_old.py | 10 | 8 | 7 | 0 |\n| test_a.py | 1 | 1 | 1 | 0 |\n| **total** | 11 | 9 | 8 | 0 |\n\n"
                   "## Real passes, ours does not (1 tests, 1 groups)\n\n| file | test | n | ours | cause |\n"
                   "|---|---|---:|---|---|\n| test_old.py | `test_f` | 1 | failed: X |  |\n\n"
                   "- test_old.py `test_f[1]` — failed: X\n\n"
                   "## Not compared: the real does not pass on the stand-ins (2)\n\n| file | test | n | real |\n"
                   "|---|---|---:|---|\n| test_old.py | `test_g` | 2 | skipped: S |\n")

    class Args:
        work = tmp_path
        keep = True

    Args.doc = doc
    assert us.cmd_table(Args) == 0
    text = doc.read_text()
    assert "| test_old.py | 10 | 8 | 7 | 0 |" in text and "| test_a.py | 5 | 2 | 2 | 0 |" in text
    assert "| **total** | 15 | 10 | 9 | 0 |" in text
    assert "carried over from the previous table (generated 2026-01-01 00:00 UTC" in text
    assert "(1 tests, 1 groups)" in text and "| test_old.py | `test_f` | 1 | failed: X |  |" in text
    assert "- test_old.py `test_f[1]` — failed: X" in text
    # test_a's three (failed, skipped, error) and the two kept
    assert "stand-ins (5)" in text and "| test_old.py | `test_g` | 2 | skipped: S |" in text


def test_hub_snapshot_layout_is_made_once(tmp_path):
    """The Whisper stand-ins' hub cache layout: <kind>--org--name/snapshots/<rev>, refs/main."""
    calls = []

    def build(d):
        calls.append(d)
        (d / "config.json").write_text("{}")

    snap = us._hub_snapshot(tmp_path, "openai/whisper-tiny", "models", build)
    assert snap.parent.parent == tmp_path / "models--openai--whisper-tiny"
    assert (snap / "config.json").is_file()
    assert (snap.parent.parent / "refs" / "main").read_text() == snap.name
    assert us._hub_snapshot(tmp_path, "openai/whisper-tiny", "models", build) == snap and len(calls) == 1
    assert {"openai/whisper-tiny", "distil-whisper/distil-small.en"} == set(us.WHISPER_IDS)


def test_vlm_files_get_vlm_standins_only(tmp_path):
    (tmp_path / "utils").mkdir()
    (tmp_path / "test_vlm_pipeline.py").write_text(
        'a = "optimum-intel-internal-testing/tiny-random-qwen2vl"\n'
        'b = "optimum-intel-internal-testing/tiny-random-llava"\n'
        'c = "optimum-intel-internal-testing/tiny-random-internvl2"\n')
    assert us.hub_ids(tmp_path, ["test_vlm_pipeline.py"]) == []  # no LLM stand-in for a VLM id
    assert us.vlm_hub_ids(tmp_path, ["test_vlm_pipeline.py"]) == [
        "optimum-intel-internal-testing/tiny-random-llava", "optimum-intel-internal-testing/tiny-random-qwen2vl"]


def test_chunks_of_a_file_merge(tmp_path):
    d = tmp_path / "results" / "real"
    d.mkdir(parents=True)
    (d / "test_a.py@one.xml").write_text(JUNIT)
    (d / "test_a.py@two.xml").write_text(JUNIT.replace("test_ok[1]", "test_more[1]"))
    real = us.collect(tmp_path)["test_a.py"]["real"]
    assert "test_a.py::test_ok[1]" in real and "test_a.py::test_more[1]" in real and len(real) == 6


def test_web_standins_are_deterministic(tmp_path):
    import pytest

    pytest.importorskip("PIL")  # the fixtures venv's (the tool runs there)
    index = json.loads((us.web_standins(tmp_path) / "index.json").read_text())
    assert set(index) == set(us.WEB_IMAGES)
    first = {u: (tmp_path / "web" / f).read_bytes() for u, f in index.items()}
    for f in index.values():
        (tmp_path / "web" / f).unlink()
    us.web_standins(tmp_path)
    assert first == {u: (tmp_path / "web" / f).read_bytes() for u, f in index.items()}
