"""Every conversion between zeromem's plain results and LSP types, in one place.

Offsets are code points into the analysed text; `LineIndex` turns them into positions in the
negotiated encoding (utf-8, utf-16 or utf-32), so ranges stay exact after non-ASCII and non-BMP
text on the same line.
"""

from __future__ import annotations

import functools

from lsprotocol import types

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: these load with the analysis, after `initialize` is answered
    from zeromem_lsp.document import LineIndex
    from zeromem_lsp.findings import Finding, Fix
    from zeromem_lsp.assist.completion import Candidate
    from zeromem_lsp.assist.hover import HoverText
    from zeromem_lsp.assist.inlay import InlayLabel

SOURCE = "zeromem"
SEVERITIES = {
    "error": types.DiagnosticSeverity.Error,
    "warning": types.DiagnosticSeverity.Warning,
    "information": types.DiagnosticSeverity.Information,
    "hint": types.DiagnosticSeverity.Hint,
}
COMPLETION_KINDS = {"key": types.CompletionItemKind.Property, "value": types.CompletionItemKind.Value}


def encoding_name(kind: object) -> str:
    """'utf-8' | 'utf-16' | 'utf-32' from a PositionEncodingKind (or its string); UTF-16 by default."""
    value = getattr(kind, "value", kind)
    return value if value in ("utf-8", "utf-16", "utf-32") else "utf-16"


def to_position(lines: LineIndex, offset: int, encoding: str) -> types.Position:
    line, character = lines.position(offset, encoding)
    return types.Position(line=line, character=character)


def to_range(lines: LineIndex, start: int, end: int, encoding: str) -> types.Range:
    return types.Range(start=to_position(lines, start, encoding), end=to_position(lines, end, encoding))


def to_offset(lines: LineIndex, position: types.Position, encoding: str) -> int:
    return lines.offset(position.line, position.character, encoding)


def to_offsets(lines: LineIndex, range_: types.Range, encoding: str) -> tuple[int, int]:
    return to_offset(lines, range_.start, encoding), to_offset(lines, range_.end, encoding)


def range_json(lines: LineIndex, start: int, end: int, encoding: str) -> dict:
    (start_line, start_character), (end_line, end_character) = (
        lines.position(start, encoding), lines.position(end, encoding))
    return {"start": {"line": start_line, "character": start_character},
            "end": {"line": end_line, "character": end_character}}


def diagnostic_json(finding: Finding, lines: LineIndex, encoding: str, uri: str) -> dict:
    """A Diagnostic as it goes on the wire: what lsprotocol's converter makes of the typed one, key for
    key and in its order, without building it (publishDiagnostics runs on every keystroke)."""
    from zeromem_lsp.rules.registry import RULES

    diagnostic: dict[str, object] = {
        "range": range_json(lines, finding.start, finding.end, encoding),
        "message": finding.message,
        "severity": SEVERITIES.get(finding.severity, types.DiagnosticSeverity.Warning).value,
        "code": finding.code,
        "source": SOURCE,
    }
    known = RULES.get(finding.code)
    if known is not None and "deprecated" in known.name:
        diagnostic["tags"] = [types.DiagnosticTag.Deprecated.value]
    if finding.related:
        diagnostic["relatedInformation"] = [
            {"location": {"uri": uri, "range": range_json(lines, start, end, encoding)}, "message": note}
            for start, end, note in finding.related]
    return diagnostic


def publish_diagnostics_json(uri: str, diagnostics: list[dict], version: int | None) -> dict:
    """The textDocument/publishDiagnostics notification as pygls' converter writes it."""
    params: dict[str, object] = {"uri": uri, "diagnostics": diagnostics}
    if version is not None:
        params["version"] = version
    return {"params": params, "method": types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS, "jsonrpc": "2.0"}


def to_diagnostic(finding: Finding, lines: LineIndex, encoding: str, uri: str) -> types.Diagnostic:
    """The typed Diagnostic (pull reports, code actions), made from the same wire form."""
    return _converter().structure(diagnostic_json(finding, lines, encoding, uri), types.Diagnostic)


@functools.cache
def _converter():
    from lsprotocol.converters import get_converter

    return get_converter()


def to_workspace_edit(
    fix: Fix, lines: LineIndex, encoding: str, uri: str, version: int | None, versioned: bool
) -> types.WorkspaceEdit:
    """Minimal text edits; as a versioned TextDocumentEdit when the client supports documentChanges."""
    edits = [types.TextEdit(range=to_range(lines, e.start, e.end, encoding), new_text=e.new_text) for e in fix.edits]
    if versioned:
        document = types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version)
        return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(text_document=document, edits=edits)])
    return types.WorkspaceEdit(changes={uri: edits})


def to_code_action(fix: Fix, diagnostic: types.Diagnostic, edit: types.WorkspaceEdit) -> types.CodeAction:
    return types.CodeAction(
        title=fix.title,
        kind=types.CodeActionKind.QuickFix,
        diagnostics=[diagnostic],
        is_preferred=fix.preferred or None,
        edit=edit,
    )


def to_hover(hover: HoverText, lines: LineIndex, encoding: str) -> types.Hover:
    return types.Hover(
        contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=hover.markdown),
        range=to_range(lines, hover.start, hover.end, encoding),
    )


def to_inlay_hint(hint: InlayLabel, lines: LineIndex, encoding: str) -> types.InlayHint:
    return types.InlayHint(
        position=to_position(lines, hint.offset, encoding),
        label=hint.label,
        padding_left=True,
        tooltip=hint.tooltip,
    )


def to_completion_item(candidate: Candidate, lines: LineIndex, encoding: str) -> types.CompletionItem:
    return types.CompletionItem(
        label=candidate.label,
        kind=COMPLETION_KINDS.get(candidate.kind, types.CompletionItemKind.Text),
        detail=candidate.detail or None,
        documentation=types.MarkupContent(kind=types.MarkupKind.Markdown, value=candidate.documentation)
        if candidate.documentation else None,
        tags=[types.CompletionItemTag.Deprecated] if candidate.deprecated else None,
        sort_text=candidate.sort_text or None,
        filter_text=candidate.filter_text,
        text_edit=types.TextEdit(
            range=to_range(lines, candidate.start, candidate.end, encoding), new_text=candidate.new_text
        ),
    )
