"""`zeromem check PATH...`: analyse config files and report findings; exit 1 on any error."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from zeromem_lsp.analysis import analyse
from zeromem_lsp.cli import UsageError
from zeromem_lsp.cli.reporters import REPORTERS, FileResult
from zeromem_lsp.document import LineIndex

SKIPPED_DIRECTORIES = {".git", ".hg", ".venv", "venv", "node_modules", "__pycache__", ".tox", ".mypy_cache"}
CONFIG_SUFFIXES = (".json", ".jsonc", ".hjson")


def register(commands) -> None:
    parser = commands.add_parser("check", help="lint training configs (exit 1 on errors)",
                                 description="Lint DeepSpeed training configs: validity and memory per GPU.")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="config files or directories (searched recursively)")
    parser.add_argument("--format", choices=sorted(REPORTERS), default="text")
    parser.set_defaults(run=run)


def discover(paths: list[str]) -> list[Path]:
    files: list[Path] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            for folder, directories, names in os.walk(path):
                directories[:] = sorted(d for d in directories if d not in SKIPPED_DIRECTORIES)
                files += [Path(folder, n) for n in sorted(names) if n.endswith(CONFIG_SUFFIXES)]
        elif path.exists():
            files.append(path)
        else:
            raise UsageError(f"{name}: no such file or directory")
    return files


def read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise UsageError(f"{path}: cannot read: {error.strerror or error}") from None
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", errors="replace")
    return data.decode("utf-8", errors="replace")


def run(args) -> int:
    results = []
    for path in discover(args.paths):
        text = read_text(path)
        analysis = analyse(text, path.name)
        results.append(FileResult(str(path), analysis.findings, LineIndex(text)))
    sys.stdout.write(REPORTERS[args.format](results))
    has_error = any(f.severity == "error" for result in results for f in result.findings)
    return 1 if has_error else 0
