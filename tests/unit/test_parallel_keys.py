"""Issue 30's readers: the N-D degrees and long-context keys each tool reads, resolved to one `Parallelism` with the
key each value came from; the settings and flags of the same names over them; ZM109 and Accelerate's refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from zeromem_lsp.analysis import analyse
from zeromem_lsp.configs.layers import command_line, resolve
from zeromem_lsp.configs.parallel_checks import degree_problems
from zeromem_lsp.configs.parallel_keys import (accelerate_parallel, axolotl_parallel, deepspeed_parallel,
                                               llamafactory_parallel, trl_parallel)
from zeromem_lsp.configs.parallelism import Parallelism, parallelism_of
from zeromem_lsp.configs.settings import ZeromemSettings
from zeromem_lsp.configs.model_config import model_shape_from_text
from zeromem_lsp.provenance import Given
from zeromem_lsp.resolved.peak_inputs import resolve_parallel

RECIPES = Path(__file__).resolve().parents[1] / "data" / "recipes"


def recipe(path: str) -> dict:
    return yaml.safe_load((RECIPES / path).read_text(encoding="utf-8"))


def test_axolotl_alst_example():
    found = axolotl_parallel(recipe("axolotl/examples/alst/llama3-8b-deepspeed-alst.yaml"))
    # sequence_len 500_000 over context_parallel_size 8: 62,500 tokens a rank, ceil(62,500 / 32768) = 2 tiles
    assert parallelism_of(found) == Parallelism(context=8, activation_offload="cpu", tiled_mlp_shards=2)
    assert found["context"].path == ("context_parallel_size",) and found["tiled_mlp_shards"].path == ("tiled_mlp",)


def test_axolotl_tp_cp_and_expert_examples():
    tp_cp = axolotl_parallel(recipe("axolotl/examples/distributed-parallel/qwen3-8b-fsdp-tp-cp.yaml"))
    assert parallelism_of(tp_cp) == Parallelism(tensor=2, context=2)
    expert = axolotl_parallel(recipe("axolotl/examples/expert_parallel/qwen3_30ba3b_ep_lora_4gpu.yaml"))
    assert parallelism_of(expert) == Parallelism(expert=4) and expert["expert"].note == "expert_parallel_size"


@pytest.mark.parametrize("written, offload", [
    ({"activation_offloading": True}, "cpu_all"), ({"activation_offloading": "disk"}, "cpu_all"),
    ({"activation_offloading": "legacy"}, "cpu"), ({"activation_offloading": "hidden_states"}, "cpu"),
    ({"activation_offloading": False}, "none"),
    ({"gradient_checkpointing": "offload"}, "cpu_all"),
    ({"gradient_checkpointing": "offload_disk", "activation_offloading": "legacy"}, "cpu_all"),  # validation.py
])
def test_axolotl_activation_offloading(written, offload):
    assert parallelism_of(axolotl_parallel(written)).activation_offload == offload


def test_axolotl_deprecated_sequence_parallel_degree_and_shards():
    found = axolotl_parallel({"sequence_parallel_degree": 4, "tiled_mlp": True, "tiled_mlp_num_shards": 6})
    assert parallelism_of(found) == Parallelism(context=4, tiled_mlp_shards=6)
    assert "deprecated" in found["context"].note
    assert axolotl_parallel({"tiled_mlp_num_shards": 6}) == {}  # the shard count alone tiles nothing
    assert parallelism_of(axolotl_parallel({"tiled_mlp": True, "sequence_len": 32769})).tiled_mlp_shards == 2


def test_accelerate_reads_prefixed_sizes_only():
    config = recipe("accelerate/examples/torch_native_parallelism/configs/tp_hsdp.yaml")
    found = accelerate_parallel(config["parallelism_config"])
    assert parallelism_of(found) == Parallelism(tensor=2)
    assert found["tensor"].path == ("parallelism_config", "parallelism_config_tp_size")
    assert accelerate_parallel({"cp_size": 4, "parallelism_config_sp_size": 2}) == {
        "ulysses": Given(2, "parallelism_config.parallelism_config_sp_size",
                         ("parallelism_config", "parallelism_config_sp_size"))}


def test_trl_llamafactory_and_deepspeed():
    assert parallelism_of(trl_parallel({"activation_offloading": True})).activation_offload == "cpu_all"
    assert parallelism_of(llamafactory_parallel({"use_unsloth_gc": True, "cp_size": 2})) == Parallelism(
        ulysses=2, activation_offload="cpu")
    assert llamafactory_parallel({"cp_size": 2, "cp_mode": "ring"}) == {}
    config = {"tensor_parallel": {"autotp_size": 4}, "sequence_parallel_size": 2,
              "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 8}}
    found = deepspeed_parallel(config, ())
    assert parallelism_of(found) == Parallelism(tensor=4, ulysses=2, hpz_partition=8)
    assert found["tensor"].path == ("tensor_parallel", "autotp_size")
    assert deepspeed_parallel(config, None, "ds.json")["ulysses"].path is None  # another file: no position here
    assert deepspeed_parallel({"tensor_parallel": {"autotp_size": 0}}, ()) == {}  # 0 = AutoTP off


def _resolved(**settings: object):
    return resolve((command_line(ZeromemSettings.from_checked(settings)),))


def test_a_flag_wins_over_the_config_and_says_what_it_overrides():
    written = {"tensor": Given(2, "tensor_parallel_size", ("tensor_parallel_size",))}
    found = resolve_parallel(written, _resolved(tensor_parallel=4, tiled_mlp=True), 65536)
    assert parallelism_of(found) == Parallelism(tensor=4, tiled_mlp_shards=2)
    assert "overrides tensor_parallel_size" in found["tensor"].note
    assert parallelism_of(resolve_parallel({}, _resolved(tiled_mlp=5, ulysses=2), 4096)) == Parallelism(
        ulysses=2, tiled_mlp_shards=5)


SHAPE = model_shape_from_text('{"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 2, '
                              '"num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, '
                              '"vocab_size": 128256}')


def test_degree_problems():
    context = Given(3, "context_parallel_size", ("context_parallel_size",))
    [problem] = degree_problems({"context": context}, {}, 8, None, None)
    assert problem.at is context and "does not divide the world size 8" in problem.message
    assert degree_problems({"context": Given(2, "context_parallel_size")}, {}, 8, None, None) == []
    shard = {"dp_shard_size": Given(2, "dp_shard_size"), "dp_replicate_size": Given(1, "dp_replicate_size")}
    assert degree_problems({"tensor": Given(2, "t"), "context": Given(2, "c")}, shard, 8, None, None) == []
    assert degree_problems({"tensor": Given(2, "t")}, shard, 8, None, None)[0].at is shard["dp_shard_size"]
    torch_cp = {"context": Given(4, "parallelism_config.parallelism_config_cp_size")}
    assert "multiple of 8" in degree_problems(torch_cp, {}, None, Given(4100, "sequence_len"), None)[0].message
    assert degree_problems(torch_cp, {}, None, Given(4096, "sequence_len"), None) == []
    assert degree_problems({"context": Given(4, "context_parallel_size")}, {}, None, Given(4100, "s"), None) == []
    assert degree_problems({"ulysses": Given(16, "u")}, {}, None, None, SHAPE) == []  # 16 % 8 kv heads
    assert "kv heads" in degree_problems({"ulysses": Given(32, "u")}, {}, None, None, SHAPE._replace(
        kv_heads=6))[0].message
    assert "32 heads" in degree_problems({"ulysses": Given(64, "u")}, {}, None, None, SHAPE)[0].message


BASE = {"compute_environment": "LOCAL_MACHINE", "distributed_type": "FSDP", "num_processes": 8,
        "fsdp_config": {"fsdp_version": 2, "fsdp_reshard_after_forward": True}}


def accelerate_findings(parallel: dict, **top: object) -> list[tuple[str, str, str]]:
    text = yaml.safe_dump({**BASE, **top, "parallelism_config": parallel}, sort_keys=False)
    return [(f.code, f.message, text[f.start:f.end]) for f in analyse(text, "accelerate.yaml").findings]


def test_an_unprefixed_parallelism_key_is_ignored_by_the_launcher():
    found = accelerate_findings({"cp_size": 8})
    assert [(code, at) for code, _, at in found if code == "ZM352"] == [("ZM352", "cp_size")]


def test_tensor_parallelism_over_replication_alone_and_sequence_parallelism_without_deepspeed():
    prefixed = {"parallelism_config_dp_replicate_size": 4, "parallelism_config_tp_size": 2}
    assert any(code == "ZM308" and "tensor parallelism needs sharded" in message and at == "2"
               for code, message, at in accelerate_findings(prefixed))
    found = accelerate_findings({"parallelism_config_sp_size": 2, "parallelism_config_dp_shard_size": 4})
    assert any(code == "ZM308" and "DEEPSPEED" in message for code, message, _ in found)


def test_the_accelerate_examples_run_as_written():
    for name in ("cp.yaml", "tp_hsdp.yaml"):
        text = (RECIPES / "accelerate/examples/torch_native_parallelism/configs" / name).read_text(encoding="utf-8")
        assert [f.code for f in analyse(text, name).findings if f.severity == "error"] == []
