"""LineIndex: offsets <-> LSP positions in utf-8 / utf-16 / utf-32."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zeromem_lsp.document import LineIndex

ENCODINGS = ("utf-8", "utf-16", "utf-32")


def naive_position(text: str, offset: int, encoding: str) -> tuple[int, int]:
    """Reference: split into lines by hand and encode the prefix."""
    line, start, index = 0, 0, 0
    while index < offset:
        if text[index] == "\r" and text[index + 1 : index + 2] == "\n":
            if index + 1 >= offset:
                break
            index += 2
            line, start = line + 1, index
            continue
        if text[index] in "\r\n":
            line, start = line + 1, index + 1
        index += 1
    prefix = text[start:offset]
    if encoding == "utf-32":
        return line, len(prefix)
    units = len(prefix.encode("utf-16-le" if encoding == "utf-16" else "utf-8", "surrogatepass"))
    return line, units // 2 if encoding == "utf-16" else units


def test_emoji_and_non_ascii_before_a_position():
    text = 'a😀é"x"\n😀😀b'
    lines = LineIndex(text)
    x = text.index("x")
    assert lines.position(x, "utf-32") == (0, 4)
    assert lines.position(x, "utf-16") == (0, 5)  # 😀 is two UTF-16 units
    assert lines.position(x, "utf-8") == (0, 8)  # a=1, 😀=4, é=2, "=1
    b = text.index("b")
    assert lines.position(b) == (1, 4)  # utf-16 is the default
    assert lines.position(b, "utf-8") == (1, 8)
    for encoding in ENCODINGS:
        for offset in range(len(text) + 1):
            assert lines.offset(*lines.position(offset, encoding), encoding) == offset


def test_line_breaks_crlf_cr_lf():
    text = "a\r\nbc\rd\ne\r\n"
    lines = LineIndex(text)
    assert lines.starts == [0, 3, 6, 8, 11]
    assert lines.line_count == 5
    assert lines.position(text.index("d")) == (2, 0)
    assert lines.position(text.index("e")) == (3, 0)
    assert lines.position(len(text)) == (4, 0)
    assert lines.line_end(0) == 1 and lines.line_end(1) == 5 and lines.line_end(4) == len(text)
    assert lines.offset(1, 1) == 4


def test_clamping():
    text = "ab\ncd😀"
    lines = LineIndex(text)
    assert lines.position(-5) == (0, 0)
    assert lines.position(100) == lines.position(len(text)) == (1, 4)
    assert lines.offset(0, 99) == 2  # past the line end -> the line end (before the break)
    assert lines.offset(-1, 3) == 0
    assert lines.offset(7, 0) == len(text)
    assert lines.offset(1, -2) == 3
    # inside a surrogate pair / a UTF-8 sequence -> start of that code point
    assert lines.offset(1, 3, "utf-16") == text.index("😀")
    assert lines.offset(1, 4, "utf-8") == text.index("😀")
    assert lines.offset(1, 5, "utf-8") == text.index("😀")
    assert lines.offset(1, 6, "utf-8") == len(text)


def test_range_and_empty_text():
    text = '{"k": "😀"}'
    lines = LineIndex(text)
    start, end = text.index('"😀"'), text.index('"😀"') + 3
    assert lines.range(start, end) == ((0, 6), (0, 10))
    assert lines.range(start, end, "utf-8") == ((0, 6), (0, 12))
    assert lines.range(start, end, "utf-32") == ((0, 6), (0, 9))
    empty = LineIndex("")
    assert empty.position(0) == (0, 0) and empty.offset(0, 5) == 0 and empty.line_count == 1


def test_unknown_encoding_is_refused():
    with pytest.raises(ValueError):
        LineIndex("x").position(0, "latin-1")


def test_lone_surrogates_do_not_break_encoding():
    text = "a\ud83db\udcff"
    lines = LineIndex(text)
    assert lines.position(len(text), "utf-16") == (0, 4)
    assert lines.position(len(text), "utf-8") == (0, 8)
    assert lines.offset(0, 4, "utf-8") == 2


def test_long_document_is_fast():
    import time

    text = ("x" * 60 + "é😀\n") * 200_000
    started = time.perf_counter()
    lines = LineIndex(text)
    for offset in range(0, len(text), 997):
        lines.offset(*lines.position(offset), "utf-16")
    assert time.perf_counter() - started < 10
    assert lines.line_count == 200_001


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["a", "é", "😀", "\n", "\r", "\r\n", "\t", "中", "\ud800"])).map("".join), st.data())
def test_matches_reference_and_round_trips(text, data):
    lines = LineIndex(text)
    offset = data.draw(st.integers(0, len(text)))
    for encoding in ENCODINGS:
        position = lines.position(offset, encoding)
        assert position == naive_position(text, offset, encoding)
        between_cr_lf = 0 < offset < len(text) and text[offset - 1 : offset + 1] == "\r\n"
        if not between_cr_lf:
            assert lines.offset(*position, encoding) == offset
