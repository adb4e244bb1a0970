"""Editor settings: initializationOptions + workspace/configuration `zeromem`, camelCase, invalid values."""

from __future__ import annotations

import pytest
from lsp_session import client_fixture, open_doc
from lsprotocol import types

pytestmark = pytest.mark.asyncio(loop_scope="module")

INITIALIZATION_OPTIONS = {"zeromem": {"parameters": "7B", "gpuMemory": "24GiB"}}
CONFIGURATION = {"worldSize": 8, "warnFraction": 5, "gpu_memory": None}  # warnFraction is invalid

client = client_fixture(initialization_options=INITIALIZATION_OPTIONS, configuration=CONFIGURATION)

NO_BLOCK = '{\n  "train_micro_batch_size_per_gpu": 4,\n  "bf16": {"enabled": true},\n  "zero_optimization": {"stage": 1}\n}\n'
OWN_BLOCK = NO_BLOCK.replace("\n}", ',\n  "zeromem": {"gpu_memory": "80GiB"}\n}')


async def test_both_sources_apply_to_files_without_a_block(client):
    doc = open_doc(client, "ds_config.json", NO_BLOCK)
    [overflow] = await doc.diagnostics()  # 7B and 24GiB from initializationOptions, 8 ranks from configuration
    assert overflow.code == "ZM101" and "35.9 GiB" in overflow.message


async def test_invalid_setting_warns_and_falls_back(client):
    await client.until(lambda: client.messages)
    [message] = [m for m in client.messages if "warnFraction" in m.message]
    assert message.type == types.MessageType.Warning


async def test_the_file_block_wins(client):
    doc = open_doc(client, "ds_config.json", OWN_BLOCK)
    assert await doc.diagnostics() == []


async def test_changed_configuration_reanalyses_open_documents(client):
    doc = open_doc(client, "ds_config.json", NO_BLOCK)
    assert [d.code for d in await doc.diagnostics()] == ["ZM101"]
    count = len(client.published[doc.uri])
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"zeromem": {"gpuMemory": "80GiB", "worldSize": 8}}))
    await client.until(lambda: len(client.published[doc.uri]) > count)
    assert client.published[doc.uri][-1][1] == []
    hints = await client.text_document_inlay_hint_async(types.InlayHintParams(
        text_document=doc.identifier, range=types.Range(start=doc.position(0), end=doc.position(len(doc.text)))))
    assert hints[0].label == "≈ 35.9 GiB/GPU · 45% of 80.0 GiB"
    if client.profile == "neovim":  # it declares workspace.inlayHint.refreshSupport
        await client.until(lambda: client.inlay_hint_refresh_count > 0)
