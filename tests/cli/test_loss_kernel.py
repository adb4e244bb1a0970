"""The loss kernel through the real entry points: `zeromem estimate` (flag, recipe keys, project settings) and
`zeromem check` (a zeromem block's unknown value). The arithmetic is tests/unit/test_step_loss_kernels.py's; here:
where the value comes from, that it changes the peak as its parts say, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import run_zeromem
from tests.cli.test_check_recipes import LLAMA, RECIPES, cache_with, findings

QWEN = Path(__file__).resolve().parents[1] / "data" / "models" / "Qwen2.5-7B" / "config.json"
WORKLOAD = ("--model-config", str(QWEN), "-R", "8", "--sequence-length", "4096", "--micro-batch", "2")
LORA_1B = (RECIPES / "axolotl/examples/llama-3/lora-1b.yml").read_text()


def estimate(*args: str) -> dict:
    done = run_zeromem("estimate", "-v", *args, "--format", "json")
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def held(result: dict, stage: str) -> dict:
    return result["phases"][stage]["parts"]


def test_each_kernel_replaces_the_fp32_logit_tensors_by_its_own_parts():
    hf = estimate(*WORKLOAD, "--loss-kernel", "hf")
    assert "log-softmax gradients" in held(hf, "zero3") and hf["peak_inputs"]["loss_kernel"]["from"] == "--loss-kernel"
    for kernel, own in (("liger_flce", "FLCE logits chunk"), ("cut_cross_entropy", "CCE input gradient"),
                        ("chunked_ce", "chunked logits")):
        result = estimate(*WORKLOAD, "--loss-kernel", kernel)
        assert result["peak_inputs"]["loss_kernel"] == {"value": kernel, "from": "--loss-kernel"}
        parts = held(result, "zero3")
        assert own in parts and "log-softmax gradients" not in parts and "fp32 logits copy" not in parts
        assert result["peak"]["zero3"] < hf["peak"]["zero3"]
        assert sum(parts.values()) + result["phases"]["zero3"]["reserved_bytes"] == result["peak"]["zero3"]
    assert estimate(*WORKLOAD)["peak_inputs"]["loss_kernel"] == {
        "value": "hf", "from": "default: Transformers' ForCausalLMLoss"}


def test_the_text_says_what_of_the_activations_the_kernel_does_not_keep():
    done = run_zeromem("estimate", "-v", *WORKLOAD, "--loss-kernel", "liger_flce")
    line = next(line for line in done.stdout.splitlines() if "loss kernel liger_flce (--loss-kernel)" in line)
    numbers = [int(found.replace(",", "")) for found in
               line.split('"activations" = ')[1].split(" B")[0].replace("−", "=").split(" = ")]
    saved, dropped, kept = numbers
    assert saved - dropped == kept and f"activations {kept:,}" in done.stdout  # the phases' "activations"


def test_an_unknown_kernel_is_a_usage_error_and_zm104_in_a_block(tmp_path):
    done = run_zeromem("estimate", "-v", *WORKLOAD, "--loss-kernel", "flash")
    assert done.returncode == 2 and "--loss-kernel" in done.stderr and "chunked_ce" in done.stderr
    config = tmp_path / "ds_config.json"
    config.write_text('{\n  "train_micro_batch_size_per_gpu": 1,\n  "zeromem": {"loss_kernel": "flash"}\n}\n')
    (item,) = [item for item in findings(str(config)) if item["code"] == "ZM104"]
    assert item["range"]["start"]["line"] == 2 and "loss_kernel" in item["message"]


def test_project_settings_set_it_credited_to_pyproject(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.zeromem]\nloss_kernel = "cut_cross_entropy"\n')
    config = tmp_path / "ds_config.json"
    config.write_text('{"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3}}\n')
    result = estimate("--config", str(config), *WORKLOAD[:2], "--sequence-length", "1024", "-R", "8", )
    given = result["peak_inputs"]["loss_kernel"]
    assert given["value"] == "cut_cross_entropy" and "pyproject.toml" in given["from"]


@pytest.mark.parametrize("name, kernel, credited", [
    ("axolotl/examples/qwen3/32b-qlora.yaml", "cut_cross_entropy",
     "plugins: CutCrossEntropyPlugin (cut_cross_entropy defaults to true)"),
    ("axolotl/examples/llama-3/fft-8b-liger-fsdp.yaml", "liger_flce",
     "liger_fused_linear_cross_entropy (LigerPlugin)"),
])
def test_real_recipes_set_the_kernel_credited_to_their_keys(name, kernel, credited, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(cache_with(tmp_path, ["Qwen/Qwen3-32B", "NousResearch/Meta-Llama-3.1-8B"],
                                                      LLAMA)))
    recipe = tmp_path / "recipe.yaml"  # parameter offload left out: the full fine-tune's FSDP step has a peak
    recipe.write_text((RECIPES / name).read_text().replace("fsdp_offload_params: true", "fsdp_offload_params: false"))
    result = estimate("--config", str(recipe), "-R", "8")
    assert result["peak_inputs"]["loss_kernel"] == {"value": kernel, "from": credited}
    stage = result["stage"]
    parts = held(result, stage)
    assert "log-softmax gradients" not in parts and "fp32 logits copy" not in parts
    plain = estimate("--config", str(recipe), "-R", "8", "--loss-kernel", "hf")
    assert plain["peak_inputs"]["loss_kernel"]["from"] == "--loss-kernel"
    assert result["peak"][stage] < plain["peak"][stage]


def recipe_with(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "recipe.yml"
    path.write_text(LORA_1B + extra)
    return path


@pytest.mark.parametrize("extra, value, note", [
    ("chunked_cross_entropy: true\nchunked_cross_entropy_num_chunks: 4\n", "chunked_ce", "chunked_cross_entropy (4 chunks)"),
    ("chunked_cross_entropy: true\n", "chunked_ce", "chunked_cross_entropy (8 chunks, the default)"),
    ("liger_fused_linear_cross_entropy: true\n", "hf",
     "liger_fused_linear_cross_entropy without axolotl.integrations.liger.LigerPlugin in plugins: axolotl does not "
     "read it, Transformers' loss runs"),
    ("plugins:\n  - axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin\ncut_cross_entropy: false\n", "hf",
     "default: Transformers' ForCausalLMLoss"),
])
def test_axolotl_keys(extra, value, note, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(cache_with(tmp_path / "cache", ["NousResearch/Llama-3.2-1B"], LLAMA)))
    result = estimate("--config", str(recipe_with(tmp_path, extra)), "-R", "8")
    assert result["peak_inputs"]["loss_kernel"] == {"value": value, "from": note}


def test_a_model_type_the_tool_gives_no_fused_loss_keeps_transformers_loss_and_says_why(tmp_path, monkeypatch):
    gpt2 = tmp_path / "gpt2.json"  # a gpt2 config of our own: Liger has no kernel for model type gpt2
    gpt2.write_text(json.dumps({"model_type": "gpt2", "n_embd": 256, "n_head": 4, "n_layer": 2, "vocab_size": 50257,
                                "n_positions": 1024}))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache_with(tmp_path / "cache", ["NousResearch/Llama-3.2-1B"], gpt2)))
    recipe = tmp_path / "full.yml"  # a full fine-tune (LoRA-1B's targets are not gpt2's module names)
    recipe.write_text("base_model: NousResearch/Llama-3.2-1B\nsequence_len: 512\nmicro_batch_size: 1\nbf16: true\n"
                      "plugins:\n  - axolotl.integrations.liger.LigerPlugin\nliger_fused_linear_cross_entropy: true\n")
    result = estimate("--config", str(recipe), "-R", "8")
    assert result["peak_inputs"]["loss_kernel"] == {
        "value": "hf", "from": "liger_fused_linear_cross_entropy (LigerPlugin) asks for liger_flce, but axolotl's "
        "LigerPlugin has none for model type gpt2: Transformers' loss"}
    assert "log-softmax gradients" in json.dumps(result["phases"])


@pytest.mark.parametrize("body, value, note", [
    ("enable_liger_kernel: true\n", "liger_flce", "enable_liger_kernel"),
    ("enable_liger_kernel: true\nstage: dpo\n", "hf", "enable_liger_kernel at stage dpo: LLaMA-Factory applies "
     "Liger's plain cross_entropy (the stage needs logits), the logits are made as by Transformers' loss"),
])
def test_llamafactory_liger(body, value, note, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(cache_with(tmp_path / "cache", ["Qwen/Qwen3-4B-Instruct-2507"], LLAMA)))
    recipe = tmp_path / "lf.yaml"
    recipe.write_text((RECIPES / "llamafactory/examples/train_lora/qwen3_lora_sft.yaml").read_text()
                      .replace("stage: sft\n", "") + body)
    assert estimate("--config", str(recipe), "-R", "8")["peak_inputs"]["loss_kernel"] == {"value": value, "from": note}


@pytest.mark.parametrize("body, value, note", [
    ("use_liger_kernel: true\n", "liger_flce", "use_liger_kernel (fused linear cross-entropy: Liger's default)"),
    ("use_liger_kernel: true\nliger_kernel_config:\n  fused_linear_cross_entropy: false\n", "hf",
     "use_liger_kernel with liger_kernel_config.fused_linear_cross_entropy: false"),
])
def test_trl_liger(body, value, note, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(cache_with(tmp_path / "cache", ["mistralai/Mistral-7B-v0.1"], LLAMA)))
    recipe = tmp_path / "trl.yaml"
    recipe.write_text((RECIPES / "alignment-handbook/recipes/zephyr-7b-beta/sft/config_qlora.yaml").read_text() + "\n" + body)
    assert estimate("--config", str(recipe), "-R", "8")["peak_inputs"]["loss_kernel"] == {"value": value, "from": note}


def test_training_arguments_use_liger_kernel(tmp_path):
    """A TrainingArguments JSON (the Trainer applies Liger itself): `use_liger_kernel` at its key."""
    args = {"output_dir": "out", "per_device_train_batch_size": 2, "max_seq_length": 512, "bf16": True,
            "use_liger_kernel": True,
            "deepspeed": {"train_micro_batch_size_per_gpu": "auto", "bf16": {"enabled": True},
                          "zero_optimization": {"stage": 2},
                          "zeromem": {"parameters": {"from_config": str(QWEN)}, "world_size": 8}}}
    path = tmp_path / "training_args.json"
    path.write_text(json.dumps(args))
    result = estimate("--config", str(path))
    assert result["peak_inputs"]["loss_kernel"] == {
        "value": "liger_flce", "from": "use_liger_kernel (fused linear cross-entropy: Liger's default)"}
    assert "FLCE logits chunk" in json.dumps(result["phases"])
