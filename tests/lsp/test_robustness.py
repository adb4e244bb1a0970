"""A half-typed document, odd positions and unknown documents never break the session."""

from __future__ import annotations

import asyncio

import pytest
from lsp_session import OVERFLOW, errors_logged, open_doc
from lsprotocol import types

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def every_request(doc, offset):
    client, position = doc.client, doc.position(offset)
    whole = types.Range(start=doc.position(0), end=doc.position(len(doc.text)))
    return await asyncio.gather(
        client.text_document_hover_async(types.HoverParams(text_document=doc.identifier, position=position)),
        client.text_document_completion_async(types.CompletionParams(text_document=doc.identifier, position=position)),
        client.text_document_inlay_hint_async(types.InlayHintParams(text_document=doc.identifier, range=whole)),
        client.text_document_code_action_async(types.CodeActionParams(
            text_document=doc.identifier, range=types.Range(start=position, end=position),
            context=types.CodeActionContext(diagnostics=[]))),
    )


async def test_typing_a_config_character_by_character(client):
    doc = open_doc(client, "ds_config.json", "")
    for end in range(1, len(OVERFLOW) + 1, 4):
        doc.replace(OVERFLOW[:end])
        await every_request(doc, end if end % 8 else end // 2)
    doc.replace(OVERFLOW)
    assert [d.code for d in await doc.diagnostics()] == ["ZM101"]
    assert errors_logged(client) == []


async def test_incremental_typing_keeps_the_server_text_in_step(client):
    """Type the config with incremental changes in the client's encoding; the server's text must match."""
    doc = open_doc(client, "ds_config.json", "")
    for index, char in enumerate(OVERFLOW):
        position = doc.position(len(doc.text))
        doc.apply([types.TextEdit(range=types.Range(start=position, end=position), new_text=char)])
        if index % 40 == 0:
            await every_request(doc, len(doc.text))
    assert doc.text == OVERFLOW
    assert [d.code for d in await doc.diagnostics()] == ["ZM101"]


async def test_positions_past_the_end_and_unknown_documents(client):
    doc = open_doc(client, "ds_config.json", OVERFLOW)
    far = types.Position(line=10_000, character=10_000)
    hover = await client.text_document_hover_async(types.HoverParams(text_document=doc.identifier, position=far))
    assert hover is None
    line_end = types.Position(line=5, character=100_000)  # clamped to the end of the line
    await client.text_document_completion_async(types.CompletionParams(text_document=doc.identifier, position=line_end))
    ghost = types.TextDocumentIdentifier(uri="file:///nowhere/ds_config.json")
    assert await client.text_document_hover_async(types.HoverParams(text_document=ghost, position=far)) is None
    assert [d.code for d in await doc.diagnostics()] == ["ZM101"]
    assert errors_logged(client) == []


async def test_unknown_request_gets_an_error_and_the_session_goes_on(client):
    with pytest.raises(Exception):
        await client.protocol.send_request_async("zeromem/noSuchMethod", {})
    doc = open_doc(client, "ds_config.json", OVERFLOW)
    assert [d.code for d in await doc.diagnostics()] == ["ZM101"]
