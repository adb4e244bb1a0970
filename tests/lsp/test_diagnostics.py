"""Diagnostics end to end: codes and exact ranges, quick fixes, versions, non-configs, close."""

from __future__ import annotations

import pytest
from pygls.exceptions import JsonRpcMethodNotFound
from lsprotocol import types

from lsp_session import EXPECTED_ENCODING, OVERFLOW, example, open_doc

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_encoding_is_negotiated(client):
    assert client.encoding == EXPECTED_ENCODING[client.profile]


async def test_budget_overflow_on_the_stage_value_with_exact_range(client):
    doc = open_doc(client, "ds_config.json", OVERFLOW)
    diagnostics = await doc.diagnostics()
    assert [d.code for d in diagnostics] == ["ZM101"]
    overflow = diagnostics[0]
    assert overflow.severity == types.DiagnosticSeverity.Error
    assert overflow.source == "zeromem"
    assert doc.text_of(overflow.range) == "1"
    stage_value = OVERFLOW.index('"stage": 1') + len('"stage": ')
    assert doc.offsets(overflow.range) == (stage_value, stage_value + 1)
    # the emoji before it on the same line counts 2 UTF-16 units, 4 UTF-8 bytes
    line = OVERFLOW.splitlines()[5]
    prefix = line[: line.index('"stage": 1') + len('"stage": ')]
    assert overflow.range.start.character == len(prefix.encode(client.encoding.replace("-", "_") + ("_le" if client.encoding == "utf-16" else ""))) // (2 if client.encoding == "utf-16" else 1)
    assert "35.9 GiB" in overflow.message and "24.0 GiB" in overflow.message


async def test_quick_fix_gives_a_clean_document(client):
    doc = open_doc(client, "ds_config.json", OVERFLOW)
    [overflow] = await doc.diagnostics()
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=doc.identifier, range=overflow.range,
        context=types.CodeActionContext(diagnostics=[overflow])))
    [fix] = [a for a in actions if a.diagnostics and a.diagnostics[0].code == "ZM101"]
    assert fix.kind == types.CodeActionKind.QuickFix and fix.is_preferred
    assert "ZeRO-3" in fix.title
    edit = fix.edit
    if edit.document_changes:  # VS Code: a versioned TextDocumentEdit
        [change] = edit.document_changes
        assert change.text_document.version == doc.version
        edits = change.edits
    else:
        edits = edit.changes[doc.uri]
    before = doc.text
    doc.apply(edits)
    assert doc.text == before.replace('"stage": 1', '"stage": 3')  # minimal: nothing else moved
    assert await doc.diagnostics() == []


async def test_rename_typo_fix(client):
    doc = open_doc(client, "ds_config.json", example("typos.json"))
    diagnostics = await doc.diagnostics()
    typo = next(d for d in diagnostics if d.code == "ZM201")
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=doc.identifier, range=typo.range, context=types.CodeActionContext(diagnostics=[typo])))
    [rename] = [a for a in actions if a.diagnostics[0].code == "ZM201"]
    edits = rename.edit.document_changes[0].edits if rename.edit.document_changes else rename.edit.changes[doc.uri]
    doc.apply(edits)
    assert '"loss_scale_window": 1000' in doc.text
    assert "ZM201" not in [d.code for d in await doc.diagnostics()]


async def test_a_client_that_gets_pushes_is_not_offered_pull(client):
    """A client that cannot be asked to re-pull after a settings change (Neovim 0.11+ pulls, but has no
    workspace.diagnostics.refreshSupport) gets pushes, and no diagnosticProvider: it is never told to
    pull and then given nothing."""
    assert client.server_capabilities.diagnostic_provider is None
    doc = open_doc(client, "ds_config.json", OVERFLOW)
    assert [d.code for d in await doc.diagnostics()] == ["ZM101"]
    with pytest.raises(JsonRpcMethodNotFound):
        await doc.pull()


@pytest.mark.parametrize("name, text", [
    ("package.json", '{"name": "app", "version": "1.0.0", "scripts": {"test": "jest"}, "dependencies": {}}'),
    ("tsconfig.json", '{"compilerOptions": {"target": "es2020", "strict": true,}, // comment\n "include": ["src"]}'),
    ("settings.json", '{"editor.fontSize": 14, "broken": '),
])
async def test_non_config_json_gets_nothing(client, name, text):
    doc = open_doc(client, name, text)
    assert await doc.diagnostics() == []
    end = doc.position(len(text))
    assert await client.text_document_hover_async(types.HoverParams(text_document=doc.identifier, position=doc.position(2))) is None
    assert await client.text_document_completion_async(types.CompletionParams(text_document=doc.identifier, position=end)) is None
    assert await client.text_document_inlay_hint_async(types.InlayHintParams(
        text_document=doc.identifier, range=types.Range(start=doc.position(0), end=end))) is None


async def test_versions_only_move_forward(client):
    doc = open_doc(client, "ds_config.json", OVERFLOW)
    for stage in (2, 3, 0, 1, 3):
        doc.replace(OVERFLOW.replace('"stage": 1', f'"stage": {stage}'))
    assert await doc.diagnostics() == []  # stage 3 fits
    versions = [version for version, _ in client.published[doc.uri]]
    assert versions == sorted(versions)
    assert versions[-1] == doc.version


async def test_close_clears_diagnostics(client):
    doc = open_doc(client, "ds_config.json", OVERFLOW)
    assert await doc.diagnostics()
    doc.close()
    await client.until(lambda: client.published[doc.uri][-1] == (None, []))


async def test_save_republishes(client):
    doc = open_doc(client, "ds_config.json", OVERFLOW)
    await doc.diagnostics()
    count = len(client.published[doc.uri])
    client.text_document_did_save(types.DidSaveTextDocumentParams(text_document=doc.identifier))
    await client.until(lambda: len(client.published[doc.uri]) > count)
    assert [d.code for d in client.published[doc.uri][-1][1]] == ["ZM101"]


NEEDS_OFFLOAD = """{
  // 13B on 8 × 24 GiB: even ZeRO-3 needs 24.2 GiB without offload
  "train_micro_batch_size_per_gpu": 1,
  "bf16": {"enabled": true},
  "zero_optimization": {
    "overlap_comm": true
  },
  "zeromem": {"parameters": "13B", "world_size": 8, "gpu_memory": "24GiB"}
}
"""


async def test_offload_fix_when_no_stage_fits(client):
    doc = open_doc(client, "ds_config.jsonc", NEEDS_OFFLOAD, language="jsonc")
    diagnostics = await doc.diagnostics()
    overflow = next(d for d in diagnostics if d.code == "ZM101")
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=doc.identifier, range=overflow.range, context=types.CodeActionContext(diagnostics=[overflow])))
    [fix] = [a for a in actions if a.diagnostics[0].code == "ZM101"]
    assert fix.title == "Switch to ZeRO-3 with optimizer → cpu (3.0 GiB/GPU)"
    edits = fix.edit.document_changes[0].edits if fix.edit.document_changes else fix.edit.changes[doc.uri]
    doc.apply(edits)
    assert '"overlap_comm": true,\n    "stage": 3,\n    "offload_optimizer": {"device": "cpu"}\n  },' in doc.text
    assert "// 13B on 8" in doc.text  # the comment survives
    assert [d.code for d in await doc.diagnostics()] == ["ZM253"]  # only the comment warning is left
