"""A client that pulls diagnostics (and can be asked to re-pull) is offered pull and gets no pushes; any
other client is not offered pull (tests/lsp/test_diagnostics.py: it gets pushes)."""

from __future__ import annotations

import pytest
from lsp_session import OVERFLOW, client_fixture, open_doc
from lsprotocol import types

pytestmark = pytest.mark.asyncio(loop_scope="module")


def refreshable(capabilities: types.ClientCapabilities) -> None:
    capabilities.workspace.diagnostics = types.DiagnosticWorkspaceClientCapabilities(refresh_support=True)


puller = client_fixture(profiles=["neovim"], configuration={"parameters": "7B"}, adjust=refreshable)


async def test_pull_only_and_refresh_after_settings_change(puller):
    assert puller.server_capabilities.diagnostic_provider.identifier == "zeromem"
    doc = open_doc(puller, "ds_config.json", OVERFLOW.replace('"parameters": "7B", ', ""))
    report = await puller.text_document_diagnostic_async(types.DocumentDiagnosticParams(text_document=doc.identifier))
    assert [d.code for d in report.items] == ["ZM101"]  # 7B from workspace/configuration
    unchanged = await puller.text_document_diagnostic_async(types.DocumentDiagnosticParams(
        text_document=doc.identifier, previous_result_id=report.result_id))
    assert unchanged.kind == "unchanged"
    puller.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"zeromem": {"parameters": "1B"}}))
    await puller.until(lambda: puller.diagnostic_refresh_count > 0)
    assert await doc.pull() == []
    doc.close()
    assert puller.published == {}
