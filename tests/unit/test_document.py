"""The positioned parser: hjson acceptance, relaxations, recovery, positions of keys and values."""

from __future__ import annotations

import gc
import json
import math
import random
import sys
import time
from pathlib import Path

import hjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zeromem_lsp.document import Document, Location, Member, Node, Problem, parse_document

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "real"


def kinds(document: Document, kind: str) -> list[tuple[int, int]]:
    return [(p.start, p.end) for p in document.problems if p.kind == kind]


def span(text: str, fragment: str, nth: int = 0) -> tuple[int, int]:
    """Offsets of the ``nth`` occurrence of ``fragment`` in ``text``."""
    start = -1
    for _ in range(nth + 1):
        start = text.index(fragment, start + 1)
    return start, start + len(fragment)


def hjson_load(text: str) -> object:
    """What DeepSpeed does: hjson with a duplicate-key-raising pairs hook."""

    def no_duplicates(pairs):
        keys = [key for key, _ in pairs]
        if len(keys) != len(set(keys)):
            raise ValueError(f"Duplicate keys: {keys}")
        return dict(pairs)

    return hjson.loads(text, object_pairs_hook=no_duplicates)


def check_invariants(document: Document) -> None:
    """Ranges inside the text, members in source order, every query answers."""
    n = len(document.text)
    for problem in document.problems:
        assert 0 <= problem.start <= problem.end <= n, problem
        assert problem.kind in {
            "syntax", "duplicate_key", "comment", "trailing_comma", "missing_comma", "unquoted_key",
            "quoteless_value", "quoteless_comma", "single_quoted", "multiline_string", "braceless_root", "bom",
        }
    stack = [document.root] if document.root is not None else []
    while stack:
        node = stack.pop()
        assert 0 <= node.start <= node.end <= n, node
        if node.kind == "object":
            previous = node.start
            for member in node.members:
                assert previous <= member.key_start <= member.key_end <= member.end <= n
                assert member.start == member.key_start
                if member.value is not None:
                    assert member.key_end <= member.value.start and member.value.end == member.end
                    stack.append(member.value)
                previous = member.start
        elif node.kind == "array":
            stack.extend(node.items)
        else:
            assert node.members is None and node.items is None
    document.to_python()


# --------------------------------------------------------------------------- API shape


def test_plain_json_tree_and_ranges():
    text = '{\n  "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}},\n  "lr": 1.5e-4\n}'
    document = parse_document(text)
    assert document.problems == []
    assert isinstance(document.root, Node) and document.root.kind == "object"
    assert (document.root.start, document.root.end) == (0, len(text))
    zero = document.root.get("zero_optimization")
    assert isinstance(zero, Member)
    assert (zero.key_start, zero.key_end) == span(text, '"zero_optimization"')
    assert zero.colon == text.index(":")
    assert zero.value.kind == "object"
    assert (zero.start, zero.end) == (zero.key_start, text.index("}}") + 2)
    stage = document.find(("zero_optimization", "stage"))
    assert stage.value.kind == "number" and stage.value.value == 3 and stage.value.raw == "3"
    assert (stage.value.start, stage.value.end) == (text.index("3,"), text.index("3,") + 1)
    device = document.find(("zero_optimization", "offload_param", "device"))
    assert device.value.value == "cpu" and (device.value.start, device.value.end) == span(text, '"cpu"')
    lr = document.find(("lr",))
    assert lr.value.value == 1.5e-4 and isinstance(lr.value.value, float) and lr.value.raw == "1.5e-4"
    assert document.to_python() == json.loads(text)


def test_numbers_are_exact_and_keep_their_literal():
    text = '[0, -0, 12345678901234567890123, 5e8, 1.0, -2.5E+3, 1e400, -1e400, 1' + "0" * 5000 + "]"
    items = parse_document(text).root.items
    assert [item.kind for item in items] == ["number"] * 9
    assert items[2].value == 12345678901234567890123 and isinstance(items[2].value, int)
    assert items[3].value == 5e8 and isinstance(items[3].value, float) and items[3].raw == "5e8"
    assert isinstance(items[4].value, float) and items[4].raw == "1.0"
    assert items[5].value == -2500.0
    assert items[6].value == math.inf and items[6].raw == "1e400"
    assert items[7].value == -math.inf
    assert items[8].value == math.inf and len(items[8].raw) == 5001  # beyond int()'s digit limit
    assert items[1].value == 0 and items[1].raw == "-0"
    # hjson itself fails on a number that overflows (OverflowError / int digit limit)
    document = parse_document(text)
    assert kinds(document, "syntax") == [(text.index("1e400"), text.index("1e400") + 5),
                                         (text.index("-1e400"), text.index("-1e400") + 6),
                                         (items[8].start, items[8].end)]


