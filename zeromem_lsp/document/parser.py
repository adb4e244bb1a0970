"""Text -> positioned tree, accepting what hjson (DeepSpeed's config loader) accepts.

An iterative scanner modelled on ``hjson.decoder`` (3.1): comments (``#``, ``//``,
``/* */``), trailing commas, a newline (or nothing) in place of a comma, unquoted keys,
quoteless values running to the end of the line, single-quoted and ``'''`` strings,
a root object without braces. Each such relaxation is recorded as a ``Problem`` with its
range; real syntax errors are recorded as ``syntax`` problems and parsing recovers.
It never raises and never recurses: containers live on an explicit stack.
See docs/parser.md.
"""

from __future__ import annotations

import json

import gc
import re
from typing import cast

from .model import Document, Member, Node, Problem
from .positions import LineIndex, always_matches
from .strict_json import parse_strict

__all__ = ["parse_document"]

# The patterns that match the empty string are kept as their `match` (typed as never None).
_WS_MATCH = always_matches(re.compile(r"[ \t\n\r]*"))  # hjson's WHITESPACE; other white space is text
_TABS_MATCH = always_matches(re.compile(r"[\t ]*"))
_EOL = re.compile(r"[\r\n]")
# Where hjson stops to test whether a quoteless value is a number / true / false / null.
_STOP = re.compile(r"[,}\]\r\n#]|/[/*]")
# hjson's NUMBER_RE without the surrounding blanks (note: \d, as hjson, so Unicode digits).
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?")
_DQ_SIMPLE = re.compile(r'"([^"\\\x00-\x1f]*)"')
_SQ_SIMPLE = re.compile(r"'([^'\\\x00-\x1f]*)'")
_DQ_CHUNK_MATCH = always_matches(re.compile(r'[^"\\\x00-\x1f]*'))
_SQ_CHUNK_MATCH = always_matches(re.compile(r"[^'\\\x00-\x1f]*"))
_KEY_WORD_MATCH = always_matches(re.compile(r"[^: \t\n\r{}\[\],]*"))
# Fast path for the usual member: "key": "string" | number | true | false | null, where the
# scalar is followed by what makes hjson end it there; anything else takes the general path.
_MEMBER_FAST = re.compile(
    r'"([^"\\\x00-\x1f]*)"[ \t\n\r]*(:)[ \t\n\r]*'
    r'(?:"([^"\\\x00-\x1f]*)"'
    r"|(-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null)"
    r"(?=[\t ]*(?:[,}\]\r\n#]|/[/*]|\Z))"
    r"|([{\[]))?"
)
_AFTER_FAST = re.compile(r'[ \t\n\r]*([,}])')
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")
_ESCAPES = {'"': '"', "'": "'", "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}

_INFINITIES = (float("inf"), float("-inf"))
_UNTERMINATED_COMMENT = "Unterminated /* comment"

_VALUE, _KEY, _OBJ_AFTER, _ARR_FIRST, _ARR_AFTER, _DONE = range(6)


def _short(text: str, limit: int = 40) -> str:
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def _number(raw: str) -> int | float:
    """An int when the literal has no fraction or exponent (exact), else a float (1e400 -> inf)."""
    if "." in raw or "e" in raw or "E" in raw:
        return float(raw)
    try:
        return int(raw)
    except ValueError:  # more digits than int() converts by default
        return float(raw)


def _problem_order(problem: Problem) -> tuple[int, int]:
    return problem.start, problem.end


def parse_document(text: str) -> Document:
    """Parse config text. Never raises; problems describe everything that is not strict JSON."""
    if isinstance(text, (bytes, bytearray, memoryview)):
        text = bytes(text).decode("utf-8", "surrogateescape")
    elif not isinstance(text, str):
        text = str(text)
    strict = parse_strict(text)
    if strict is not None:
        return strict
    # The tree is acyclic and large documents make hundreds of thousands of objects: the
    # cyclic collector's repeated passes over them would more than double the parse time.
    collecting = gc.isenabled()
    if collecting:
        gc.disable()
    try:
        return _Parser(text).run()
    finally:
        if collecting:
            gc.enable()


class _Frame:
    """One open container on the parser's stack."""

    __slots__ = ("node", "is_object", "member", "pending", "seen", "comma", "last_end", "last_ok", "braceless")

    def __init__(self, node: Node, is_object: bool, member: Member | None, braceless: bool = False) -> None:
        self.node = node
        self.is_object = is_object
        self.member = member  # the member whose value this container is
        self.pending: Member | None = None  # member waiting for its value
        self.seen: dict[str, Member] | None = {} if is_object else None
        self.comma: int | None = None  # offset of a comma not yet followed by a key / item
        self.last_end = node.start
        self.last_ok = False  # the last member / item is complete (for "missing_comma")
        self.braceless = braceless


def _swallowed_comma_message(value_text: str) -> str:
    word = value_text[:-1].strip()
    literal = {"true": "true", "false": "false", "null": "null", "none": "null"}.get(word.lower())
    hint = f"; write {literal} for the JSON literal" if literal else "; quote the value"
    shown = value_text if len(value_text) <= 40 else value_text[:39] + "…"
    return (f"Unquoted value {shown} is read as the string {json.dumps(shown)}, comma included:"
            f" hjson takes an unquoted value to the end of the line{hint}")


class _Parser:
    def __init__(self, text: str, allow_braceless: bool = True) -> None:
        self.allow_braceless = allow_braceless
        self.text = text
        self.n = len(text)
        self.problems: list[Problem] = []
        self.lines = LineIndex(text)
        self.open_ended: set[int] = set()
        self.swallowed_comma: set[int] = set()  # ends of unquoted values whose last character is a comma
        self.stack: list[_Frame] = []

    # -- small helpers -------------------------------------------------------------
    def error(self, message: str, start: int, end: int) -> None:
        self.problems.append(Problem("syntax", message, start, end))

    def skip(self, i: int, record: bool = True) -> int:
        """Skip hjson white space and comments from ``i``; record comments."""
        text, n = self.text, self.n
        while True:
            i = _WS_MATCH(text, i).end()
            if i >= n:
                return i
            char = text[i]
            if char == "#" or (char == "/" and text[i + 1 : i + 2] == "/"):
                match = _EOL.search(text, i)
                end = match.start() if match else n
                if record:
                    self.problems.append(Problem("comment", "Comment (not allowed in strict JSON)", i, end))
                i = end
            elif char == "/" and text[i + 1 : i + 2] == "*":
                end = text.find("*/", i + 2)
                if end < 0:
                    if record:
                        self.problems.append(Problem("comment", "Comment (not allowed in strict JSON)", i, n))
                        self.error(_UNTERMINATED_COMMENT, i, n)
                    return n
                if record:
                    self.problems.append(Problem("comment", "Comment (not allowed in strict JSON)", i, end + 2))
                i = end + 2
            else:
                return i

    def scan_string(self, i: int, problems: list[Problem]) -> tuple[str, int, bool]:
        """Scan a quoted string starting at its quote ``text[i]``: (value, end, terminated)."""
        text, n = self.text, self.n
        quote = text[i]
        simple = (_DQ_SIMPLE if quote == '"' else _SQ_SIMPLE).match(text, i)
        if simple is not None:
            return simple.group(1), simple.end(), True
        chunk = _DQ_CHUNK_MATCH if quote == '"' else _SQ_CHUNK_MATCH
        parts: list[str] = []
        j = i + 1
        while True:
            k = chunk(text, j).end()
            if k > j:
                parts.append(text[j:k])
            if k >= n:
                problems.append(Problem("syntax", "Unterminated string", i, n))
                return "".join(parts), n, False
            char = text[k]
            if char == quote:
                return "".join(parts), k + 1, True
            if char == "\\":
                escape = text[k + 1 : k + 2]
                if escape in _ESCAPES and escape:
                    parts.append(_ESCAPES[escape])
                    j = k + 2
                elif escape == "u":
                    if _HEX4.fullmatch(text, k + 2, k + 6):
                        code = int(text[k + 2 : k + 6], 16)
                        j = k + 6
                        if (
                            0xD800 <= code < 0xDC00
                            and text[j : j + 2] == "\\u"
                            and _HEX4.fullmatch(text, j + 2, j + 6)
                        ):
                            low = int(text[j + 2 : j + 6], 16)
                            if 0xDC00 <= low < 0xE000:
                                code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                                j += 6
                        parts.append(chr(code))
                    else:
                        problems.append(Problem("syntax", "Invalid \\uXXXX escape", k, min(k + 6, n)))
                        parts.append("\\u")
                        j = k + 2
                elif escape == "":
                    problems.append(Problem("syntax", "Unterminated string", i, n))
                    return "".join(parts), n, False
                elif escape in "\r\n":
                    problems.append(Problem("syntax", "Unterminated string", i, k + 1))
                    return "".join(parts), k + 1, False
                else:
                    problems.append(Problem("syntax", f"Invalid escape \\{escape}", k, k + 2))
                    parts.append(escape)
                    j = k + 2
            elif char == "\n" or char == "\r":
                problems.append(Problem("syntax", "Unterminated string", i, k))
                return "".join(parts), k, False
            else:
                problems.append(Problem("syntax", f"Control character {char!r} in string", k, k + 1))
                parts.append(char)
                j = k + 1

    def scan_multiline(self, i: int) -> tuple[str, int]:
        """hjson's ``'''`` string at ``i``: indentation of the opening line is removed."""
        text, n = self.text, self.n
        newline = text.rfind("\n", 0, i)
        if newline >= 0:
            indent = i - newline - 1
        else:
            # hjson looks backwards for the line start with a negative index, so on the first
            # line it wraps round to the text's last newline; with none at all it fails.
            newline = text.rfind("\n")
            if newline < 0:
                self.error("Multiline ''' string on the first line of the text", i, i + 3)
                indent = 0
            else:
                indent = i - 1 - newline + n
        j = i + 3
        while j < n and text[j] in " \t\r":
            j += 1
        if j < n and text[j] == "\n":
            j += 1
            limit = j + indent
            while j < limit and j < n and text[j] in " \t\r":
                j += 1
        close = text.find("'''", j)
        if close < 0:
            self.error("Unterminated multiline string", i, n)
            body, end = text[j:], n
        else:
            body, end = text[j:close], close + 3
        lines = body.split("\n")
        for index in range(1, len(lines)):
            line = lines[index]
            cut = 0
            while cut < indent and cut < len(line) and line[cut] in " \t\r":
                cut += 1
            lines[index] = line[cut:]
        value = "\n".join(lines).replace("\r", "")
        if value.endswith("\n"):
            value = value[:-1]
        self.problems.append(Problem("multiline_string", "Multiline ''' string (hjson only)", i, end))
        return value, end

    def looks_like_key(self, i: int) -> bool:
        """Whether the text at ``i`` is ``key :`` (hjson then reads a root object without braces)."""
        text = self.text
        if text[i] in "\"'":
            _, end, ok = self.scan_string(i, [])
            return ok and text[self.skip(end, record=False) : self.skip(end, record=False) + 1] == ":"
        end = _KEY_WORD_MATCH(text, i).end()
        if end == i:
            return False
        j = _WS_MATCH(text, end).end()
        return text[j : j + 1] == ":"

    # -- containers ----------------------------------------------------------------
    def close(self, i: int) -> int:
        """Close the top container at its bracket ``text[i]``; return the next state."""
        frame = self.stack.pop()
        node = frame.node
        node.end = i + 1
        if frame.member is not None:
            frame.member.end = i + 1
        return self.after_child(node)

    def after_child(self, node: Node) -> int:
        if not self.stack:
            return _DONE
        parent = self.stack[-1]
        parent.last_end = node.end
        parent.last_ok = True
        return _OBJ_AFTER if parent.is_object else _ARR_AFTER

    def leave_open(self, frame: _Frame, end: int) -> None:
        frame.node.end = end
        if frame.member is not None:
            frame.member.end = end
        self.open_ended.add(id(frame.node))

    def mismatched_close(self, i: int, state: int) -> tuple[int, int]:
        """A ``}`` / ``]`` that does not close the top container: close up to its match, or skip it."""
        char = self.text[i]
        want_object = char == "}"
        stack = self.stack
        for depth in range(len(stack) - 1, -1, -1):
            frame = stack[depth]
            if frame.is_object == want_object and not frame.braceless:
                top = stack[-1]
                expected = "}" if top.is_object else "]"
                self.error(f"Expected '{expected}' before '{char}'", i, i + 1)
                while len(stack) > depth + 1:
                    self.leave_open(stack.pop(), i)
                return i + 1, self.close(i)
        self.error(f"Unexpected '{char}'", i, i + 1)
        return i + 1, state

    def end_of_input(self) -> None:
        stack = self.stack
        top = stack[-1]
        if not top.braceless:
            bracket = "{" if top.is_object else "["
            start = top.node.start
            self.error(f"'{bracket}' is not closed (unexpected end of input)", start, start + 1)
        while stack:
            self.leave_open(stack.pop(), self.n)

    def new_member(self, frame: _Frame, key: str, start: int, end: int, colon: int | None) -> Member:
        member = Member(key, start, end, None, start, end, colon)
        # an object's frame: its node has members and the frame its seen keys
        cast("list[Member]", frame.node.members).append(member)
        seen = cast("dict[str, Member]", frame.seen)
        first = seen.get(key)
        if first is None:
            seen[key] = member
        else:
            self.duplicate(member, first)
        frame.pending = member
        frame.comma = None
        return member

    def duplicate(self, member: Member, first: Member) -> None:
        line = self.lines.position(first.key_start)[0] + 1
        self.problems.append(
            Problem(
                "duplicate_key",
                f"Duplicate key {_short(member.key)} (first at line {line})",
                member.key_start,
                member.key_end,
                first.key_start,
            )
        )

    # -- the main loop -------------------------------------------------------------
    def run(self) -> Document:
        text, n = self.text, self.n
        problems = self.problems
        add = problems.append
        stack = self.stack
        ws_match = _WS_MATCH
        member_fast = _MEMBER_FAST.match
        after_fast = _AFTER_FAST.match
        root: Node | None = None
        member: Member | None  # the member a value goes to
        value: object  # a scalar's value

        i = 0
        if text.startswith("\ufeff"):
            add(Problem("bom", "Byte order mark at start of text", 0, 1))
            i = 1
        elif text.startswith("\xef\xbb\xbf"):  # a UTF-8 BOM decoded as Latin-1: hjson skips it too
            add(Problem("bom", "Byte order mark at start of text", 0, 3))
            i = 3
        i = self.skip(i)
        if i >= n:
            self.error("Empty document: expected a value", 0, n)
            return Document(text, None, problems, self.lines, self.open_ended)

        state = _VALUE
        braceless = text[i] not in "{[" and self.allow_braceless and self.looks_like_key(i)
        if braceless:
            root = Node("object", i, n, None, None, [], None)
            stack.append(_Frame(root, True, None, braceless=True))
            self.open_ended.add(id(root))
            add(Problem("braceless_root", "Root object without braces (hjson only)", i, i))
            state = _KEY

        while True:
            i = ws_match(text, i).end()
            if i < n:
                char = text[i]
                if char == "#" or char == "/":
                    i = self.skip(i)
                    char = text[i] if i < n else ""
            else:
                char = ""

            if state == _KEY:
                if char == '"':
                    # Fast path for plain JSON: runs of `"key": scalar | { | [` members, closing
                    # braces and commas are handled here without going round the main loop.
                    top = stack[-1]
                    # an object's frame (state _KEY): its node has members and the frame its seen keys
                    members = cast("list[Member]", top.node.members)
                    seen = cast("dict[str, Member]", top.seen)
                    while True:
                        match = member_fast(text, i)
                        if match is None:
                            break  # the general path below handles this key
                        key = match.group(1)
                        key_end = match.end(1) + 1
                        colon = match.start(2)
                        member = Member(key, i, key_end, None, i, key_end, colon)
                        members.append(member)
                        if key in seen:
                            self.duplicate(member, seen[key])
                        else:
                            seen[key] = member
                        top.pending = member
                        top.comma = None
                        string = match.group(3)
                        if string is not None:
                            node = Node("string", match.start(3) - 1, match.end(3) + 1, string, None, None, None)
                        else:
                            raw = match.group(4)
                            if raw is None:
                                bracket = match.group(5)
                                if bracket is None:
                                    i = colon + 1
                                    state = _VALUE
                                    break
                                start = match.start(5)
                                if bracket == "[":
                                    node = Node("array", start, start + 1, None, None, None, [])
                                    member.value = node
                                    stack.append(_Frame(node, False, member))
                                    i = start + 1
                                    state = _ARR_FIRST
                                    break
                                node = Node("object", start, start + 1, None, None, [], None)
                                member.value = node
                                top = _Frame(node, True, member)
                                stack.append(top)
                                members = cast("list[Member]", node.members)
                                seen = cast("dict[str, Member]", top.seen)
                                i = ws_match(text, start + 1).end()
                                continue
                            start = match.start(4)
                            if raw == "true" or raw == "false":
                                node = Node("bool", start, start + len(raw), raw == "true", None, None, None)
                            elif raw == "null":
                                node = Node("null", start, start + 4, None, None, None, None)
                            else:
                                value = _number(raw)
                                if value in _INFINITIES:
                                    self.error(f"Number {_short(raw)} is out of range (hjson fails on it)", start, start + len(raw))
                                node = Node("number", start, start + len(raw), value, raw, None, None)
                        i = member.end = top.last_end = node.end
                        member.value = node
                        top.last_ok = True
                        state = _OBJ_AFTER
                        # closing braces, then a comma before the next quoted key
                        match = after_fast(text, i)
                        while match is not None and match.group(1) == "}" and not top.braceless:
                            state = self.close(match.start(1))
                            i = match.end()
                            if state != _OBJ_AFTER:
                                break
                            top = stack[-1]
                            match = after_fast(text, i)
                        if state != _OBJ_AFTER or match is None or match.group(1) != ",":
                            break
                        top.comma = match.start(1)
                        members = cast("list[Member]", top.node.members)
                        seen = cast("dict[str, Member]", top.seen)
                        i = ws_match(text, match.end()).end()
                        state = _KEY
                    if state != _KEY or text[i : i + 1] != '"':
                        continue  # (comments and white space are skipped at the top of the loop)
                top = stack[-1]
                if char == '"' or char == "'":
                    key, end, _ = self.scan_string(i, problems)
                    if char == "'":
                        add(Problem("single_quoted", "Single-quoted string (not allowed in strict JSON)", i, end))
                    key_start = i
                elif char == "}" and not top.braceless:
                    if top.comma is not None:
                        add(Problem("trailing_comma", "Trailing comma (not allowed in strict JSON)", top.comma, top.comma + 1))
                    state = self.close(i)
                    i += 1
                    continue
                elif char == "":
                    if top.braceless and top.comma is not None:
                        add(Problem("trailing_comma", "Trailing comma (not allowed in strict JSON)", top.comma, top.comma + 1))
                    if top.braceless and len(stack) == 1:
                        stack.pop()
                        break
                    self.end_of_input()
                    break
                elif char == "}" or char == "]":
                    i, state = self.mismatched_close(i, state)
                    continue
                elif char == ",":
                    self.error("Expected a key, found ','", i, i + 1)
                    top.comma = i
                    i += 1
                    continue
                elif char == ":":
                    self.error("Missing key before ':'", i, i + 1)
                    top.pending = Member("", i, i, None, i, i, i)  # not part of the tree
                    i += 1
                    state = _VALUE
                    continue
                elif char == "{" or char == "[":
                    self.error(f"Expected a key, found '{char}'", i, i + 1)
                    top.pending = Member("", i, i, None, i, i, None)  # its value is dropped
                    state = _VALUE
                    continue
                else:
                    end = _KEY_WORD_MATCH(text, i).end()
                    after = ws_match(text, end).end()
                    # hjson strips (Unicode) white space off the key only when blanks precede ':'
                    key = text[i:end].rstrip() if after > end else text[i:end]
                    add(Problem("unquoted_key", f"Unquoted key {_short(key)} (not allowed in strict JSON)", i, i + len(key)))
                    if text[after : after + 1] != ":":
                        member = self.new_member(top, key, i, i + len(key), None)
                        following = text[after : after + 1]
                        if following == "":
                            self.error(f"Expected ':' after key {_short(key)}", i, i + len(key))
                        elif after > end and following not in "{}[],":
                            self.error(f"Expected ':' after key {_short(key)} (quote keys containing spaces)", i, i + len(key))
                        else:
                            self.error(f"Expected ':' after key {_short(key)}", i, i + len(key))
                        top.last_ok = False
                        i = end
                        state = _OBJ_AFTER
                        continue
                    self.new_member(top, key, i, i + len(key), after)
                    i = after + 1
                    state = _VALUE
                    continue
                # a key was read: expect ':'
                colon = self.skip(end)
                if colon < n and text[colon] == ":":
                    self.new_member(top, key, key_start, end, colon)
                    i = colon + 1
                    state = _VALUE
                else:
                    self.new_member(top, key, key_start, end, None)
                    self.error(f"Expected ':' after key {_short(key)}", key_start, end)
                    top.last_ok = False
                    i = colon
                    state = _OBJ_AFTER
                continue

            if state == _VALUE:
                parent = stack[-1] if stack else None
                if char == "{" or char == "[":
                    is_object = char == "{"
                    node = Node("object", i, i + 1, None, None, [], None) if is_object else Node(
                        "array", i, i + 1, None, None, None, []
                    )
                    member = None
                    if parent is None:
                        root = node
                    elif parent.is_object:
                        member = cast(Member, parent.pending)  # the member whose key was read
                        member.value = node
                    else:
                        cast("list[Node]", parent.node.items).append(node)
                    stack.append(_Frame(node, is_object, member))
                    i += 1
                    state = _KEY if is_object else _ARR_FIRST
                    continue
                if char == '"' or char == "'":
                    if char == "'" and text.startswith("'''", i):
                        value, end = self.scan_multiline(i)
                    else:
                        value, end, _ = self.scan_string(i, problems)
                        if char == "'":
                            add(Problem("single_quoted", "Single-quoted string (not allowed in strict JSON)", i, end))
                    node = Node("string", i, end, value, None, None, None)
                    i = end
                elif char == "" or char in "}],:":
                    if char == ":":
                        self.error("Unexpected ':'", i, i + 1)
                        i += 1
                        continue
                    if parent is None:
                        if char:
                            self.error(f"Expected a value, found '{char}'", i, i + 1)
                        else:
                            self.error("Unexpected end of input: expected a value", i, i)
                        break
                    if parent.is_object:
                        member = parent.pending
                        if member is not None and member.colon is not None:
                            self.error(f"Missing value for {_short(member.key)}", member.colon, member.colon + 1)
                        parent.last_ok = False
                        state = _OBJ_AFTER
                    else:
                        if char == ",":
                            self.error("Missing value before ','", i, i + 1)
                        parent.last_ok = False
                        state = _ARR_AFTER
                    continue
                else:
                    node, i = self.scan_quoteless(i, char)
                # a scalar value is complete
                if parent is None:
                    root = node
                    state = _DONE
                elif parent.is_object:
                    member = cast(Member, parent.pending)  # the member whose key was read
                    member.value = node
                    member.end = node.end
                    parent.last_end = node.end
                    parent.last_ok = True
                    state = _OBJ_AFTER
                else:
                    cast("list[Node]", parent.node.items).append(node)
                    parent.last_end = node.end
                    parent.last_ok = True
                    state = _ARR_AFTER
                continue

            if state == _OBJ_AFTER:
                top = stack[-1]
                if char == ",":
                    top.comma = i
                    i += 1
                    state = _KEY
                elif char == "}" and not top.braceless:
                    state = self.close(i)
                    i += 1
                elif char == "":
                    if top.braceless and len(stack) == 1:
                        stack.pop()
                        break
                    self.end_of_input()
                    break
                elif char == "}" or char == "]":
                    i, state = self.mismatched_close(i, state)
                else:
                    if top.last_ok and top.last_end not in self.swallowed_comma:
                        add(Problem("missing_comma", "Missing comma between members", top.last_end, top.last_end))
                    state = _KEY
                continue

            if state == _ARR_FIRST:
                top = stack[-1]
                if char == "]":
                    if top.comma is not None:
                        add(Problem("trailing_comma", "Trailing comma (not allowed in strict JSON)", top.comma, top.comma + 1))
                    state = self.close(i)
                    i += 1
                else:
                    top.comma = None
                    state = _VALUE
                continue

            if state == _ARR_AFTER:
                top = stack[-1]
                if char == ",":
                    top.comma = i
                    i += 1
                    state = _ARR_FIRST
                elif char == "]":
                    state = self.close(i)
                    i += 1
                elif char == "":
                    self.end_of_input()
                    break
                elif char == "}":
                    i, state = self.mismatched_close(i, state)
                elif char == ":":
                    self.error("Unexpected ':'", i, i + 1)
                    i += 1
                else:
                    if top.last_ok and top.last_end not in self.swallowed_comma:
                        add(Problem("missing_comma", "Missing comma between items", top.last_end, top.last_end))
                    state = _VALUE
                continue

            # _DONE: only white space and comments may follow the root value
            if i < n:
                match = _EOL.search(text, i)
                self.error("Unexpected text after the root value", i, match.start() if match else n)
            break

        syntax = [problem for problem in problems if problem.kind == "syntax"]
        if braceless and syntax and min(syntax, key=_problem_order).message != _UNTERMINATED_COMMENT:
            # hjson: when the root object without braces fails, try the text as one value.
            alternative = _Parser(text, allow_braceless=False).run()
            if not alternative.syntax_errors:
                return alternative
        problems.sort(key=_problem_order)
        return Document(text, root, problems, self.lines, self.open_ended)

    def scan_quoteless(self, i: int, first: str) -> tuple[Node, int]:
        """hjson's ``scantfnns``: a number, true/false/null, or else a string to the end of the line."""
        text, n = self.text, self.n
        match = _STOP.search(text, i)
        stop = match.start() if match else n
        if first == "t" or first == "f" or first == "n":
            word = text[i:stop].strip()
            # like hjson, continue after the (Unicode) blanks that str.strip() removed
            if word == "true" or word == "false":
                return Node("bool", i, i + len(word), word == "true", None, None, None), stop
            if word == "null":
                return Node("null", i, i + 4, None, None, None, None), stop
        elif first == "-" or "0" <= first <= "9":
            number = _NUMBER.match(text, i)
            if number is not None and _TABS_MATCH(text, number.end()).end() == stop:
                raw = number.group(0)
                value = _number(raw)
                if value in _INFINITIES:
                    self.error(f"Number {_short(raw)} is out of range (hjson fails on it)", i, number.end())
                return Node("number", i, number.end(), value, raw, None, None), stop
        if stop < n and text[stop] not in "\r\n":
            match = _EOL.search(text, stop)
            stop = match.start() if match else n
        segment = text[i:stop]
        value_text = segment.strip()
        start = i + len(segment) - len(segment.lstrip())
        end = start + len(value_text)
        if value_text.endswith(","):  # `"x": True,` -- the comma the author meant as a separator
            self.swallowed_comma.add(end)
            self.problems.append(Problem("quoteless_comma", _swallowed_comma_message(value_text), start, end))
        else:
            self.problems.append(Problem(
                "quoteless_value", f"Unquoted string {_short(value_text)} (read to the end of the line)", start, end))
        return Node("quoteless", start, end, value_text, value_text, None, None), stop
