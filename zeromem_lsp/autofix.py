"""`zeromem check --fix`: which of the fixes that findings carry to apply, and the text they give.

Pure: text and findings in, text out. A fix is *safe* when it keeps what the launcher does with the
config (a misspelt key in a section the loader rejects, a deprecated or legacy key under its new
name); every other fix (switching stage or sharding strategy, adding offload, changing batch sizes or
values) changes the training run and is applied only with --unsafe-fixes. Which is which is the
registry's `Rule.safe_fix`. Each finding contributes
its preferred fix (else its first); a fix whose edits overlap one already taken waits for the next
pass. Whether the new text still parses is for the caller to check by analysing it again
(`still_parses`).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from zeromem_lsp.findings import Finding, Fix, TextEdit, apply_edits, overlapping
from zeromem_lsp.rules.registry import RULES
from zeromem_lsp.rules.syntax import SYNTAX_ERROR

def is_safe(finding: Finding) -> bool:
    """The registry says which rules' fixes are safe (`Rule.safe_fix`: renames the loader treats alike)."""
    return RULES[finding.code].safe_fix


def chosen_fix(finding: Finding) -> Fix | None:
    preferred = [fix for fix in finding.fixes if fix.preferred]
    candidates = preferred or list(finding.fixes)
    return candidates[0] if candidates else None


@dataclass(frozen=True, slots=True)
class FixPass:
    text: str  # the text with the chosen fixes applied (the input when none applies)
    applied: tuple[Finding, ...]  # the findings whose fix is in `text`
    unsafe: tuple[Finding, ...]  # fixable, but only with --unsafe-fixes


def fix_pass(text: str, findings: list[Finding], unsafe_fixes: bool = False) -> FixPass:
    edits: list[TextEdit] = []
    applied: list[Finding] = []
    held_back: list[Finding] = []
    for finding in sorted(findings, key=lambda f: (f.start, f.end, f.code)):
        fix = chosen_fix(finding)
        if fix is None or not fix.edits:
            continue
        if not (unsafe_fixes or is_safe(finding)):
            held_back.append(finding)
            continue
        if overlapping((*edits, *fix.edits)):
            continue  # the next pass, on the new text, offers it again if it still applies
        edits.extend(fix.edits)
        applied.append(finding)
    return FixPass(apply_edits(text, edits), tuple(applied), tuple(held_back))


def fixable(findings: list[Finding]) -> tuple[int, int]:
    """(findings `--fix` would fix, findings only `--unsafe-fixes` would): those whose fix edits the text."""
    with_fix = [f for f in findings if (fix := chosen_fix(f)) is not None and fix.edits]
    safe = sum(is_safe(f) for f in with_fix)
    return safe, len(with_fix) - safe


def still_parses(before: list[Finding], after: list[Finding]) -> bool:
    """The fixed text parses at least as well as the original: no syntax error it did not have."""
    def count(findings: list[Finding]) -> int:
        return sum(f.code == SYNTAX_ERROR.code for f in findings)
    return count(after) <= count(before)


def unified_diff(name: str, old: str, new: str) -> str:
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                 fromfile=f"a/{name}", tofile=f"b/{name}")
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
