"""`zeromem check` on FSDP / Accelerate / TrainingArguments files, referenced files and model configs."""

import json

from tests.cli.conftest import run_zeromem

LLAMA3_8B = {"model_type": "llama", "vocab_size": 128256, "hidden_size": 4096, "num_hidden_layers": 32,
             "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
             "tie_word_embeddings": False}


def check(*paths, cwd=None):
    done = run_zeromem("check", "--format", "json", *map(str, paths), cwd=cwd)
    assert done.returncode in (0, 1), done.stderr
    assert "Traceback" not in done.stderr
    return json.loads(done.stdout)["findings"], done.returncode


def test_yaml_files_are_discovered_and_analysed(tmp_path):
    (tmp_path / "fsdp.yaml").write_text("distributed_type: FSDP\nnum_processes: 8\nfsdp_config:\n"
                                        "  fsdp_sharding_strategy: FULL_SHARDED\n")
    (tmp_path / "workflow.yml").write_text("on: [push]\njobs: {}\n")
    findings, status = check(tmp_path)
    assert status == 1 and [f["code"] for f in findings] == ["ZM301"]


def test_from_config_is_read_relative_to_the_config(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps(LLAMA3_8B))
    config = tmp_path / "fsdp.yaml"
    config.write_text("distributed_type: FSDP\nnum_processes: 8\nfsdp_config:\n  fsdp_sharding_strategy: NO_SHARD\n"
                      "  zeromem: {parameters: {from_config: model/config.json}, gpu_memory: 80GiB}\n")
    findings, status = check(config)
    hit = next(f for f in findings if f["code"] == "ZM101")
    assert status == 1 and "NO_SHARD" in hit["message"]


def test_project_settings_from_config_is_relative_to_the_settings_file(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA3_8B))
    (tmp_path / "zeromem.toml").write_text('gpu-memory = "24GiB"\nparameters = {from_config = "config.json"}\n')
    (tmp_path / "configs").mkdir()
    config = tmp_path / "configs" / "fsdp.yaml"
    config.write_text("distributed_type: FSDP\nnum_processes: 8\nfsdp_config:\n  fsdp_sharding_strategy: NO_SHARD\n")
    findings, _ = check(config)
    assert any(f["code"] == "ZM101" for f in findings), findings


def test_deepspeed_config_file_of_accelerate_is_followed(tmp_path):
    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 1}, "bf16": {"enabled": True},
                                                  "train_micro_batch_size_per_gpu": 1}))
    config = tmp_path / "accelerate.yaml"
    config.write_text("distributed_type: DEEPSPEED\nnum_processes: 8\ndeepspeed_config:\n"
                      "  deepspeed_config_file: ds.json\n  zeromem: {parameters: 7B, gpu_memory: 24GiB}\n")
    findings, status = check(config)
    hit = next(f for f in findings if f["code"] == "ZM101")
    assert "ZeRO-1" in hit["message"] and status == 1


def test_training_arguments_json(tmp_path):
    config = tmp_path / "train_args.json"
    config.write_text(json.dumps({"output_dir": "out", "fsdp": "full_shard shard_grad_op",
                                  "fsdp_config": {"min_num_params": 10, "transformer_layer_cls_to_wrap": "X"}}))
    findings, status = check(config)
    assert status == 1 and sorted(f["code"] for f in findings) == ["ZM303", "ZM304"]
