"""The positioned tree: nodes, members, problems, and the queries on a parsed document.

Offsets are code points into ``Document.text``; ranges are half-open ``[start, end)``.
Every walk here is iterative (explicit stack), so a 100,000-deep document is fine.
The generated ``__eq__`` / ``__repr__`` of the tree classes are disabled or shallow
for the same reason: a dataclass ``repr`` of a deep tree would recurse.
"""

from __future__ import annotations

import gc
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any

from .positions import LineIndex

__all__ = ["CONTAINER_KINDS", "Document", "Location", "Member", "Node", "Problem"]

CONTAINER_KINDS = frozenset({"object", "array"})


@dataclass(slots=True, eq=False, repr=False)
class Node:
    """A value: ``kind`` is object, array, string, number, bool, null or quoteless."""

    kind: str
    start: int
    end: int
    value: object = None
    raw: str | None = None
    members: list[Member] | None = None
    items: list[Node] | None = None

    def get(self, key: str) -> Member | None:
        """The last member named ``key`` (what a dict would keep), or None."""
        if self.members is None:
            return None
        for member in reversed(self.members):
            if member.key == key:
                return member
        return None

    def decoded(self) -> dict[str, object] | list[object] | None:
        """The plain value of a container decoded while parsing (strict JSON), else None."""
        return None

    def __repr__(self) -> str:
        if self.kind == "object":
            detail = f"members={len(self.members or ())}"
        elif self.kind == "array":
            detail = f"items={len(self.items or ())}"
        else:
            detail = f"value={self.value!r}"
        return f"Node({self.kind}, {self.start}..{self.end}, {detail})"


@dataclass(slots=True, eq=False, repr=False)
class Member:
    """``key: value`` inside an object. ``value`` is None when it is missing (half-typed text)."""

    key: str
    key_start: int
    key_end: int
    value: Node | None
    start: int
    end: int
    colon: int | None

    def __repr__(self) -> str:
        return f"Member({self.key!r}, {self.start}..{self.end}, value={self.value!r})"


@dataclass(slots=True)
class Problem:
    """A syntax error, a relaxation of strict JSON, or a duplicate key, with its range.

    Kinds: ``syntax``; ``duplicate_key`` (``related`` = offset of the first occurrence);
    relaxations that hjson accepts and strict JSON does not: ``comment``,
    ``trailing_comma``, ``missing_comma``, ``unquoted_key``, ``quoteless_value``,
    ``quoteless_comma`` (an unquoted value that swallowed the comma after it),
    ``single_quoted``, ``multiline_string``, ``braceless_root``; and ``bom``.
    """

    kind: str
    message: str
    start: int
    end: int
    related: int | None = None


@dataclass(eq=False)
class Location:
    """Where an offset is: the answer of ``Document.locate``.

    ``path`` leads to the innermost member or array item containing the offset.
    ``member`` is the innermost member containing it (also when the cursor is inside
    that member's value, e.g. on an array item). ``node`` is what the cursor is about:
    the value of the member whose key or value holds the cursor, the array item under
    the cursor, or the container whose blank space holds it (None when a member's value
    is missing). ``object_node`` is the innermost object the cursor is *inside* (between
    its braces): the object in which a new key would be completed.
    """

    path: tuple[str | int, ...] = ()
    member: Member | None = None
    node: Node | None = None
    in_key: bool = False
    in_value: bool = False
    object_node: Node | None = None


