"""What Accelerate 1.16 refuses in a `parallelism_config` (accelerate/parallelism_config.py `__post_init__` and
`_validate_accelerator`): each an error at the key that causes it (ZM308), none for a layout that runs."""

from __future__ import annotations

import pytest
import yaml

from zeromem_lsp.analysis import analyse

BASE = {"compute_environment": "LOCAL_MACHINE", "distributed_type": "FSDP", "num_processes": 8,
        "fsdp_config": {"fsdp_version": 2, "fsdp_reshard_after_forward": True}}


def findings(parallel: dict, **top: object) -> list:
    text = yaml.safe_dump({**BASE, **top, "parallelism_config": parallel}, sort_keys=False)
    analysis = analyse(text, "accelerate.yaml")
    return [(f.code, f.message, text[f.start:f.end]) for f in analysis.findings if f.code == "ZM308"]


def sizes(**named: object) -> dict:
    return {f"parallelism_config_{name}": value for name, value in named.items()}


@pytest.mark.parametrize("parallel", [
    sizes(dp_shard_size=4, tp_size=2),
    sizes(dp_shard_size=2, cp_size=4, cp_backend="torch"),
    sizes(dp_replicate_size=2, dp_shard_size=2, tp_size=2),
    {"dp_shard_size": 8},  # Accelerate's own names without the prefix
])
def test_a_layout_that_runs_gets_no_error(parallel):
    assert findings(parallel) == []


def test_context_and_sequence_parallelism_exclude_each_other():
    found = findings(sizes(dp_shard_size=2, cp_size=2, sp_size=2))  # also: sp_size needs DEEPSPEED, not FSDP
    [(code, message, at)] = [item for item in found if "exclude each other" in item[1]]
    assert at == "2"  # sp_size's value


def test_context_parallelism_over_replication_alone():
    found = findings(sizes(dp_replicate_size=4, cp_size=2))
    assert any("sharded data parallelism" in message and at == "2" for _, message, at in found)  # cp_size's value


def test_the_sizes_multiply_to_num_processes():
    [(_, message, at)] = findings(sizes(dp_shard_size=4, tp_size=4))
    assert "= 16, but num_processes is 8" in message and at == "parallelism_config"


def test_deepspeed_sequence_parallelism_is_not_held_to_num_processes():
    assert findings(sizes(sp_size=4, sp_backend="deepspeed"), distributed_type="DEEPSPEED",
                    deepspeed_config={"zero_stage": 3}) == []


def test_fsdp2_needs_a_dimension_to_shard_over():
    [(_, message, _at)] = findings(sizes(tp_size=8))
    assert "no dimension to shard over" in message


@pytest.mark.parametrize("value", [0, "2", 2.0, True])
def test_a_size_is_a_yaml_integer_of_at_least_one(value):
    [(_, message, at)] = findings(sizes(dp_shard_size=8, tp_size=value))
    assert "tp_size must be an integer of at least 1" in message and at == yaml.safe_dump(value).split("\n")[0]


def test_an_unknown_backend():
    [(_, message, _at)] = findings(sizes(dp_shard_size=4, cp_size=2, cp_backend="ring"))
    assert "cp_backend must be 'torch'" in message


def test_through_zeromem_check(tmp_path):
    """The real entry point: ZM308 and exit 1 for sizes that do not multiply to num_processes; none when they do."""
    import json

    from tests.cli.conftest import run_zeromem

    config = tmp_path / "accelerate.yaml"
    for tp, status in ((4, 1), (2, 0)):
        parallel = sizes(dp_shard_size=4, tp_size=tp)
        config.write_text(yaml.safe_dump({**BASE, "parallelism_config": parallel}, sort_keys=False))
        done = run_zeromem("check", "--format", "json", str(config))
        codes = [f["code"] for f in json.loads(done.stdout)["findings"] if f["severity"] == "error"]
        assert done.returncode == status and codes == (["ZM308"] if status else [])
