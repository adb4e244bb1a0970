"""Preference trainers through the real entry points (`zeromem estimate` / `check` via cli.main): the reference
model is a part of every phase, placed as the engine places it, gone for a PEFT policy or precomputed log-probs;
recipes name the trainer at their own key. The step model behind it: tests/unit/test_preference.py (measured)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import run_zeromem
from tests.cli.test_check_recipes import LLAMA, RECIPES, cache_with

WORKLOAD = ("--model-config", str(LLAMA), "-R", "8", "--sequence-length", "1024", "--micro-batch", "1",
            "--format", "json")
P = 2 * 8_030_261_248  # Llama-3-8B in bf16 (the plan's own parameter count, checked below)


def estimate(*args: str) -> dict:
    done = run_zeromem("estimate", "-v", *WORKLOAD, *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def parts(data: dict, stage: str) -> dict[str, int]:
    return data["phases"][stage]["parts"]


def test_dpo_adds_the_reference_model_placed_per_stage():
    sft, dpo = estimate(), estimate("--trainer", "dpo")
    assert dpo["inputs"]["parameter_bytes"] == P  # the contract's P is unchanged: the reference is beside it
    assert all(dpo[stage] == sft[stage] for stage in ("ddp", "zero1", "zero2", "zero3"))  # the contract's figures
    assert dpo["peak_inputs"]["trainer"] == {"value": "dpo", "from": "--trainer"}
    for stage in ("zero1", "zero2"):  # prepare_deepspeed runs the reference at stage 0: whole on every rank
        assert parts(dpo, stage)["reference model"] == P
        assert dpo["peak"][stage] > sft["peak"][stage] + P // 2
    # ZeRO-3 partitions it like the policy: its own 1/8 and the small tensors kept whole on every rank
    ref3 = parts(dpo, "zero3").get("reference model")
    assert ref3 is not None and P // 8 <= ref3 < P // 8 + 2 * 10**6
    assert dpo["activations"]["bytes"] > sft["activations"]["bytes"]  # chosen and rejected: two rows per pair


def test_precomputed_log_probs_and_a_peft_policy_keep_no_reference():
    precomputed = estimate("--trainer", "dpo", "--precompute-ref-log-probs")
    lora = estimate("--trainer", "dpo", "--lora-rank", "16")
    for data in (precomputed, lora):
        for stage, found in data["phases"].items():
            assert "reference model" not in found["parts"], stage
    assert precomputed["peak_inputs"]["precompute_ref_log_probs"] == {"value": True, "from": "--precompute-ref-log-probs"}
    assert estimate("--trainer", "dpo")["peak"]["zero2"] > precomputed["peak"]["zero2"]


def test_grpo_gives_a_peak_with_its_generation_named_and_its_inputs_defaulted_from_trl():
    """--trainer grpo: TRL's defaults (max_completion_length 512, beta 0: no reference) with the sequence length as
    prompt + completion; many completions generated at once make the generation the peak, named as such."""
    sft = estimate("--gradient-checkpointing")
    data = estimate("--trainer", "grpo", "--gradient-checkpointing", "--steps-per-generation", "64")
    assert data["peak_inputs"]["max_completion_length"] == {
        "value": 512, "from": "default: TRL GRPOConfig's max_completion_length 512"}
    assert data["peak_inputs"]["steps_per_generation"] == {"value": 64, "from": "--steps-per-generation"}
    assert data["peak_inputs"]["beta"]["value"] == 0.0 and data["peak_inputs"]["use_vllm"]["value"] is False
    held = data["phases"]["zero2"]
    assert held["peak_phase"] == "forward" and held["moment"].startswith("GRPO's generation")
    cache = 2 * 32 * 8 * 128 * 2 * 64 * 1023  # Llama-3-8B's K/V per token × 64 completions × (1024 - 1) tokens
    assert held["parts"]["KV cache (generation)"] == cache and "reference model" not in held["parts"]
    assert data["peak"]["zero2"] > sft["peak"]["zero2"]
    # ZeRO-3 gathers the whole policy for generation (all but the small tensors kept whole on every rank)
    held3 = data["phases"]["zero3"]
    assert held3["moment"].startswith("GRPO's generation") and P * 0.99 < held3["parts"]["gathered parameters"] < P
    # a QLoRA base gathers its packed bytes (pro rata of its P), far below the 16-bit policy
    qlora = estimate("--trainer", "grpo", "--gradient-checkpointing", "--steps-per-generation", "64", "--lora-rank",
                     "16", "--quantization", "nf4")["phases"]["zero3"]
    assert qlora["moment"].startswith("GRPO's generation") and qlora["parts"]["gathered parameters"] < P // 2
    # FSDP2 is modelled (with a reference: one unit, gathered whole); FSDP1's summon_full_params is not, with why
    assert estimate("--trainer", "grpo", "--engine", "fsdp")["peak"]["zero3"] is not None
    fsdp1 = estimate("--trainer", "grpo", "--engine", "fsdp", "--fsdp-version", "1")
    assert fsdp1["peak"]["zero3"] is None and "sharded FSDP1" in fsdp1["phases"]["zero3"]["unknown"]
    fsdp_ref = estimate("--trainer", "grpo", "--engine", "fsdp", "--beta", "0.04")
    assert fsdp_ref["peak"]["zero3"] is not None
    assert parts(fsdp_ref, "zero3")["reference model"] == 2 * P // 8  # prepare_fsdp shards it (fp32 under FSDP)
    # its one unit gathered whole (bf16 compute) and the all-gather output beside it: the reference's forward peaks
    assert parts(fsdp_ref, "zero3")["reference gathered parameters"] == 2 * P
    assert fsdp_ref["phases"]["zero3"]["moment"] == "the reference model's forward"
    with_reference = estimate("--trainer", "grpo", "--beta", "0.04")
    assert parts(with_reference, "zero2")["reference model"] == P
    assert with_reference["peak_inputs"]["beta"] == {"value": 0.04, "from": "--beta"}


def test_grpos_generation_batch_follows_the_accumulation_flag_and_generates_before_the_gradients():
    """TRL's steps_per_generation defaults to gradient_accumulation_steps: `--gradient-accumulation-steps 4` makes
    the generation batch 4 micro-batches; the generation runs at the first micro-step (after zero_grad), so the
    later micro-batches hold the accumulated gradients beside the policy's head only."""
    data = estimate("--trainer", "grpo", "--gradient-checkpointing", "--gradient-accumulation-steps", "4")
    assert data["peak_inputs"]["steps_per_generation"] == {
        "value": 4, "from": "--gradient-accumulation-steps: TRL's default steps_per_generation"}
    one = estimate("--trainer", "grpo", "--gradient-checkpointing", "--steps-per-generation", "4")
    for stage in ("ddp", "zero1", "zero2"):  # the peak at a later micro-batch is its head, never a generation
        moment = data["phases"][stage]["moment"]
        assert "generation" not in moment or "a later micro-batch" not in moment, (stage, moment)
        assert data["phases"][stage]["phases"]["forward"] >= one["phases"][stage]["phases"]["forward"]


