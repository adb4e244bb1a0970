import re
from pathlib import Path

from zeromem_lsp.findings import SEVERITIES
from zeromem_lsp.rules.docs import rules_markdown
from zeromem_lsp.rules.registry import RULES

ROOT = Path(__file__).resolve().parents[2]


def test_every_rule_is_documented_in_full():
    for code, rule in RULES.items():
        assert re.fullmatch(r"ZM\d{3}", code) and rule.code == code
        assert rule.severity in SEVERITIES
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", rule.name)
        for section in (rule.summary, rule.rationale, rule.example, rule.fix):
            assert section.strip(), f"{code} has an empty section"


def test_rule_names_are_unique():
    names = [rule.name for rule in RULES.values()]
    assert len(names) == len(set(names))


def test_docs_rules_md_is_generated_from_the_registry():
    committed = (ROOT / "docs" / "rules.md").read_text(encoding="utf-8")
    assert committed == rules_markdown(), "docs/rules.md is stale: run `zeromem rules --markdown > docs/rules.md`"


def test_every_rule_has_an_end_to_end_case():
    tested = "".join(path.read_text() for path in (ROOT / "tests" / "cli").glob("test_*.py"))
    missing = [code for code in RULES if f'"{code}"' not in tested]
    assert missing == []


def test_overlapping_edits_cannot_form_one_fix():
    from zeromem_lsp.findings import TextEdit, overlapping

    assert not overlapping([TextEdit(0, 2, "a"), TextEdit(2, 4, "b")])
    assert overlapping([TextEdit(0, 3, "a"), TextEdit(2, 4, "b")])
    assert overlapping([TextEdit(5, 5, "x"), TextEdit(5, 5, "y")])  # two insertions at one offset
    assert overlapping([TextEdit(5, 5, "x"), TextEdit(5, 8, "y")])  # insertion where a replacement starts
