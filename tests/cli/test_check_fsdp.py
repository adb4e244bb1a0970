"""`zeromem check` on FSDP / Accelerate / TrainingArguments files, referenced files and model configs."""

import json

import pytest

from tests.cli.conftest import run_zeromem, run_zeromem_subprocess, text_at

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
    done = run_zeromem_subprocess("check", "--format", "json", str(tmp_path))  # smoke: YAML through the entry point
    assert "Traceback" not in done.stderr
    findings, status = json.loads(done.stdout)["findings"], done.returncode
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


# --- hostile model config.json files (parameters.from_config) -----------------------------------

TINY_QWEN3_MOE = {"model_type": "qwen3_moe", "vocab_size": 100, "hidden_size": 64, "intermediate_size": 128,
                  "num_attention_heads": 4, "num_experts": 4, "moe_intermediate_size": 32, "num_hidden_layers": 2}


@pytest.mark.parametrize(("model", "field"), [
    ({**LLAMA3_8B, "num_attention_heads": 0}, "num_attention_heads"),
    ({"model_type": []}, "model_type"),
    ({**LLAMA3_8B, "vocab_size": -100_000_000}, "vocab_size"),
    ({"model_type": "gpt2", "vocab_size": 100, "n_embd": 64, "n_layer": 2, "n_positions": 10, "n_inner": "x"}, "n_inner"),
    ({**TINY_QWEN3_MOE, "decoder_sparse_step": 0}, "decoder_sparse_step"),
    ({**TINY_QWEN3_MOE, "mlp_only_layers": 5}, "mlp_only_layers"),
    ({**TINY_QWEN3_MOE, "num_hidden_layers": 10**12}, "num_hidden_layers"),
], ids=["zero-heads", "list-model-type", "negative-vocab", "string-n-inner", "zero-sparse-step", "int-mlp-only-layers",
        "trillion-layers"])
def test_hostile_model_config_is_a_zm104_not_a_crash_or_hang(tmp_path, model, field):
    (tmp_path / "cfg.json").write_text(json.dumps(model))
    config = tmp_path / "ds_config.json"
    config.write_text(json.dumps({"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": 1,
                                  "zeromem": {"parameters": {"from_config": "cfg.json"}, "world_size": 8,
                                              "gpu_memory": "80GiB"}}))
    # the per-layer loop hung on a trillion layers: that case runs as a child process with a timeout
    runner = run_zeromem_subprocess if field == "num_hidden_layers" else run_zeromem
    done = runner("check", "--format", "json", str(config))
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr
    problems = [f["message"] for f in json.loads(done.stdout)["findings"] if f["code"] == "ZM104"]
    assert len(problems) == 1 and "cfg.json" in problems[0] and field in problems[0], problems


# --- DeepSpeed inline in TrainingArguments, and Accelerate's zero_stage -------------------------

def test_training_arguments_inline_deepspeed_budget_lands_on_its_stage(check_json):
    text = json.dumps({"output_dir": "out", "deepspeed": {
        "zero_optimization": {"stage": 2}, "bf16": {"enabled": True}, "train_micro_batch_size_per_gpu": 1,
        "zeromem": {"parameters": "7B", "world_size": 8, "gpu_memory": "24GiB"}}}, indent=2)
    findings, text, status = check_json(text, "train_args.json")
    hit = next(f for f in findings if f["code"] == "ZM101")
    assert status == 1 and text_at(text, hit["range"]) == "2" and hit["range"]["start"]["line"] > 3


def test_accelerate_integral_float_zero_stage_is_the_stage(check_json):
    text = ("distributed_type: DEEPSPEED\nnum_processes: 8\nmixed_precision: bf16\ndeepspeed_config:\n"
            "  zero_stage: 2.0\n  zeromem: {parameters: 7B, gpu_memory: 24GiB}\n")
    findings, text, status = check_json(text, "accelerate.yaml")
    assert [f["code"] for f in findings] == ["ZM101"], findings
    assert "ZeRO-2" in findings[0]["message"] and text_at(text, findings[0]["range"]) == "2.0"
    findings, _, _ = check_json(text.replace("2.0", "2.5"), "accelerate.yaml")
    assert "zero_stage must be 0, 1, 2 or 3, got 2.5" in [f["message"] for f in findings]
