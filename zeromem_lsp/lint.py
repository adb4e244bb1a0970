"""Lint files on disk: discovery, project settings, analysis, filtering → a `LintResult`.

The core under `zeromem check` (and the benchmarks). It prints nothing and picks no exit status:
cli/check.py parses the arguments, prints the result through cli/reporters.py and decides the exit.
"""

from __future__ import annotations

import fnmatch
import glob
import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from zeromem_lsp.analysis import analyse_bytes
from zeromem_lsp.configs.settings import ZeromemSettings
from zeromem_lsp.document import LineIndex
from zeromem_lsp.findings import Finding
from zeromem_lsp.configs.model_source import HubAccess
from zeromem_lsp.project import ProjectSettings, discover, file_loader
from zeromem_lsp.rules import settings as settings_rules

SKIPPED_DIRECTORIES = {".git", ".hg", ".venv", "venv", "node_modules", "__pycache__", ".tox", ".mypy_cache"}
CONFIG_SUFFIXES = (".json", ".jsonc", ".hjson", ".yaml", ".yml")
GLOB_CHARACTERS = set("*?[")
NO_SETTINGS = ZeromemSettings()


class LintInputError(Exception):
    """A path that names nothing, a glob that matches nothing, a file that cannot be read."""


@dataclass
class FileResult:
    path: str
    findings: list[Finding]
    lines: LineIndex
    kind: str | None = None  # the config kind analysed (configs/detect.py), None for a settings file


@dataclass
class LintResult:
    """Findings per file (settings files included), skipped files with reasons, and counts."""

    files: list[FileResult] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)
    checked: int = 0  # configs analysed
    unchecked: list[tuple[str, str]] = field(default_factory=list)  # (path named, why it gave no config)

    @property
    def findings(self) -> list[Finding]:
        return [finding for result in self.files for finding in result.findings]

    def counts(self, key: Callable[[Finding], str]) -> Counter:
        """Findings counted by `key`, e.g. by severity or by code."""
        return Counter(key(finding) for finding in self.findings)


def _excluded(path: Path, patterns: list[str]) -> bool:
    text = path.as_posix()
    return any(fnmatch.fnmatch(text, p) or fnmatch.fnmatch(path.name, p) or any(
        fnmatch.fnmatch(part, p) for part in path.parts) for p in patterns)


def discover_files(paths: list[str], exclude: list[str], skipped: list[tuple[str, str]]) -> list[Path]:
    files: list[Path] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            for folder, directories, names in os.walk(path):
                directories[:] = sorted(d for d in directories if d not in SKIPPED_DIRECTORIES)
                for file_name in sorted(names):
                    candidate = Path(folder, file_name)
                    if not file_name.endswith(CONFIG_SUFFIXES):
                        continue
                    if _excluded(candidate, exclude):
                        skipped.append((str(candidate), "excluded"))
                    else:
                        files.append(candidate)
        elif path.is_file():
            if _excluded(path, exclude):
                skipped.append((name, "excluded"))
            else:
                files.append(path)
        elif GLOB_CHARACTERS & set(name):
            matches = sorted(glob.glob(name, recursive=True))
            if not matches:
                raise LintInputError(f"{name}: no files match")
            files += discover_files(matches, exclude, skipped)
        else:
            raise LintInputError(f"{name}: no such file or directory")
    return list(dict.fromkeys(files))


def read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise LintInputError(f"{path}: cannot read: {error.strerror or error}") from None


def _keep(finding: Finding, select: tuple[str, ...] | None, ignore: tuple[str, ...] | None) -> bool:
    if select is not None and not finding.code.startswith(select):
        return False
    return not (ignore and finding.code.startswith(ignore))


def settings_results(project: ProjectSettings) -> FileResult | None:
    if not project.problems or project.source is None:  # problems are a settings file's
        return None
    text = project.source.read_text(encoding="utf-8", errors="replace")
    return FileResult(str(project.source), settings_rules.project_findings(text, project.problems), LineIndex(text))


