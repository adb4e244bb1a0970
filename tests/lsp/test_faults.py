"""An exception inside a handler is logged and answered with an empty result; the session survives."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from lsp_session import CLIENTS, OVERFLOW, client_fixture, errors_logged, open_doc
from lsprotocol import types

pytestmark = pytest.mark.asyncio(loop_scope="module")
FAULTY = [sys.executable, str(Path(__file__).with_name("faulty_server.py"))]


faulty = client_fixture(profiles=CLIENTS[:1], server=FAULTY)


async def test_failing_handlers_are_logged_and_answered_empty(faulty):
    doc = open_doc(faulty, "ds_config.json", OVERFLOW)
    position = doc.at('"stage"', 1)
    assert await faulty.text_document_hover_async(types.HoverParams(text_document=doc.identifier, position=position)) is None
    assert await faulty.text_document_completion_async(types.CompletionParams(text_document=doc.identifier, position=position)) is None
    await faulty.until(lambda: len(errors_logged(faulty)) >= 2)
    assert "hover failed" in errors_logged(faulty)[0] and "injected failure" in errors_logged(faulty)[0]
    # the session goes on: diagnostics and inlay hints still work
    assert [d.code for d in await doc.diagnostics()] == ["ZM101"]
    hints = await faulty.text_document_inlay_hint_async(types.InlayHintParams(
        text_document=doc.identifier, range=types.Range(start=doc.position(0), end=doc.position(len(doc.text)))))
    assert hints
