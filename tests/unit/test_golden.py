"""Issue 27's golden files: what zeromem said before the step model's redesign, held byte for byte.

tests/data/golden/*.json were written by `python benchmarks/golden/record.py` (benchmarks/golden/collect.py): every
recorded measurement case's whole step (moments and parts), `zeromem estimate` JSON / text / `-v` for the LoRA
measurements and a set of command lines, `zeromem check` and `estimate --config` on every recipe of the corpus and
the examples, and the hover of every top-level key with the memory report. A change of output is either a fix,
re-recorded with the reason in its commit, or a regression this test names.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import pytest

from benchmarks.golden.collect import collect

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"


@pytest.fixture(scope="module")
def found(tmp_path_factory) -> dict[str, str]:
    return collect(tmp_path_factory.mktemp("golden"))


def placed(value):
    """The value as the comparison sees it: a text that names the checkout or a temporary folder (`<root>`, `<tmp>`)
    was wrapped by the CLI before the path was replaced, so its line breaks follow that path's length on the machine
    that ran it; such texts are compared without their whitespace, every other text byte for byte."""
    if isinstance(value, str):
        return "".join(value.split()) if "<root>" in value or "<tmp>" in value else value
    if isinstance(value, dict):
        return {key: placed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [placed(item) for item in value]
    return value


@pytest.mark.parametrize("name", ["steps.json", "cli.json", "hover.json"])
def test_the_output_is_what_was_recorded(found, name):
    recorded = placed(json.loads((GOLDEN / name).read_text(encoding="utf-8")))
    now = placed(json.loads(found[name]))
    changed = sorted(key for key in recorded.keys() | now.keys() if recorded.get(key) != now.get(key))
    if changed:
        first = changed[0]
        diff = "\n".join(difflib.unified_diff(json.dumps(recorded.get(first), indent=1).splitlines(),
                                              json.dumps(now.get(first), indent=1).splitlines(), lineterm="", n=2))
        pytest.fail(f"{len(changed)} of {len(recorded)} entries changed: {changed[:8]}\n{first}:\n{diff[:4000]}")
    assert list(json.loads(found[name])) == list(json.loads((GOLDEN / name).read_text(encoding="utf-8")))
