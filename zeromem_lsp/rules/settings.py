"""ZM002, ZM003, ZM104, ZM107, ZM108: the input itself — too large, not UTF-8, invalid zeromem settings, a GPU
budget in decimal gigabytes, a recipe's model not found here."""

from __future__ import annotations

import json
from collections.abc import Iterable

from zeromem_lsp.configs.settings_values import binary_budget, decimal_budget_note
from zeromem_lsp.document import LineIndex
from zeromem_lsp.edits import set_value
from zeromem_lsp.findings import Finding, Fix
from zeromem_lsp.rules.context import Context
from zeromem_lsp.rules.registry import rule
from zeromem_lsp.units import format_count

TOO_LARGE, UNREADABLE, INVALID_SETTING = rule("ZM002"), rule("ZM003"), rule("ZM104")
DECIMAL_BUDGET, MODEL_NOT_FOUND = rule("ZM107"), rule("ZM108")


def too_large(length: int, limit: int) -> Finding:
    return TOO_LARGE.at(f"document not analysed: {format_count(length)} characters exceeds the "
                        f"{format_count(limit)} limit", 0, 0)


def unreadable(problem: str, start: int = 0, end: int = 0) -> Finding:
    return UNREADABLE.at(problem, start, end)


def block_findings(context: Context, problems: Iterable[tuple]) -> list[Finding]:
    """ZM104 for each (path, message, target) problem of a zeromem block in the document."""
    return [context.finding(INVALID_SETTING, message, path, target) for path, message, target in problems]


def model_not_found(context: Context, path: tuple, message: str) -> list[Finding]:
    """ZM108 on a recipe's model name that could not be counted (the message says where it looked, or why)."""
    return [context.finding(MODEL_NOT_FOUND, f"{message}; without it there is no memory estimate: put its "
                            f"config.json in the Hugging Face cache ({_download(context, path)}), or give "
                            "--model-config / --parameters (or parameters in [tool.zeromem])", path, "value")]


def _download(context: Context, path: tuple) -> str:
    """The command that puts a hub model's config.json in the cache, for the model name at `path`."""
    name = context.data
    for key in path:
        name = name.get(key) if isinstance(name, dict) else None
    return f"`huggingface-cli download {name} config.json`" if isinstance(name, str) else "huggingface-cli download"


def budget_note(context: Context, block_path: tuple) -> list[Finding]:
    """ZM107 on the block's `gpu_memory` when it is written in decimal gigabytes ("80GB")."""
    value = context.data
    for key in (*block_path, "gpu_memory"):
        value = value.get(key) if isinstance(value, dict) else None
    note = decimal_budget_note(value)
    if not note or not isinstance(value, str):  # a note is for a string only
        return []
    edit = set_value(context.document, (*block_path, "gpu_memory"), json.dumps(binary_budget(value)))
    fixes = (Fix(f"Write {binary_budget(value)} (what a GPU sold as {value.strip()!r} has)", (edit,),
                 preferred=True),) if edit else ()
    return [context.finding(DECIMAL_BUDGET, note, (*block_path, "gpu_memory"), fixes=fixes)]


def project_findings_on_config(source_name: str, problems: Iterable, text: str) -> list[Finding]:
    """ZM104 for a project settings file's problems, shown on the config they apply to (its start):
    for a front end that cannot show them on the settings file itself."""
    end = min(1, len(text))
    return [INVALID_SETTING.at(f"{source_name} line {problem.line + 1}: {problem.message}", 0, end)
            for problem in problems]


def project_findings(text: str, problems: Iterable) -> list[Finding]:
    """ZM104 for problems of a project settings file (pyproject.toml / zeromem.toml), each on its line."""
    lines = LineIndex(text)
    last_line = text.count("\n")
    findings = []
    for problem in problems:
        start = lines.offset(problem.line, 0, "utf-32")
        end = lines.offset(problem.line + 1, 0, "utf-32") if problem.line < last_line else len(text)
        findings.append(INVALID_SETTING.at(problem.message, start, max(start, end - 1)))
    return findings
