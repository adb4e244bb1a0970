"""Lua's empty table arrives as `[]`: Neovim's default `settings = {}` sends `[]` as initializationOptions,
as the workspace/configuration answer and inside {"zeromem": []}. That is "no settings", not a warning."""

from __future__ import annotations

import pytest
from lsp_session import OVERFLOW, client_fixture, open_doc
from lsprotocol import types

pytestmark = pytest.mark.asyncio(loop_scope="module")

client = client_fixture(initialization_options=[], configuration=[])


async def test_empty_list_settings_are_no_settings(client):
    doc = open_doc(client, "ds_config.json", OVERFLOW)
    assert [d.code for d in await doc.diagnostics()] == ["ZM101"]  # analysed with the file's own block
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"zeromem": []}))
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=[]))
    doc.replace(doc.text + "\n")  # a later round trip: any message about the settings has arrived by then
    assert [d.code for d in await doc.diagnostics()] == ["ZM101"]
    assert [m.message for m in client.messages] == []

