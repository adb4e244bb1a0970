"""ZM001 syntax errors, ZM203 duplicate keys, ZM253 what hjson accepts but json.load does not, ZM258
unfilled template placeholders (one finding per file instead of a ZM253 and a ZM202 per placeholder; a
ZM202 error when DeepSpeed refuses them)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from zeromem_lsp.document import Document
from zeromem_lsp.findings import Finding
from zeromem_lsp.rules.context import Context
from zeromem_lsp.rules.registry import rule

SYNTAX_ERROR, DUPLICATE_KEY, NOT_STRICT_JSON = rule("ZM001"), rule("ZM203"), rule("ZM253")
PLACEHOLDER, REFUSED_VALUE = rule("ZM258"), rule("ZM202")

#: ZERO_STAGE, TRAIN_BATCH, $LR, ${LR}, <MICRO_BATCH>, %GAS%, @STAGE@ as a whole unquoted value.
_PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*|\$\{?[A-Za-z_]\w*\}?|<[A-Za-z_]\w*>|%[A-Za-z_]\w*%|@[A-Za-z_]\w*@")
#: Capitalised words that are a value mistyped rather than a placeholder (ZM202 says what to write).
_VALUE_WORDS = frozenset({"true", "false", "null", "none", "auto", "cpu", "nvme", "gpu"})
_NAMED = 8  # placeholders named in the message; the rest are counted

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


def placeholders(document: Document) -> list[tuple[str, int, int]]:
    """(name, start, end) of each unquoted value that is a template placeholder, in text order."""
    found = []
    for problem in document.problems:
        if problem.kind in ("quoteless_value", "quoteless_comma"):
            name = document.text[problem.start:problem.end].removesuffix(",").strip()
            if len(name) > 1 and _PLACEHOLDER.fullmatch(name) and name.lower() not in _VALUE_WORDS:
                found.append((name, problem.start, problem.end))
    return found


def with_placeholders(context: Context, findings: list[Finding]) -> list[Finding]:
    """`findings` with those on a placeholder's value replaced by one finding naming every placeholder:
    ZM258, or ZM202 (an error) when DeepSpeed refuses the string a placeholder is read as."""
    spans = placeholders(context.document)
    if not spans:
        return findings

    def covered(finding: Finding) -> tuple[str, int, int] | None:
        return next((span for span in spans if span[1] <= finding.start and finding.end <= span[2]), None)

    refused = {span[0] for f in findings if f.severity == "error" and (span := covered(f)) is not None}
    names = list(dict.fromkeys(name for name, _, _ in spans))
    shown = ", ".join(names[:_NAMED]) + (f" and {len(names) - _NAMED} more" if len(names) > _NAMED else "")
    if not refused:
        as_written = "which DeepSpeed's config loader lets through"
    elif refused >= set(names):
        as_written = "which DeepSpeed refuses" if len(names) == 1 else "which DeepSpeed refuses for each"
    else:
        as_written = f"which DeepSpeed refuses for {', '.join(n for n in names if n in refused)}"
    message = (f"unfilled template placeholder{'s' if len(names) != 1 else ''} {shown}: hjson reads "
               f"{'it' if len(names) == 1 else 'each'} as a string, {as_written}, and json.load (HF Transformers, Accelerate) fails on the file. Fill "
               f"{'it' if len(names) == 1 else 'them'} in before launch; the values are checked once filled")
    (_, start, end), others = spans[0], spans[1:]
    related = tuple((s, e, f"placeholder {name}") for name, s, e in others)
    chosen = REFUSED_VALUE if refused else PLACEHOLDER
    return [f for f in findings if covered(f) is None] + [chosen.at(message, start, end, related=related)]


def check(context: Context) -> Iterator[Finding]:
    first: dict[str, tuple[int, int]] = {}
    counts: dict[str, int] = {}
    template = {start for _, start, _ in placeholders(context.document)}  # ZM258 reports these
    for problem in context.document.problems:
        if problem.start in template and problem.kind in ("quoteless_value", "quoteless_comma"):
            continue
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
            f"{RELAXATIONS[kind]} ({where}): DeepSpeed's hjson loader accepts this syntax, but HF Transformers "
            "and Accelerate read config files with json.load, which fails",
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
