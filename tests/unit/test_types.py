"""The type checker as a CI step (issue 27): mypy passes on the package, and few `# type: ignore`s remain.

mypy's settings are pyproject.toml's [tool.mypy]: the package overall, zeromem_lsp/memory/ strictly.
"""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "zeromem_lsp"
MAX_IGNORES = 10
_ERROR = re.compile(r"^(?P<path>[^:\n]+):\d+: error: .*?(?:\[(?P<code>[a-z-]+)\])?$", re.MULTILINE)
# An ignore names its error codes and says why in a comment after it: `# type: ignore[code]  # why`.
_IGNORE = re.compile(r"#\s*type:\s*ignore\b(?P<rest>.*)$")
_EXPLAINED = re.compile(r"^\[[a-z-]+(?:\s*,\s*[a-z-]+)*\]\s*#\s*\S")


def _summary(output: str) -> str:
    """How many errors outside and inside memory/, by file, for the failure message."""
    by_file: dict[str, int] = {}
    for match in _ERROR.finditer(output):
        by_file[match["path"]] = by_file.get(match["path"], 0) + 1
    memory = sum(n for path, n in by_file.items() if "zeromem_lsp/memory/" in path)
    outside = sum(by_file.values()) - memory
    files = "\n".join(f"  {n:4d} {path}" for path, n in sorted(by_file.items(), key=lambda item: -item[1]))
    return f"{outside} errors outside zeromem_lsp/memory/, {memory} inside\n{files}"


def test_mypy_passes_on_the_package():
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (pip install -e '.[test]')")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "--hide-error-context", "--no-pretty",
         "--config-file", str(ROOT / "pyproject.toml")],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    errors = "\n".join(line for line in result.stdout.splitlines() if ": error: " in line)
    assert result.returncode == 0, f"mypy exit {result.returncode}: {_summary(errors)}\n{errors}\n{result.stderr}"


def test_type_ignores_are_few_and_each_says_why():
    ignores = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if match := _IGNORE.search(line):
                ignores.append((f"{path.relative_to(ROOT)}:{number}", match["rest"].strip()))
    unexplained = [where for where, rest in ignores if not _EXPLAINED.match(rest)]
    assert not unexplained, "each `# type: ignore[code]` needs `  # why` after it:\n" + "\n".join(unexplained)
    assert len(ignores) <= MAX_IGNORES, f"{len(ignores)} `# type: ignore`s (at most {MAX_IGNORES}):\n" + "\n".join(
        where for where, _ in ignores)


def test_the_settings_literals_spell_the_memory_models_tuples():
    """settings_model.py spells memory/precision.py's tuples as Literal types (mypy reads no Literal[tuple])."""
    from typing import get_args

    from zeromem_lsp.configs.settings_model import Optimizer, Precision
    from zeromem_lsp.memory.precision import OPTIMIZERS, PRECISIONS

    assert get_args(Precision) == PRECISIONS
    assert get_args(Optimizer) == OPTIMIZERS


def test_the_settings_type_declarations_name_every_setting_once():
    """ZeromemSettings' declarations for mypy (under TYPE_CHECKING) are a copy of the slots: held to SETTING_NAMES and to
    the pydantic model's fields, so neither can gain a setting the other lacks."""
    import ast

    from zeromem_lsp.configs.settings import SETTING_NAMES
    from zeromem_lsp.configs.settings_model import ZeromemSettingsModel

    tree = ast.parse((PACKAGE / "configs" / "settings.py").read_text(encoding="utf-8"))
    [settings] = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "ZeromemSettings"]
    [block] = [node for node in settings.body if isinstance(node, ast.If)]
    declared = [node.target.id for node in block.body if isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)]
    assert declared == list(SETTING_NAMES)
    assert set(declared) == set(ZeromemSettingsModel.model_fields)
