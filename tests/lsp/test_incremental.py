"""Ranged edits, which the server parses incrementally where it can (document/splice.py), give the
diagnostics a fresh open of the same text gives — in every client profile (UTF-16 and UTF-8 positions;
OVERFLOW has astral characters on the edited line)."""

from __future__ import annotations

import pytest
from lsp_session import OVERFLOW, client_fixture, open_doc
from lsprotocol import types
from test_big_documents import big

pytestmark = pytest.mark.asyncio(loop_scope="module")

client = client_fixture(scope="module")


def edit_at(doc, needle: str, old: str, new: str, delta: int = 0) -> types.TextEdit:
    start = doc.text.index(needle) + delta
    assert doc.text[start:start + len(old)] == old
    return types.TextEdit(range=types.Range(start=doc.position(start), end=doc.position(start + len(old))),
                          new_text=new)


def shown(diagnostics: list[types.Diagnostic]) -> list[tuple]:
    return [(d.code, d.severity, d.message, d.range.start.line, d.range.start.character, d.range.end.line,
             d.range.end.character) for d in diagnostics]


async def assert_as_fresh(client, doc) -> list[tuple]:
    edited = shown(await doc.diagnostics())
    fresh = shown(await open_doc(client, "ds_config.json", doc.text).diagnostics())
    assert edited == fresh
    return edited


@pytest.mark.parametrize("size", ["small", "big"])
async def test_a_sequence_of_edits_gives_what_a_fresh_open_gives(client, size):
    doc = open_doc(client, "ds_config.json", OVERFLOW if size == "small" else big(rows=20_000))
    assert [d.code for d in await doc.diagnostics()] == ["ZM101"]
    steps = [
        ('"stage": 1', "1", "3", len('"stage": ')),  # inside a section after the astral characters: ZM101 goes
        ('"stage": 3', "3", "12", len('"stage": ')),  # longer: what follows moves; DeepSpeed refuses stage 12
        ('"stage": 12', "12", "2", len('"stage": ')),
        ('"job_name"', '"job_name"', '"job_nme"', 0),  # a key renamed: the full parse
        ('"gpu_memory": "24GiB"', "24GiB", "240GiB", len('"gpu_memory": "')),
        ('"stage": 2}', "}", ",}", len('"stage": 2')),  # a trailing comma: no longer strict JSON
        ('"stage": 2,}', ",}", "}", len('"stage": 2')),  # and back
        ('"stage": 2', "2", "1", len('"stage": ')),  # stage 1 fits 240 GiB too
    ]
    seen = []
    for needle, old, new, delta in steps:
        doc.apply([edit_at(doc, needle, old, new, delta)])
        seen.append(await assert_as_fresh(client, doc))
    codes = [[entry[0] for entry in step] for step in seen]
    # the edits did change what is reported, so an analysis of a stale text would have shown:
    # stage 3 fits; DeepSpeed refuses stage 12 (so no figure); stage 2 is over budget again;
    # the misspelt key; 240 GiB fits; the trailing comma hjson allows and json.load does not
    assert codes == [[], ["ZM103", "ZM202"], ["ZM101"], ["ZM201", "ZM101"], ["ZM201"], ["ZM201", "ZM253"],
                     ["ZM201"], ["ZM201"]]
