"""gradient_accumulation_steps through the real entry points: where it comes from (a ds_config, DeepSpeed's own
derivation from train_batch_size, an Accelerate deepspeed_config, TrainingArguments JSON, a recipe, the setting,
the flag), that it raises the peak as the later micro-batch's parts say, `zeromem check` judging it, and bad input.
The held bytes are tests/unit/test_step_accumulation.py's (measured)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.cli.conftest import run_zeromem
from tests.cli.test_check_recipes import LLAMA, RECIPES, cache_with, findings

QWEN = Path(__file__).resolve().parents[1] / "data" / "models" / "Qwen2.5-7B" / "config.json"
LATER = ", a later micro-batch"


def estimate(*args: str) -> dict:
    done = run_zeromem("estimate", "-v", *args, "--format", "json")
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def ds_config(tmp_path: Path, stage: int, **top) -> Path:
    shutil.copy(QWEN, tmp_path / "config.json")
    path = tmp_path / "ds_config.json"
    config = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "zero_optimization": {"stage": stage},
              **top, "zeromem": {"parameters": {"from_config": "config.json"}, "world_size": 8,
                                 "sequence_length": 2048}}
    path.write_text(json.dumps(config, indent=1))
    return path


@pytest.mark.parametrize("stage", [1, 2])
def test_a_ds_configs_accumulation_raises_a_full_fine_tunes_peak(tmp_path, stage):
    one = estimate("--config", str(ds_config(tmp_path, stage, gradient_accumulation_steps=1)))
    four = estimate("--config", str(ds_config(tmp_path, stage, gradient_accumulation_steps=4)))
    key = f"zero{stage}"
    assert four["peak_inputs"]["gradient_accumulation_steps"] == {"value": 4, "from": "gradient_accumulation_steps"}
    assert four["peak"][key] > one["peak"][key]
    phase = four["phases"][key]
    assert phase["moment"].endswith(LATER) and phase["parts"]["accumulated gradients"] > 0
    assert sum(phase["parts"].values()) + phase["reserved_bytes"] == four["peak"][key]  # reproducible from parts
    # ZeRO-3 reduces into the partitions it always has: nothing more
    assert four["peak"]["zero3"] == one["peak"]["zero3"]


def test_the_text_shows_the_input_and_where_it_is_written(tmp_path):
    done = run_zeromem("estimate", "-v", "--config", str(ds_config(tmp_path, 1, gradient_accumulation_steps=4)))
    assert "gradient accumulation steps 4 — gradient_accumulation_steps" in done.stdout
    assert "a later micro-batch): " in done.stdout and "accumulated gradients " in done.stdout


def test_deepspeeds_derivation_from_train_batch_size(tmp_path):
    config = ds_config(tmp_path, 2, train_batch_size=32)  # 32 // micro 1 // 8 ranks
    given = estimate("--config", str(config))["peak_inputs"]["gradient_accumulation_steps"]
    assert given == {"value": 4, "from": "train_batch_size // train_micro_batch_size_per_gpu // world size = "
                                         "32 // 1 // 8"}
    alone = estimate("--config", str(ds_config(tmp_path, 2)))["peak_inputs"]["gradient_accumulation_steps"]
    assert alone == {"value": 1, "from": "default: 1 (one micro-batch per optimizer step)"}


def test_the_flag_overrides_the_config(tmp_path):
    config = ds_config(tmp_path, 1, gradient_accumulation_steps=4)
    result = estimate("--config", str(config), "--gradient-accumulation-steps", "1")
    assert result["peak_inputs"]["gradient_accumulation_steps"] == {"value": 1, "from": "--gradient-accumulation-steps"}
    assert not result["phases"]["zero1"]["moment"].endswith(LATER)


def test_estimate_without_a_config(tmp_path):
    workload = ("--model-config", str(QWEN), "-R", "8", "--sequence-length", "2048", "--micro-batch", "1",
                "--engine", "torch")
    one, two = estimate(*workload), estimate(*workload, "--gradient-accumulation-steps", "2")
    assert one["peak_inputs"]["gradient_accumulation_steps"]["value"] == 1
    # torch DDP: every bf16 gradient is held from the second micro-batch on
    parameters = two["inputs"]["parameters"]
    assert two["phases"]["ddp"]["phases"]["forward"] - one["phases"]["ddp"]["phases"]["forward"] == 2 * parameters


def test_a_check_judges_the_accumulated_peak(tmp_path):
    """A budget between the peaks with and without accumulation: only the accumulating config exceeds it."""
    one = estimate("--config", str(ds_config(tmp_path, 1, gradient_accumulation_steps=1)))["peak"]["zero1"]
    four = estimate("--config", str(ds_config(tmp_path, 1, gradient_accumulation_steps=4)))["peak"]["zero1"]
    budget = str((one + four) // 2)
    codes = {}
    for steps in (1, 4):
        config = ds_config(tmp_path, 1, gradient_accumulation_steps=steps)
        data = json.loads(config.read_text())
        data["zeromem"]["gpu_memory"] = budget
        config.write_text(json.dumps(data, indent=1))
        codes[steps] = {item["code"] for item in findings(str(config))}
    assert not codes[1] & {"ZM105", "ZM106"} and codes[4] & {"ZM105", "ZM106"}


def test_hf_arguments_and_accelerate_configs(tmp_path):
    shutil.copy(QWEN, tmp_path / "config.json")
    block = {"parameters": {"from_config": "config.json"}, "world_size": 8, "sequence_length": 2048}
    arguments = tmp_path / "training_args.json"
    arguments.write_text(json.dumps({"per_device_train_batch_size": 1, "gradient_accumulation_steps": 8, "bf16": True,
                                     "deepspeed": {"zero_optimization": {"stage": 2},
                                                   "gradient_accumulation_steps": "auto"}, "zeromem": block}))
    assert estimate("--config", str(arguments))["peak_inputs"]["gradient_accumulation_steps"] == {
        "value": 8, "from": "gradient_accumulation_steps"}
    accelerate = tmp_path / "accelerate.yaml"
    accelerate.write_text("distributed_type: DEEPSPEED\nnum_processes: 8\nmixed_precision: bf16\n"
                          "deepspeed_config:\n  zero_stage: 2\n  gradient_accumulation_steps: 4\n"
                          f"  zeromem:\n    parameters:\n      from_config: config.json\n    sequence_length: 2048\n"
                          "    micro_batch: 1\n")
    assert estimate("--config", str(accelerate))["peak_inputs"]["gradient_accumulation_steps"] == {
        "value": 4, "from": "deepspeed_config.gradient_accumulation_steps"}


def test_an_axolotl_recipes_value_is_credited(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(cache_with(tmp_path / "cache", ["NousResearch/Llama-3.2-1B"], LLAMA)))
    recipe = tmp_path / "lora-1b.yml"  # gradient_accumulation_steps: 2
    recipe.write_text((RECIPES / "axolotl/examples/llama-3/lora-1b.yml").read_text())
    result = estimate("--config", str(recipe), "-R", "8")
    assert result["peak_inputs"]["gradient_accumulation_steps"] == {"value": 2, "from": "gradient_accumulation_steps"}
    phase = result["phases"][result["stage"]]
    assert phase["moment"].endswith(LATER) and phase["parts"]["accumulated gradients"] > 0  # the adapters'
    recipe.write_text(recipe.read_text().replace("gradient_accumulation_steps: 2\n", ""))
    assert estimate("--config", str(recipe), "-R", "8")["peak_inputs"]["gradient_accumulation_steps"] == {
        "value": 1, "from": "gradient_accumulation_steps absent: axolotl's default"}
    recipe.write_text(recipe.read_text() + "batch_size: 8\n")  # micro_batch_size 2: axolotl derives 4
    assert estimate("--config", str(recipe), "-R", "8")["peak_inputs"]["gradient_accumulation_steps"] == {
        "value": 4, "from": "batch_size // micro_batch_size = 8 // 2"}


def test_the_setting_from_the_project(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.zeromem]\ngradient_accumulation_steps = 3\n")
    config = ds_config(tmp_path, 2)
    given = estimate("--config", str(config))["peak_inputs"]["gradient_accumulation_steps"]
    assert given["value"] == 3 and "pyproject.toml" in given["from"]


def test_bad_input_is_a_clear_error(tmp_path):
    done = run_zeromem("estimate", "-v", "--model-config", str(QWEN), "-R", "8", "--sequence-length", "2048",
                       "--micro-batch", "1", "--gradient-accumulation-steps", "0")
    assert done.returncode == 2 and "--gradient-accumulation-steps" in done.stderr and "Traceback" not in done.stderr
    config = tmp_path / "ds_config.json"
    config.write_text('{\n  "train_micro_batch_size_per_gpu": 1,\n  "zeromem": {"gradient_accumulation_steps": 0}\n}\n')
    (item,) = [item for item in findings(str(config)) if item["code"] == "ZM104"]
    assert item["range"]["start"]["line"] == 2 and "gradient_accumulation_steps" in item["message"]
