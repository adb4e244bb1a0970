"""ZM106's quick fixes, applied and re-analysed: each changes what the message says it changes."""

import json

from zeromem_lsp.analysis import analyse
from zeromem_lsp.findings import apply_edits
from zeromem_lsp.project import file_loader
from tests.cli.test_estimate_peak import GiB, write_config



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


def _shown(tmp_path) -> tuple[int, dict[str, int]]:
    """ZeRO-2's peak and the parts of the phase holding it, as the plan shows them (budget ample)."""
    analysis, _ = _analyse(tmp_path, _config(tmp_path, 10**12))
    found = analysis.plan.peak.stage_peak("zero2")
    parts = dict(found.held.parts)
    assert found.gpu is not None and found.reserved == found.gpu.bytes  # the default reserve: modelled per stage
    assert found.total == sum(parts.values()) + found.reserved
    return found.total, parts


def test_halving_the_micro_batch_keeps_the_global_batch(tmp_path):
    peak, _ = _shown(tmp_path)
    analysis, text = _analyse(tmp_path, _config(tmp_path, peak - 1))
    fixed = json.loads(apply_edits(text, _fix(analysis, "Halve the micro-batch").edits))
    assert fixed["train_micro_batch_size_per_gpu"] == 1 and fixed["gradient_accumulation_steps"] == 2


def test_shrinking_the_buckets_is_the_largest_size_that_fits(tmp_path):
    peak, parts = _shown(tmp_path)
    assert parts["reduce bucket"] == 2 * 500_000_000  # the IPG buffer (stage 2, no overlap_comm): 2 B × the size
    rest = peak - parts["reduce bucket"]
    budget = rest + 3 * 10**8 + 2  # room for one bucket of 2 B × x: x = 1.5e8 + 1
    analysis, text = _analyse(tmp_path, _config(tmp_path, budget))
    fix = _fix(analysis, "Shrink reduce_bucket_size and allgather_bucket_size")
    fixed = json.loads(apply_edits(text, fix.edits))
    expected = (budget - rest) // 2
    assert fixed["zero_optimization"]["reduce_bucket_size"] == expected == fixed["zero_optimization"]["allgather_bucket_size"]
    again = analyse(json.dumps(fixed), "ds_config.json", loader=file_loader(tmp_path / "ds_config.json"))
    assert not [f for f in again.findings if f.code == "ZM106"]
    assert again.plan.peak.at("zero2") == rest + 2 * expected <= budget


def test_checkpointing_fix_declares_it(tmp_path):
    analysis, text = _analyse(tmp_path, _config(tmp_path, 2 * 10**9))
    fixed = json.loads(apply_edits(text, _fix(analysis, "Declare gradient checkpointing").edits))
    assert fixed["zeromem"]["gradient_checkpointing"] is True
    again = analyse(json.dumps(fixed), "ds_config.json", loader=file_loader(tmp_path / "ds_config.json"))
    assert again.plan.peak.activations.checkpointing is True
    assert again.plan.peak.activations.total < analysis.plan.peak.activations.total
