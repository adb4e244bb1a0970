"""ZM106's quick fixes, applied and re-analysed: each changes what the message says it changes."""

import json
import math

from zeromem_lsp.analysis import analyse
from zeromem_lsp.findings import apply_edits
from zeromem_lsp.project import file_loader
from tests.cli.test_estimate_peak import CASES, GiB, llama0_parameters, write_config

MEASURED = CASES["llama-0"]["saved_bytes"]["2"]
LOGITS_COPY = 4 * 2 * 64 * 1000


def _analyse(tmp_path, config: dict):
    path = tmp_path / "ds_config.json"
    text = json.dumps(config, indent=1)
    return analyse(text, path.name, loader=file_loader(path)), text


def _config(tmp_path, budget: int) -> dict:
    return {"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
            "zero_optimization": {"stage": 2, "reduce_bucket_size": 500_000_000, "allgather_bucket_size": 500_000_000},
            "zeromem": {"parameters": {"from_config": str(write_config(tmp_path, "llama-0"))}, "world_size": 8,
                        "sequence_length": 64, "gpu_memory": budget}}


def _fix(analysis, title_start: str):
    [finding] = [f for f in analysis.findings if f.code == "ZM106"]
    return next(fix for fix in finding.fixes if fix.title.startswith(title_start))


def test_halving_the_micro_batch_keeps_the_global_batch(tmp_path):
    n = llama0_parameters()
    state = 2 * n + math.ceil(14 * n / 8)
    analysis, text = _analyse(tmp_path, _config(tmp_path, state + 2 * 10**9 + MEASURED + LOGITS_COPY + GiB - 1))
    fixed = json.loads(apply_edits(text, _fix(analysis, "Halve the micro-batch").edits))
    assert fixed["train_micro_batch_size_per_gpu"] == 1 and fixed["gradient_accumulation_steps"] == 2


def test_shrinking_the_buckets_is_the_largest_size_that_fits(tmp_path):
    n = llama0_parameters()
    rest = 2 * n + math.ceil(14 * n / 8) + MEASURED + LOGITS_COPY + GiB
    budget = rest + 3 * 10**8 + 2  # room for 3e8 + 2 bytes of buckets: two buckets of 2 B × x each
    analysis, text = _analyse(tmp_path, _config(tmp_path, budget))
    fix = _fix(analysis, "Shrink reduce_bucket_size and allgather_bucket_size")
    fixed = json.loads(apply_edits(text, fix.edits))
    expected = (budget - rest) // 4
    assert fixed["zero_optimization"]["reduce_bucket_size"] == expected == fixed["zero_optimization"]["allgather_bucket_size"]
    again = analyse(json.dumps(fixed), "ds_config.json", loader=file_loader(tmp_path / "ds_config.json"))
    assert not [f for f in again.findings if f.code == "ZM106"]
    assert again.plan.peak.at("zero2") == rest + 4 * expected <= budget


def test_checkpointing_fix_declares_it(tmp_path):
    analysis, text = _analyse(tmp_path, _config(tmp_path, 2 * 10**9))
    fixed = json.loads(apply_edits(text, _fix(analysis, "Declare gradient checkpointing").edits))
    assert fixed["zeromem"]["gradient_checkpointing"] is True
    again = analyse(json.dumps(fixed), "ds_config.json", loader=file_loader(tmp_path / "ds_config.json"))
    assert again.plan.peak.activations.checkpointing is True
    assert again.plan.peak.activations.total < analysis.plan.peak.activations.total
