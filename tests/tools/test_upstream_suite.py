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
