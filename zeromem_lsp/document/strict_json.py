"""The fast path for strict JSON: C-speed decoding, positions only where they are asked for.

``parse_strict(text)`` returns the same tree ``parse_document`` builds, or None when the text is
anything but strict JSON with an object or array root and no duplicate keys, no non-finite numbers
and no integer too long to convert (the tolerant parser then reads it and reports the problems).

The standard library's C scanner decodes each value and says where it ends. A container's own
members or items are scanned only when ``members`` / ``items`` is first read, so a 10 MB document
whose large blocks no rule looks into costs about one C decode. ``Document.to_python`` takes the
decoded values without visiting those blocks.
"""

from __future__ import annotations

import json
import json.decoder
import json.scanner
import re
from collections.abc import Callable
from typing import Any, cast

from .model import Document, Member, Node
from .positions import LineIndex, always_matches

__all__ = ["LazyNode", "decode_value", "new_root", "parse_strict"]

_WS = re.compile(r"[ \t\n\r]*")
_WS_MATCH = always_matches(_WS)
# json.decoder's scanstring (the C one): (text, after the opening quote) -> (string, end); typeshed leaves it out
scanstring: Callable[[str, int], tuple[str, int]] = getattr(json.decoder, "scanstring")
_MEMBERS = Node.__dict__["members"]  # the slot descriptors LazyNode's properties wrap
_ITEMS = Node.__dict__["items"]


class _NotStrict(Exception):
    """The text needs the tolerant parser."""


_DECLINED = (_NotStrict, ValueError, RecursionError, IndexError, StopIteration)  # json's errors, huge ints, bad text


def _pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise _NotStrict  # duplicate keys: the tolerant parser reports them with positions
    return result


def _finite(raw: str) -> float:
    value = float(raw)
    if value in (float("inf"), float("-inf")):
        raise _NotStrict  # hjson fails on it; the tolerant parser says so
    return value


def _no_constant(raw: str) -> object:
    raise _NotStrict  # NaN / Infinity are not JSON


# (text, start) -> (decoded value, end); raises StopIteration where no value starts. typeshed types the
# scanner's context as a make_scanner (its TODO: a duck type of the attributes a JSONDecoder has).
_SCAN = json.scanner.make_scanner(cast(json.scanner.make_scanner, json.JSONDecoder(
    object_pairs_hook=_pairs, parse_float=_finite, parse_constant=_no_constant)))


def _scanned_on_read(slot: Any) -> Any:
    """A property over Node's slot that scans the container's text the first time it is read.

    Typed Any: it stands in for Node's ``list[...] | None`` slot attribute, which a property is not."""

    def read(node: LazyNode) -> object:
        if node.text is not None:
            node._scan()
        return slot.__get__(node)

    return property(read, slot.__set__)


class LazyNode(Node):
    """An object or array whose members / items are scanned from the text on first use."""

    __slots__ = ("text", "data")

    def __init__(self, kind: str, start: int, end: int, text: str | None,
                 data: dict[str, object] | list[object] | None) -> None:
        Node.__init__(self, kind, start, end)
        self.text = text  # None once scanned
        self.data = data  # the decoded dict / list

    def decoded(self) -> dict[str, object] | list[object] | None:
        return self.data

    members = _scanned_on_read(_MEMBERS)
    items = _scanned_on_read(_ITEMS)

    def _scan(self) -> list[object] | dict[str, object]:
        """Make the members / items from the text; return their decoded values as a dict / list.

        Raises _NotStrict where the text is not strict JSON (only the root can meet that: every
        other container was decoded by the C scanner before it was made)."""
        text, self.text = self.text, None
        assert text is not None  # _scan runs once, on a node made with its text
        ws = _WS_MATCH
        i = ws(text, self.start + 1).end()
        is_object = self.kind == "object"
        children: list[Any] = []  # members or items
        (_MEMBERS if is_object else _ITEMS).__set__(self, children)
        closing = "}" if is_object else "]"
        while text[i] != closing:
            if is_object:
                if text[i] != '"':
                    raise _NotStrict
                key, key_end = scanstring(text, i + 1)
                colon = ws(text, key_end).end()
                if text[colon] != ":":
                    raise _NotStrict
                value = _node(text, ws(text, colon + 1).end())
                children.append(Member(key, i, key_end, value, i, value.end, colon))
            else:
                value = _node(text, i)
                children.append(value)
            i = ws(text, value.end).end()
            if text[i] == ",":
                i = ws(text, i + 1).end()
                if text[i] == closing:
                    raise _NotStrict  # trailing comma
            elif text[i] != closing:
                raise _NotStrict
        self.end = i + 1
        if is_object:
            return _pairs([(member.key, _value(member.value)) for member in children])
        return [_value(item) for item in children]


def _node(text: str, start: int) -> Node:
    """The value at ``start``: decoded by the C scanner, which also says where it ends."""
    value, end = _SCAN(text, start)
    char = text[start]
    if char == "{" or char == "[":
        return LazyNode("object" if char == "{" else "array", start, end, text, value)
    if char == '"':
        return Node("string", start, end, value)
    if value is None:
        return Node("null", start, end)
    if value is True or value is False:
        return Node("bool", start, end, value)
    return Node("number", start, end, value, text[start:end])


def _value(node: Node) -> object:
    return node.data if type(node) is LazyNode else node.value


def new_root(kind: str, start: int, end: int, children: list[Member] | list[Node],
             data: dict[str, object] | list[object]) -> LazyNode:
    """A root whose children are already made (document/splice.py)."""
    root = LazyNode(kind, start, end, None, data)
    (_MEMBERS if kind == "object" else _ITEMS).__set__(root, children)
    return root


def decode_value(text: str, start: int) -> Node | None:
    """The positioned node of the strict-JSON value at ``start``, or None (document/splice.py)."""
    try:
        return _node(text, start)
    except _DECLINED:
        return None


def _root(text: str, start: int) -> LazyNode:
    """The root container: its direct children are scanned (and decoded) at once, which checks the
    whole text; its decoded value is assembled from theirs rather than decoded a second time."""
    root = LazyNode("object" if text[start] == "{" else "array", start, start, text, None)
    root.data = root._scan()
    return root


def parse_strict(text: str) -> Document | None:
    """The positioned tree of strict JSON text, or None when the tolerant parser must read it."""
    start = _WS_MATCH(text).end()
    if text[start : start + 1] not in ("{", "["):
        return None
    try:
        root = _root(text, start)
    except _DECLINED:
        return None
    if _WS_MATCH(text, root.end).end() != len(text):
        return None
    return Document(text, root, [], LineIndex(text))