def test_scalars_and_root_of_any_kind():
    assert parse_document("true").to_python() is True
    assert parse_document(" null ").root.kind == "null"
    assert parse_document('"x"').to_python() == "x"
    assert parse_document("[]").to_python() == []
    assert parse_document("42").root.raw == "42"
    document = parse_document("  \n ")
    assert document.root is None and document.to_python() is None
    assert [p.kind for p in document.problems] == ["syntax"]
    assert parse_document("").problems[0].kind == "syntax"


def test_string_escapes_and_surrogates():
    text = r'{"a": "q\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00", "b": "\ud83d", "c": "it''s"}'
    document = parse_document(text)
    assert document.problems == []
    assert document.to_python() == hjson.loads(text)
    assert document.find(("a",)).value.value.endswith("é😀")
    assert document.find(("b",)).value.value == "\ud83d"


# --------------------------------------------------------------------------- relaxations


def test_each_relaxation_is_recorded_with_its_range():
    text = (
        "{\n"
        "  // line comment\n"
        '  "a": 1, # hash comment\n'
        '  /* block\n     comment */ "b": [1, 2,],\n'
        "  unquoted_key: 2\n"
        '  "stage": ${zero_stage},\n'
        '  "c": "x",\n'
        "}"
    )
    document = parse_document(text)
    assert kinds(document, "syntax") == []
    assert kinds(document, "comment") == [
        span(text, "// line comment"),
        span(text, "# hash comment"),
        span(text, "/* block\n     comment */"),
    ]
    assert kinds(document, "trailing_comma") == [(text.index("2,]") + 1, text.index("2,]") + 2), (text.rindex(","), text.rindex(",") + 1)]
    assert kinds(document, "unquoted_key") == [span(text, "unquoted_key")]
    # the newline after `unquoted_key: 2`; after the quoteless value the author did write a comma,
    # which hjson swallowed into the value: that is reported as such, not as a missing comma
    end_of_2 = span(text, "unquoted_key: 2")[1]
    assert kinds(document, "missing_comma") == [(end_of_2, end_of_2)]
    assert kinds(document, "quoteless_value") == []
    assert kinds(document, "quoteless_comma") == [span(text, "${zero_stage},")]
    stage = document.find(("stage",)).value
    assert stage.kind == "quoteless" and stage.value == "${zero_stage}," and stage.raw == "${zero_stage},"
    assert document.to_python() == hjson.loads(text)


def test_quoteless_value_is_trimmed_and_ends_at_the_line_end():
    text = '{\n  "path": /tmp/x y  # not a comment here\t \n  "n": 1 # a comment\n}'
    document = parse_document(text)
    path = document.find(("path",)).value
    assert path.value == "/tmp/x y  # not a comment here"
    assert (path.start, path.end) == span(text, "/tmp/x y  # not a comment here")
    assert document.find(("n",)).value.value == 1
    assert kinds(document, "comment") == [span(text, "# a comment")]
    assert document.to_python() == hjson.loads(text)


def test_missing_comma_on_the_same_line_after_a_quoted_value_is_accepted():
    text = '{"a": "x" "b": 2}'
    document = parse_document(text)
    assert kinds(document, "missing_comma") == [(9, 9)]
    assert document.to_python() == hjson.loads(text) == {"a": "x", "b": 2}


def test_other_hjson_relaxations():
    text = "{'a': 'b\"c', k: '''\n    line one\n      two\n    '''}"
    document = parse_document(text)
    assert kinds(document, "single_quoted") == [span(text, "'a'"), span(text, "'b\"c'")]
    assert kinds(document, "multiline_string") == [(text.index("'''"), len(text) - 1)]
    assert document.to_python() == hjson.loads(text)

    braceless = "train_batch_size: 8\nfp16: {enabled: true}\n"
    document = parse_document(braceless)
    assert kinds(document, "braceless_root") == [(0, 0)]
    assert document.to_python() == hjson.loads(braceless) == {"train_batch_size": 8, "fp16": {"enabled": True}}


def test_bom_is_skipped_and_recorded():
    document = parse_document('\ufeff{"a": 1}')
    assert kinds(document, "bom") == [(0, 1)]
    assert document.to_python() == {"a": 1}
    assert document.root.start == 1


