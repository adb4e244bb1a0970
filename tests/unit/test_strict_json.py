"""The strict-JSON fast path builds exactly the tree the tolerant parser builds, or declines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from zeromem_lsp.document import parse_document
from zeromem_lsp.document.parser import _Parser
from zeromem_lsp.document.strict_json import LazyNode, parse_strict

DATA = Path(__file__).resolve().parents[1] / "data"
CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"


def tolerant(text: str):
    return _Parser(text).run()


def shape(node) -> list[tuple]:
    """Everything a tree says, flat in document order (iterative: deep trees are fine)."""
    out: list[tuple] = []
    stack = [(node, 0, None)]
    while stack:
        current, depth, member = stack.pop()
        if member is not None:
            out.append((depth, member.key, member.key_start, member.key_end, member.start, member.end, member.colon))
        if current is None:
            continue
        out.append((depth, current.kind, current.start, current.end, repr(current.value), current.raw))
        if current.kind == "object":
            stack.extend((m.value, depth + 1, m) for m in reversed(current.members))
        elif current.kind == "array":
            stack.extend((item, depth + 1, None) for item in reversed(current.items))
    return out


def assert_same(text: str) -> None:
    fast = parse_strict(text)
    assert fast is not None, text[:200]
    slow = tolerant(text)
    assert slow.problems == [] and not slow.open_ended
    assert fast.to_python() == slow.to_python()
    assert shape(fast.root) == shape(slow.root)
    assert fast.problems == [] and fast.open_ended == set()


scalars = st.none() | st.booleans() | st.integers(-10**30, 10**30) | st.text(max_size=8) | st.floats(
    allow_nan=False, allow_infinity=False)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.text(max_size=6), inner, max_size=4), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(value=st.dictionaries(st.text(max_size=6), values, max_size=5) | st.lists(values, max_size=4),
       indent=st.sampled_from([None, 0, 2, "\t"]), separators=st.sampled_from([None, (",", ":"), (" , ", " : ")]),
       ascii_only=st.booleans())
def test_any_strict_json_gives_the_tolerant_parsers_tree(value, indent, separators, ascii_only):
    assert_same(json.dumps(value, indent=indent, separators=separators, ensure_ascii=ascii_only))


def test_configs_in_the_repository_and_corpus_give_the_same_tree():
    paths = sorted(DATA.rglob("*.json")) + sorted((DATA.parents[1] / "examples").glob("*.json"))
    if CORPUS.is_dir():
        paths += sorted(CORPUS.rglob("*.json"))
    checked = 0
    for path in paths:
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
        if parse_strict(text) is None:
            assert tolerant(text).problems, f"{path} is strict JSON but the fast path declined it"
            continue
        assert_same(text)
        checked += 1
    assert checked >= 3


@pytest.mark.parametrize("text", [
    '{"a": 1,}', '{"a": 1 // note\n}', '{a: 1}', "{'a': 1}", '{"a": 1 "b": 2}', '{"a": 1, "a": 2}',
    '{"x": {"a": 1, "a": 2}}', '{"a": NaN}', '{"a": Infinity}', '{"a": 1e400}', '[-1e999]',
    '{"a": ' + "9" * 5000 + "}", "\ufeff{}", '{"a": 1} x', '{"a": 1}}', "", "  ", "5", '"s"', "null",
    '{"a": "tab\there"}', '{"a": [1, 2,]}', '{"a": tru}', "[" * 100_000 + "]" * 100_000,
    '{"a": 1', '{"a"}', '{"a": }', '{,}', '[,]', '[1 2]', '{"a": 01}',
])
def test_anything_else_is_left_to_the_tolerant_parser(text):
    assert parse_strict(text) is None
    document, expected = parse_document(text), tolerant(text)
    assert shape(document.root) == shape(expected.root) and document.problems == expected.problems


def test_large_blocks_are_scanned_only_when_asked_for():
    rows = ",".join(json.dumps({"name": f"t{i}", "stage": i % 4}) for i in range(2000))
    text = '{"zero_optimization": {"stage": 3}, "trials": [' + rows + "]}"
    document = parse_document(text)
    trials = document.find(("trials",)).value
    assert isinstance(trials, LazyNode) and trials.text is not None  # not scanned yet
    assert document.to_python()["trials"][1999] == {"name": "t1999", "stage": 3}
    assert trials.text is not None  # to_python did not scan it either
    location = document.locate(text.index('"t1500"') + 1)
    assert location.path == ("trials", 1500, "name") and location.node.value == "t1500"
    assert trials.text is None
    assert shape(document.root) == shape(tolerant(text).root)
