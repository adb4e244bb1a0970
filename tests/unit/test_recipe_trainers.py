"""Which preference trainer a recipe runs, credited to the key that says so (configs/recipes.py): axolotl `rl:`,
LLaMA-Factory `stage:` with `pref_loss:`, TRL / alignment-handbook by the config class whose keys it sets."""

import pytest

from zeromem_lsp.configs.recipes import read_recipe


def trainer_of(tool: str, data: dict):
    issues, setup = read_recipe(tool, {"base_model" if tool == "axolotl" else "model_name_or_path": "m", **data})
    return setup.trainer, setup.precompute_ref_log_probs, setup.preference_loss


@pytest.mark.parametrize("rl, trainer", [("dpo", "dpo"), ("ipo", "dpo"), ("kto", "kto"), ("orpo", "orpo"),
                                         ("simpo", "simpo"), ("grpo", "grpo"), ("gdpo", "grpo")])
def test_axolotl_rl_names_the_trainer_at_its_key(rl, trainer):
    found, _, loss = trainer_of("axolotl", {"rl": rl})
    assert (found.value, found.path) == (trainer, ("rl",)) and "axolotl" in found.note
    assert loss.value == "logits" and "trl==1.8.0" in loss.note  # axolotl pins TRL 1.8: no fused LM head


def test_axolotl_liger_dpo_loss_is_named_at_its_key():
    _, _, loss = trainer_of("axolotl", {"rl": "dpo", "dpo_use_liger_kernel": True})
    assert (loss.value, loss.path) == ("liger", ("dpo_use_liger_kernel",)) and "not modelled" in loss.note


def test_axolotl_without_rl_is_supervised_and_precompute_is_read():
    found, precompute, _ = trainer_of("axolotl", {"precompute_ref_log_probs": True})
    assert found is None and (precompute.value, precompute.path) == (True, ("precompute_ref_log_probs",))
    assert trainer_of("axolotl", {"rl": "ebft"})[0] is None  # a trainer the setting does not know: left as sft


@pytest.mark.parametrize("data, trainer, key", [
    ({"stage": "dpo"}, "dpo", "stage"), ({"stage": "dpo", "pref_loss": "ipo"}, "dpo", "pref_loss"),
    ({"stage": "dpo", "pref_loss": "orpo"}, "orpo", "pref_loss"), ({"stage": "dpo", "pref_loss": "simpo"}, "simpo", "pref_loss"),
    ({"stage": "kto"}, "kto", "stage"), ({"stage": "sft"}, None, None)])
def test_llamafactory_stage_and_pref_loss(data, trainer, key):
    found, _, loss = trainer_of("llamafactory", data)
    assert (found.value if found else None, found.path[0] if found else None) == (trainer, key)
    assert loss.value == "llamafactory" and "logits.to(torch.float32)" in loss.note


@pytest.mark.parametrize("data, trainer, key", [
    ({"beta": 0.01, "max_prompt_length": 512}, "dpo", "precompute_ref_log_probs"),
    ({"beta": 0.01}, None, None), ({"desirable_weight": 1.0, "beta": 0.1}, "kto", "desirable_weight"),
    ({"cpo_alpha": 1.0, "beta": 0.1}, "cpo", "cpo_alpha"),
    ({"simpo_gamma": 0.5, "loss_type": "simpo", "beta": 2.0}, "simpo", "simpo_gamma"),
    ({"loss_type": "simpo", "beta": 2.0}, "simpo", "loss_type"),  # CPOConfig's own loss: CPOTrainer runs SimPO
    ({"loss_type": "sigmoid", "beta": 0.1}, None, None),  # DPO's and CPO's default: names neither
    ({"sync_ref_model": True, "beta": 0.1}, None, None),  # GRPOConfig has it too (trl/trainer/grpo_config.py)
    ({"max_length": 1024}, None, None)])
def test_trl_recipes_by_their_config_class(data, trainer, key):
    if key == "precompute_ref_log_probs":
        data = {**data, "precompute_ref_log_probs": False}
    found, precompute, loss = trainer_of("trl", data)
    assert (found.value if found else None, found.path[0] if found else None) == (trainer, key)
    assert loss is None  # TRL recipes run the installed TRL: its fused LM head
    if key == "precompute_ref_log_probs":
        assert precompute.value is False


