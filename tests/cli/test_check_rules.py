"""Every rule, positive and negative, through `zeromem check --format json`."""

import json

import pytest

from tests.cli.conftest import text_at

BUDGET = '"zeromem": {"parameters": "7B", "world_size": 8, "gpu_memory": "%s"}'

# (code, config that triggers it, text its range must cover, the same config fixed)
CASES = [
    ("ZM001", '{"zero_optimization": {"stage": 2,, }}', ",", '{"zero_optimization": {"stage": 2 }}'),
    ("ZM101", '{"bf16": {"enabled": true}, "zero_optimization": {"stage": 1}, %s}' % (BUDGET % "24GiB"), "1",
     '{"bf16": {"enabled": true}, "zero_optimization": {"stage": 3}, %s}' % (BUDGET % "24GiB")),
    ("ZM102", '{"bf16": {"enabled": true}, "zero_optimization": {"stage": 3}, %s}' % (BUDGET % "14GB"), "3",
     '{"bf16": {"enabled": true}, "zero_optimization": {"stage": 3}, %s}' % (BUDGET % "24GB")),
    ("ZM103", '{"zero_optimization": {"stage": 2}, "zeromem": {"gpu_memory": "80GiB"}}', "2",
     '{"zero_optimization": {"stage": 2}, "zeromem": {"gpu_memory": "80GiB", "parameters": "1B", "world_size": 2}}'),
    ("ZM104", '{"zero_optimization": {"stage": 2}, "zeromem": {"gpu_memory": "80 GBs"}}', '"80 GBs"',
     '{"zero_optimization": {"stage": 2}, "zeromem": {"gpu_memory": "80GB"}}'),
    ("ZM105", '{"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, '
     '"zeromem": {"world_size": 4}}', "4",
     '{"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, '
     '"zeromem": {"world_size": 8}}'),
    ("ZM201", '{"train_batch_size": 8, "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_sz": 5e7}}',
     '"stage3_prefetch_bucket_sz"',
     '{"train_batch_size": 8, "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 5e7}}'),
    ("ZM202", '{"train_batch_size": 8, "zero_optimization": {"stage": 4}}', "4",
     '{"train_batch_size": 8, "zero_optimization": {"stage": 3}}'),
    ("ZM203", '{"train_batch_size": 8, "zero_optimization": {"stage": 2, "stage": 3}}', '"stage"',
     '{"train_batch_size": 8, "zero_optimization": {"stage": 3}}'),
    ("ZM204", '{"gradient_accumulation_steps": 4, "zero_optimization": {"stage": 1}}', None,
     '{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4, "zero_optimization": {"stage": 1}}'),
    ("ZM205", '{"train_micro_batch_size_per_gpu": 0}', "0", '{"train_micro_batch_size_per_gpu": 1}'),
    ("ZM206", '{"train_batch_size": 33, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}', None,
     '{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}'),
    ("ZM207", '{"train_batch_size": 8, "fp16": {"enabled": true}, "bf16": {"enabled": true}}', None,
     '{"train_batch_size": 8, "fp16": {"enabled": false}, "bf16": {"enabled": true}}'),
    ("ZM208", '{"train_batch_size": 8, "zero_optimization": {"stage": 2, "cpu_offload": true, '
     '"offload_optimizer": {"device": "cpu"}}}', None,
     '{"train_batch_size": 8, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}'),
    ("ZM209", '{"train_batch_size": 8, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", '
     '"ratio": 0.5}}}', None,
     '{"train_batch_size": 8, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}}'),
    ("ZM210", '{"train_batch_size": 8, "curriculum_learning": {"enabled": true}}', None, '{"train_batch_size": 8}'),
    ("ZM251", '{"train_batch_size": 8, "zero_optimization": {"stage": 2, "cpu_offload": true}}', '"cpu_offload"',
     '{"train_batch_size": 8, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}'),
    ("ZM252", '{"train_batch_size": 8, "zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}}', None,
     '{"train_batch_size": 8, "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}}'),
    ("ZM253", '{"train_batch_size": 8, // eight\n "zero_optimization": {"stage": 2}}', "// eight",
     '{"train_batch_size": 8,\n "zero_optimization": {"stage": 2}}'),
    ("ZM254", '{"train_batch_size": 8, "steps_per_print": "auto"}', '"auto"',
     '{"train_batch_size": "auto", "zero_optimization": {"stage": 2}}'),
    ("ZM255", '{"train_batch_sise": 8, "train_micro_batch_size_per_gpu": 1}', '"train_batch_sise"',
     '{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1}'),
    ("ZM211", '{"train_batch_size": 8, "zero_optimization": {"stage": 3, "stage3_max_live_parameters": 1e9, '
     '"max_live_parameters": 1e9}}', None,
     '{"train_batch_size": 8, "zero_optimization": {"stage": 3, "max_live_parameters": 1e9}}'),
    ("ZM256", '{"train_batch_size": 8, "optimizer": {"type": "OneBitAdam"}, "zero_optimization": {"stage": 2}}',
     '"OneBitAdam"', '{"train_batch_size": 8, "optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 2}}'),
    ("ZM257", '{"train_micro_batch_size_per_gpu": 2.5}', "2.5", '{"train_micro_batch_size_per_gpu": 2}'),
]


@pytest.mark.parametrize(("code", "bad", "covers", "good"), CASES, ids=[case[0] for case in CASES])
def test_rule_fires_and_is_positioned(check_json, code, bad, covers, good):
    findings, text, status = check_json(bad)
    hits = [f for f in findings if f["code"] == code]
    assert hits, f"{code} expected in {json.dumps(findings, indent=1)}"
    if covers is not None:
        assert text_at(text, hits[0]["range"]) == covers
    if hits[0]["severity"] == "error":
        assert status == 1


