"""Run the analysis over files on disk: discovery, project settings, filtering, exit status.

The I/O layer under `zeromem check` (and the benchmarks); output formats live in cli/reporters.py.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import sys
from collections import Counter
from pathlib import Path


from zeromem_lsp.analysis import analyse_bytes
from zeromem_lsp.cli import UsageError
from zeromem_lsp.cli.reporters import REPORTERS, FileResult
from zeromem_lsp.configs.settings import ZeromemSettings, validate_settings
from zeromem_lsp.document import LineIndex
from zeromem_lsp.findings import SEVERITIES, Finding
from zeromem_lsp.project import ProjectSettings, discover, file_loader
from zeromem_lsp.rules import settings as settings_rules
from zeromem_lsp.rules.registry import RULES

SKIPPED_DIRECTORIES = {".git", ".hg", ".venv", "venv", "node_modules", "__pycache__", ".tox", ".mypy_cache"}
CONFIG_SUFFIXES = (".json", ".jsonc", ".hjson", ".yaml", ".yml")
ANALYSED_KINDS = ("deepspeed", "oversized", "binary", "fsdp", "hf-arguments", "accelerate")
GLOB_CHARACTERS = set("*?[")
SEVERITY_RANK = {name: rank for rank, name in enumerate(reversed(SEVERITIES))}  # hint 0 … error 3


def _codes(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    codes = tuple(code.strip().upper() for code in text.split(",") if code.strip())
    unknown = [code for code in codes if not any(known.startswith(code) for known in RULES)]
    if unknown:
        raise UsageError(f"unknown rule code or prefix: {', '.join(unknown)}")
    return codes


def forced_settings(args) -> ZeromemSettings:
    values = {
        "gpu_memory": args.gpu_memory, "parameters": args.parameters, "world_size": args.world_size,
        "precision": args.precision, "optimizer": args.optimizer, "warn_fraction": args.warn_fraction,
    }
    settings, problems = validate_settings({k: v for k, v in values.items() if v is not None})
    if problems:
        raise UsageError(f"--{problems[0].name.replace('_', '-')}: {problems[0].message}")
    return settings


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
                raise UsageError(f"{name}: no files match")
            files += discover_files(matches, exclude, skipped)
        else:
            raise UsageError(f"{name}: no such file or directory")
    return list(dict.fromkeys(files))


def read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise UsageError(f"{path}: cannot read: {error.strerror or error}") from None


def _keep(finding: Finding, select: tuple[str, ...] | None, ignore: tuple[str, ...] | None) -> bool:
    if select is not None and not finding.code.startswith(select):
        return False
    return not (ignore and finding.code.startswith(ignore))


def settings_results(project: ProjectSettings) -> FileResult | None:
    if not project.problems:
        return None
    text = project.source.read_text(encoding="utf-8", errors="replace")
    return FileResult(str(project.source), settings_rules.project_findings(text, project.problems), LineIndex(text))


class Progress:
    """A one-line counter on a terminal's stderr, for long runs."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.enabled = total, enabled and total >= 50 and sys.stderr.isatty()

    def update(self, done: int) -> None:
        if self.enabled and (done % 25 == 0 or done == self.total):
            sys.stderr.write(f"\rchecked {done}/{self.total} files")
            sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\r\033[K")


def run(args) -> int:
    select, ignore = _codes(args.select), _codes(args.ignore)
    forced = forced_settings(args)
    skipped: list[tuple[str, str]] = []
    files = discover_files(args.paths, args.exclude, skipped)
    named = {str(Path(name)) for name in args.paths}
    projects: dict[Path, ProjectSettings] = {}
    results: list[FileResult] = []
    reported_settings: set[Path] = set()
    checked = 0
    progress = Progress(len(files), not args.quiet)
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
                results.append(settings_result)
        analysis = analyse_bytes(read_bytes(path), path.name, project.for_file(path), forced,
                                 file_loader(path))
        progress.update(number)
        if analysis.kind is None:
            skipped.append((str(path), "not a training config"))
            continue
        if analysis.kind == "binary" and str(path) not in named:
            skipped.append((str(path), "binary data"))
            continue
        if analysis.kind not in ANALYSED_KINDS:
            skipped.append((str(path), f"{analysis.kind} configs are not analysed yet"))
            continue
        checked += 1
        findings = [f for f in analysis.findings if _keep(f, select, ignore)]
        lines = analysis.document.lines if analysis.document is not None else LineIndex(analysis.text)
        results.append(FileResult(str(path), findings, lines))
    progress.close()
    colour = args.format == "text" and sys.stdout.isatty() and "NO_COLOR" not in os.environ
    sys.stdout.write(REPORTERS[args.format]([r for r in results if r.findings], colour))
    all_findings = [f for result in results for f in result.findings]
    summary_stream = sys.stdout if args.format == "text" else sys.stderr
    if args.statistics:
        for code, count in sorted(Counter(f.code for f in all_findings).items()):
            print(f"{count:5}  {code}  {RULES[code].name}", file=summary_stream)
    if args.verbose:
        for name, reason in skipped:
            print(f"skipped {name}: {reason}", file=sys.stderr)
    if not args.quiet and args.format == "text":
        counts = Counter(f.severity for f in all_findings)
        parts = [f"{counts[s]} {s}{'s' if counts[s] != 1 and s != 'information' else ''}" for s in SEVERITIES if counts[s]]
        print(f"{', '.join(parts) or 'no findings'} in {checked} config{'s' if checked != 1 else ''}"
              f" ({len(skipped)} skipped)", file=sys.stderr)
    threshold = SEVERITY_RANK[args.fail_on]
    return 1 if any(SEVERITY_RANK[f.severity] >= threshold for f in all_findings) else 0