def test_a_trl_grpo_recipe_names_grpo_and_its_generation_keys_at_their_paths():
    """GRPOConfig has `beta` too (a DPOConfig key): a GRPO-only key is read first. steps_per_generation defaults to
    gradient_accumulation_steps as written (TRL's GRPOConfig.__post_init__)."""
    _, setup = read_recipe("trl", {"model_name_or_path": "m", "num_generations": 8, "beta": 0.04,
                                   "max_completion_length": 256, "gradient_accumulation_steps": 4})
    assert (setup.trainer.value, setup.trainer.path) == ("grpo", ("num_generations",))
    found = setup.generation
    assert (found["beta"].value, found["beta"].path) == (0.04, ("beta",))
    assert (found["max_completion_length"].value, found["max_completion_length"].path) == (256, ("max_completion_length",))
    assert "use_vllm" not in found and "steps_per_generation" not in found  # TRL's defaults: the peak's inputs
    from zeromem_lsp.resolved.peak_inputs import generation_inputs
    found = generation_inputs(setup.generation, None, setup.accumulation)  # as peak_inputs makes them
    assert (found["steps_per_generation"].value, found["steps_per_generation"].path) == (4, ("gradient_accumulation_steps",))


def test_axolotl_reads_grpo_keys_from_its_trl_block():
    _, setup = read_recipe("axolotl", {"base_model": "m", "rl": "grpo",
                                       "trl": {"use_vllm": "true", "beta": 0.001, "steps_per_generation": 2}})
    found = setup.generation
    assert (found["use_vllm"].value, found["use_vllm"].path) == (True, ("trl", "use_vllm"))
    assert (found["beta"].value, found["beta"].note) == (0.001, "trl.beta")
    assert found["steps_per_generation"].path == ("trl", "steps_per_generation")


def test_axolotl_rl_beta_is_grpos_beta_when_trl_beta_is_not_set():
    """core/builders/rl.py: trl.beta, else rl_beta."""
    _, setup = read_recipe("axolotl", {"base_model": "m", "rl": "grpo", "rl_beta": 0.5})
    assert (setup.generation["beta"].value, setup.generation["beta"].path) == (0.5, ("rl_beta",))
    _, setup = read_recipe("axolotl", {"base_model": "m", "rl": "grpo", "rl_beta": 0.5, "trl": {"beta": 0.0}})
    assert (setup.generation["beta"].value, setup.generation["beta"].path) == (0.0, ("trl", "beta"))


def test_keys_dpo_orpo_and_cpo_share_name_no_trainer_but_are_named_as_not_modelled():
    """Issue 26: an ORPO recipe sets `beta` and `max_prompt_length` (ORPOConfig's too) and was priced as DPO. Alone they
    name no trainer: the reading says so (unread), unless the recipe's folder names its trainer (the handbook's
    recipes/<model>/orpo/, dpo/)."""
    _, setup = read_recipe("trl", {"model_name_or_path": "m", "beta": 0.1, "max_prompt_length": 512})
    assert setup.trainer is None
    [(path, value, why)] = setup.unread
    assert path == ("beta",) and value == 0.1 and "DPO, ORPO and CPO" in why
    for folder, trainer in (("orpo", "orpo"), ("dpo", "dpo")):
        _, setup = read_recipe("trl", {"model_name_or_path": "m", "beta": 0.1}, ("recipes", "zephyr", folder))
        assert setup.trainer.value == trainer and f"folder named {folder}/" in setup.trainer.note and not setup.unread


def test_grpo_sequence_is_prompt_plus_completion_from_max_prompt_length():
    """open-r1's GRPO recipes bound the prompt (max_prompt_length, an older GRPOConfig key) and the completion; with
    no max_length the step's sequence is their sum, credited to max_prompt_length."""
    _, setup = read_recipe("trl", {"model_name_or_path": "m", "num_generations": 8, "max_prompt_length": 512,
                                   "max_completion_length": 1024})
    assert (setup.sequence_length.value, setup.sequence_length.path) == (1536, ("max_prompt_length",))
    _, setup = read_recipe("trl", {"model_name_or_path": "m", "num_generations": 8, "max_prompt_length": 512})
    assert setup.sequence_length.value == 512 + 512 and "TRL's default" in setup.sequence_length.note
    _, setup = read_recipe("trl", {"model_name_or_path": "m", "num_generations": 8, "max_prompt_length": 512,
                                   "max_length": 4096})
    assert setup.sequence_length.value == 4096  # written: as written


def test_pure_bf16_trains_in_bf16_without_an_fp32_copy():
    _, setup = read_recipe("llamafactory", {"model_name_or_path": "m", "finetuning_type": "full", "pure_bf16": True})
    assert (setup.dtype.value, setup.dtype.path) == ("bf16", ("pure_bf16",)) and setup.flags["bf16"]


def test_model_revision_is_read_per_tool():
    for tool, key in (("trl", "model_revision"), ("llamafactory", "model_revision"), ("axolotl", "revision_of_model")):
        _, setup = read_recipe(tool, {"base_model" if tool == "axolotl" else "model_name_or_path": "m", key: "v2"})
        assert (setup.revision.value, setup.revision.path) == ("v2", (key,))
    _, setup = read_recipe("trl", {"model_name_or_path": "m", "model_revision": "main"})
    assert setup.revision is None  # main is the default
