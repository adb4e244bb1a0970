"""Re-parsing after one edit gives exactly the document a full parse gives, or declines."""

from __future__ import annotations

import json

from hypothesis import given, settings, strategies as st

from zeromem_lsp.analysis import analyse
from zeromem_lsp.document import parse_document
from zeromem_lsp.document.positions import LineIndex
from zeromem_lsp.document.splice import reparse
from tests.unit.test_strict_json import shape

CONFIG = json.dumps({
    "train_batch_size": 64,
    "train_micro_batch_size_per_gpu": 4,
    "bf16": {"enabled": True},
    "optimizer": {"type": "AdamW", "params": {"lr": 2e-5, "betas": [0.9, 0.95]}},
    "zero_optimization": {"stage": 1, "overlap_comm": True},
    "autotuning": {"arg_mappings": {f"key_{i}": f"value {i}" for i in range(50)}},
    "zeromem": {"parameters": "7B", "gpu_memory": "24GiB"},
}, indent=2)


def edited(text: str, start: int, end: int, inserted: str) -> tuple[str, tuple[int, int, int]]:
    return text[:start] + inserted + text[end:], (start, end, start + len(inserted))


def assert_same_as_full(document, text: str) -> None:
    full = parse_document(text)
    assert document.text == text
    assert document.problems == full.problems == []
    assert shape(document.root) == shape(full.root)  # every node's kind, offsets, value; every member
    assert document.to_python() == full.to_python()
    assert list(document.to_python()) == list(full.to_python())  # key order too
    assert document.lines.starts == LineIndex(text).starts


def test_an_edited_value_deep_inside_a_section_is_decoded_alone():
    before = parse_document(CONFIG)
    before.find(("zero_optimization", "stage"))  # members read (scanned) before the edit, as rules do
    at = CONFIG.index('"stage": 1') + len('"stage": ')
    text, edit = edited(CONFIG, at, at + 1, "3")
    after = reparse(before, text, *edit)
    assert after is not None
    assert_same_as_full(after, text)
    assert after.find(("zero_optimization", "stage")).value.value == 3
    # the sections after the edit moved by 0 characters here; a longer value moves them
    text, edit = edited(CONFIG, at, at + 1, "12345")
    after = reparse(before, text, *edit)
    assert after is not None and after.find(("zeromem", "gpu_memory")).value.start == (
        before.find(("zeromem", "gpu_memory")).value.start + 4)
    assert_same_as_full(after, text)


def test_new_lines_in_the_edit_move_the_line_index():
    before = parse_document(CONFIG)
    at = CONFIG.index('"lr": ') + len('"lr": ')
    end = CONFIG.index(",", at)
    text, edit = edited(CONFIG, at, end, "\n    0.5\n   ")
    after = reparse(before, text, *edit)
    assert after is not None
    assert_same_as_full(after, text)
    assert after.lines.line_count == before.lines.line_count + 2


def test_edits_it_cannot_prove_take_the_full_parse():
    before = parse_document(CONFIG)
    stage = CONFIG.index('"stage": 1') + len('"stage": ')
    cases = [
        edited(CONFIG, stage + 1, stage + 1, ","),  # a trailing comma: not strict any more
        edited(CONFIG, stage, stage + 1, '1, "stage": 2'),  # a duplicate key inside the section
        edited(CONFIG, stage, stage + 1, "1e999"),  # infinite: hjson refuses it
        edited(CONFIG, 1, 1, '"x": 1, '),  # between top-level members: a new member
        edited(CONFIG, CONFIG.index('"bf16"') + 1, CONFIG.index('"bf16"') + 2, "c"),  # a key renamed
        edited(CONFIG, 0, 1, "["),  # the root itself
    ]
    for text, edit in cases:
        assert reparse(before, text, *edit) is None, text[:80]
    # an edit that does not match the previous text (a stale document) is refused, not trusted
    text, (start, end, new_end) = edited(CONFIG, stage, stage + 1, "2")
    assert reparse(before, text, start + 5, end + 5, new_end + 5) is None
    # a document that was not strict JSON has no decoded tree to splice into
    hjson = parse_document(CONFIG.replace('"bf16"', "bf16", 1))
    assert hjson.problems and reparse(hjson, hjson.text, 0, 0, 0) is None


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_any_single_edit_gives_the_full_parse_or_declines(data):
    before = parse_document(CONFIG)
    for path in data.draw(st.lists(st.sampled_from([("optimizer", "params"), ("zero_optimization",), ("zeromem",),
                                                    ("autotuning", "arg_mappings")]), max_size=2)):
        before.find(path)  # some sections scanned before the edit, others not
    start = data.draw(st.integers(0, len(CONFIG)))
    end = data.draw(st.integers(start, min(len(CONFIG), start + 12)))
    inserted = data.draw(st.text(alphabet='0123456789.eE-+"abc:,{}[] \n', max_size=8))
    text, edit = edited(CONFIG, start, end, inserted)
    after = reparse(before, text, *edit)
    if after is not None:
        assert_same_as_full(after, text)


def test_analysis_with_the_previous_document_equals_a_fresh_analysis():
    previous = analyse(CONFIG, "ds_config.json")
    at = CONFIG.index('"stage": 1') + len('"stage": ')
    for stage in "0", "2", "3", '"x"':
        text, edit = edited(CONFIG, at, at + 1, stage)
        incremental = analyse(text, "ds_config.json", previous=previous.document, edit=edit)
        fresh = analyse(text, "ds_config.json")
        assert incremental.findings == fresh.findings
        assert incremental.findings  # ZM101 at stages 0-2 against 24 GiB, a refused stage for "x"
        assert incremental.plan == fresh.plan