@dataclass(eq=False)
class Document:
    """A parsed text: the tree (``root``), every problem, and the line index."""

    text: str
    root: Node | None
    problems: list[Problem]
    lines: LineIndex
    # Containers whose closing bracket is missing (they run to where parsing stopped) and
    # a root object without braces: for these the end offset is inside, not after.
    open_ended: set[int] = field(default_factory=set, repr=False)
    flavour: str = "json"  # "json" (JSON and hjson) | "yaml": how edits spell keys and values

    def __repr__(self) -> str:
        return (
            f"Document(length={len(self.text)}, root={self.root!r}, "
            f"problems={len(self.problems)})"
        )

    @property
    def syntax_errors(self) -> list[Problem]:
        return [problem for problem in self.problems if problem.kind == "syntax"]

    def problems_of(self, kind: str) -> list[Problem]:
        return [problem for problem in self.problems if problem.kind == kind]

    def to_python(self) -> object:
        """Plain dicts, lists and scalars. Duplicate keys: the last wins. Missing values are left out."""
        root = self.root
        if root is None:
            return None
        decoded = root.decoded()
        if decoded is not None:
            return decoded  # strict JSON: decoded in C while parsing
        result = _empty(root)
        if result is None:
            return root.value
        collecting = gc.isenabled()  # see parse_document: an acyclic build, GC passes only cost
        if collecting:
            gc.disable()
        try:
            self._fill(root, result)
        finally:
            if collecting:
                gc.enable()
        return result

    @staticmethod
    def _fill(root: Node, result: dict[str, object] | list[object]) -> None:
        # (node, its container): an object node's dict, an array node's list; Any, as the pairing
        # of node.kind and the container's type is not one mypy follows
        pending: list[tuple[Node, Any]] = [(root, result)]
        while pending:
            node, target = pending.pop()
            if node.kind == "object":
                for member in node.members or ():
                    child = member.value
                    if child is None:
                        continue
                    container = _empty(child)
                    if container is None:
                        target[member.key] = child.value
                    else:
                        target[member.key] = container
                        pending.append((child, container))
            else:
                for child in node.items or ():
                    container = _empty(child)
                    if container is None:
                        target.append(child.value)
                    else:
                        target.append(container)
                        pending.append((child, container))

    def find(self, path: tuple[str | int, ...]) -> Member | Node | None:
        """The member at a key path, or the node at an array index; the root for ``()``.

        A string step looks a key up in an object (the last of duplicates), an int step
        indexes an array; None when the path does not exist.
        """
        node = self.root
        found: Member | Node | None = node
        for step in path:
            if node is None:
                return None
            if isinstance(step, str):
                if node.kind != "object":
                    return None
                member = node.get(step)
                if member is None:
                    return None
                found, node = member, member.value
            else:
                if node.kind != "array" or not isinstance(step, int):
                    return None
                items = node.items or []
                if not -len(items) <= step < len(items):
                    return None
                found = node = items[step]
        return found

    def _contains_inside(self, node: Node, offset: int) -> bool:
        """Whether ``offset`` is between a container's brackets (or in an open-ended one)."""
        if id(node) in self.open_ended:
            if self.text[node.start : node.start + 1] not in ("{", "["):
                return node.start <= offset <= node.end  # root object without braces
            return node.start < offset <= node.end
        return node.start < offset < node.end

    def locate(self, offset: int) -> Location:
        """The cursor query: which member / node ``offset`` is on, and whether in key or value."""
        location = Location()
        node = self.root
        if node is None or not node.start <= offset <= node.end:
            return location
        path: list[str | int] = []
        location.node = node
        while node is not None and node.kind in CONTAINER_KINDS and self._contains_inside(node, offset):
            location.node = node
            location.in_key = False
            if node.kind == "object":
                location.object_node = node
                location.in_value = False
                members = node.members or []
                index = bisect_right(members, offset, key=_member_start) - 1
                if index < 0:
                    break
                member = members[index]
                value = member.value
                if member.key_start <= offset <= member.key_end:
                    location.member, location.in_key, location.node = member, True, value
                    path.append(member.key)
                    break
                if value is not None and value.start <= offset <= value.end:
                    location.member, location.in_value, location.node = member, True, value
                    path.append(member.key)
                    node = value
                    continue
                if member.colon is not None and offset > member.colon and (
                    value is None or offset < value.start
                ):
                    # After the colon, before the value (or where the missing value goes).
                    location.member, location.in_value, location.node = member, True, value
                    path.append(member.key)
                    break
                if member.colon is not None and member.key_end < offset <= member.colon:
                    location.member, location.node = member, value
                    path.append(member.key)
                    break
                break  # blank space inside the object
            items = node.items or []
            index = bisect_right(items, offset, key=_node_start) - 1
            if index < 0 or offset > items[index].end:
                break  # blank space inside the array
            path.append(index)
            node = items[index]
            location.node = node
        location.path = tuple(path)
        return location


def _member_start(member: Member) -> int:
    return member.start


def _node_start(node: Node) -> int:
    return node.start


def _empty(node: Node) -> dict[str, object] | list[object] | None:
    if node.kind == "object":
        return {}
    if node.kind == "array":
        return []
    return None
