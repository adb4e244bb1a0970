"""YAML text -> the same positioned tree as the JSON/hjson parser (Document, Node, Member).

Accelerate reads its config with PyYAML's ``yaml.safe_load``; this module uses PyYAML's
``compose`` on the same text, so what parses here is exactly what parses for Accelerate, and
every node carries ``start_mark.index`` / ``end_mark.index`` (code-point offsets into the text).
The node tree is converted into ``Node``/``Member`` records, so rules, ranges, hover and fixes
work unchanged. PyYAML is imported lazily: only when a YAML document is analysed.

Conventions (see docs/fsdp-accelerate.md):
- scalars get kind string/number/bool/null from the type PyYAML's safe resolver gives them;
- a block mapping or sequence ends where its last entry ends (PyYAML's own end mark runs to the
  next token, past comments and blank lines) and is marked *open-ended* (no brackets);
- duplicate keys are not an error for PyYAML (the last one wins): they are recorded as
  ``yaml_duplicate_key`` problems, which no rule reports as an error;
- a syntax error (or a second document in the stream) gives a ``syntax`` problem and no tree.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import Document, Member, Node, Problem
from .positions import LineIndex

__all__ = ["YamlDocument", "parse_yaml_document"]


@dataclass(eq=False)
class YamlDocument(Document):
    """A Document parsed from YAML; edits use YAML spelling (plain keys, block layout)."""

    flavour: str = "yaml"

    def __repr__(self) -> str:
        return f"YamlDocument(length={len(self.text)}, root={self.root!r}, problems={len(self.problems)})"


def _kind_of(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "string"  # timestamps, binary: shown as text


def _syntax_problem(error: Exception, text: str) -> Problem:
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    start = min(mark.index, len(text)) if mark is not None else 0
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    context = getattr(error, "context", None)
    message = f"YAML syntax error: {problem}" + (f" ({context})" if context else "")
    return Problem("syntax", message, start, min(start + 1, len(text)) if text else start)


class _Converter:
    def __init__(self, text: str, constructor) -> None:
        self.text = text
        self.constructor = constructor
        self.problems: list[Problem] = []
        self.open_ended: set[int] = set()

    def _colon_after(self, offset: int) -> int | None:
        text = self.text
        index = offset
        while index < len(text) and text[index] in " \t":
            index += 1
        return index if index < len(text) and text[index] == ":" else None

    def scalar(self, node) -> Node:
        import yaml

        try:
            value = self.constructor.construct_object(node, deep=True)
        except yaml.YAMLError:
            value = node.value
        start, end = node.start_mark.index, node.end_mark.index
        return Node(_kind_of(value), start, end, value, self.text[start:end])

    def convert(self, root) -> Node:
        """Iterative conversion (explicit stack), like the JSON parser."""
        import yaml

        built = self._shell(root)
        pending = [(root, built)]
        while pending:
            source, target = pending.pop()
            if isinstance(source, yaml.MappingNode):
                seen: dict[str, int] = {}
                members: list[Member] = []
                for key_node, value_node in source.value:
                    if isinstance(key_node, yaml.ScalarNode):
                        key = key_node.value
                    else:
                        key = self.text[key_node.start_mark.index : key_node.end_mark.index]
                    key_start, key_end = key_node.start_mark.index, key_node.end_mark.index
                    child = self._shell(value_node)
                    if not isinstance(value_node, yaml.ScalarNode):
                        pending.append((value_node, child))
                    if key in seen:
                        self.problems.append(Problem(
                            "yaml_duplicate_key", f"duplicate key {key!r}: YAML keeps the last one",
                            key_start, key_end, seen[key]))
                    seen[key] = key_start
                    members.append(Member(key, key_start, key_end, child, key_start, child.end,
                                          self._colon_after(key_end)))
                target.members = members
            else:
                items = []
                for item_node in source.value:
                    child = self._shell(item_node)
                    if not isinstance(item_node, yaml.ScalarNode):
                        pending.append((item_node, child))
                    items.append(child)
                target.items = items
        self._fix_block_ends(built)
        return built

    def _shell(self, node) -> Node:
        import yaml

        if isinstance(node, yaml.ScalarNode):
            return self.scalar(node)
        kind = "object" if isinstance(node, yaml.MappingNode) else "array"
        result = Node(kind, node.start_mark.index, node.end_mark.index)
        if not node.flow_style:
            self.open_ended.add(id(result))
        return result

    def _fix_block_ends(self, root: Node) -> None:
        """Block containers end where their last entry ends (children first: post-order)."""
        order: list[Node] = []
        stack = [root]
        while stack:
            node = stack.pop()
            order.append(node)
            children = [m.value for m in node.members or () if m.value is not None] + list(node.items or ())
            stack.extend(child for child in children if child.kind in ("object", "array"))
        for node in reversed(order):
            if id(node) not in self.open_ended:
                continue
            entries = node.members or node.items or []
            if entries:
                node.end = max(node.start, entries[-1].end)
            for member in node.members or ():
                if member.value is not None:
                    member.end = member.value.end


def parse_yaml_document(text: str) -> YamlDocument:
    """Parse YAML config text. Never raises: a syntax error becomes a ``syntax`` problem."""
    import yaml

    lines = LineIndex(text)
    if text.startswith("\ufeff"):  # PyYAML skips a BOM; keep offsets aligned with the text
        body = " " + text[1:]
    else:
        body = text
    try:
        root = yaml.compose(body, Loader=yaml.SafeLoader)
    except yaml.YAMLError as error:
        return YamlDocument(text, None, [_syntax_problem(error, text)], lines)
    except ValueError as error:  # e.g. unusual characters the reader refuses
        return YamlDocument(text, None, [Problem("syntax", f"YAML syntax error: {error}", 0, min(1, len(text)))], lines)
    if root is None:
        return YamlDocument(text, None, [], lines)
    converter = _Converter(text, yaml.constructor.SafeConstructor())
    tree = converter.convert(root)
    if tree.kind == "object" and id(tree) in converter.open_ended:
        tree.end = len(text.rstrip())
        tree.end = max(tree.end, tree.start)
    document = YamlDocument(text, tree, converter.problems, lines, converter.open_ended)
    return document
