"""What the analysis reports: findings with offsets, and fixes as plain text edits.

Offsets index the analysed `str` (code points); front ends convert to line/character.
"""

from __future__ import annotations

from typing import NamedTuple

SEVERITIES = ("error", "warning", "information", "hint")


class TextEdit(NamedTuple):
    start: int
    end: int
    new_text: str


class Fix(NamedTuple):
    title: str
    edits: tuple[TextEdit, ...]
    preferred: bool = False


class Finding(NamedTuple):
    code: str
    severity: str
    message: str
    start: int
    end: int
    fixes: tuple[Fix, ...] = ()
    related: tuple[tuple[int, int, str], ...] = ()  # (start, end, note) elsewhere in the file


def overlapping(edits: tuple[TextEdit, ...] | list[TextEdit]) -> bool:
    """True when edits touch the same characters, or an insertion shares its offset with another edit
    (their order would be ambiguous): such a set cannot be offered as one fix."""
    ordered = sorted(edits, key=lambda e: (e.start, e.end))
    return any(
        a.end > b.start or (a.start == b.start and (a.start == a.end or b.start == b.end))
        for a, b in zip(ordered, ordered[1:])
    )


def apply_edits(text: str, edits: tuple[TextEdit, ...] | list[TextEdit]) -> str:
    """Apply non-overlapping edits (any order) to text."""
    for edit in sorted(edits, key=lambda e: (e.start, e.end), reverse=True):
        text = text[: edit.start] + edit.new_text + text[edit.end :]
    return text
