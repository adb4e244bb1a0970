"""axolotl's refusals about context parallelism (validation.py `check_context_parallel_size`): errors at the key."""

from __future__ import annotations

import json

import yaml

from zeromem_lsp.analysis import analyse

BASE = {"base_model": "meta-llama/Llama-3.1-8B", "micro_batch_size": 1, "sequence_len": 65536,
        "context_parallel_size": 4, "attn_implementation": "flash_attention_2", "sample_packing": True}


def refused(**changes: object) -> list[tuple[str, str]]:
    data = {**BASE, **changes}
    text = yaml.safe_dump({key: value for key, value in data.items() if value is not None}, sort_keys=False)
    analysis = analyse(text, "recipe.yml")
    marks = ("needs flash attention", "micro_batch_size 1", "GRPO with Liger")
    return [(f.message, text[f.start:f.end]) for f in analysis.findings
            if f.severity == "error" and any(mark in f.message for mark in marks)]


def test_a_ring_attention_recipe_that_runs_gets_no_error():
    assert refused() == []
    assert refused(attn_implementation=None, flash_attention=True) == []  # the legacy flag names FA2
    assert refused(context_parallel_size=1, attn_implementation="sdpa", micro_batch_size=4) == []


def test_context_parallelism_needs_flash_attention():
    [(message, at)] = refused(attn_implementation="sdpa")
    assert "needs flash attention" in message and at == "4"


def test_the_deprecated_name_is_read_too():
    [(message, _)] = refused(context_parallel_size=None, sequence_parallel_degree=2, attn_implementation="sdpa")
    assert message.startswith("sequence_parallel_degree 2 needs flash attention")


def test_packing_needs_micro_batch_one():
    [(message, at)] = refused(micro_batch_size=2)
    assert "micro_batch_size 1" in message and at == "2"


def test_grpo_with_liger_loss():
    found = refused(rl="grpo", trl={"use_liger_loss": True})
    assert any("GRPO with Liger" in message for message, _ in found)


def test_through_zeromem_check(tmp_path):
    """The real entry point: an error (exit 1, ZM104 at the key) for ring attention without flash attention; none
    for the recipe as axolotl runs it."""
    from tests.cli.conftest import run_zeromem

    recipe = tmp_path / "recipe.yml"
    for attention, status in (("sdpa", 1), ("flash_attention_2", 0)):
        recipe.write_text(yaml.safe_dump({**BASE, "attn_implementation": attention}, sort_keys=False))
        done = run_zeromem("check", "--format", "json", str(recipe))
        found = [f for f in json.loads(done.stdout)["findings"] if "needs flash attention" in f["message"]]
        assert done.returncode == status and len(found) == (status == 1)
        assert all(f["code"] == "ZM104" and f["severity"] == "error" for f in found)
