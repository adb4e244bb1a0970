"""Re-parse strict JSON after one edit by decoding again only the top-level value the edit is in.

A keystroke in a 10 MB config changes one value; decoding the whole text again costs ~80 % of the
analysis. ``reparse`` takes the previous document and the edit ``[start, old_end)`` → ``[start,
new_end)`` and returns the document ``parse_document`` would build for the new text, or None when it
cannot prove the shortcut is exact — then the caller parses in full:

- the previous document is strict JSON (no problems) with a container root;
- the new text is the previous text with that one edit (checked, not assumed);
- the edit lies inside one top-level value, and that value decodes again (C scanner) to exactly
  the edited span, strict (no duplicate key, no non-finite number).

Every other top-level value keeps its decoded data and moves by the edit's length; its members are
scanned again from the new text when first read (``LazyNode``), so nothing old is kept alive.
"""

from __future__ import annotations

from typing import cast

from .model import Document, Member, Node
from .strict_json import LazyNode, decode_value, new_root

__all__ = ["reparse"]


def reparse(previous: Document, text: str, start: int, old_end: int, new_end: int) -> Document | None:
    """The document of ``text`` = ``previous.text`` with ``[start, old_end)`` replaced by
    ``text[start:new_end]``, re-decoding only the top-level value holding the edit; None when a
    full parse is needed."""
    root, old = previous.root, previous.text
    if type(root) is not LazyNode or previous.problems or previous.flavour != "json" or root.text is not None:
        return None
    delta = new_end - old_end
    if not (0 <= start <= old_end <= len(old) and start <= new_end) or len(text) != len(old) + delta:
        return None
    if text[:start] != old[:start] or text[new_end:] != old[old_end:]:
        return None  # not the text this edit was made to
    is_object = root.kind == "object"
    children = root.members if is_object else root.items
    index = _holding(children, start, old_end, is_object)
    if index is None:
        return None
    edited = children[index].value if is_object else children[index]
    value = decode_value(text, edited.start)
    if value is None or value.end != edited.end + delta:
        return None  # the edit reached past the value (a comma, a new member...)
    moved = [value if i == index else _moved(child, i > index, delta, text, is_object)
             for i, child in enumerate(children)]
    data: dict[str, object] | list[object]
    # the root was scanned (root.text is None): its data is the decoded dict / list
    if is_object:
        old_member = children[index]
        moved[index] = Member(old_member.key, old_member.key_start, old_member.key_end, value,
                              old_member.start, value.end, old_member.colon)
        data = members = dict(cast("dict[str, object]", root.data))
        members[old_member.key] = _decoded(value)
    else:
        data = items = list(cast("list[object]", root.data))
        items[index] = _decoded(value)
    spliced = new_root(root.kind, root.start, root.end + delta, moved, data)
    return Document(text, spliced, [], previous.lines.spliced(text, start, old_end, new_end))


def _holding(children: list, start: int, old_end: int, is_object: bool) -> int | None:
    """Index of the child whose value spans the whole edit (its key and the commas excluded)."""
    for index, child in enumerate(children):
        value = child.value if is_object else child
        if value is None:
            return None
        if value.start <= start and old_end <= value.end:
            return index
        if value.start > start:
            return None
    return None


def _decoded(node: Node) -> object:
    return node.data if type(node) is LazyNode else node.value


def _moved(child, after: bool, delta: int, text: str, is_object: bool):
    """``child`` (a member or an item) as it sits in the new text: shifted when after the edit,
    with any container made lazy again over the new text."""
    shift = delta if after else 0
    node = child.value if is_object else child
    fresh = _node_at(node, shift, text)
    if not is_object:
        return fresh
    colon = child.colon + shift if child.colon is not None else None
    return Member(child.key, child.key_start + shift, child.key_end + shift, fresh, child.start + shift,
                  child.end + shift, colon)


def _node_at(node: Node, shift: int, text: str) -> Node:
    if type(node) is LazyNode:
        return LazyNode(node.kind, node.start + shift, node.end + shift, text, node.data)
    if not shift:
        return node  # a scalar holds no text: the same object serves
    return Node(node.kind, node.start + shift, node.end + shift, node.value, node.raw)
