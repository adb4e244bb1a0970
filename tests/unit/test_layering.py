"""The package's shape: rule identity lives in rules/, findings are made by Rules, kinds map to rules."""

import ast
import re
from pathlib import Path

from zeromem_lsp.rules.kinds import KIND_RULES
from zeromem_lsp.rules.registry import RULES

PACKAGE = Path(__file__).resolve().parents[2] / "zeromem_lsp"
CODE = re.compile(r"ZM\d")


def _modules():
    return sorted(PACKAGE.rglob("*.py"))


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def code_literals(path: Path) -> list[str]:
    """String literals in `path` that name a rule code ("ZM104", "ZM1…"); docstrings are prose."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = _docstrings(tree)
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
            and CODE.match(node.value.strip())]


def test_the_literal_scan_sees_codes():
    rules_registry = PACKAGE / "rules" / "registry.py"
    assert len(code_literals(rules_registry)) == len(RULES)


def test_no_rule_code_literal_outside_rules():
    offenders = {str(path.relative_to(PACKAGE)): found for path in _modules()
                 if path.parent.name != "rules" and (found := code_literals(path))}
    assert offenders == {}


def test_findings_are_made_only_by_rules():
    makers = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "Finding":
                makers.append(str(path.relative_to(PACKAGE)))
    assert makers == ["rules/registry.py"]


def _reported_kinds(path: Path, maker: str) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.args[0].value for node in ast.walk(tree)
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == maker
            and node.args and isinstance(node.args[0], ast.Constant)}


def test_every_reported_kind_has_a_rule_in_its_namespace():
    configs = PACKAGE / "configs"
    reported = {f"fsdp.{k}" for k in _reported_kinds(configs / "fsdp.py", "_issue")}
    reported |= {f"accelerate.{k}" for k in _reported_kinds(configs / "accelerate.py", "_issue")}
    for path in (configs / "deepspeed").glob("*.py"):
        reported |= {f"deepspeed.{k}" for k in _reported_kinds(path, "issue")}
    assert len(reported) > 20
    assert reported - set(KIND_RULES) == set()


def test_same_kind_name_in_two_readers_may_be_two_rules():
    assert KIND_RULES["deepspeed.unknown_key"].code != KIND_RULES["accelerate.unknown_key"].code
    assert KIND_RULES["deepspeed.invalid_value"].code != KIND_RULES["fsdp.invalid_value"].code


def test_issue_severity_is_its_rules_severity():
    from zeromem_lsp.configs.deepspeed.validation import validate_deepspeed

    issues = validate_deepspeed({"train_batch_size": 8, "zero_optimization": {"stage": 9, "cpu_offload": True}})
    assert issues
    for issue in issues:
        assert issue.severity == KIND_RULES[issue.key].severity


def test_every_config_kind_has_one_reader_and_outcomes_are_not_kinds():
    from zeromem_lsp.analysis import analyse
    from zeromem_lsp.configs.detect import KINDS
    from zeromem_lsp.readers import READERS

    assert set(READERS) == set(KINDS)
    refused = analyse("[" * 10 + " " * (16 * 2**20))
    assert refused.kind is None and refused.refused == "oversized" and refused.reported
    assert [f.code for f in refused.findings] == ["ZM002"]
    assert not analyse('{"name": "x"}').reported


def test_rules_pass_rule_objects_not_codes_to_context_finding():
    offenders = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and getattr(node.func, "attr", None) in ("finding", "at") and node.args
                    and isinstance(node.args[0], ast.Constant) and CODE.match(str(node.args[0].value))):
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert offenders == []
