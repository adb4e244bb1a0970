"""ZM001 syntax errors, ZM203 duplicate keys, ZM253 what hjson accepts but json.load does not."""

from __future__ import annotations

from collections.abc import Iterator

from zeromem_lsp.findings import Finding
from zeromem_lsp.rules.context import Context
from zeromem_lsp.rules.registry import rule

SYNTAX_ERROR, DUPLICATE_KEY, NOT_STRICT_JSON = rule("ZM001"), rule("ZM203"), rule("ZM253")

RELAXATIONS = {
    "comment": "comments",
    "trailing_comma": "trailing commas",
    "missing_comma": "a newline instead of a comma",
    "unquoted_key": "unquoted keys",
    "quoteless_value": "unquoted string values",
    "quoteless_comma": "an unquoted value with the comma after it read into it",
    "single_quoted": "single-quoted strings",
    "multiline_string": "multi-line \'\'\' strings",
    "braceless_root": "a root object without braces",
    "bom": "a UTF-8 byte-order mark",
}


def check(context: Context) -> Iterator[Finding]:
    first: dict[str, tuple[int, int]] = {}
    counts: dict[str, int] = {}
    for problem in context.document.problems:
        if problem.kind == "syntax":
            yield context.finding(SYNTAX_ERROR, problem.message, span=(problem.start, problem.end))
        elif problem.kind == "duplicate_key":
            finding = context.finding(DUPLICATE_KEY, problem.message, span=(problem.start, problem.end))
            if problem.related is not None:
                first_key = (problem.related, problem.related + problem.end - problem.start, "first occurrence")
                finding = finding._replace(related=(first_key,))
            yield finding
        elif problem.kind == "quoteless_comma":  # its own message: the value is not what the author wrote
            yield context.finding(NOT_STRICT_JSON, f"{problem.message}. HF Transformers and Accelerate (json.load) fail here",
                                  span=(problem.start, problem.end))
        elif problem.kind in RELAXATIONS:
            first.setdefault(problem.kind, (problem.start, problem.end))
            counts[problem.kind] = counts.get(problem.kind, 0) + 1
    for kind, span in first.items():
        count = counts[kind]
        where = "here" if count == 1 else f"here and {count - 1} more time{'s' if count > 2 else ''}"
        yield context.finding(
            NOT_STRICT_JSON,
            f"{RELAXATIONS[kind]} ({where}): DeepSpeed accepts this, but HF Transformers and Accelerate read "
            "config files with json.load, which fails",
            span=span,
        )


def check_strict(context: Context, reader: str) -> Iterator[Finding]:
    """Files read with json.load (fsdp_config, TrainingArguments): what hjson forgives is ZM001 there."""
    for problem in context.document.problems:
        if problem.kind == "syntax":
            yield context.finding(SYNTAX_ERROR, problem.message, span=(problem.start, problem.end))
        elif problem.kind in RELAXATIONS:
            yield context.finding(
                SYNTAX_ERROR, f"{RELAXATIONS[problem.kind]}: {reader} reads this file with json.load, which fails here",
                span=(problem.start, problem.end))


def check_yaml(context: Context) -> Iterator[Finding]:
    for problem in context.document.syntax_errors:
        yield context.finding(SYNTAX_ERROR, problem.message, span=(problem.start, problem.end))
