"""Minimal text edits on a positioned document: replace a value, rename a key, insert a member.

Edits touch only the characters they change, so comments and formatting elsewhere survive.
A YAML document (``document.flavour == "yaml"``) keeps YAML spelling: plain keys stay plain and a
member is added to a block mapping as a new ``key: value`` line; JSON values are valid YAML flow values.
"""

from __future__ import annotations

import json
import re

from zeromem_lsp.document import Document, Member, Node
from zeromem_lsp.findings import TextEdit


def replace_value(member: Member, new_json: str) -> TextEdit:
    value = member.value
    if value is None:  # half-typed: put the value after the colon (or key)
        at = member.colon + 1 if member.colon is not None else member.key_end
        prefix = "" if member.colon is not None else ":"
        return TextEdit(at, at, f"{prefix} {new_json}")
    return TextEdit(value.start, value.end, new_json)


PLAIN_YAML_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


def _yaml_key(key: str) -> str:
    return key if PLAIN_YAML_KEY.fullmatch(key) else json.dumps(key)


def rename_key(member: Member, new_key: str, document: Document | None = None) -> TextEdit:
    """Rename a key; in YAML an unquoted key stays unquoted."""
    if document is not None and document.flavour == "yaml" and document.text[member.key_start : member.key_start + 1] not in ("'", '"'):
        return TextEdit(member.key_start, member.key_end, _yaml_key(new_key))
    return TextEdit(member.key_start, member.key_end, json.dumps(new_key))


def _indent_of(text: str, offset: int) -> str:
    line_start = text.rfind("\n", 0, offset) + 1
    prefix = text[line_start:offset]
    return prefix if prefix.strip() == "" else ""


def insert_member(document: Document, container: Node, key: str, value_json: str) -> TextEdit:
    """Add `"key": value` as the last member of an object, matching its layout."""
    text = document.text
    members = container.members or []
    entry = f"{json.dumps(key)}: {value_json}"
    if document.flavour == "yaml" and members and id(container) in document.open_ended:
        last = members[-1]
        line_start = text.rfind("\n", 0, last.key_start) + 1
        indent = text[line_start : last.key_start]
        indent = indent if indent.strip() == "" else ""
        line_end = text.find("\n", last.end)
        at = len(text) if line_end < 0 else line_end
        if text[at - 1 : at] == "\r":
            at -= 1
        return TextEdit(at, at, f"\n{indent}{_yaml_key(key)}: {value_json}")
    if members:
        last = members[-1]
        multiline = "\n" in text[container.start : last.start]
        if multiline:
            return TextEdit(last.end, last.end, f",\n{_indent_of(text, last.start)}{entry}")
        return TextEdit(last.end, last.end, f", {entry}")
    # empty object: "{}" or "{\n}"
    inner_start = container.start + 1
    closing = container.end - 1
    if "\n" in text[inner_start:closing]:
        line_start = text.rfind("\n", 0, container.start) + 1
        indent = text[line_start:container.start][: len(text[line_start:container.start]) - len(text[line_start:container.start].lstrip())]
        return TextEdit(inner_start, closing, f"\n{indent}  {entry}\n{indent}")
    return TextEdit(inner_start, closing, entry)


def set_value(document: Document, path: tuple[str, ...], value_json: str) -> TextEdit | None:
    """Set path to value: replace it if present, else insert it (creating parent objects as needed)."""
    found = document.find(path)
    if isinstance(found, Member):
        return replace_value(found, value_json)
    for depth in range(len(path) - 1, -1, -1):
        parent = document.find(path[:depth])
        container = parent.value if isinstance(parent, Member) else parent
        if isinstance(container, Node) and container.kind == "object":
            nested = value_json
            for key in reversed(path[depth + 1 :]):
                nested = f"{{{json.dumps(key)}: {nested}}}"
            return insert_member(document, container, path[depth], nested)
        if parent is not None:
            return None  # a non-object is in the way
    return None
