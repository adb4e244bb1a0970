"""ZM2xx: what DeepSpeed refuses at launch (errors) or silently mishandles (warnings).

The judgement is `configs.deepspeed.validate_deepspeed`; this module only gives each issue its
code, its range in the document and, where one is obvious, a fix.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from zeromem_lsp.configs.deepspeed import ConfigIssue, validate_deepspeed
from zeromem_lsp.document import Member
from zeromem_lsp.edits import rename_key, replace_value
from zeromem_lsp.findings import Finding, Fix
from zeromem_lsp.rules.context import Context

CODES = {
    "unknown_key": "ZM201",
    "invalid_value": "ZM202",
    "batch_missing": "ZM204",
    "batch_non_positive": "ZM205",
    "batch_inconsistent": "ZM206",
    "fp16_and_bf16": "ZM207",
    "deprecated_with_replacement": "ZM208",
    "partial_offload_below_stage3": "ZM209",
    "removed_feature": "ZM210",
    "deprecated_key": "ZM251",
    "offload_param_below_stage3": "ZM252",
    "auto_not_filled": "ZM254",
    "top_level_near_miss": "ZM255",
    "unknown_optimizer": "ZM256",
    "incompatible_optimizer": "ZM256",
    "unsupported_optimizer_param": "ZM256",
    "suspicious_value": "ZM257",
}
FALLBACK = {"error": "ZM211", "warning": "ZM257"}
OFFLOAD_SUCCESSORS = {"offload_optimizer", "offload_param"}


def code_for(issue: ConfigIssue) -> str:
    return CODES.get(issue.kind) or FALLBACK.get(issue.severity, "ZM211")


def _fixes(context: Context, issue: ConfigIssue) -> tuple[Fix, ...]:
    if issue.replacement is None:
        return ()
    member = context.document.find(tuple(issue.path))
    if not isinstance(member, Member):
        return ()
    edits = [rename_key(member, issue.replacement)]
    if issue.replacement in OFFLOAD_SUCCESSORS and member.value is not None and member.value.value is True:
        edits.append(replace_value(member, json.dumps({"device": "cpu"})))
    if issue.kind in ("unknown_key", "top_level_near_miss"):
        title = f"Rename {member.key!r} to {issue.replacement!r}"
    else:
        title = f"Replace {member.key!r} with {issue.replacement!r}"
    return (Fix(title, tuple(edits), preferred=True),)


def _batch_fix(context: Context) -> tuple[Fix, ...]:
    setup = context.setup
    world = context.settings.world_size
    micro, gas = setup.micro_batch_size, setup.gradient_accumulation_steps
    if world is None or micro is None or gas is None:
        return ()
    member = context.document.find(("train_batch_size",))
    if not isinstance(member, Member):
        return ()
    total = micro * gas * world
    return (Fix(f"Set train_batch_size to {total} (= {micro} × {gas} × {world})",
                (replace_value(member, str(total)),), preferred=True),)


def check(context: Context) -> Iterator[Finding]:
    root = context.document.root
    if root is None:  # nothing parsed: the syntax error says why
        return
    if root.kind != "object":  # a top-level array, string, null... (unless the text is broken anyway)
        if not context.document.syntax_errors:
            yield from check_issues(context, validate_deepspeed(context.data))
        return
    data = context.data if isinstance(context.data, dict) else {}
    config = {key: value for key, value in data.items() if key != "zeromem"}
    yield from check_issues(context, validate_deepspeed(config, world_size=context.settings.world_size))


def check_issues(context: Context, issues) -> Iterator[Finding]:
    """Findings for DeepSpeed issues whose paths are already document paths (also inline configs)."""
    for issue in issues:
        code = code_for(issue)
        fixes = _batch_fix(context) if code == "ZM206" else _fixes(context, issue)
        finding = context.finding(code, issue.message, tuple(issue.path), issue.target, fixes)
        yield finding
