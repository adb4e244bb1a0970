"""Reader issues → findings: each issue's rule from the kinds table, its range, its quick fix."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from zeromem_lsp.configs.issue import ConfigIssue
from zeromem_lsp.findings import Finding
from zeromem_lsp.rules import deepspeed as deepspeed_rules
from zeromem_lsp.rules import fsdp as fsdp_rules
from zeromem_lsp.rules.context import Context
from zeromem_lsp.rules.kinds import rule_for_kind

FIXES_BY_READER = {"deepspeed": deepspeed_rules.fixes_for, "fsdp": fsdp_rules.fixes_for,
                   "accelerate": fsdp_rules.fixes_for, "recipe": fsdp_rules.fixes_for}


def check(context: Context, issues: Iterable[ConfigIssue]) -> Iterator[Finding]:
    """Findings for issues whose paths are document paths (inline sections already re-rooted)."""
    for issue in issues:
        fixes = FIXES_BY_READER[issue.reader](context, issue)
        yield context.finding(rule_for_kind(issue.key), issue.message, tuple(issue.path), issue.target, fixes)
