"""Offsets (code points into a ``str``) <-> LSP ``(line, character)`` positions.

Line breaks are ``\\r\\n``, ``\\n`` and ``\\r``, as the LSP specification says.
``character`` is counted in the units of the negotiated position encoding:
``"utf-8"`` (bytes), ``"utf-16"`` (code units, the LSP default) or ``"utf-32"``
(code points). Line starts are computed once; a query is a bisection plus, for
non-ASCII lines only, encoding the prefix of one line.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from itertools import accumulate
from typing import Protocol, cast

__all__ = ["ENCODINGS", "AlwaysMatch", "LineIndex", "always_matches"]

ENCODINGS = ("utf-8", "utf-16", "utf-32")

_LINE_BREAK = re.compile(r"\r\n?|\n")


class AlwaysMatch(Protocol):
    """``pattern.match`` of a pattern that matches the empty string: it never answers None."""

    def __call__(self, string: str, pos: int = 0, /) -> re.Match[str]: ...


def always_matches(pattern: re.Pattern[str]) -> AlwaysMatch:
    """``pattern.match`` itself, typed as never None (the scanners' ``[ \\t]*``-like patterns)."""
    if pattern.match("") is None:
        raise ValueError(f"{pattern.pattern!r} does not match the empty string")
    return cast(AlwaysMatch, pattern.match)


def _check_encoding(encoding: str) -> str:
    if encoding not in ENCODINGS:
        raise ValueError(f"unknown position encoding {encoding!r}; expected one of {ENCODINGS}")
    return encoding


def _width(char: str, encoding: str) -> int:
    """Units one code point takes in ``encoding`` (lone surrogates count as in 'surrogatepass')."""
    code = ord(char)
    if encoding == "utf-16":
        return 2 if code > 0xFFFF else 1
    if code < 0x80:
        return 1
    if code < 0x800:
        return 2
    if code < 0x10000:
        return 3
    return 4


class LineIndex:
    """Line starts of one text, and conversions between offsets and positions."""

    __slots__ = ("text", "starts")

    def __init__(self, text: str) -> None:
        self.text = text
        if "\r" in text:
            starts = [0]
            starts.extend([match.end() for match in _LINE_BREAK.finditer(text)])
        else:  # the usual case, done in C: each start is the previous one + line length + 1
            starts = list(accumulate(map((1).__add__, map(len, text.split("\n"))), initial=0))
            starts.pop()
        self.starts = starts

    def __repr__(self) -> str:
        return f"LineIndex(lines={len(self.starts)}, length={len(self.text)})"

    def spliced(self, text: str, start: int, old_end: int, new_end: int) -> LineIndex:
        """The index of ``text``: this index's text with ``[start, old_end)`` replaced by
        ``text[start:new_end]`` (the caller has checked that). Lines before the edit are kept, those
        after it move; only the edited span is searched for line breaks."""
        if "\r" in text or "\r" in self.text:
            return LineIndex(text)  # a "\r\n" could be split or joined by the edit
        starts = self.starts
        before = bisect_right(starts, start)  # line starts at or before the edit (their break is before it)
        after = bisect_right(starts, old_end)  # the first line start past the replaced span
        inserted = text[start:new_end]
        breaks = list(accumulate(map((1).__add__, map(len, inserted.split("\n"))), initial=start))[1:-1]
        delta = new_end - old_end
        index = LineIndex.__new__(LineIndex)
        index.text = text
        index.starts = [*starts[:before], *breaks, *[line + delta for line in starts[after:]]] if delta else [
            *starts[:before], *breaks, *starts[after:]]
        return index

    @property
    def line_count(self) -> int:
        return len(self.starts)

    def line_start(self, line: int) -> int:
        """Offset of the first character of ``line`` (clamped into the document)."""
        if line <= 0:
            return 0
        if line >= len(self.starts):
            return len(self.text)
        return self.starts[line]

    def line_end(self, line: int) -> int:
        """Offset just past the last character of ``line``, before its line break."""
        starts = self.starts
        if line < 0:
            line = 0
        if line >= len(starts) - 1:
            return len(self.text)
        end = starts[line + 1]
        if self.text[end - 2 : end] == "\r\n" and end - 2 >= starts[line]:
            return end - 2
        return end - 1

    def position(self, offset: int, encoding: str = "utf-16") -> tuple[int, int]:
        """Zero-based ``(line, character)`` of ``offset`` (clamped into the document)."""
        _check_encoding(encoding)
        text = self.text
        if offset < 0:
            offset = 0
        elif offset > len(text):
            offset = len(text)
        line = bisect_right(self.starts, offset) - 1
        start = self.starts[line]
        if encoding == "utf-32":
            return line, offset - start
        prefix = text[start:offset]
        if prefix.isascii():
            return line, len(prefix)
        if encoding == "utf-16":
            return line, len(prefix.encode("utf-16-le", "surrogatepass")) // 2
        return line, len(prefix.encode("utf-8", "surrogatepass"))

    def offset(self, line: int, character: int, encoding: str = "utf-16") -> int:
        """Offset of ``(line, character)``.

        A line past the end gives the end of the document; a character past the end
        of its line gives the end of that line (before the break). A character in the
        middle of a code point (half a surrogate pair, inside a UTF-8 sequence) gives
        the start of that code point.
        """
        _check_encoding(encoding)
        if line < 0:
            return 0
        if line >= len(self.starts):
            return len(self.text)
        start = self.starts[line]
        end = self.line_end(line)
        if character <= 0:
            return start
        segment = self.text[start:end]
        if encoding == "utf-32" or segment.isascii():
            return start + min(character, len(segment))
        units = 0
        for index, char in enumerate(segment):
            units += _width(char, encoding)
            if units > character:
                return start + index
        return end

    def range(
        self, start: int, end: int, encoding: str = "utf-16"
    ) -> tuple[tuple[int, int], tuple[int, int]]:
        """``((line, character), (line, character))`` of the offsets ``start`` .. ``end``."""
        return self.position(start, encoding), self.position(end, encoding)
