"""Reading the real recipes (tests/data/recipes, SOURCES.md) into plain data: which tool, the adapter with each
tool's defaults (docs/recipes.md, notes/recipes-notes.md), and Transformers' "auto" fill of a DeepSpeed file."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from zeromem_lsp.configs.recipes import RecipeSetup, fill_auto, read_recipe, recipe_tool

RECIPES = Path(__file__).resolve().parents[1] / "data" / "recipes"


def read(name: str) -> RecipeSetup:
    data = yaml.safe_load((RECIPES / name).read_text(encoding="utf-8"))
    tool = recipe_tool(set(data))
    issues, setup = read_recipe(tool, data)
    assert issues == []
    return setup


@pytest.mark.parametrize("name, tool", [
    ("axolotl/examples/llama-3/lora-1b.yml", "axolotl"),
    ("llamafactory/examples/train_lora/qwen3_lora_dpo.yaml", "llamafactory"),
    ("alignment-handbook/recipes/smollm2/sft/config.yaml", "trl"),
    ("alignment-handbook/recipes/accelerate_configs/zero3.yaml", None),
    ("llamafactory/examples/accelerate/fsdp_config.yaml", None),
])
def test_the_tool_is_judged_by_content(name, tool):
    assert recipe_tool(set(yaml.safe_load((RECIPES / name).read_text(encoding="utf-8")))) == tool


def test_axolotl_qlora_is_nf4_with_double_quantization_on():
    adapter = read("axolotl/examples/llama-3/qlora-1b.yml").adapter
    assert adapter.method == "qlora" and adapter.rank.value == 32 and adapter.rank.path == ("lora_r",)
    assert adapter.quantization.value == "nf4" and adapter.double_quantization.value is True


def test_axolotl_target_linear_is_the_linear_layers_names():
    # loaders/adapter.py _build_peft_lora_config: find_all_linear_names, a list (not PEFT's all-linear, which would
    # take Mixtral's experts and router too)
    setup = read("axolotl/examples/mistral/mixtral/mixtral.yml")
    linear = setup.adapter.target_linear
    assert linear.value is True and linear.path == ("lora_target_linear",) and setup.adapter.targets is None
    assert setup.deepspeed.value == "deepspeed_configs/zero2.json"


def test_llamafactory_on_the_fly_4bit_takes_its_defaults():
    setup = read("llamafactory/examples/train_qlora/qwen3_lora_sft_otfq.yaml")
    adapter = setup.adapter
    assert adapter.quantization.value == "nf4" and adapter.quantization.path == ("quantization_bit",)
    assert adapter.double_quantization.value is True and adapter.double_quantization.path is None  # its default
    assert adapter.rank.value == 8 and adapter.targets is None and adapter.target_linear.value is True
    assert setup.checkpointing.value is True and setup.checkpointing.path is None  # on unless disabled
    assert setup.sequence_length.value == 2048


def test_llamafactory_full_fine_tune_has_no_adapter():
    assert read("llamafactory/examples/train_full/qwen3_full_sft.yaml").adapter is None


def test_handbook_qlora_reads_trl_keys_and_older_spellings():
    setup = read("alignment-handbook/recipes/zephyr-7b-beta/sft/config_qlora.yaml")
    adapter = setup.adapter
    assert adapter.rank.value == 16 and adapter.targets.value[:2] == ["q_proj", "k_proj"]
    assert adapter.quantization.value == "nf4" and adapter.double_quantization.value is False  # TRL's default
    assert setup.sequence_length.value == 2048 and setup.sequence_length.path == ("max_seq_length",)
    assert setup.dtype.value == "bf16" and setup.dtype.path == ("torch_dtype",)
    assert setup.micro_batch.value == 4


def test_handbook_full_recipe_has_no_adapter_and_trl_checkpointing():
    setup = read("alignment-handbook/recipes/zephyr-7b-beta/sft/config_full.yaml")
    assert setup.adapter is None  # no use_peft
    assert setup.checkpointing.value is True


def test_fill_auto_takes_axolotls_accumulation_from_batch_size_as_the_peak_does():
    """axolotl derives gradient_accumulation_steps = batch_size // micro_batch_size (normalize_config) when only
    batch_size is written: the "auto" DeepSpeed fill and the peak's input are that one value."""
    _, setup = read_recipe("axolotl", {"base_model": "org/model", "batch_size": 16, "micro_batch_size": 2})
    assert setup.accumulation.value == 8 and setup.accumulation.path == ("batch_size",)
    assert fill_auto({"gradient_accumulation_steps": "auto"}, setup)["gradient_accumulation_steps"] == 8
    _, plain = read_recipe("trl", {"model_name_or_path": "org/model", "batch_size": 16})
    assert plain.accumulation.value == 1  # TrainingArguments has no batch_size


def test_fill_auto_fills_what_transformers_fills_from_the_recipe():
    setup = read("axolotl/examples/llama-3/lora-1b-ray.yml")
    config = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
              "train_batch_size": "auto", "bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"},
              "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"}}
    filled = fill_auto(config, setup)
    assert filled["train_micro_batch_size_per_gpu"] == setup.micro_batch.value
    assert filled["gradient_accumulation_steps"] == setup.accumulation.value
    assert filled["bf16"] == {"enabled": True} and filled["fp16"] == {"enabled": False}
    assert filled["train_batch_size"] == "auto" and filled["zero_optimization"]["reduce_bucket_size"] == "auto"
    assert config["bf16"] == {"enabled": "auto"}  # the file's own data is not changed


def test_the_generated_trl_keys_match_the_installed_trl():
    """configs/recipe_keys.py was generated from TRL's dataclasses; where TRL is installed, check it still is."""
    trl = pytest.importorskip("trl")
    import dataclasses

    from zeromem_lsp.configs import recipe_keys

    if trl.__version__ != recipe_keys.TRL_VERSION:
        pytest.skip(f"generated from TRL {recipe_keys.TRL_VERSION}, installed {trl.__version__}")
    classes = (trl.ScriptArguments, trl.ModelConfig, trl.SFTConfig, trl.DPOConfig, trl.GRPOConfig, trl.KTOConfig,
               trl.RewardConfig, trl.RLOOConfig)
    fields = {field.name for cls in classes for field in dataclasses.fields(cls) if field.init}
    assert fields <= recipe_keys.TRL_KEYS  # beside them: the experimental trainers' and open-r1's keys


def test_llamafactory_module_lists_are_split_at_commas_as_split_arg_does():
    issues, setup = read_recipe("llamafactory", {"model_name_or_path": "m", "finetuning_type": "lora",
                                                 "lora_target": "q_proj, v_proj", "additional_target": "lm_head"})
    assert issues == [] and setup.adapter.targets.value == ["q_proj", "v_proj"]
    assert setup.adapter.modules_to_save.value == ["lm_head"] and setup.adapter.targets.path == ("lora_target",)
