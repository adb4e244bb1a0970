"""Where the cursor is, in the terms hover and completion need (on top of `Document.locate`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeGuard

from zeromem_lsp.analysis import Analysis
from zeromem_lsp.document import Location, Member

KeyPath = tuple[str, ...]


@dataclass(frozen=True)
class Cursor:
    location: Location
    member_path: KeyPath | None  # keys leading to the member under the cursor (None: inside an array)
    object_path: KeyPath | None  # keys leading to the object in which a new key would go


def _all_keys(steps: Sequence[str | int]) -> TypeGuard[Sequence[str]]:
    return all(isinstance(step, str) for step in steps)


def _keys_only(path: tuple[str | int, ...]) -> KeyPath | None:
    """The key path to a member (array indices after it dropped); None when an array is in between."""
    steps = list(path)
    while steps and isinstance(steps[-1], int):
        steps.pop()
    return tuple(steps) if _all_keys(steps) else None


def cursor_at(analysis: Analysis, offset: int, kinds: tuple[str, ...] = ("deepspeed",)) -> Cursor | None:
    """The cursor query for a training config of one of `kinds`; None for other documents."""
    document = analysis.document
    if analysis.kind not in kinds or document is None:
        return None
    location = document.locate(offset)
    member_path = _keys_only(location.path) if location.member is not None else None
    object_path = None
    if location.in_key:
        object_path = member_path[:-1] if member_path else None
    elif not location.in_value and location.node is not None and location.node is location.object_node:
        if _all_keys(location.path):  # blank space between members
            object_path = tuple(location.path)
    return Cursor(location, member_path, object_path)


def member_span(member: Member, in_key: bool) -> tuple[int, int]:
    """The key's range when the cursor is on the key or the value is missing, else the value's."""
    if in_key or member.value is None:
        return member.key_start, member.key_end
    return member.value.start, member.value.end
