"""Hostile documents through the server: each gets a clear diagnostic, the session goes on."""

from __future__ import annotations

import random

import pytest
from lsp_session import errors_logged, open_doc
from lsprotocol import types

pytestmark = pytest.mark.asyncio(loop_scope="session")

BASE = '{"train_batch_size": 8, "zero_optimization": {"stage": 5}}'


def _garbage() -> str:
    rng = random.Random(3)
    return "".join(chr(rng.choice([rng.randrange(0, 0xD800), rng.randrange(0xE000, 0x110000)])) for _ in range(3000))


# (text, codes it must get, what hovering at character 30 shows: a phrase of the hover, or None)
CASES = {
    "utf8-bom": ("\ufeff" + BASE, {"ZM253", "ZM202"}, "Memory per GPU"),  # on "zero_optimization"
    "control-characters": ('{"train_batch_size": 8, "zero_optimization": {"stage": \x00\x01}}', {"ZM001"},
                           "Memory per GPU"),
    # parsed to the end: the invalid stage after 100,000 levels is still found; 30 is inside "x"'s arrays
    "deep-nesting": ('{"train_batch_size": 8, "x": ' + "[" * 100_000 + "]" * 100_000
                     + ', "zero_optimization": {"stage": 5}}', {"ZM202"}, None),
    "unclosed-deep-nesting": ('{"train_batch_size": 8, "x": ' + '{"a": ' * 50_000, {"ZM001"}, None),
    "duplicate-keys": ("{" + ", ".join(f'"train_batch_size": {i + 1}' for i in range(10_000)) + "}", {"ZM203"},
                       "World size"),  # on the second "train_batch_size"
    "beyond-float": ('{"train_batch_size": 1e400, "gradient_accumulation_steps": ' + "9" * 5000 + "}", {"ZM001"},
                     "World size"),  # on "gradient_accumulation_steps"
    "fifty-megabytes": ('{"train_batch_size": 8, "pad": "' + "x" * 50_000_000 + '"}', {"ZM002"}, None),  # not analysed
}


@pytest.mark.parametrize("name", sorted(CASES))
async def test_hostile_document_gets_a_finding_and_the_session_continues(client, name):
    text, expected, hover_phrase = CASES[name]
    doc = open_doc(client, "ds_config.json", text)
    codes = {diagnostic.code for diagnostic in await doc.diagnostics()}
    assert expected <= codes, codes
    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=doc.identifier, position=doc.position(min(len(text), 30))))
    if hover_phrase is None:
        assert hover is None
    else:
        assert hover_phrase in hover.contents.value
    follow_up = open_doc(client, "ds_config.json", BASE)  # the server still analyses other documents
    assert "ZM202" in {d.code for d in await follow_up.diagnostics()}
    assert errors_logged(client) == []


async def test_random_unicode_is_not_a_config_and_breaks_nothing(client):
    doc = open_doc(client, "notes.json", _garbage())
    assert await doc.diagnostics() == []
    assert errors_logged(client) == []
