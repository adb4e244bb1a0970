"""A big document is analysed off the event loop: other documents keep being answered meanwhile, and
a newer version's result is the one that stays.

Order of arrival is asserted, not durations: a hover on a small, already analysed document takes a
few milliseconds, a 5 MB document's analysis a few hundred.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from lsp_session import OVERFLOW, client_fixture, open_doc
from lsprotocol import types

from zeromem_lsp.lsp.server import INLINE_ANALYSIS_CHARS

pytestmark = pytest.mark.asyncio(loop_scope="module")

client = client_fixture(scope="module")


def big(text: str = OVERFLOW, rows: int = 60_000) -> str:
    """`text` with a long `trials` list appended: the findings stay those of `text`."""
    trials = ",\n    ".join(json.dumps({"name": f"trial_{i}", "stage": i % 4, "note": "padding " * 4})
                            for i in range(rows))
    return text.rstrip()[:-1].rstrip() + ',\n  "trials": [\n    ' + trials + "\n  ]\n}\n"


def hover_params(doc, needle: str = '"stage"') -> types.HoverParams:
    return types.HoverParams(text_document=doc.identifier, position=doc.at(needle, 2))


async def test_hover_on_a_small_document_answered_while_a_big_one_is_analysed(client):
    small = open_doc(client, "ds_config.json", OVERFLOW)
    assert [d.code for d in await small.diagnostics()] == ["ZM101"]
    text = big()
    assert len(text) > 50 * INLINE_ANALYSIS_CHARS
    large = open_doc(client, "ds_config.json", text)
    hover = await client.text_document_hover_async(hover_params(small))
    assert "stage" in hover.contents.value.lower()
    assert large.uri not in client.published  # the big document's analysis had not finished
    assert [d.code for d in await large.diagnostics()] == ["ZM101"]


async def test_the_newest_version_of_a_big_document_wins(client):
    large = open_doc(client, "ds_config.json", big())
    fixed = OVERFLOW.replace('"stage": 1', '"stage": 3')
    large.replace(big(fixed))  # sent while version 1 is being analysed
    fixed_codes = [d.code for d in await open_doc(client, "ds_config.json", fixed).diagnostics()]
    assert fixed_codes != ["ZM101"]  # the edit changes the findings, so a stale result would show
    assert [d.code for d in await large.diagnostics()] == fixed_codes
    versions = [version for version, _ in client.published[large.uri]]
    assert versions == sorted(versions) and versions[-1] == 2  # version 1's result never came after 2's


def pulling(capabilities: types.ClientCapabilities) -> None:
    capabilities.text_document.diagnostic = types.DiagnosticClientCapabilities()
    capabilities.workspace.diagnostics = types.DiagnosticWorkspaceClientCapabilities(refresh_support=True)


pull_client = client_fixture(scope="module", profiles=["neovim"], adjust=pulling)


async def test_pulling_a_big_document_does_not_hold_up_hover_elsewhere(pull_client):
    client = pull_client
    small = open_doc(client, "ds_config.json", OVERFLOW)
    assert [d.code for d in await small.pull()] == ["ZM101"]
    large = open_doc(client, "ds_config.json", big())
    answered = []  # responses in the order the client read them (done callbacks run as each is read)
    pulled = client.protocol.send_request(
        types.TEXT_DOCUMENT_DIAGNOSTIC, types.DocumentDiagnosticParams(text_document=large.identifier))
    pulled.add_done_callback(lambda _: answered.append("pull"))
    hovered = client.protocol.send_request(types.TEXT_DOCUMENT_HOVER, hover_params(small))
    hovered.add_done_callback(lambda _: answered.append("hover"))
    hover, report = await asyncio.wrap_future(hovered), await asyncio.wrap_future(pulled)
    assert "stage" in hover.contents.value.lower()
    assert [d.code for d in report.items] == ["ZM101"]
    assert answered == ["hover", "pull"]
    assert large.uri not in client.published  # pulled, never pushed