RELAXED_DOCUMENTS = [
    '{"a": 1}',
    '{"a": 1,}',
    "[1, 2, 3,]",
    '{\n "a": 1\n "b": [1\n 2\n 3]\n}',
    "{a: 1, b_c-d: x y z\n e: true}",
    '{"stage": ${zero_stage},\n "x": 2}',
    '{"a": 1 # trailing hash\n}',
    '{"a": 1 // trailing slashes\n, "b": 2}',
    '{/* a */ "a" /* b */ : /* c */ 1 /* d */}',
    '{"a": "x", "a": "y"}',
    '{"nested": {"deep": [{"x": null}, [], {}]}}',
    "{\"q\": 'single \"quoted\"'}",
    '{"n": -0.5e-3, "m": 10, "big": 123456789012345678901234567890}',
    '{"t": true , "f": false\t, "z": null}',
    '{"url": http://example.com/x\n "y": 1}',
    '{"w": weird value, with commas,\n "k": 2}',
    '{"v": 1.5.6\n}',
    '{"u": -\n}',
    '{"s": 01, "t": +1, "n": NaN\n}',
    '{"n": nullish\n "t": true1\n}',
    '{"e": 1e5 }',
    "{\r\n  \"a\": 1\r\n  \"b\": 2\r\n}",
    "a: 1\nb: [x\n y\n]\n",
    '{"esc": "tab\\there \\u0041\\/"}',
    '{"a": [\n  # comment only line\n  1\n]}',
    '\ufeff{"bom": true}',
    '{"emoji😀": "ünïcödé 😀"}',
    '"just a string"',
    "3.25",
    "[]",
]


@pytest.mark.parametrize("text", RELAXED_DOCUMENTS)
def test_to_python_matches_hjson(text):
    document = parse_document(text)
    assert kinds(document, "syntax") == []
    assert document.to_python() == hjson.loads(text)
    check_invariants(document)


@pytest.mark.skipif(not CORPUS.is_dir(), reason="shared corpus not available")
def test_real_corpus_matches_hjson():
    checked = 0
    for path in sorted(CORPUS.glob("*.json")):
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
        try:
            expected = hjson.loads(text)
        except Exception:  # noqa: BLE001 - what hjson refuses is not compared here
            continue
        document = parse_document(text)
        assert kinds(document, "syntax") == [], path.name
        assert document.to_python() == expected, path.name
        check_invariants(document)
        checked += 1
    assert checked > 10


# --------------------------------------------------------------------------- syntax errors


@pytest.mark.parametrize(
    ("text", "message", "fragment"),
    [
        ('{"a": "abc', "Unterminated string", '"abc'),
        ('{"a": "abc\n, "b": 1}', "Unterminated string", '"abc'),
        ('{"a": 1}}', "Unexpected text after the root value", "}"),
        ('{"a": 1,,}', "Expected a key, found ','", ","),
        ("[1,,2]", "Missing value before ','", ","),
        ('{"a": 1, "b": }', "Missing value for 'b'", ":"),
        ('{"a" 1}', "Expected ':' after key 'a'", '"a"'),
        ("{a b: 1}", "Expected ':' after key 'a' (quote keys containing spaces)", "a"),
        ('{"a": "x\ty"}', "Control character '\\t' in string", "\t"),
        ('{"a": "\\q"}', "Invalid escape \\q", "\\q"),
        ('{"a": "\\u12G4"}', "Invalid \\uXXXX escape", "\\u12G4"),
        ("[1, 2", "'[' is not closed (unexpected end of input)", "["),
        ('{"a": [1, }', "Expected ']' before '}'", "}"),
        ("]", "Expected a value, found ']'", "]"),
        ('{"a": 1 /* never closed', "Unterminated /* comment", "/* never closed"),
    ],
)
def test_syntax_errors_have_precise_ranges(text, message, fragment):
    with pytest.raises(Exception):  # noqa: B017 - hjson refuses each of these
        hjson.loads(text)
    document = parse_document(text)
    start = text.rindex(fragment) if fragment in ("}", ",", ":") else text.index(fragment)
    assert Problem("syntax", message, start, start + len(fragment)) in document.problems
    check_invariants(document)


def test_hjson_quirks_followed_for_acceptance():
    # A quoteless value runs to the end of the line, swallowing `}`: the object is then unclosed.
    document = parse_document('{"a": 1 "b": 2}')
    assert document.find(("a",)).value.value == '1 "b": 2}'
    assert kinds(document, "syntax")
    with pytest.raises(hjson.HjsonDecodeError):
        hjson.loads('{"a": 1 "b": 2}')
    # Unicode digits are digits for hjson's number pattern (and for int()).
    assert parse_document('{"a": 1\u0663}').to_python() == hjson.loads('{"a": 1\u0663}') == {"a": 13}


