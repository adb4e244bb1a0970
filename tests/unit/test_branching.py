"""The memory model branches on data, not on names (issue 27): at most LIMIT tests of which engine, stage, trainer or
model family runs in zeromem_lsp/memory/, counted on the AST beside the import-graph test (the issue's goal: 70; LIMIT
only goes down, as name tests leave for the tables).

A test counted: a comparison (`==`, `!=`, `in`, `not in`, anywhere: in a condition or a value) with a string naming an
engine, a stage or FSDP sharding strategy, a trainer or a model family; and an `isinstance` against an engine spec
(`Torch`, `DeepSpeed`, `Fsdp`). What differs by engine, stage, trainer or family belongs in the tables that describe
them (configs/families.py, the engine specs of memory/step.py, the heads of the trainers).
"""

from __future__ import annotations

import ast
from pathlib import Path

from zeromem_lsp.configs.families import FAMILIES
from zeromem_lsp.configs.settings_values import ENGINES, TRAINERS
from zeromem_lsp.memory.adapters import ENGINES as ADAPTER_ENGINES
from zeromem_lsp.memory.model_state import STAGES

MEMORY = Path(__file__).resolve().parents[2] / "zeromem_lsp" / "memory"
LIMIT = 39
STRATEGIES = {"NO_SHARD", "SHARD_GRAD_OP", "FULL_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"}
NAMES = {*ENGINES, *ADAPTER_ENGINES, *STAGES, *STRATEGIES, *TRAINERS, *FAMILIES, "ddp"}
ENGINE_SPECS = {"Torch", "DeepSpeed", "Fsdp"}


def name_tests(tree: ast.AST) -> list[ast.AST]:
    """The comparisons with a name and the isinstance tests against an engine spec in `tree`."""
    found: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            constants = [c.value for operand in operands for c in ast.walk(operand) if isinstance(c, ast.Constant)]
            if any(isinstance(value, str) and value in NAMES for value in constants):
                found.append(node)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
            if {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)} & ENGINE_SPECS:
                found.append(node)
    return found


def counts() -> dict[str, int]:
    return {path.name: len(name_tests(ast.parse(path.read_text(encoding="utf-8"))))
            for path in sorted(MEMORY.glob("*.py"))}


def test_the_counter_sees_a_name_test_in_every_form():
    source = ('if engine == "deepspeed": pass\nx = stage in ("zero2", "zero3")\ny = "dpo" != trainer\n'
              'z = isinstance(spec, (Torch, Fsdp))\nw = model_type == "llama"\nv = kind == "object"\n')
    assert len(name_tests(ast.parse(source))) == 5


def test_the_memory_model_tests_names_at_most_limit_times():
    found = counts()
    total = sum(found.values())
    assert total <= LIMIT, f"{total} name tests in memory/ (at most {LIMIT}): " + ", ".join(
        f"{name} {count}" for name, count in sorted(found.items(), key=lambda item: -item[1]) if count)


def test_no_family_name_is_tested_outside_the_families_table():
    package = MEMORY.parent
    for path in package.rglob("*.py"):
        if path.name == "families.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare):
                constants = {c.value for operand in (node.left, *node.comparators) for c in ast.walk(operand)
                             if isinstance(c, ast.Constant) and isinstance(c.value, str)}
                assert not constants & set(FAMILIES), (path.name, node.lineno,
                                                        ast.unparse(node))
