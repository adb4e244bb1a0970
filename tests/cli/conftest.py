import json
import subprocess
import sys
from pathlib import Path

import pytest


def run_zeromem(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
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
