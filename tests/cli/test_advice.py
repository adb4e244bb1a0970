"""Advice that fits the file and the run (issue 26, item 6): where a tool refuses a zeromem block the advice names
what works instead, and ZM101 / ZM106 suggestions search every lever the file can say — gradient checkpointing too."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.conftest import run_zeromem
from tests.cli.test_check_recipes import RECIPES

#: Llama-2-7B's shape (meta-llama/Llama-2-7b-hf config.json: 4096 hidden, 11008 intermediate, 32 layers and heads,
#: 32000 tokens, untied head).
LLAMA2 = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
          "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
          "vocab_size": 32000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "tie_word_embeddings": False}


def _zero1(tmp_path: Path, checkpointing: bool | None = None) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA2))
    block = {"parameters": {"from_config": "config.json"}, "world_size": 8, "gpu_memory": "24GiB",
             "sequence_length": 4096}
    if checkpointing is not None:
        block["gradient_checkpointing"] = checkpointing
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 4, "bf16": {"enabled": True},
              "zero_optimization": {"stage": 1}, "zeromem": block}
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(config, indent=2))
    return path


def test_zm101_suggests_zero3_with_checkpointing_when_no_stage_alone_fits(tmp_path):
    path = _zero1(tmp_path)
    done = run_zeromem("check", "--format", "json", "-q", str(path))
    (over,) = [item for item in json.loads(done.stdout)["findings"] if item["code"] == "ZM101"]
    assert "the cheapest whose peak fits is ZeRO-3 with gradient checkpointing (peak 20.9 GiB/GPU" in over["message"]
    assert "add GPUs" not in over["message"]
    done = run_zeromem("check", "--diff", "--unsafe-fixes", str(path))
    assert '"stage": 3' in done.stdout and '"gradient_checkpointing": true' in done.stdout
    # the same with checkpointing already declared: ZeRO-3 alone is the answer, nothing to switch on
    done = run_zeromem("check", "--format", "json", "-q", str(_zero1(tmp_path, True)))
    (over,) = [item for item in json.loads(done.stdout)["findings"] if item["code"] == "ZM101"]
    assert "the cheapest whose peak fits is ZeRO-3 (peak" in over["message"]


def test_estimate_on_a_recipe_whose_tool_refuses_a_zeromem_block_never_advises_one(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    recipe = RECIPES / "llamafactory/examples/train_lora/qwen3_lora_sft.yaml"
    done = run_zeromem("estimate", "--config", str(recipe))
    assert done.returncode == 2
    assert "`huggingface-cli download Qwen/Qwen3-4B-Instruct-2507 config.json`" in done.stderr
    assert "--model-config" in done.stderr and "zeromem block" not in done.stderr
    done = run_zeromem("estimate", "--config", str(recipe), "--parameters", "4B")
    assert done.returncode == 2 and "give --model-config PATH" in done.stdout + done.stderr
    assert 'declare "parameters"' not in done.stdout + done.stderr


def test_the_missing_model_size_is_advised_where_the_file_allows_it():
    from zeromem_lsp.memory.plan import missing_model_size

    assert missing_model_size() == 'the model size: declare "parameters" (e.g. "7B") in the zeromem block'
    refused = missing_model_size("TRL")
    assert refused.startswith("the model size: TRL refuses a zeromem block in its file: give --parameters 7B")
    assert 'parameters = "7B" under [tool.zeromem] in pyproject.toml' in refused
    assert "zeromem.parameters" in refused
