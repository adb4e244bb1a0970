"""Output formats for `zeromem check`: text, json, sarif, github.

Text uses 1-based lines and columns counted in characters; JSON uses LSP's zero-based lines and
UTF-16 characters (and says so in its `positions`); SARIF and GitHub use 1-based lines and UTF-16
columns. JSON and SARIF carry the run's summary (counts, fixable findings, paths not checked); text and
GitHub get it as lines on stderr from cli/check.py.
"""

from __future__ import annotations

import json

from zeromem_lsp import __version__
from zeromem_lsp.findings import Finding
from zeromem_lsp.lint import FileResult
from zeromem_lsp.rules.docs import rule_anchor, rule_markdown
from zeromem_lsp.rules.registry import RULES

SARIF_LEVELS = {"error": "error", "warning": "warning", "information": "note", "hint": "note"}
GITHUB_COMMANDS = {"error": "error", "warning": "warning", "information": "notice", "hint": "notice"}
COLOURS = {"error": "\033[31m", "warning": "\033[33m", "information": "\033[36m", "hint": "\033[2m"}
BOLD, RESET = "\033[1m", "\033[0m"


def _span(result: FileResult, finding: Finding, encoding: str) -> tuple[int, int, int, int]:
    (sl, sc), (el, ec) = result.lines.range(finding.start, finding.end, encoding)
    return sl, sc, el, ec


def text_report(results: list[FileResult], colour: bool = False, summary: dict | None = None) -> str:
    lines = []
    for result in results:
        for finding in result.findings:
            line, column, _, _ = _span(result, finding, "utf-32")
            severity = finding.severity
            if colour:
                where = f"{BOLD}{result.path}:{line + 1}:{column + 1}:{RESET}"
                severity = f"{COLOURS[severity]}{severity}{RESET}"
                lines.append(f"{where} {BOLD}{finding.code}{RESET} {severity}: {finding.message}")
            else:
                lines.append(f"{result.path}:{line + 1}:{column + 1}: {finding.code} {severity}: {finding.message}")
    return "\n".join(lines) + ("\n" if lines else "")


JSON_POSITIONS = {"line": "0-based", "character": "0-based, UTF-16 code units (as LSP)"}


def json_report(results: list[FileResult], colour: bool = False, summary: dict | None = None) -> str:
    findings = []
    for result in results:
        for finding in result.findings:
            sl, sc, el, ec = _span(result, finding, "utf-16")
            findings.append({
                "path": result.path,
                "code": finding.code,
                "severity": finding.severity,
                "message": finding.message,
                "range": {"start": {"line": sl, "character": sc}, "end": {"line": el, "character": ec}},
            })
    report = {"findings": findings, "positions": JSON_POSITIONS}
    if summary is not None:
        report["summary"] = summary
    return json.dumps(report, indent=2, ensure_ascii=False) + "\n"


def sarif_rules() -> list[dict]:
    return [
        {
            "id": rule.code,
            "name": rule.name,
            "shortDescription": {"text": rule.summary},
            "fullDescription": {"text": rule.rationale},
            "help": {"text": f"{rule.summary} {rule.rationale} Fix: {rule.fix}", "markdown": rule_markdown(rule)},
            "helpUri": f"https://github.com/zeromem-lsp/zeromem-lsp/blob/main/docs/rules.md#{rule_anchor(rule)}",
            "defaultConfiguration": {"level": SARIF_LEVELS[rule.severity]},
        }
        for rule in RULES.values()
    ]


def sarif_report(results: list[FileResult], colour: bool = False, summary: dict | None = None) -> str:
    index = {code: number for number, code in enumerate(RULES)}
    sarif_results = []
    for result in results:
        for finding in result.findings:
            sl, sc, el, ec = _span(result, finding, "utf-16")
            sarif_results.append({
                "ruleId": finding.code,
                "ruleIndex": index[finding.code],
                "level": SARIF_LEVELS[finding.severity],
                "message": {"text": finding.message},
                "locations": [{
                    "physicalLocation": {
                        "artifactLocation": {"uri": result.path.replace("\\", "/")},
                        "region": {"startLine": sl + 1, "startColumn": sc + 1, "endLine": el + 1, "endColumn": ec + 1},
                    }
                }],
            })
    log = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "zeromem",
                "version": __version__,
                "informationUri": "https://github.com/zeromem-lsp/zeromem-lsp",
                "rules": sarif_rules(),
            }},
            "columnKind": "utf16CodeUnits",
            "results": sarif_results,
            **({"properties": {"summary": summary}} if summary is not None else {}),
        }],
    }
    return json.dumps(log, indent=2, ensure_ascii=False) + "\n"


def _github_escape(text: str, property_value: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if property_value:
        text = text.replace(":", "%3A").replace(",", "%2C")
    return text


def github_report(results: list[FileResult], colour: bool = False, summary: dict | None = None) -> str:
    lines = []
    for result in results:
        for finding in result.findings:
            sl, sc, el, ec = _span(result, finding, "utf-16")
            properties = ",".join([
                f"file={_github_escape(result.path, True)}",
                f"line={sl + 1}", f"col={sc + 1}", f"endLine={el + 1}", f"endColumn={ec + 1}",
                f"title={finding.code}",
            ])
            lines.append(f"::{GITHUB_COMMANDS[finding.severity]} {properties}::{_github_escape(finding.message)}")
    return "\n".join(lines) + ("\n" if lines else "")


REPORTERS = {"text": text_report, "json": json_report, "sarif": sarif_report, "github": github_report}
