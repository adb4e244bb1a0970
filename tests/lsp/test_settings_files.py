"""Project settings files in the editor: their problems are ZM104 there too (as in `zeromem check`),
and discovery is cached until the client reports a settings file changed (a registered watcher)."""

import sys

import pytest_lsp
from lsprotocol import types
from lsp_session import vscode_capabilities
from pytest_lsp import ClientServerConfig, LanguageClient


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "zeromem_lsp", "serve"]))
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(types.InitializeParams(capabilities=vscode_capabilities()))
    yield
    await lsp_client.shutdown_session()


CONFIG = '{"train_batch_size": 64, "bf16": {"enabled": true}, "zero_optimization": {"stage": 1}}'


async def _codes(client: LanguageClient, path) -> list[tuple[str, str]]:
    path.write_text(CONFIG)
    uri = path.as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="json", version=1, text=CONFIG)))
    report = await client.text_document_diagnostic_async(
        types.DocumentDiagnosticParams(text_document=types.TextDocumentIdentifier(uri=uri)))
    return [(d.code, d.message) for d in report.items]


async def test_settings_file_problems_are_zm104_and_refresh_on_watched_file_change(client: LanguageClient, tmp_path):
    settings = tmp_path / "pyproject.toml"
    settings.write_text('[tool.zeromem]\nparameters = "7B"\ngpu-memory = "80 GBs"\n')
    first = await _codes(client, tmp_path / "a.json")
    assert [code for code, _ in first] == ["ZM104"]
    assert first[0][1].startswith("pyproject.toml line 3: ") and "gpu" in first[0][1]

    watched = [w["globPattern"] for r in client.registrations for reg in r.registrations  # options arrive as JSON
               if reg.method == types.WORKSPACE_DID_CHANGE_WATCHED_FILES for w in reg.register_options["watchers"]]
    assert "**/pyproject.toml" in watched and "**/zeromem.toml" in watched

    settings.write_text('[tool.zeromem]\nparameters = "7B"\ngpu-memory = "24GiB"\nworld-size = 8\n')
    cached = await _codes(client, tmp_path / "b.json")  # same folder, no change reported: not re-read
    assert [code for code, _ in cached] == ["ZM104"]

    client.workspace_did_change_watched_files(types.DidChangeWatchedFilesParams(
        changes=[types.FileEvent(uri=settings.as_uri(), type=types.FileChangeType.Changed)]))
    report = await client.text_document_diagnostic_async(
        types.DocumentDiagnosticParams(text_document=types.TextDocumentIdentifier(uri=(tmp_path / "b.json").as_uri())))
    codes = [(d.code, d.message) for d in report.items]
    assert [code for code, _ in codes] == ["ZM101"]
    assert "24.0 GiB budget" in codes[0][1]


async def test_an_open_settings_file_shows_its_problems_on_their_lines_instead_of_the_configs(
        client: LanguageClient, tmp_path):
    settings = tmp_path / "zeromem.toml"
    text = 'parameters = "7B"\n\nworld-size = "eight"\n'
    settings.write_text(text)
    assert [code for code, _ in await _codes(client, tmp_path / "c.json")] == ["ZM104"]

    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=settings.as_uri(), language_id="toml", version=1, text=text)))
    report = await client.text_document_diagnostic_async(
        types.DocumentDiagnosticParams(text_document=types.TextDocumentIdentifier(uri=settings.as_uri())))
    [problem] = report.items
    assert problem.code == "ZM104" and problem.range.start.line == 2 and "world" in problem.message
    config = await client.text_document_diagnostic_async(
        types.DocumentDiagnosticParams(text_document=types.TextDocumentIdentifier(uri=(tmp_path / "c.json").as_uri())))
    assert all(d.code != "ZM104" for d in config.items) and config.kind == "full"