def test_a_trl_grpo_recipe_gets_its_generation_from_its_keys(tmp_path, monkeypatch):
    """A TRL GRPOConfig recipe: num_generations names the trainer; beta 0.04 adds the reference copy; the generation
    batch is per_device_train_batch_size × gradient_accumulation_steps (TRL's default steps_per_generation)."""
    monkeypatch.setenv("HF_HUB_CACHE", str(cache_with(tmp_path, ["meta-llama/Meta-Llama-3-8B"], LLAMA)))
    recipe = tmp_path / "grpo.yaml"
    recipe.write_text("model_name_or_path: meta-llama/Meta-Llama-3-8B\ndataset_name: trl-lib/DeepMath-103K\n"
                      "dtype: bfloat16\nbf16: true\nper_device_train_batch_size: 2\ngradient_accumulation_steps: 8\n"
                      "num_generations: 8\nmax_completion_length: 256\nbeta: 0.04\nmax_length: 1024\n")
    done = run_zeromem("estimate", "-v", "--config", str(recipe), "-R", "8", "--format", "json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    inputs = data["peak_inputs"]
    assert inputs["trainer"]["value"] == "grpo" and "num_generations" in inputs["trainer"]["from"]
    assert inputs["steps_per_generation"]["value"] == 8 and "gradient_accumulation_steps" in \
        inputs["steps_per_generation"]["from"]
    assert inputs["max_completion_length"] == {"value": 256, "from": "max_completion_length"}
    assert parts(data, "ddp")["reference model"] == P  # no DeepSpeed file: torch DDP
    text = run_zeromem("estimate", "-v", "--config", str(recipe), "-R", "8").stdout
    assert "GRPO generation: 16 completions at once" in text and "prompt 768 at its prefill" in text


def test_grpo_options_with_a_config_are_a_usage_error_naming_the_recipe_key(tmp_path):
    recipe = tmp_path / "grpo.yaml"
    recipe.write_text("model_name_or_path: m\nnum_generations: 8\n")
    done = run_zeromem("estimate", "-v", "--config", str(recipe), "--beta", "0.1")
    assert done.returncode == 2 and "--beta goes with --model-config" in done.stderr and "trl.beta" in done.stderr


def test_grpo_with_vllm_leaves_the_peak_unknown_with_why():
    data = estimate("--trainer", "grpo", "--use-vllm")
    assert all(value is None for value in data["peak"].values())
    assert all("vLLM" in found["unknown"] for found in data["phases"].values())


@pytest.mark.parametrize("trainer", ["orpo", "cpo", "simpo"])
def test_trls_reference_free_trainers_keep_their_logits_and_no_reference(trainer):
    """TRL's ORPOTrainer / CPOTrainer (memory/reference_free_loss.py): 2 rows of bf16 logits, no reference model."""
    data = estimate("--trainer", trainer)
    vocab = json.loads(LLAMA.read_text())["vocab_size"]
    for found in data["phases"].values():
        assert not [name for name in found["parts"] if name.startswith("reference")]
    assert all(found["peak_phase"] for found in data["phases"].values())  # a peak, not "unknown"
    text = run_zeromem("estimate", "-v", *WORKLOAD[:-2], "--trainer", trainer).stdout
    scored = 2 * 1024 - 2  # chosen and rejected stacked, shifted
    kept = 2 * (scored // 2) * vocab + 2 * 4 * scored + 8 * 2 * 1024  # bf16 NLL, the Triton kernel's, labels
    assert f"{trainer} (TRL): chosen and rejected stacked, 2 rows; its chosen rows' NLL and the log-prob kernel's " \
           f"2 fp32 values per token keep {kept:,} B" in text


def test_a_bad_trainer_is_a_usage_error():
    done = run_zeromem("estimate", "-v", *WORKLOAD, "--trainer", "ppo")
    assert done.returncode == 2 and "--trainer" in done.stderr and "dpo" in done.stderr


def test_the_zephyr_dpo_recipe_names_its_trainer_and_gets_a_reference(tmp_path, monkeypatch):
    """alignment-handbook recipes/zephyr-7b-beta/dpo/config_full.yaml (a DPOConfig: beta, max_prompt_length):
    8 pairs per GPU, max_length 1024, full fine-tune, so a reference model beside the policy."""
    monkeypatch.setenv("HF_HUB_CACHE", str(cache_with(tmp_path, ["alignment-handbook/zephyr-7b-sft-full"], LLAMA)))
    recipe = RECIPES / "alignment-handbook/recipes/zephyr-7b-beta/dpo/config_full.yaml"
    done = run_zeromem("estimate", "-v", "--config", str(recipe), "-R", "8", "--format", "json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    # beta is DPO's, ORPO's and CPO's: the handbook's recipes/zephyr-7b-beta/dpo/ folder says which
    assert data["peak_inputs"]["trainer"] == {"value": "dpo", "from": "beta (a preference key) in a recipe folder "
                                                                       "named dpo/: TRL DPOTrainer"}
    assert data["peak_inputs"]["micro_batch"]["value"] == 8
    assert all(found["parts"]["reference model"] > 0 for found in data["phases"].values())
    flagged = json.loads(run_zeromem("estimate", "-v", "--config", str(recipe), "-R", "8", "--format", "json",
                                     "--precompute-ref-log-probs").stdout)
    assert all("reference model" not in found["parts"] for found in flagged["phases"].values())


def test_axolotl_rl_dpo_runs_trl_18s_loss_and_check_reports_it(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(cache_with(tmp_path, ["Qwen/Qwen2.5-0.5B"], LLAMA)))
    recipe = RECIPES / "axolotl/examples/qwen2/dpo.yaml"
    done = run_zeromem("estimate", "-v", "--config", str(recipe), "-R", "8", "--optimizer", "adamw")
    assert done.returncode == 0, done.stderr
    assert "trainer dpo — rl: dpo (axolotl)" in done.stdout
    assert "dpo (TRL 1.8): chosen and rejected stacked, 4 rows" in done.stdout  # micro_batch_size 2 pairs
    assert "reference model 16,060,522,496" in done.stdout
    # ZeRO-3: TRL 1.8 scores the reference's logits after its forward released its weights (measured, trl18-dpo-ds-z3)
    ds = tmp_path / "zero3.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 3}, "bf16": {"enabled": True}}))
    sharded = tmp_path / "dpo-zero3.yaml"
    sharded.write_text(recipe.read_text() + f"\ndeepspeed: {ds}\n")
    zero3 = json.loads(run_zeromem("estimate", "-v", "--config", str(sharded), "-R", "8", "--optimizer", "adamw", "--format",
                                   "json").stdout)["phases"]["zero3"]["parts"]
    assert zero3["reference model"] > 0 and zero3["reference logits"] > 0
    assert zero3.get("reference gathered parameters", 0) == 0
    llamafactory = RECIPES / "llamafactory/examples/train_lora/qwen3_lora_dpo.yaml"
    cache_with(tmp_path, ["Qwen/Qwen3-4B-Instruct-2507"], LLAMA)
    data = json.loads(run_zeromem("estimate", "-v", "--config", str(llamafactory), "-R", "8", "--format", "json").stdout)
    assert data["peak_inputs"]["trainer"] == {"value": "dpo", "from": "pref_loss: sigmoid (LLaMA-Factory)"}
    checked = run_zeromem("check", "--world-size", "8", "--gpu-memory", "20GiB", "--format", "json", str(llamafactory))
    (over,) = [item for item in json.loads(checked.stdout)["findings"] if item["code"] == "ZM106"]
    ddp = data["phases"]["ddp"]
    assert f"{ddp['phases']['forward'] + ddp['reserved_bytes']:,} B" in over["message"]


def test_axolotl_rl_orpo_runs_trl_18s_orpo_trainer(tmp_path, monkeypatch):
    """axolotl's AxolotlORPOTrainer is TRL 1.8's ORPOTrainer (src/axolotl/core/trainers/trl.py): no Triton log-prob
    kernel in TRL 1.8, so a log-softmax per row, as measured; no reference model."""
    monkeypatch.setenv("HF_HUB_CACHE", str(cache_with(tmp_path, ["Qwen/Qwen2.5-0.5B"], LLAMA)))
    recipe = tmp_path / "orpo.yaml"
    text = (RECIPES / "axolotl/examples/qwen2/dpo.yaml").read_text()
    recipe.write_text("\n".join("rl: orpo" if line.startswith("rl:") else line for line in text.splitlines()) + "\n")
    done = run_zeromem("estimate", "-v", "--config", str(recipe), "-R", "8", "--optimizer", "adamw")
    assert done.returncode == 0, done.stderr
    assert "trainer orpo — rl: orpo (axolotl)" in done.stdout
    assert "orpo (TRL 1.8): chosen and rejected stacked, 4 rows; its chosen rows' NLL and a log-softmax per row" \
        in done.stdout
    assert "reference model" not in done.stdout and "peak unknown" not in done.stdout


def _llamafactory_dpo(tmp_path, monkeypatch, **keys) -> tuple[dict, str]:
    """LLaMA-Factory's qwen3_lora_dpo.yaml (its keys replaced by `keys`): estimate's JSON and text."""
    hub = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(hub if hub.exists() else cache_with(hub, ["Qwen/Qwen3-4B-Instruct-2507"], LLAMA)))
    recipe = tmp_path / "dpo.yaml"
    lines = (RECIPES / "llamafactory/examples/train_lora/qwen3_lora_dpo.yaml").read_text().splitlines()
    lines = [line for line in lines if line.split(":")[0] not in keys] + [f"{key}: {value}" for key, value in keys.items()]
    recipe.write_text("\n".join(lines) + "\n")
    done = run_zeromem("estimate", "-v", "--config", str(recipe), "-R", "8", "--format", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), run_zeromem("estimate", "-v", "--config", str(recipe), "-R", "8").stdout


def test_llamafactory_dpo_runs_its_own_loss_with_fp32_logits(tmp_path, monkeypatch):
    """LLaMA-Factory's CustomDPOTrainer (memory/llamafactory_loss.py, measured in tests/data/step/preference.json):
    the policy's fp32 logits beside the reference's logits and log-softmax; LoRA's reference is the policy with its
    adapters disabled (no copy), a full fine-tune's is a copy; orpo and simpo run no reference; KTO runs b
    completions and b KL completions through the reference too."""
    lora, text = _llamafactory_dpo(tmp_path, monkeypatch)
    assert "dpo (LLaMA-Factory): chosen and rejected stacked, 2 rows; its fp32 log-softmax" in text
    forward = parts(lora, "ddp")
    # the recipe accumulates 8 micro-batches: the peak is a later one's reference forward, gradients held
    assert lora["phases"]["ddp"]["moment"] == "the reference model's forward, a later micro-batch"
    assert "reference model" not in forward
    vocab = json.loads(LLAMA.read_text())["vocab_size"]  # 1 pair of cutoff_len 2048: 2 rows
    assert forward["fp32 logits"] == forward["reference fp32 logits"] == 4 * 2 * 2048 * vocab
    assert forward["reference log-softmax"] == 4 * 2 * 2047 * vocab  # the shifted positions
    full, _ = _llamafactory_dpo(tmp_path, monkeypatch, finetuning_type="full")
    # the policy's trainable parameters upcast to fp32 (model/adapter.py init_adapter), the reference loaded in bf16
    assert 2 * parts(full, "ddp")["reference model"] == full["inputs"]["parameter_bytes"]
    pure, _ = _llamafactory_dpo(tmp_path, monkeypatch, finetuning_type="full", pure_bf16="true")
    assert parts(pure, "ddp")["reference model"] == pure["inputs"]["parameter_bytes"] == \
        parts(full, "ddp")["reference model"]  # pure_bf16: policy and reference both bf16
    orpo, text = _llamafactory_dpo(tmp_path, monkeypatch, pref_loss="orpo")
    assert orpo["peak_inputs"]["trainer"] == {"value": "orpo", "from": "pref_loss: orpo (LLaMA-Factory)"}
    assert "orpo (LLaMA-Factory): chosen and rejected stacked, 2 rows" in text
    assert not [name for name in parts(orpo, "ddp") if name.startswith("reference")]
    assert orpo["phases"]["ddp"]["phases"]["forward"] < lora["phases"]["ddp"]["phases"]["forward"]
    named, _ = _llamafactory_dpo(tmp_path, monkeypatch, ref_model="Qwen/Qwen3-4B-Instruct-2507")
    assert parts(named, "ddp")["reference model"] == parts(full, "ddp")["reference model"]  # loaded beside LoRA
    other, _ = _llamafactory_dpo(tmp_path, monkeypatch, ref_model="Qwen/Qwen3-8B")
    assert all("ref_model: Qwen/Qwen3-8B" in found["unknown"] for found in other["phases"].values())
    kto, text = _llamafactory_dpo(tmp_path, monkeypatch, stage="kto")
    assert "kto (LLaMA-Factory): 1 rows; its fp32 log-softmax" in text
    assert parts(kto, "ddp")["reference KL fp32 logits"] == 4 * 2048 * vocab


def test_settings_in_the_block_are_credited(tmp_path):
    config = tmp_path / "ds_config.json"
    config.write_text(json.dumps({
        "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "zero_optimization": {"stage": 3},
        "zeromem": {"parameters": {"from_config": str(LLAMA)}, "world_size": 8, "sequence_length": 1024,
                    "trainer": "kto"}}))
    data = json.loads(run_zeromem("estimate", "-v", "--config", str(config), "--format", "json").stdout)
    assert data["peak_inputs"]["trainer"] == {"value": "kto", "from": "zeromem.trainer"}
    assert parts(data, "zero3")["reference model"] > 0
    bad = config.with_name("bad.json")
    bad.write_text(config.read_text().replace('"kto"', '"kto2"'))
    found = json.loads(run_zeromem("check", "--format", "json", str(bad)).stdout)["findings"]
    assert any(item["code"] == "ZM104" and "trainer" in item["message"] for item in found)


def test_check_says_the_peak_is_unknown_at_the_trainer_that_makes_it_so(tmp_path, monkeypatch):
    """axolotl's rl: grpo with trl.use_vllm runs TRL's GRPOTrainer generating with vLLM, whose memory is not
    modelled: with a budget, check must not read as a fitting run (no finding) but say only the model state was
    checked, at the `use_vllm` key's value. Without vLLM the peak is known (TRL 1.8's GRPO, axolotl's pin)."""
    monkeypatch.setenv("HF_HUB_CACHE", str(cache_with(tmp_path, ["meta-llama/Llama-3.2-1B"], LLAMA)))
    recipe = tmp_path / "qlora-1b-grpo.yaml"
    text = (RECIPES / "axolotl/examples/llama-3/qlora-1b-kto.yaml").read_text()
    recipe.write_text(text.replace("rl: kto\n", "rl: grpo\ntrl:\n  use_vllm: true\n"))
    row = recipe.read_text().splitlines().index("  use_vllm: true")
    done = run_zeromem("check", "--world-size", "1", "--gpu-memory", "80GiB", "--format", "json", str(recipe))
    (unknown,) = [item for item in json.loads(done.stdout)["findings"] if item["code"] == "ZM103"]
    assert "vLLM" in unknown["message"] and "only the model state" in unknown["message"]
    assert (unknown["range"]["start"]["line"], unknown["range"]["start"]["character"]) == (row, len("  use_vllm: "))
    plain = tmp_path / "qlora-1b-grpo-plain.yaml"
    plain.write_text(text.replace("rl: kto\n", "rl: grpo\n"))
    found = json.loads(run_zeromem("check", "--world-size", "1", "--gpu-memory", "80GiB", "--format", "json",
                                   str(plain)).stdout)["findings"]
    assert not [item for item in found if item["code"] in ("ZM103", "ZM104")]
    data = json.loads(run_zeromem("estimate", "-v", "--config", str(plain), "-R", "1", "--format", "json").stdout)
    assert data["peak"]["ddp"] is not None
    completion = data["peak_inputs"]["max_completion_length"]
    assert completion["value"] == 256 and completion["from"].startswith("default: TRL 1.8 GRPOConfig's")
    assert "set it" in completion["from"]  # axolotl passes None when unset
    beta = data["peak_inputs"]["beta"]  # the recipe's rl_beta: 0.5, a QLoRA policy (its adapters disabled)
    assert beta == {"value": 0.5, "from": "rl_beta (axolotl: trl.beta not set)"}
    assert "reference model" not in data["phases"]["ddp"]["parts"]
    assert done.returncode == 0  # information only
    small = run_zeromem("check", "--world-size", "1", "--gpu-memory", "4GiB", "--format", "json", str(recipe))
    codes = {item["code"] for item in json.loads(small.stdout)["findings"]}
    assert "ZM101" in codes and "ZM103" not in codes  # the model state itself does not fit: that error alone


def test_axolotl_rl_kto_runs_trl_18s_kto_trainer_and_check_reports_it(tmp_path, monkeypatch):
    """axolotl's rl: kto is TRL 1.8's KTOTrainer (measured: tests/unit/test_preference.py trl18-kto-*): b completions
    (no stacking) and the logits copy its metrics select beside DPO's tensors, no KV cache (axolotl sets the model
    config's use_cache False); the reference is the QLoRA policy with its adapters off (no reference model's bytes)."""
    monkeypatch.setenv("HF_HUB_CACHE", str(cache_with(tmp_path, ["meta-llama/Llama-3.2-1B"], LLAMA)))
    recipe = RECIPES / "axolotl/examples/llama-3/qlora-1b-kto.yaml"
    done = run_zeromem("estimate", "-v", "--config", str(recipe), "-R", "1")
    assert done.returncode == 0, done.stderr
    assert "trainer kto — rl: kto (axolotl)" in done.stdout and "peak unknown" not in done.stdout
    assert "kto (TRL 1.8): 2 rows; its log-probs keep" in done.stdout  # micro_batch_size 2 completions
    data = json.loads(run_zeromem("estimate", "-v", "--config", str(recipe), "-R", "1", "--format", "json").stdout)
    config, tokens, c = json.loads(LLAMA.read_text()), 2 * 2048, 2  # axolotl QLoRA: norms, embeddings, head cast back to bf16
    found = data["phases"]["ddp"]
    assert found["parts"]["logits selected for the metrics"] == found["parts"]["logits"] == c * tokens * config[
        "vocab_size"]
    assert found["parts"]["reference logits"] == found["parts"]["logits"]  # the adapter-disabled policy's forward
    assert not {"reference model", "reference KV cache", "policy KV cache"} & set(found["parts"])
    peak = data["peak"]["ddp"]
    assert peak == found["phases"]["forward"] + found["reserved_bytes"] == sum(found["parts"].values()) + found[
        "reserved_bytes"]
    budget = (data["ddp"] + peak) // 2
    checked = run_zeromem("check", "--world-size", "1", "--gpu-memory", str(budget), "--format", "json", str(recipe))
    (over,) = [item for item in json.loads(checked.stdout)["findings"] if item["code"] == "ZM106"]
    assert f"= {peak:,} B" in over["message"]
