"""Streamers: callable status mapping, StreamerBase, TextStreamer — against the real pipeline."""

from __future__ import annotations

import pytest

import genai_shim
from genai_shim.streamers import StreamingStatus, status_from_callback
from tests.genai_shim.conftest import F32

PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def pair(pipelines, stories_dir):
    return pipelines("ours", stories_dir, **F32), pipelines(
        "real", stories_dir, ATTENTION_BACKEND="SDPA", **F32
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, 0),
        (False, 0),
        (0, 0),
        (True, 1),
        (1, 1),
        (2, 2),
        (3, 3),
        (5, 1),
        ("x", 1),
        (StreamingStatus.CANCEL, 2),
    ],
)
def test_status_mapping(value, expected):
    assert status_from_callback(value) == expected


@pytest.mark.oracle
@pytest.mark.parametrize("ret", [None, False, True, 0, 1, 2, 3, 5], ids=repr)
def test_callback_return_values_match_real(pair, real_genai, ret):
    results = []
    for pipe, _mod in zip(pair, (genai_shim, real_genai), strict=False):
        calls = []

        def cb(text, calls=calls):
            calls.append(text)
            return ret if len(calls) >= 3 else None

        r = pipe.generate([PROMPT], max_new_tokens=12, streamer=cb)
        results.append((calls, r.texts, [int(f) for f in r.finish_reasons]))
    assert results[0] == results[1]


@pytest.mark.oracle
def test_callback_exception_is_printed_and_generation_continues(pair, capfd):
    ours, real = pair

    def bad(_text):
        raise ValueError("boom")

    a = ours.generate(PROMPT, max_new_tokens=8, streamer=bad)
    err_ours = capfd.readouterr().err
    b = real.generate(PROMPT, max_new_tokens=8, streamer=bad)
    err_real = capfd.readouterr().err
    assert a == b
    assert "[GenAI] Text streamer callback raised exception: ValueError: boom" in err_ours
    marker = "[GenAI] Text streamer callback raised exception"
    assert err_ours.count(marker) == err_real.count(marker) > 1
    assert "test_streamers.py(" in err_ours  # pybind-style "file(line): function" frames


def _collector(mod, stop_at=10):
    class Collect(mod.StreamerBase):
        def __init__(self):
            super().__init__()
            self.items = []

        def write(self, token):
            self.items.append(token)
            return (
                mod.StreamingStatus.STOP
                if len(self.items) == stop_at
                else mod.StreamingStatus.RUNNING
            )

        def end(self):
            self.items.append("END")

    return Collect()


@pytest.mark.oracle
def test_streamer_base_write_and_end_match_real(pair, real_genai):
    ours, real = pair
    got = []
    for pipe, mod in zip(pair, (genai_shim, real_genai), strict=False):
        s = _collector(mod)
        r = pipe.generate(pipe.get_tokenizer().encode(PROMPT), max_new_tokens=30, streamer=s)
        got.append((s.items, r.tokens, [int(f) for f in r.finish_reasons]))
    assert got[0] == got[1]
    items, tokens, reasons = got[0]
    # the real test_terminate_by_sampler: a STOP at step 10 leaves exactly 10 tokens
    assert len(tokens[0]) == 10 and reasons == [int(genai_shim.GenerationFinishReason.STOP)]
    assert items[:-1] == [[t] for t in tokens[0]] and items[-1] == "END"


@pytest.mark.oracle
def test_stop_string_tokens_are_not_streamed(pair, real_genai):
    got = []
    for pipe, mod in zip(pair, (genai_shim, real_genai), strict=False):
        s = _collector(mod, stop_at=-1)
        r = pipe.generate(PROMPT, max_new_tokens=40, stop_strings={"park."}, streamer=s)
        got.append((s.items, r))
    assert got[0] == got[1]
    assert "park" not in got[0][1]


@pytest.mark.oracle
def test_text_streamer_chunks_match_real(pair, real_genai):
    chunks = []
    for pipe, mod in zip(pair, (genai_shim, real_genai), strict=False):
        out = []
        pipe.generate(
            PROMPT, max_new_tokens=60, streamer=mod.TextStreamer(pipe.get_tokenizer(), out.append)
        )
        chunks.append(out)
    assert chunks[0] == chunks[1]
    assert any("\n" in c for c in chunks[0]) or len(chunks[0]) > 10


def test_text_streamer_holds_incomplete_utf8(stories_dir):
    """Byte-fallback tokens of one multi-byte character are emitted only once complete."""
    tok = genai_shim.Tokenizer(str(stories_dir))
    ids = tok.encode("a ✓ b", add_special_tokens=False).input_ids.data[0].tolist()
    out = []
    ts = genai_shim.TextStreamer(tok, out.append)
    for t in ids:
        assert ts.write(t) == StreamingStatus.RUNNING
    ts.end()
    assert "".join(out) == tok.decode(ids)
    assert all("\ufffd" not in c for c in out)
