"""The memory model stays small: zeromem_lsp/memory/ at most LIMIT lines (`wc -l zeromem_lsp/memory/*.py`), beside
the branching test. Issue 27's goal was 4,800 lines, now reached; LIMIT holds what has been reached: lower it as duplication, dead
code and name branches leave memory/; a new mechanism of the model may raise it, within GOAL, by the lines it needs
(its commit says which). Never meet it by cramming: the lines stay within the project's style."""

from __future__ import annotations

from pathlib import Path

MEMORY = Path(__file__).resolve().parents[2] / "zeromem_lsp" / "memory"
GOAL = 4800
LIMIT = 4686


def lines() -> dict[str, int]:
    return {path.name: len(path.read_text(encoding="utf-8").splitlines()) for path in sorted(MEMORY.glob("*.py"))}


def test_the_memory_model_stays_within_its_line_limit():
    found = lines()
    total = sum(found.values())
    assert total <= LIMIT, f"{total} lines in memory/ (at most {LIMIT}, goal {GOAL}): " + ", ".join(
        f"{name} {count}" for name, count in sorted(found.items(), key=lambda item: -item[1]))


def test_the_goal_stays_reached():
    assert LIMIT <= GOAL
