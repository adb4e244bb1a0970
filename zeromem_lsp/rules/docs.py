"""Render the rule registry as Markdown (docs/rules.md) and as plain text (`zeromem rules CODE`)."""

from __future__ import annotations

from zeromem_lsp.rules.registry import RULES, Rule

HEADER = """# Rules

Generated from `zeromem_lsp/rules/registry.py` by `zeromem rules --markdown`; do not edit by hand.
Codes are stable. Severity is what `zeromem check` and the language server report.

| code | name | severity | summary |
|---|---|---|---|
"""


def rule_anchor(rule: Rule) -> str:
    """The Markdown heading anchor of a rule's section in docs/rules.md."""
    return f"{rule.code.lower()}-{rule.name}-{rule.severity}"


def severity_text(rule: Rule) -> str:
    """`error` or, for a rule with a lesser case, `error (warning in its lesser case)`."""
    return f"{rule.severity} ({rule.lesser_severity} in its lesser case)" if rule.lesser_severity else rule.severity


def rule_markdown(rule: Rule) -> str:
    return (
        f"## {rule.code} `{rule.name}` ({rule.severity})\n\n"
        + (f"**Severity.** {severity_text(rule)}.\n\n" if rule.lesser_severity else "")
        + f"**What it does.** {rule.summary}\n\n"
        f"**Why is this bad?** {rule.rationale}\n\n"
        f"**Example**\n\n```jsonc\n{rule.example}\n```\n\n"
        f"**Use instead.** {rule.fix}\n"
        + ("\n**Fix.** Safe: `zeromem check --fix` applies it.\n" if rule.safe_fix else "")
    )


def rules_markdown() -> str:
    table = "".join(f"| [{r.code}](#{rule_anchor(r)}) | {r.name} | {severity_text(r)} | {r.summary} |\n"
                    for r in RULES.values())
    return HEADER + table + "\n" + "\n".join(rule_markdown(r) for r in RULES.values())


def rule_text(rule: Rule) -> str:
    return (
        f"{rule.code} {rule.name} ({severity_text(rule)})\n\n{rule.summary}\n\nWhy: {rule.rationale}\n\n"
        f"Example:\n{rule.example}\n\nInstead: {rule.fix}\n"
    )