def lint(
    paths: list[str],
    exclude: Sequence[str] = (),
    forced: ZeromemSettings = NO_SETTINGS,
    select: tuple[str, ...] | None = None,
    ignore: tuple[str, ...] | None = None,
    progress: Callable[[int, int], None] | None = None,
    fixer: Callable | None = None,
    hub: HubAccess = "cache",
) -> LintResult:
    """Analyse every config under `paths`; `forced` ranks above every file's own settings.

    `select`/`ignore`: code prefixes to keep/drop; `progress(done, total)` after each file;
    `fixer(path, data, analysis, reanalyse, keep)` (cli/fix.py, for --fix/--diff) returns the
    analysis of the fixed text, `reanalyse(text)` analysing a new text of the same file. `hub`: whether a recipe's
    model missing from the caches is fetched from the Hugging Face Hub (configs/hub.py)."""
    result = LintResult()
    files = discover_files(paths, list(exclude), result.skipped)
    named = {str(Path(name)) for name in paths}
    checked: list[Path] = []
    projects: dict[Path, ProjectSettings] = {}
    reported_settings: set[Path] = set()
    for number, path in enumerate(files, 1):
        folder = path.parent
        if folder not in projects:
            projects[folder] = discover(folder)
        project = projects[folder]
        if project.source is not None and project.source not in reported_settings:
            reported_settings.add(project.source)
            settings_result = settings_results(project)
            if settings_result:
                settings_result.findings = [f for f in settings_result.findings if _keep(f, select, ignore)]
                result.files.append(settings_result)
        data = read_bytes(path)
        analysis = analyse_bytes(data, path.name, project.layers_for(path), forced, file_loader(path, hub))
        if progress is not None:
            progress(number, len(files))
        if not analysis.reported:
            result.skipped.append((str(path), "not a training config"))
            if str(path) in named:
                result.unchecked.append((str(path), unrecognised(analysis)))
            continue
        if analysis.refused == "binary" and str(path) not in named:
            result.skipped.append((str(path), "binary data"))
            continue
        result.checked += 1
        if fixer is not None:
            analysis = fixer(path, data, analysis, lambda text: analyse_bytes(  # noqa: B023 (called now)
                text.encode("utf-8"), path.name, project.layers_for(path), forced, file_loader(path, hub)),
                lambda f: _keep(f, select, ignore))
        findings = [f for f in analysis.findings if _keep(f, select, ignore)]
        result.files.append(FileResult(str(path), findings, analysis.lines, analysis.kind))
        checked.append(path)
    result.unchecked += empty_directories(paths, files, checked)
    return result


def unrecognised(analysis) -> str:
    """Why a file named on the command line is not checked: what its top level holds."""
    root = analysis.document.root if analysis.document is not None else None
    if root is None:
        why = "it is empty" if not analysis.text.strip() else "it does not parse as JSON or YAML"
        return f"not a training config ({why}); not checked"
    if root.kind != "object":
        shape = f"a{'n' if root.kind[0] in 'aeiou' else ''} {root.kind}"
        return f"not a training config (its top level is {shape}, not an object); not checked"
    keys = [member.key for member in root.members]
    shown = ", ".join(keys[:4]) + (", ..." if len(keys) > 4 else "") if keys else "none"
    readers = ("DeepSpeed, FSDP, Accelerate or TrainingArguments" if analysis.document.flavour != "yaml"
               else "Accelerate or an axolotl / LLaMA-Factory / TRL recipe")
    return f"not a training config (top-level keys: {shown}; none is what {readers} read); not checked"


def empty_directories(paths: list[str], files: list[Path], checked: list[Path]) -> list[tuple[str, str]]:
    """Directories named on the command line in which no config was checked, with what they held."""
    empty = []
    for name in paths:
        folder = Path(name)
        if not folder.is_dir() or any(folder in path.parents for path in checked):
            continue
        found = sum(folder in path.parents for path in files)
        held = (f"{found} JSON/YAML file{'s' if found != 1 else ''}, none a training config" if found
                else f"no {'/'.join(CONFIG_SUFFIXES)} files")
        empty.append((name, f"no configs ({held})"))
    return empty
