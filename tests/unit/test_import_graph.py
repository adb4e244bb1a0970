"""No import cycles in the package, counting imports made inside functions, and the layer rules."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "zeromem_lsp"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports anywhere in its body (module level or in a function)."""
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in paths}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in paths else base for alias in node.names]
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module":
                argument = node.args[0] if node.args else None
                if isinstance(argument, ast.JoinedStr) and isinstance(argument.values[0], ast.Constant):
                    prefix = argument.values[0].value
                    targets = [module for module in paths if module.startswith(prefix)]
            for target in targets:
                while target and target not in paths:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_function_level_and_relative_imports():
    graph = import_graph()
    assert "zeromem_lsp.configs.deepspeed.issue" in graph["zeromem_lsp.configs.deepspeed.validation"]  # from .x import
    assert {"zeromem_lsp.cli.check", "zeromem_lsp.cli.estimate"} <= graph["zeromem_lsp.cli"]  # importlib / in-function


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_the_linter_core_and_the_analysis_import_nothing_from_cli_or_the_server():
    graph = import_graph()
    front_ends = {"zeromem_lsp.lsp.server", "zeromem_lsp.lsp.convert"}
    for module, imported in graph.items():
        if module.startswith(("zeromem_lsp.cli", "zeromem_lsp.lsp.server", "zeromem_lsp.__main__")):
            continue
        assert not {name for name in imported if name.startswith("zeromem_lsp.cli")}, module
        if not module.startswith("zeromem_lsp.assist"):
            assert not imported & front_ends, module


def test_the_linter_core_returns_a_result_and_prints_nothing(tmp_path, capsys):
    from zeromem_lsp.lint import LintInputError, lint

    (tmp_path / "ds_config.json").write_text('{"zero_optimization": {"stage": 7}, "train_batch_size": 8}')
    (tmp_path / "package.json").write_text('{"name": "x"}')
    result = lint([str(tmp_path)])
    assert capsys.readouterr() == ("", "")
    assert result.checked == 1
    assert result.skipped == [(str(tmp_path / "package.json"), "not a training config")]
    assert [f.code for f in result.findings] == ["ZM202"]
    assert result.counts(lambda f: f.severity) == {"error": 1}
    try:
        lint([str(tmp_path / "missing")])
    except LintInputError as error:
        assert "no such file or directory" in str(error)
    else:
        raise AssertionError("a missing path must be an input error")


def documented_layers() -> dict[str, int]:
    """docs/architecture.md's layer table: module or package (trailing /) -> layer number."""
    import re

    text = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    layers = {}
    for number, cells in re.findall(r"^\| (\d+) [^|]*\| (.*) \|$", text, re.MULTILINE):
        for entry in re.findall(r"`([^`]+)`", cells):
            name = entry.rstrip("/").replace("/", ".")
            name = "zeromem_lsp" if name == "zeromem_lsp" else f"zeromem_lsp.{name}"
            layers[name] = int(number)
    return layers


def layer_of(module: str, layers: dict[str, int]) -> int | None:
    """The layer of a module, or of the nearest package listed with a trailing / (never the root's)."""
    if module in layers:
        return layers[module]
    package = module.rpartition(".")[0]
    while package != "zeromem_lsp" and package:
        if package in layers:
            return layers[package]
        package = package.rpartition(".")[0]
    return None


def test_layer_lookup_does_not_fall_back_to_the_root():
    layers = {"zeromem_lsp": 0, "zeromem_lsp.cli": 8}
    assert layer_of("zeromem_lsp.cli.check", layers) == 8
    assert layer_of("zeromem_lsp.readers", layers) is None


def test_every_module_has_a_documented_layer_and_imports_only_downwards():
    layers = documented_layers()
    assert len(layers) > 20
    graph = import_graph()
    undocumented = [module for module in graph if layer_of(module, layers) is None]
    assert undocumented == []
    upward = [(module, target) for module, imported in graph.items() for target in imported
              if layer_of(target, layers) > layer_of(module, layers)]
    assert upward == []