@pytest.mark.parametrize(("code", "bad", "covers", "good"), CASES, ids=[case[0] for case in CASES])
def test_rule_quiet_when_fixed(check_json, code, bad, covers, good):
    findings, _, _ = check_json(good)
    assert [f for f in findings if f["code"] == code] == []


# FSDP / Accelerate / TrainingArguments rules: (code, file name, bad, text its range covers, good).
ACCELERATE = "distributed_type: FSDP\nnum_processes: 8\nfsdp_config:\n"
FSDP_CASES = [
    ("ZM301", "accelerate.yaml", ACCELERATE + "  fsdp_sharding_strategy: FULL_SHARDED\n", "FULL_SHARDED",
     ACCELERATE + "  fsdp_sharding_strategy: FULL_SHARD\n"),
    ("ZM301", "fsdp_config.json", '{"version": 1, "fsdp_backward_prefetch": "BACKWARDS"}', '"BACKWARDS"',
     '{"version": 1, "fsdp_backward_prefetch": "backward_pre"}'),  # FSDP1: Transformers' FSDP2 default ignores it
    ("ZM302", "train_args.json", '{"output_dir": "out", "fsdp": "offload"}', '"offload"',
     '{"output_dir": "out", "fsdp": "full_shard offload"}'),
    ("ZM303", "train_args.json", '{"output_dir": "out", "fsdp": "full_shard shard_grad_op"}',
     '"full_shard shard_grad_op"', '{"output_dir": "out", "fsdp": "full_shard"}'),
    ("ZM304", "fsdp_config.json", '{"min_num_params": 1000, "transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]}',
     '"min_num_params"', '{"min_num_params": 0, "transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]}'),
    ("ZM305", "accelerate.yaml", ACCELERATE + "  fsdp_cpu_ram_efficient_loading: true\n  fsdp_sync_module_states: false\n",
     "false", ACCELERATE + "  fsdp_cpu_ram_efficient_loading: true\n  fsdp_sync_module_states: true\n"),
    ("ZM306", "accelerate.yaml", ACCELERATE + "  fsdp_version: 2\n  fsdp_reshard_after_forward: FULL_SHARD\n",
     "FULL_SHARD", ACCELERATE + "  fsdp_version: 2\n  fsdp_reshard_after_forward: true\n"),
    ("ZM307", "accelerate.yaml", "distributed_type: FSDP\nnum_process: 8\n", "num_process",
     "distributed_type: FSDP\nnum_processes: 8\n"),
    ("ZM308", "accelerate.yaml", "distributed_type: fsdp\nnum_processes: 8\n", "fsdp",
     "distributed_type: FSDP\nnum_processes: 8\n"),
    ("ZM308", "accelerate.yaml", "distributed_type: FSDP\nmixed_precision: no\n", "no",
     "distributed_type: FSDP\nmixed_precision: 'no'\n"),
    ("ZM309", "accelerate.yml", "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds.json\n"
     "  zero_stage: 3\n", "zero_stage",
     "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds.json\n"),
    ("ZM351", "accelerate.yaml", ACCELERATE + "  fsdp_backward_prefetch_policy: BACKWARD_PRE\n",
     "fsdp_backward_prefetch_policy", ACCELERATE + "  fsdp_backward_prefetch: BACKWARD_PRE\n"),
    ("ZM352", "accelerate.yaml", ACCELERATE + "  fsdp_version: 2\n  fsdp_sharding_strategy: SHARD_GRAD_OP\n",
     "fsdp_sharding_strategy", ACCELERATE + "  fsdp_version: 2\n  fsdp_reshard_after_forward: false\n"),
    ("ZM101", "accelerate.yaml", ACCELERATE + "  fsdp_sharding_strategy: NO_SHARD\n"
     "  zeromem: {parameters: 7B, gpu_memory: 40GiB}\n", "NO_SHARD",
     ACCELERATE + "  fsdp_sharding_strategy: FULL_SHARD\n  zeromem: {parameters: 7B, gpu_memory: 40GiB}\n"),
    ("ZM104", "accelerate.yaml", ACCELERATE + "  zeromem: {parameters: {from_config: missing/config.json}}\n",
     None, ACCELERATE + "  zeromem: {parameters: 7B}\n"),
]


@pytest.mark.parametrize(("code", "name", "bad", "covers", "good"), FSDP_CASES,
                         ids=[f"{case[0]}-{case[1]}" for case in FSDP_CASES])
def test_fsdp_rule_fires_and_is_positioned(check_json, code, name, bad, covers, good):
    findings, text, status = check_json(bad, name)
    hits = [f for f in findings if f["code"] == code]
    assert hits, f"{code} expected in {json.dumps(findings, indent=1)}"
    if covers is not None:
        assert text_at(text, hits[0]["range"]) == covers
    if hits[0]["severity"] == "error":
        assert status == 1


@pytest.mark.parametrize(("code", "name", "bad", "covers", "good"), FSDP_CASES,
                         ids=[f"{case[0]}-{case[1]}" for case in FSDP_CASES])
def test_fsdp_rule_quiet_when_fixed(check_json, code, name, bad, covers, good):
    findings, _, _ = check_json(good, name)
    assert [f for f in findings if f["code"] == code] == []


def test_world_size_conflict_names_the_files_own_value(check_json):
    text = ('{"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, '
            '"zeromem": {"world_size": 4}}')
    findings, _, _ = check_json(text, "ds_config.json", "--world-size", "8")
    [conflict] = [f for f in findings if f["code"] == "ZM105"]
    assert "world_size 4 contradicts" in conflict["message"]