# --------------------------------------------------------------------------- recovery


def test_half_typed_nested_value():
    text = '{"train_batch_size": 8, "zero_optimization": {"stage": '
    document = parse_document(text)
    assert document.to_python() == {"train_batch_size": 8, "zero_optimization": {}}
    stage = document.find(("zero_optimization", "stage"))
    assert stage is not None and stage.value is None and stage.colon == text.rindex(":")
    assert (stage.start, stage.end) == (stage.key_start, stage.key_end) == span(text, '"stage"')
    zero = document.find(("zero_optimization",))
    assert zero.value.end == len(text)
    messages = [p.message for p in document.problems if p.kind == "syntax"]
    assert messages == ["'{' is not closed (unexpected end of input)", "Missing value for 'stage'"]


def test_missing_value_keeps_the_other_members():
    document = parse_document('{"a": 1, "b": , "c": [1, 2]}')
    assert document.to_python() == {"a": 1, "c": [1, 2]}
    assert document.find(("b",)).value is None
    assert len(kinds(document, "syntax")) == 1


def test_half_typed_keys():
    quoted = '{"zero_optimization": {"sta'
    document = parse_document(quoted)
    member = document.find(("zero_optimization", "sta"))
    assert (member.key_start, member.key_end) == (quoted.rindex('"'), len(quoted))
    assert member.value is None and member.colon is None
    unquoted = '{"a": 1,\n zero_opt'
    document = parse_document(unquoted)
    member = document.find(("zero_opt",))
    assert (member.key_start, member.key_end) == span(unquoted, "zero_opt")
    assert document.to_python() == {"a": 1}


def test_recovery_from_mismatched_and_stray_brackets():
    document = parse_document('{"a": {"x": [1, 2}, "b": 3}')
    assert document.find(("b",)).value.value == 3
    assert document.to_python() == {"a": {"x": [1, 2]}, "b": 3}
    assert [p.message for p in document.problems if p.kind == "syntax"] == ["Expected ']' before '}'"]
    document = parse_document('{"a": 1 ] , "b": 2}')
    assert document.to_python() == {"a": 1, "b": 2}
    assert [p.message for p in document.problems if p.kind == "syntax"] == ["Unexpected ']'"]


def test_unterminated_string_stops_at_the_line_end():
    text = '{\n  "a": "abc,\n  "b": 2\n}'
    document = parse_document(text)
    assert document.find(("a",)).value.value == "abc,"
    assert document.find(("b",)).value.value == 2


# --------------------------------------------------------------------------- duplicates


def test_duplicates_at_every_depth():
    text = '{"a": 1, "z": {"stage": 1, "x": [{"k": 1, "k": 2}], "stage": 2}, "a": 3, "a": 4}'
    document = parse_document(text)
    duplicates = [p for p in document.problems if p.kind == "duplicate_key"]
    assert [(p.start, p.end, p.related) for p in duplicates] == [
        (*span(text, '"k"', 1), text.index('"k"')),
        (*span(text, '"stage"', 1), text.index('"stage"')),
        (*span(text, '"a"', 1), text.index('"a"')),
        (*span(text, '"a"', 2), text.index('"a"')),
    ]
    assert duplicates[1].message == "Duplicate key 'stage' (first at line 1)"
    assert document.to_python() == {"a": 4, "z": {"stage": 2, "x": [{"k": 2}]}}
    assert document.find(("a",)).value.value == 4  # the last wins, as in a dict
    assert len(document.root.members) == 4  # duplicates are kept in the tree
    with pytest.raises(ValueError, match="Duplicate keys"):
        hjson_load(text)


# --------------------------------------------------------------------------- scale


def test_deep_nesting_without_recursion():
    depth = 100_000
    objects = '{"a": ' * depth + "1" + "}" * depth
    document = parse_document(objects)
    assert document.problems == []
    value = document.to_python()
    for _ in range(depth):
        value = value["a"]
    assert value == 1
    assert document.find(("a",) * depth).value.value == 1
    location = document.locate(objects.index("1"))
    assert len(location.path) == depth and location.node.value == 1 and location.in_value

    arrays = "[" * depth + "]" * depth
    assert parse_document(arrays).to_python() is not None
    unclosed = parse_document("[" * depth)
    assert [p.message for p in unclosed.problems] == ["'[' is not closed (unexpected end of input)"]
    assert repr(unclosed)  # shallow, no recursion
    assert sys.getrecursionlimit() < depth


