"""`zeromem` for the CLI tests: in-process through `cli.main` (what the console script calls), or, for
the smoke tests of the real entry point, as a subprocess."""

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from zeromem_lsp.cli import main


def run_zeromem(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`zeromem ARGS` in this process: exit status, stdout and stderr as a subprocess would give them.

    An exception escaping `main` is a traceback the user would see: it fails the test."""
    stdout, stderr = io.StringIO(), io.StringIO()
    previous = Path.cwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                status = main(list(args))
            except SystemExit as leaving:  # --version, --help
                status = leaving.code if isinstance(leaving.code, int) else 0
    finally:
        os.chdir(previous)
    return subprocess.CompletedProcess(["zeromem", *args], status, stdout.getvalue(), stderr.getvalue())


def run_zeromem_subprocess(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`python -m zeromem_lsp ARGS` as a child process: the real entry point, for smoke tests."""
    return subprocess.run([sys.executable, "-m", "zeromem_lsp", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


@pytest.fixture
def check_json(tmp_path):
    """Write text to a file, run `zeromem check --format json` on it, return (findings, text, status)."""

    def check(text: str, name: str = "ds_config.json", *extra: str):
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        done = run_zeromem("check", "--format", "json", *extra, str(path))
        assert done.returncode in (0, 1), done.stderr
        assert "Traceback" not in done.stderr
        return json.loads(done.stdout)["findings"], text, done.returncode

    return check


def text_at(text: str, lsp_range: dict) -> str:
    """The substring an LSP range (UTF-16 characters) covers."""
    lines = text.splitlines(keepends=True)

    def offset(position):
        line = lines[position["line"]] if position["line"] < len(lines) else ""
        units = line.encode("utf-16-le")[: 2 * position["character"]].decode("utf-16-le")
        return sum(len(l) for l in lines[: position["line"]]) + len(units)

    return text[offset(lsp_range["start"]) : offset(lsp_range["end"])]


def shown_peak(found: dict) -> int:
    """A stage's peak rebuilt from what `--format json` shows of it (`phases[stage]`): the phase holding the
    peak is the largest of the three, its parts sum to it, and the reserve stands beside it."""
    held = found["phases"][found["peak_phase"]]
    assert held == max(found["phases"].values()) == sum(found["parts"].values())
    return held + found["reserved_bytes"]
