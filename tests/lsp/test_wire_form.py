"""publishDiagnostics is written as JSON by hand: it must be byte for byte what pygls writes for the
typed notification (lsprotocol objects through pygls' cattrs converter), built here the long way."""

from __future__ import annotations

import json

import pytest
from lsprotocol import types

from zeromem_lsp.document import LineIndex
from zeromem_lsp.findings import Finding, Fix, TextEdit
from zeromem_lsp.lsp.convert import diagnostic_json, publish_diagnostics_json, to_diagnostic
from zeromem_lsp.lsp.server import ZeromemServer

URI = "file:///work/ds%20config.json"
TEXT = '{\n  "a😀é": 1,\r\n  "zero_optimization": {"stage": 3, "cpu_offload": true},\n  "b": "x"\n}\n'
SEVERITY = {"error": 1, "warning": 2, "information": 3, "hint": 4}  # the LSP specification's numbers


def offset(needle: str) -> int:
    return TEXT.index(needle)


FINDINGS = [
    Finding("ZM101", "error", "does not fit: 81,920,000,000 B > 80 GiB", offset('"a'), offset('": 1')),
    Finding("ZM251", "warning", "cpu_offload is deprecated", offset('"cpu_offload"'), offset(": true"),
            fixes=(Fix("use offload_optimizer", (TextEdit(offset('"cpu'), offset(": true"), '"x"'),), True),)),
    Finding("ZM208", "information", "«renamed» key", offset('"b"'), offset('"b"') + 3,
            related=((offset('"a'), offset('"a') + 4, "first here"), (0, 1, "the object"))),
    Finding("ZM002", "hint", "empty range at the end", len(TEXT), len(TEXT)),
    Finding("ZM102", "unknown-severity", "falls back to a warning", 0, 1, related=((1, 2, "note"),)),
]


def typed_diagnostic(finding: Finding, lines: LineIndex, encoding: str) -> types.Diagnostic:
    def position(at: int) -> types.Position:
        line, character = lines.position(at, encoding)
        return types.Position(line=line, character=character)

    def range_(start: int, end: int) -> types.Range:
        return types.Range(start=position(start), end=position(end))

    related = [types.DiagnosticRelatedInformation(location=types.Location(uri=URI, range=range_(s, e)), message=note)
               for s, e, note in finding.related]
    return types.Diagnostic(
        range=range_(finding.start, finding.end), message=finding.message,
        severity=types.DiagnosticSeverity(SEVERITY.get(finding.severity, 2)), code=finding.code, source="zeromem",
        related_information=related or None,
        tags=[types.DiagnosticTag.Deprecated] if finding.code in ("ZM208", "ZM251") else None)


def pygls_bytes(protocol, params: types.PublishDiagnosticsParams) -> str:
    notification = protocol.get_message_type(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)(
        method=types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS, params=params, jsonrpc="2.0")
    return json.dumps(notification, default=protocol._serialize_message)


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "utf-32"])
@pytest.mark.parametrize("version", [7, None])
def test_published_json_is_what_pygls_writes_for_the_typed_notification(encoding, version):
    protocol, lines = ZeromemServer().protocol, LineIndex(TEXT)
    typed = types.PublishDiagnosticsParams(
        uri=URI, diagnostics=[typed_diagnostic(f, lines, encoding) for f in FINDINGS], version=version)
    ours = publish_diagnostics_json(URI, [diagnostic_json(f, lines, encoding, URI) for f in FINDINGS], version)
    assert json.dumps(ours) == pygls_bytes(protocol, typed)
    assert json.dumps(ours, default=protocol._serialize_message) == json.dumps(ours)  # nothing left to convert


def test_no_diagnostics_and_the_typed_form_for_pull_and_code_actions():
    protocol, lines = ZeromemServer().protocol, LineIndex(TEXT)
    assert json.dumps(publish_diagnostics_json(URI, [], None)) == pygls_bytes(
        protocol, types.PublishDiagnosticsParams(uri=URI, diagnostics=[]))
    for finding in FINDINGS:  # structured from the wire form: sequences come back as tuples, same JSON
        ours, theirs = to_diagnostic(finding, lines, "utf-16", URI), typed_diagnostic(finding, lines, "utf-16")
        assert isinstance(ours, types.Diagnostic)
        assert json.dumps(ours, default=protocol._serialize_message) == json.dumps(
            theirs, default=protocol._serialize_message)