def _big_config(size: int) -> str:
    member = (
        '  "run_%d": {\n'
        '    "train_micro_batch_size_per_gpu": %d, // per GPU\n'
        '    "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu", "pin_memory": true},\n'
        '      "reduce_bucket_size": 5e8, "stage3_prefetch_bucket_size": "auto"},\n'
        '    "optimizer": {"type": "AdamW", "params": {"lr": 3e-5, "betas": [0.9, 0.999], "eps": 1e-8}},\n'
        '    "bf16": {"enabled": true}, "gradient_clipping": 1.0, "wall_clock_breakdown": false\n'
        "  },\n"
    )
    parts, length, index = [], 2, 0
    while length < size:
        part = member % (index, index % 64)
        parts.append(part)
        length += len(part)
        index += 1
    return "{\n" + "".join(parts) + "}\n"


def test_ten_megabyte_document():
    text = _big_config(10_000_000)
    # ~1.1 million tracked objects: the cyclic GC's first passes over them cost about as much
    # as the parse. The tree is acyclic, so freeing it by reference counting before the
    # collector runs keeps that interpreter cost out of this test (an LSP server can gc.freeze()).
    collecting = gc.isenabled()
    gc.disable()
    try:
        started = time.perf_counter()
        document = parse_document(text)
        elapsed = time.perf_counter() - started
        assert kinds(document, "syntax") == []
        assert len(document.root.members) == len(kinds(document, "comment"))
        last = len(document.root.members) - 1
        assert document.find((f"run_{last}", "optimizer", "params", "betas", 1)).value == 0.999
        assert document.to_python()[f"run_{last}"]["zero_optimization"]["reduce_bucket_size"] == 5e8
        del document
    finally:
        if collecting:
            gc.enable()
    assert elapsed < 30, f"10 MB took {elapsed:.1f} s"  # ~3 s here; this only catches blow-ups


# --------------------------------------------------------------------------- never raises


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text())
def test_never_raises_on_any_text(text):
    document = parse_document(text)
    check_invariants(document)
    for offset in range(0, len(text) + 1, max(1, len(text) // 8)):
        document.locate(offset)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_never_raises_on_random_bytes(data):
    document = parse_document(data.decode("utf-8", errors="surrogateescape"))
    check_invariants(document)


JSONISH = ["{", "}", "[", "]", ",", ":", " ", "\n", '"', "'", "a", "1", "-", ".", "e", "true", "null",
           "#", "//", "/*", "*/", "\\", "\t", '"k"', ": ", "\r\n", "2.5", "'''", "\ufeff", "\x00", "😀"]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(JSONISH), max_size=16).map("".join))
def test_agrees_with_hjson_on_jsonish_fragments(text):
    """Accepted by hjson -> same value and no syntax problem; refused -> a syntax problem."""
    document = parse_document(text)
    check_invariants(document)
    try:
        expected = hjson.loads(text)
    except hjson.HjsonDecodeError:
        assert kinds(document, "syntax"), text
        return
    except Exception:  # noqa: BLE001 - hjson crashes (IndexError on an open /*): no oracle
        return
    if document.root is None:  # hjson reads a blank or comment-only text as {}
        assert expected == {}
        return
    assert kinds(document, "syntax") == [], text
    assert document.to_python() == expected


class _Token(str):
    """Text the serialiser emits verbatim (distinct from string values, which may contain anything)."""


