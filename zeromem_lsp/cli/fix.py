"""`zeromem check --fix / --unsafe-fixes / --diff`: the file side of zeromem_lsp.autofix.

Applies fix passes until none applies (each pass re-analysed: the next pass sees the new text), keeps
a pass only if the text still parses, then writes the file atomically (a temporary file in the same
folder, renamed over it) — or, with --diff, only collects a unified diff. The findings reported and
the exit status are those of the final text.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from zeromem_lsp.autofix import fix_pass, still_parses, unified_diff
from zeromem_lsp.findings import Finding

if TYPE_CHECKING:
    from zeromem_lsp.analysis import Analysis

MAX_PASSES = 10


class FixSession:
    def __init__(self, args):
        self.unsafe, self.write = args.unsafe_fixes, not args.diff
        self.fixed = self.unsafe_available = self.files_changed = 0
        self.diffs: list[str] = []
        self.refused: list[str] = []

    def apply(self, path: Path, data: bytes, analysis: Analysis, reanalyse: Callable[[str], Analysis],
              keep: Callable[[Finding], bool]) -> Analysis:
        """The analysis of the fixed text (or `analysis` when nothing was fixed)."""
        original, current, fixed = analysis.text, analysis, 0
        if analysis.document is None or original.encode("utf-8") != data:
            return analysis  # unreadable or not plain UTF-8: rewriting it would change more than the fix
        for _ in range(MAX_PASSES):
            step = fix_pass(current.text, [f for f in current.findings if keep(f)], self.unsafe)
            if not step.applied:
                break
            candidate = reanalyse(step.text)
            if candidate.kind != current.kind or not still_parses(current.findings, candidate.findings):
                self.refused.append(f"{path}: fixing {', '.join(sorted({f.code for f in step.applied}))} "
                                    "would not leave a config that parses; not fixed")
                break
            current, fixed = candidate, fixed + len(step.applied)
        if not self.unsafe:
            self.unsafe_available += len(fix_pass(current.text, [f for f in current.findings if keep(f)]).unsafe)
        if current.text == original:
            return analysis
        self.fixed += fixed
        self.files_changed += 1
        if self.write:
            write_atomically(path, current.text.encode("utf-8"))
        else:
            self.diffs.append(unified_diff(str(path), original, current.text))
        return current

    def summary(self) -> str:
        verb = "fixed" if self.write else "would fix"
        parts = [f"{verb} {self.fixed} finding{'s' if self.fixed != 1 else ''} in {self.files_changed} "
                 f"file{'s' if self.files_changed != 1 else ''}"]
        if self.unsafe_available:
            parts.append(f"{self.unsafe_available} more fixable with --unsafe-fixes (they change the training run)")
        return "\n".join([*self.refused, "; ".join(parts)])

    def status(self) -> int:
        """--diff: 1 when a file would change (so CI can ask for the fixes to be committed)."""
        return 1 if (self.refused or (not self.write and self.files_changed)) else 0


def write_atomically(path: Path, data: bytes) -> None:
    mode = os.stat(path).st_mode & 0o7777
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".zeromem-fix")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
