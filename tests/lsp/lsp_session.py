"""Helpers for the LSP end-to-end tests: a recording client that can wait on events, and documents."""

from __future__ import annotations

import asyncio
import itertools
import sys
from dataclasses import dataclass
from pathlib import Path

from lsprotocol import types
from pygls.protocol import default_converter
import pytest_lsp
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features

from zeromem_lsp.document import LineIndex
from zeromem_lsp.findings import TextEdit as OffsetEdit
from zeromem_lsp.findings import apply_edits

ROOT = Path(__file__).resolve().parents[2]
SERVER = [sys.executable, "-m", "zeromem_lsp", "serve"]
CLIENTS = ["visual_studio_code", "neovim"]
EXPECTED_ENCODING = {"visual_studio_code": "utf-16", "neovim": "utf-8"}
TIMEOUT = 15.0
_names = itertools.count()


class RecordingClient(LanguageClient):
    """A pytest-lsp client that also records the version of each publishDiagnostics and can wait on it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.published: dict[str, list[tuple[int | None, list[types.Diagnostic]]]] = {}
        self.profile = ""
        self.inlay_hint_refresh_count = 0
        self.encoding = "utf-16"
        self._event = asyncio.Event()

    def poke(self) -> None:
        self._event.set()

    async def until(self, predicate, timeout: float = TIMEOUT):
        """Wait until predicate() is truthy, re-checking after each message the client records."""
        async def watch():
            while not (result := predicate()):
                self._event.clear()  # no await between the check and the clear: nothing is missed
                await self._event.wait()
            return result

        return await asyncio.wait_for(watch(), timeout)


def _recording(method: str):
    original = DEFAULT_CLIENT_FEATURES[method]

    def handler(client: RecordingClient, params):
        result = original(client, params)
        if method == types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS:
            client.published.setdefault(params.uri, []).append((params.version, list(params.diagnostics)))
        client.poke()
        return result

    return handler


def make_client() -> RecordingClient:
    client = RecordingClient(converter_factory=default_converter)
    features = dict(DEFAULT_CLIENT_FEATURES)
    for method in (types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS, types.WINDOW_SHOW_MESSAGE, types.WINDOW_LOG_MESSAGE,
                   types.WORKSPACE_DIAGNOSTIC_REFRESH):
        features[method] = _recording(method)
    features[types.WORKSPACE_INLAY_HINT_REFRESH] = _inlay_hint_refresh  # Neovim declares refreshSupport
    register_lsp_features(client, features)
    return client


def _inlay_hint_refresh(client: RecordingClient, params: None) -> None:
    client.inlay_hint_refresh_count += 1
    client.poke()


def client_fixture(*, scope: str = "module", profiles=CLIENTS, server=SERVER, initialization_options=None,
                   configuration=None, adjust=None):
    """A pytest-lsp fixture: one server per scope and client profile, initialised as that client.

    `configuration` answers workspace/configuration `zeromem`; `adjust(capabilities)` edits the
    profile's capabilities before `initialize`.
    """

    @pytest_lsp.fixture(scope=scope, params=profiles, config=ClientServerConfig(server_command=server, client_factory=make_client))
    async def fixture(request, lsp_client: RecordingClient):
        if configuration is not None:
            lsp_client.set_configuration(configuration, section="zeromem")
        capabilities = client_capabilities(request.param)
        if adjust is not None:
            adjust(capabilities)
        result = await lsp_client.initialize_session(types.InitializeParams(
            capabilities=capabilities, initialization_options=initialization_options))
        lsp_client.profile = request.param
        lsp_client.server_capabilities = result.capabilities
        encoding = result.capabilities.position_encoding
        lsp_client.encoding = getattr(encoding, "value", encoding) or "utf-16"
        yield
        await lsp_client.shutdown_session()

    return fixture


# ---------------------------------------------------------------- documents


@dataclass
class Doc:
    client: RecordingClient
    uri: str
    text: str
    version: int

    @property
    def lines(self) -> LineIndex:
        return LineIndex(self.text)

    def position(self, offset: int) -> types.Position:
        line, character = self.lines.position(offset, self.client.encoding)
        return types.Position(line=line, character=character)

    def at(self, needle: str, delta: int = 0) -> types.Position:
        """The position of the first `needle` (plus delta characters)."""
        return self.position(self.text.index(needle) + delta)

    def offsets(self, range_: types.Range) -> tuple[int, int]:
        lines = self.lines
        return (lines.offset(range_.start.line, range_.start.character, self.client.encoding),
                lines.offset(range_.end.line, range_.end.character, self.client.encoding))

    def text_of(self, range_: types.Range) -> str:
        start, end = self.offsets(range_)
        return self.text[start:end]

    @property
    def identifier(self) -> types.TextDocumentIdentifier:
        return types.TextDocumentIdentifier(uri=self.uri)

    def replace(self, text: str) -> None:
        """Send the whole new text (full sync)."""
        self.version += 1
        self.text = text
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=self.uri, version=self.version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)]))

    def apply(self, edits: list[types.TextEdit]) -> None:
        """Send LSP text edits as incremental changes (last first, so earlier ranges stay valid)."""
        located = [(self.offsets(edit.range), edit) for edit in edits]
        changes = [types.TextDocumentContentChangePartial(range=edit.range, text=edit.new_text)
                   for _, edit in sorted(located, key=lambda item: item[0], reverse=True)]
        self.text = apply_edits(self.text, [OffsetEdit(start, end, edit.new_text) for (start, end), edit in located])
        self.version += 1
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=self.uri, version=self.version),
            content_changes=changes))

    def close(self) -> None:
        self.client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=self.identifier))

    async def diagnostics(self) -> list[types.Diagnostic]:
        """The diagnostics pushed for this version (waits for them)."""
        def for_version():
            for version, items in reversed(self.client.published.get(self.uri, [])):
                if version == self.version:
                    return (items,)
            return None

        return (await self.client.until(for_version))[0]

    async def breakdown(self) -> str:
        """The whole memory breakdown behind the hover's verdict (the server's zeromem.memoryReport command)."""
        result = await self.client.workspace_execute_command_async(
            types.ExecuteCommandParams(command="zeromem.memoryReport", arguments=[self.uri]))
        return result["markdown"] if isinstance(result, dict) else result.markdown

    async def pull(self) -> list[types.Diagnostic]:
        report = await self.client.text_document_diagnostic_async(
            types.DocumentDiagnosticParams(text_document=self.identifier))
        return list(report.items)


async def with_breakdown(doc: "Doc", hover: str) -> str:
    """A hover's text, followed — for a memory hover, which ends by pointing at it — by the whole breakdown the
    server gives for the document (zeromem.memoryReport): what the editor shows for the key, in full."""
    if "zeromem estimate --config" not in hover:
        return hover
    return f"{hover}\n\n{await doc.breakdown()}"


def vscode_capabilities() -> types.ClientCapabilities:
    """VS Code's capabilities as pytest-lsp records them, plus what VS Code has had since 1.70 and that
    recording lacks: pulling diagnostics, and being asked to re-pull (so the server does not push)."""
    capabilities = client_capabilities("visual_studio_code")
    capabilities.text_document.diagnostic = types.DiagnosticClientCapabilities()
    capabilities.workspace.diagnostics = types.DiagnosticWorkspaceClientCapabilities(refresh_support=True)
    return capabilities

def open_doc(client: RecordingClient, name: str, text: str, language: str = "json") -> Doc:
    """Open `text` under a fresh URI ending in `name` (every test gets its own document)."""
    uri = f"file:///workspace/{client.profile}/{next(_names)}/{name}"
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id=language, version=1, text=text)))
    return Doc(client, uri, text, 1)


def errors_logged(client: RecordingClient) -> list[str]:
    """Error-level window/logMessage and window/showMessage texts the server sent."""
    return [m.message for m in [*client.log_messages, *client.messages] if m.type == types.MessageType.Error]


def example(name: str) -> str:
    return (ROOT / "examples" / name).read_text(encoding="utf-8")


# A budget overflow with non-ASCII and non-BMP text before the stage on the same line.
OVERFLOW = """{
  "train_batch_size": 64,
  "train_micro_batch_size_per_gpu": 4,
  "gradient_accumulation_steps": 2,
  "bf16": {"enabled": true},
  "tensorboard": {"enabled": false, "job_name": "🚀 naïve 𝔷 run"}, "zero_optimization": {"stage": 1},
  "zeromem": {"parameters": "7B", "gpu_memory": "24GiB"}
}
"""
