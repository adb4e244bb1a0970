"""The package's layout (issue 18): few top-level modules, one name per concept, old public paths kept."""

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "zeromem_lsp"


def _definitions() -> dict[str, list[str]]:
    """Top-level class and type-alias names -> the modules defining them."""
    found: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            names = [node.name] if isinstance(node, ast.ClassDef) else [
                target.id for target in getattr(node, "targets", []) if isinstance(target, ast.Name)]
            for name in names:
                found.setdefault(name, []).append(str(path.relative_to(PACKAGE)))
    return found


def test_at_most_twelve_modules_at_the_top():
    modules = [path.name for path in PACKAGE.glob("*.py") if path.name not in ("__init__.py", "__main__.py")]
    assert len(modules) <= 12, modules
    assert {"memory", "lsp", "configs", "rules", "document", "assist", "cli"} <= {
        path.name for path in PACKAGE.iterdir() if (path / "__init__.py").is_file()}


def test_one_name_per_concept():
    defined = _definitions()
    for name in ("Path", "Origin", "Given", "ZeromemSettings", "ParametersFromConfig", "ZeromemSettingsModel"):
        assert len(defined.get(name, [])) == 1, (name, defined.get(name))
    assert "Input" not in defined and "Layers" not in defined  # the peak's inputs are `Given`s


def test_public_paths_still_work():
    from zeromem_lsp import model_state_bytes
    from zeromem_lsp.configs.deepspeed import validate_deepspeed
    from zeromem_lsp.memory.model_state import model_state_bytes as formula

    assert model_state_bytes is formula and model_state_bytes(400, 400, 800, 4)["zero2"] == 700
    assert validate_deepspeed({"train_batch_size": 8}) == []
    for module in ("zeromem_lsp.configs.deepspeed.facts_render",):
        done = subprocess.run([sys.executable, "-m", module], capture_output=True, text=True, timeout=120)
        assert done.stdout.strip() == "facts.py is current", (module, done.stdout, done.stderr)
