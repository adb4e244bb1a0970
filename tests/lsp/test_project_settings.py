"""The server finds [tool.zeromem] from the document's folder, ranking it above editor settings."""

import sys

import pytest
import pytest_lsp
from lsprotocol import types
from lsp_session import vscode_capabilities
from pytest_lsp import ClientServerConfig, LanguageClient


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "zeromem_lsp", "serve"]))
async def client(lsp_client: LanguageClient):
    params = types.InitializeParams(
        capabilities=vscode_capabilities(),
        initialization_options={"gpuMemory": "80GiB"},  # editor default: everything fits
    )
    await lsp_client.initialize_session(params)
    yield
    await lsp_client.shutdown_session()


async def test_pyproject_settings_rank_above_editor_settings(client: LanguageClient, tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.zeromem]\ngpu-memory = "24GiB"\nparameters = "7B"\nworld-size = 8\n')
    path = tmp_path / "ds_config.json"
    text = '{"train_batch_size": 64, "bf16": {"enabled": true}, "zero_optimization": {"stage": 1}}'
    path.write_text(text)
    uri = path.as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="json", version=1, text=text)))
    report = await client.text_document_diagnostic_async(
        types.DocumentDiagnosticParams(text_document=types.TextDocumentIdentifier(uri=uri)))
    messages = [(d.code, d.message) for d in report.items]
    assert any(code == "ZM101" and "24.0 GiB budget" in message for code, message in messages), messages
