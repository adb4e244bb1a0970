"""Output formats for `zeromem check`: each turns (path, findings, line index) into text.

Text uses 1-based lines and columns counted in characters; JSON uses LSP's zero-based lines and
UTF-16 characters.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from zeromem_lsp.document import LineIndex
from zeromem_lsp.findings import Finding


@dataclass
class FileResult:
    path: str
    findings: list[Finding]
    lines: LineIndex


def _lsp_range(result: FileResult, finding: Finding) -> dict:
    (sl, sc), (el, ec) = result.lines.range(finding.start, finding.end, "utf-16")
    return {"start": {"line": sl, "character": sc}, "end": {"line": el, "character": ec}}


def text_report(results: list[FileResult]) -> str:
    lines = []
    for result in results:
        for finding in result.findings:
            line, column = result.lines.position(finding.start, "utf-32")
            lines.append(f"{result.path}:{line + 1}:{column + 1}: {finding.code} {finding.severity}: {finding.message}")
    return "\n".join(lines) + ("\n" if lines else "")


def json_report(results: list[FileResult]) -> str:
    findings = [
        {
            "path": result.path,
            "code": finding.code,
            "severity": finding.severity,
            "message": finding.message,
            "range": _lsp_range(result, finding),
        }
        for result in results
        for finding in result.findings
    ]
    return json.dumps({"findings": findings}, indent=2, ensure_ascii=False) + "\n"


REPORTERS = {"text": text_report, "json": json_report}