def _relaxed_dump(value: object, rng: random.Random) -> str:
    """Serialise ``value`` iteratively in a randomly relaxed hjson style."""
    out: list[str] = []
    work: list[object] = [value]
    while work:
        item = work.pop()
        if isinstance(item, _Token):
            out.append(item)  # literal token
        elif isinstance(item, dict):
            pieces: list[object] = [_Token("{")]
            for index, (key, child) in enumerate(item.items()):
                if index:
                    pieces.append(rng.choice([_Token(","), _Token(",\n"), _Token("\n"), _Token(" // c\n"), _Token(", # c\n")]))
                plain_key = key.isidentifier()
                if plain_key and rng.random() < 0.5:  # an unquoted key runs to the ':'
                    pieces.append(_Token(key))
                    pieces.append(rng.choice([_Token(": "), _Token(" :"), _Token("\t:\t")]))
                else:
                    pieces.append(_Token(json.dumps(key)))
                    pieces.append(rng.choice([_Token(": "), _Token(" :"), _Token("/* c */:"), _Token(" # c\n:")]))
                pieces.append(child)
            if item and rng.random() < 0.3:
                pieces.append(_Token(","))
            pieces.append(_Token("\n}"))
            work.extend(reversed(pieces))
        elif isinstance(item, list):
            pieces = [_Token("[")]
            for index, child in enumerate(item):
                if index:
                    pieces.append(rng.choice([_Token(", "), _Token("\n"), _Token(",\n")]))
                pieces.append(child)
            if item and rng.random() < 0.3:
                pieces.append(_Token(","))
            pieces.append(_Token("\n]"))
            work.extend(reversed(pieces))
        elif isinstance(item, str) and item.isidentifier() and item not in ("true", "false", "null") and rng.random() < 0.5:
            out.append(item + "\n")  # a quoteless value ends at the line end
        else:
            out.append(json.dumps(item))
    return "".join(out)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(json_values, st.randoms(use_true_random=False))
def test_relaxed_serialisations_round_trip_like_hjson(value, rng):
    text = _relaxed_dump(value, rng)
    document = parse_document(text)
    assert kinds(document, "syntax") == [], text
    assert document.to_python() == value
    assert hjson.loads(text) == value


# --------------------------------------------------------------------------- find / locate


LOCATE_TEXT = '{\n  "zero_optimization": {\n    "stage": 3,\n    "betas": [0.9, 0.99]\n  },\n  \n  "lr": 1e-4\n}'


def test_find_paths():
    document = parse_document(LOCATE_TEXT)
    assert document.find(()) is document.root
    assert document.find(("zero_optimization", "betas", 1)).value == 0.99
    assert document.find(("zero_optimization", "betas", -1)).value == 0.99
    assert document.find(("zero_optimization", "nope")) is None
    assert document.find(("lr", "x")) is None
    assert document.find(("zero_optimization", "betas", 5)) is None
    assert document.find((0,)) is None


def test_locate_on_keys_values_and_blank_space():
    text = LOCATE_TEXT
    document = parse_document(text)
    zero = document.find(("zero_optimization",))

    on_key = document.locate(text.index("stage") + 2)
    assert isinstance(on_key, Location)
    assert on_key.path == ("zero_optimization", "stage") and on_key.in_key and not on_key.in_value
    assert on_key.member is document.find(("zero_optimization", "stage"))
    assert on_key.object_node is zero.value

    on_value = document.locate(text.index("3,"))
    assert on_value.path == ("zero_optimization", "stage") and on_value.in_value and not on_value.in_key
    assert on_value.node.value == 3
    assert document.locate(text.index("3,") + 1).node.value == 3  # just after the value

    on_item = document.locate(text.index("0.99") + 1)
    assert on_item.path == ("zero_optimization", "betas", 1) and on_item.node.value == 0.99
    assert on_item.member.key == "betas" and on_item.in_value

    blank = document.locate(text.index("\n  \n") + 3)
    assert blank.path == () and blank.member is None and not blank.in_key and not blank.in_value
    assert blank.node is document.root and blank.object_node is document.root

    in_nested_blank = document.locate(text.index("3,\n") + 3)
    assert in_nested_blank.path == ("zero_optimization",) and in_nested_blank.object_node is zero.value
    assert in_nested_blank.member is zero and not in_nested_blank.in_key

    outside = document.locate(len(text) + 5)
    assert outside.path == () and outside.node is None


def test_locate_in_half_typed_text():
    key_text = '{"zero_optimization": {"sta'
    document = parse_document(key_text)
    at_end = document.locate(len(key_text))
    assert at_end.path == ("zero_optimization", "sta") and at_end.in_key
    assert at_end.object_node is document.find(("zero_optimization",)).value

    value_text = '{"zero_optimization": {"stage": '
    document = parse_document(value_text)
    after_colon = document.locate(len(value_text))
    assert after_colon.path == ("zero_optimization", "stage") and after_colon.in_value
    assert after_colon.member.key == "stage" and after_colon.node is None

    new_key = '{"a": 1,\n  \n}'
    document = parse_document(new_key)
    blank = document.locate(new_key.index("\n  \n") + 2)
    assert blank.object_node is document.root and blank.member is None and blank.path == ()

    unquoted = '{"a": 1, off'
    document = parse_document(unquoted)
    assert document.locate(len(unquoted)).in_key
    assert document.locate(len(unquoted)).path == ("off",)
