"""Recipe files (axolotl, LLaMA-Factory, TRL / alignment-handbook) through `zeromem check`: the real recipes in
tests/data/recipes (SOURCES.md) are recognised by content, give a peak, and their problems are positioned in
the file that holds them (ZM108, ZM310, ZM311, ZM353, ZM104)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from tests.cli.conftest import run_zeromem
from zeromem_lsp.analysis import analyse
from zeromem_lsp.configs.layers import command_line
from zeromem_lsp.configs.settings import ZeromemSettings
from zeromem_lsp.resolved.step_inputs import step_buckets
from zeromem_lsp.project import file_loader

DATA = Path(__file__).resolve().parents[1] / "data"
RECIPES = DATA / "recipes"
#: google/gemma-3-4b-it's language model (Gemma3ForCausalLM): the step model's subject in these tests; the published
#: composite config (vision tower too) is counted whole and gets no peak (test_the_published_composite_...)
GEMMA = DATA / "models" / "gemma-3-4b-it-text" / "config.json"
GEMMA_COMPOSITE = DATA / "models" / "gemma-3-4b-it" / "config.json"
LLAMA = DATA / "models" / "Meta-Llama-3-8B" / "config.json"  # the stand-in for the models not in tests/data
#: Every recipe in tests/data/recipes, with the model it names and whether it runs DeepSpeed.
RECIPE_FILES = {
    "axolotl/examples/llama-3/lora-1b.yml": "NousResearch/Llama-3.2-1B",
    "axolotl/examples/llama-3/lora-1b-ray.yml": "NousResearch/Llama-3.2-1B",
    "axolotl/examples/llama-3/qlora-1b.yml": "NousResearch/Llama-3.2-1B",
    "axolotl/examples/mistral/mixtral/mixtral.yml": "mistralai/Mixtral-8x7B-v0.1",
    "axolotl/examples/jamba/qlora_deepspeed.yaml": "ai21labs/Jamba-v0.1",
    "axolotl/examples/mistral/bigstral/bigstral-ds-zero3.yaml": "mistral-community/Mixtral-8x22B-v0.1",
    "axolotl/examples/llama-3/qlora-fsdp-70b.yaml": "casperhansen/llama-3-70b-fp16",
    "axolotl/examples/gemma3/gemma-3-4b-qlora.yml": "google/gemma-3-4b-it",
    "axolotl/examples/qwen3/32b-qlora.yaml": "Qwen/Qwen3-32B",
    "axolotl/examples/llama-3/fft-8b-liger-fsdp.yaml": "NousResearch/Meta-Llama-3.1-8B",
    "axolotl/examples/qwen2/dpo.yaml": "Qwen/Qwen2.5-0.5B",
    "axolotl/examples/llama-3/qlora-1b-kto.yaml": "meta-llama/Llama-3.2-1B",
    "llamafactory/examples/train_lora/qwen3_lora_sft.yaml": "Qwen/Qwen3-4B-Instruct-2507",
    "llamafactory/examples/train_lora/qwen3_lora_sft_ds3.yaml": "Qwen/Qwen3-4B-Instruct-2507",
    "llamafactory/examples/train_lora/qwen3_lora_dpo.yaml": "Qwen/Qwen3-4B-Instruct-2507",
    "llamafactory/examples/train_qlora/qwen3_lora_sft_otfq.yaml": "Qwen/Qwen3-4B-Instruct-2507",
    "llamafactory/examples/train_full/qwen3_full_sft.yaml": "Qwen/Qwen3-4B-Instruct-2507",
    "alignment-handbook/recipes/zephyr-7b-beta/sft/config_qlora.yaml": "mistralai/Mistral-7B-v0.1",
    "alignment-handbook/recipes/zephyr-7b-beta/sft/config_full.yaml": "mistralai/Mistral-7B-v0.1",
    "alignment-handbook/recipes/zephyr-7b-beta/dpo/config_qlora.yaml": "alignment-handbook/zephyr-7b-sft-qlora",
    "alignment-handbook/recipes/zephyr-7b-beta/dpo/config_full.yaml": "alignment-handbook/zephyr-7b-sft-full",
    "alignment-handbook/recipes/smollm2/sft/config.yaml": "HuggingFaceTB/SmolLM2-1.7B",
}


def cache_with(root: Path, repo_ids, config: Path = GEMMA) -> Path:
    """A Hugging Face hub cache holding `config` as each repo id's config.json at revision main."""
    for repo_id in repo_ids:
        repo = root / ("models--" + repo_id.replace("/", "--"))
        (repo / "snapshots" / "c0ffee").mkdir(parents=True)
        shutil.copy(config, repo / "snapshots" / "c0ffee" / "config.json")
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text("c0ffee")
    return root


def findings(*args: str) -> list[dict]:
    done = run_zeromem("check", "--format", "json", "-q", *args)
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)["findings"]


def line_of(path: Path, needle: str) -> int:
    return next(number for number, line in enumerate(path.read_text().splitlines()) if line.startswith(needle))


#: Every recipe of the corpus (tests/data/recipes/corpus.json) with the model it names.
CORPUS = {case["recipe"]: case["model"] for case in json.loads((RECIPES / "corpus.json").read_text())}


def test_every_recipe_is_recognised_and_its_missing_model_named_at_its_key(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    done = run_zeromem("check", "--format", "json", "-q", str(RECIPES))
    results: dict[str, list[dict]] = {}
    for item in json.loads(done.stdout)["findings"]:
        results.setdefault(Path(item["path"]).resolve().relative_to(RECIPES).as_posix(), []).append(item)
    found = {name for name, items in results.items() if any(item["code"] == "ZM108" for item in items)}
    assert found == set(CORPUS)  # the Accelerate YAML and DeepSpeed JSON beside them are not recipes
    for name, model in CORPUS.items():
        (item,) = [item for item in results[name] if item["code"] == "ZM108"]
        key = "base_model" if name.startswith("axolotl") else "model_name_or_path"
        assert item["range"]["start"]["line"] == line_of(RECIPES / name, key + ":")
        assert f"cannot read {model!r}" in item["message"]
        assert str(tmp_path / "empty-cache" / ("models--" + model.replace("/", "--"))) in item["message"]
    assert not [item for items in results.values() for item in items if item["severity"] == "error"]


def test_a_budget_beside_an_unread_model_adds_no_second_finding(tmp_path, monkeypatch):
    """ZM108 already names the model and where it was looked for: ZM103's "declare parameters in the zeromem
    block" beside it would say the same thing less precisely. A missing input other than the model still shows."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    results: dict[str, list[str]] = {}
    for item in findings("--gpu-memory", "80GiB", "--world-size", "8", str(RECIPES)):
        results.setdefault(Path(item["path"]).resolve().relative_to(RECIPES).as_posix(), []).append(item["code"])
    for name in RECIPE_FILES:
        assert results[name].count("ZM108") == 1 and "ZM103" not in results[name], name
    beside = "alignment-handbook/recipes/accelerate_configs/zero3.yaml"  # no model named at all: ZM103 says so
    assert results[beside] == ["ZM103"]
    (tmp_path / "zero3.json").write_text('{"zero_optimization": {"stage": 3}, "bf16": {"enabled": true}}')
    recipe = write(tmp_path, "sft.yaml", "model_name_or_path: org/model\nfinetuning_type: full\ndeepspeed: zero3.json\n")
    both = findings("--gpu-memory", "80GiB", str(recipe))  # ZeRO-3 needs the world size too: that alone is said
    (missing,) = [item for item in both if item["code"] == "ZM103"]
    assert "world size" in missing["message"] and "model size" not in missing["message"]


def test_a_cached_model_is_counted_not_reported(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(cache_with(tmp_path, ["google/gemma-3-4b-it"])))
    assert findings(str(RECIPES / "axolotl/examples/gemma3/gemma-3-4b-qlora.yml")) == []


def test_the_published_composite_is_counted_whole_and_gets_a_peak_with_its_tower_frozen(tmp_path, monkeypatch):
    """google/gemma-3-4b-it's own config.json: Gemma3ForConditionalGeneration counted whole (4,300,079,472: the
    SigLIP tower and projector too), no finding, and — QLoRA freezing the tower — a peak with Gemma 3's image tokens
    (configs/image_tokens.py), which it says it assumed."""
    monkeypatch.setenv("HF_HUB_CACHE", str(cache_with(tmp_path, ["google/gemma-3-4b-it"], GEMMA_COMPOSITE)))
    recipe = RECIPES / "axolotl/examples/gemma3/gemma-3-4b-qlora.yml"
    assert findings(str(recipe)) == []
    plan = _plan(recipe)
    assert plan.peak is not None and plan.peak.stage_peak(plan.stage) is not None and not plan.peak.missing
    vision = plan.peak.source.shape.vision
    assert vision is not None and not vision.trained and vision.tokens == 256
    assert plan.inputs.parameter_bytes > 0 and "4,300,079,472 parameters counted" in str(plan)
    assert "images: Gemma 3's mm_tokens_per_image 256 per image" in str(plan)


def _plan(path: Path, world_size: int = 8):
    settings = ZeromemSettings.from_checked({"world_size": world_size})
    return analyse(path.read_text(), path.name, (), settings, file_loader(path)).plan


@pytest.mark.parametrize("name", [name for name in RECIPE_FILES])
def test_each_real_recipe_gives_a_peak_in_check(name, tmp_path, monkeypatch):
    """Gemma's own config.json, and a stand-in (Llama-3-8B's) under the other recipes' model ids: the recipe's own
    batch, sequence, checkpointing, adapter and DeepSpeed file give the peak; a budget between model state and
    peak is ZM106."""
    others = set(RECIPE_FILES.values()) - {"google/gemma-3-4b-it"}
    cache_with(tmp_path, others, LLAMA)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache_with(tmp_path, ["google/gemma-3-4b-it"])))
    plan = _plan(RECIPES / name)
    assert plan.peak is not None and not plan.peak.missing, getattr(plan, "missing", plan)
    stage = plan.stage
    state, found = plan.placement.gpu[stage], plan.peak.stage_peak(stage)
    if found is None:  # the phase model refuses a full fine-tune's optimizer or offload: said, no ZM106 guessed
        why = plan.peak.unknown(stage)
        assert plan.inputs.adapter is None, name  # with an adapter (most recipes) the frozen-base step is known
        assert why.startswith("peak unknown: ") and ("adam8bit" in why or "FSDP CPU offload" in why), why
        items = findings("--world-size", "8", "--gpu-memory", str(state + 2**20), str(RECIPES / name))
        assert not [item for item in items if item["code"] == "ZM106"]
        return
    peak = found.total
    assert peak == sum(part.bytes for part in found.held.parts) + found.reserved
    budget = (state + peak) // 2
    items = findings("--world-size", "8", "--gpu-memory", str(budget), str(RECIPES / name))
    (over,) = [item for item in items if item["code"] == "ZM106"]
    assert f"= {peak:,} B" in over["message"]


def test_the_recipes_batch_and_sequence_drive_the_peak(tmp_path, monkeypatch):
    """gemma-3-4b-qlora.yml with gemma-3-4b-it's own config.json: micro_batch_size 2 × sequence_len 2048 give the
    loss's T×V tensors over 262,208 (the vocabulary Transformers defaults for gemma3_text). axolotl casts the
    norms, embeddings and head back to bf16 after prepare_model_for_kbit_training (`_configure_embedding_dtypes`),
    so the forward runs in bf16 and the loss makes its fp32 copy of the bf16 logits."""
    monkeypatch.setenv("HF_HUB_CACHE", str(cache_with(tmp_path, ["google/gemma-3-4b-it"])))
    plan = _plan(RECIPES / "axolotl/examples/gemma3/gemma-3-4b-qlora.yml")
    assert plan.peak.source.lora.activation_dtype == "bf16" and plan.peak.source.optimizer == "adam8bit"
    assert plan.peak.inputs["kbit_prepare"].value is False
    step = plan.peak.stage_peak(plan.stage)  # the recipe's own 8-bit AdamW: with an adapter the peak is known
    forward, backward = dict(step.phases["forward"].parts), dict(step.phases["backward"].parts)
    assert forward["logits"] == 2 * 2 * 2048 * 262_208 and forward["fp32 logits copy"] == 4 * 2 * 2048 * 262_208
    # gradient_accumulation_steps 4: the later micro-batches hold the adapters' gradients at the loss's backward
    assert step.phases["backward"].moment == "the loss's backward, a later micro-batch"
    assert backward["accumulated gradients"] == plan.peak.source.lora.gradient_bytes > 0
    assert backward["log-softmax gradients"] == 2 * 4 * 2 * 2048 * 262_208
    assert plan.peak.inputs["gradient_accumulation_steps"].path == ("gradient_accumulation_steps",)
    assert plan.peak.inputs["micro_batch"].path == ("micro_batch_size",)
    assert plan.peak.inputs["sequence_length"].path == ("sequence_len",)
    assert plan.family == "torch" and plan.stage == "ddp"  # no deepspeed / fsdp_config: torch DDP


def test_a_recipes_deepspeed_file_is_followed_with_its_auto_filled(tmp_path, monkeypatch):
    """lora-1b-ray.yml names deepspeed_configs/zero3.json (from the repository root): ZeRO-3, bf16 from the
    recipe's `bf16: auto`, buckets from the model's hidden size 2560 as Transformers fills "auto"."""
    monkeypatch.setenv("HF_HUB_CACHE", str(cache_with(tmp_path, ["NousResearch/Llama-3.2-1B"])))
    plan = _plan(RECIPES / "axolotl/examples/llama-3/lora-1b-ray.yml")
    lora = plan.inputs.adapter  # the recipe's adapter: frozen base, trainable LoRA weights
    assert plan.stage == "zero3" and lora.precision == "bf16" and lora.adapter.rank == 16
    assert lora.adapter.origin("rank").path == ("lora_r",) and lora.count.trainable < plan.inputs.parameters
    # no optimizer block in zero3.json: the Trainer builds the recipe's `optimizer: adamw_8bit`
    assert lora.optimizer == "adam8bit" and plan.origins["optimizer"].path == ("optimizer",)
    buckets = step_buckets(plan.peak.source)  # what the phase model receives
    assert buckets.reduce_bucket_size == 2560 * 2560 and buckets.prefetch_bucket_size == int(0.9 * 2560 ** 2)
    assert buckets.persistence_threshold == 10 * 2560


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_missing_deepspeed_file_is_zm311_on_its_value_naming_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    (tmp_path / ".git").mkdir()  # the project root: the search stops here
    (tmp_path / "examples").mkdir()
    recipe = write(tmp_path / "examples", "lora.yml", "base_model: org/model\nsequence_len: 512\n"
                   "micro_batch_size: 1\ndeepspeed: deepspeed_configs/zero3.jsn\n")
    (item,) = [item for item in findings(str(recipe)) if item["code"] == "ZM311"]
    assert item["severity"] == "error" and item["range"]["start"] == {"line": 3, "character": 11}
    assert str(tmp_path / "examples" / "deepspeed_configs/zero3.jsn") in item["message"]
    assert str(tmp_path / "deepspeed_configs/zero3.jsn") in item["message"]


def test_the_deepspeed_file_is_found_from_the_project_root(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    (tmp_path / "examples").mkdir()
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "zero2.json").write_text('{"zero_optimization": {"stage": 2}, "bf16": {"enabled": "auto"}}')
    recipe = write(tmp_path / "examples", "lora.yml", "base_model: org/model\ndeepspeed: ds/zero2.json\n")
    assert [item["code"] for item in findings(str(recipe))] == ["ZM108"]


def test_misspelled_keys_are_refused_by_llamafactory_and_trl_and_warned_for_axolotl(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    factory = write(tmp_path, "sft.yaml", "model_name_or_path: Qwen/Qwen3-4B\nfinetuning_type: lora\ncutof_len: 2048\n")
    trl = write(tmp_path, "trl.yaml", "model_name_or_path: org/m\nuse_peft: true\nmax_seq_lenght: 1024\n")
    axolotl = write(tmp_path, "ax.yml", "base_model: org/m\nmicro_batchsize: 4\nmy_plugin_setting: 1\n")
    (refused,) = [item for item in findings(str(factory)) if item["code"] == "ZM310"]
    assert refused["severity"] == "error" and "did you mean cutoff_len?" in refused["message"]
    assert refused["range"]["start"] == {"line": 2, "character": 0}
    (warned,) = [item for item in findings(str(trl)) if item["code"] == "ZM357"]  # the script may declare it
    assert warned["severity"] == "warning"
    assert "max_seq_length" in warned["message"] or "max_length" in warned["message"]
    (ignored,) = [item for item in findings(str(axolotl)) if item["code"] == "ZM353"]  # not the plugin's key
    assert ignored["severity"] == "warning" and "micro_batch_size" in ignored["message"]
    assert ignored["range"]["start"]["line"] == 1


def test_the_real_recipes_have_no_unknown_keys(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    codes = {item["code"] for item in findings(str(RECIPES))}
    assert not codes & {"ZM310", "ZM353", "ZM311", "ZM104"}


def test_check_fix_renames_a_misspelled_recipe_key(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    recipe = write(tmp_path, "ax.yml", "base_model: org/m\nmicro_batchsize: 4\n")
    run_zeromem("check", "--fix", "-q", str(recipe))
    assert recipe.read_text() == "base_model: org/m\nmicro_batch_size: 4\n"


@pytest.mark.parametrize("rank, bad", [("0", True), ("-8", True), ("1000000", True), ("16", False)])
def test_an_impossible_lora_rank_is_zm104(rank, bad, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    recipe = write(tmp_path, "ax.yml", f"base_model: org/m\nadapter: lora\nlora_r: {rank}\n")
    ranks = [item for item in findings(str(recipe)) if item["code"] == "ZM104"]
    assert bool(ranks) is bad
    if bad:
        assert ranks[0]["range"]["start"] == {"line": 2, "character": 8} and "lora_r" in ranks[0]["message"]


def test_a_zeromem_block_in_a_llamafactory_recipe_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    recipe = write(tmp_path, "sft.yaml", "model_name_or_path: org/m\nstage: sft\nzeromem:\n  world_size: 8\n")
    assert "ZM310" in {item["code"] for item in findings(str(recipe))}


def test_other_yaml_is_not_a_recipe(tmp_path):
    workflow = write(tmp_path, "ci.yml", "name: ci\non: [push]\njobs:\n  test:\n    runs-on: ubuntu-latest\n")
    assert findings(str(workflow)) == []


def test_without_a_world_size_a_llamafactory_recipe_is_told_where_to_give_it(tmp_path, monkeypatch):
    """LLaMA-Factory refuses a zeromem block, so the advice is the flag or the project settings."""
    monkeypatch.setenv("HF_HUB_CACHE", str(cache_with(tmp_path, ["Qwen/Qwen3-4B-Instruct-2507"])))
    (note,) = findings("--gpu-memory", "12GiB", str(RECIPES / "llamafactory/examples/train_lora/qwen3_lora_sft_ds3.yaml"))
    assert note["code"] == "ZM103" and "--world-size" in note["message"] and "zeromem block" not in note["message"]


def test_a_project_override_gives_the_recipes_world_size(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(cache_with(tmp_path / "cache", ["Qwen/Qwen3-4B-Instruct-2507"])))
    shutil.copytree(RECIPES / "llamafactory", tmp_path / "project")
    recipe = tmp_path / "project" / "examples/train_lora/qwen3_lora_sft_ds3.yaml"
    plan = _plan(recipe)  # the same recipe with world size 8 given directly
    budget = (plan.placement.gpu["zero3"] + plan.peak.at("zero3")) // 2  # model state fits, the peak does not
    (tmp_path / "project" / "pyproject.toml").write_text(
        f'[tool.zeromem]\ngpu-memory = {budget}\n[[tool.zeromem.overrides]]\nfiles = ["*_ds3.yaml"]\nworld-size = 8\n')
    (peak,) = findings(str(recipe))
    assert peak["code"] == "ZM106" and f"= {plan.peak.at('zero3'):,} B" in peak["message"]


@pytest.mark.parametrize("name", ["alignment-handbook/recipes/zephyr-7b-beta/sft/config_full.yaml",
                                  "axolotl/examples/llama-3/qlora-fsdp-70b.yaml"])
def test_no_quick_fix_rewrites_a_recipe_over_budget(name, tmp_path, monkeypatch):
    """ZM101 on a recipe suggests a cheaper setup in words only: a DDP recipe has no zero_optimization to
    edit, and axolotl's `fsdp:` list is not Transformers' option string."""
    monkeypatch.setenv("HF_HUB_CACHE", str(cache_with(tmp_path / "cache", set(RECIPE_FILES.values()))))
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text((RECIPES / name).read_text().replace("fsdp_offload_params: true", "fsdp_offload_params: false"))
    before = recipe.read_text()
    assert "ZM101" in {item["code"] for item in findings("--world-size", "8", "--gpu-memory", "2MiB", str(recipe))}
    run_zeromem("check", "--fix", "--unsafe-fixes", "-q", "--world-size", "8", "--gpu-memory", "2MiB", str(recipe))
    assert recipe.read_text() == before


def test_a_zero_micro_batch_and_a_missing_model_are_zm104(tmp_path):
    recipe = write(tmp_path, "ax.yml", "sequence_len: 2048\nmicro_batch_size: 0\n")
    items = [item for item in findings(str(recipe)) if item["code"] == "ZM104"]
    assert {item["range"]["start"]["line"] for item in items} == {0, 1}
    assert any("needs base_model" in item["message"] for item in items)
    assert any("micro_batch_size must be a positive integer" in item["message"] for item in items)


@pytest.mark.parametrize("body, code, line", [
    ("base_model: 123\nsequence_len: 5\n", "ZM104", 0),
    ("base_model: org/m\ndeepspeed: [1, 2]\n", "ZM104", 1),
    ("base_model: org/m\nfsdp_config: 3\n", "ZM104", 1),
    ("base_model: org/m\nadapter: {a: 1}\n", "ZM104", 1),
    ("base_model: org/m\ndeepspeed: broken.json\n", "ZM311", 1),
    ("model_name_or_path: m\nstage: sft\ncutoff_len: abc\n", "ZM104", 2),
])
def test_bad_recipe_values_are_positioned_findings(body, code, line, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    (tmp_path / "broken.json").write_text("{not json")
    recipe = write(tmp_path, "recipe.yaml", body)
    done = run_zeromem("check", "--format", "json", "-q", "--world-size", "4", str(recipe))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    items = [item for item in json.loads(done.stdout)["findings"] if item["code"] == code]
    assert [item["range"]["start"]["line"] for item in items] == [line]


def test_axolotls_top_level_fsdp_version_applies_to_its_fsdp_config():
    """fsdp_version: 2 beside fsdp_config (axolotl's layout): reshard_after_forward false is ≈ ZeRO-2."""
    text = "base_model: org/m\nfsdp_version: 2\nfsdp_config:\n  reshard_after_forward: false\n"
    settings = ZeromemSettings.from_checked({"world_size": 8, "parameters": 7_000_000_000})
    assert analyse(text, "fsdp.yml", (), settings).plan.stage == "zero2"
    assert analyse(text.replace("fsdp_version: 2\n", ""), "fsdp.yml", (), settings).plan.stage == "zero3"


def test_a_recipe_without_an_engine_is_torch_ddp_in_check_and_estimate(tmp_path, monkeypatch):
    """No deepspeed / fsdp_config: plain torch DDP in `check` and `estimate --config` alike — one stage (P + G + O
    whatever the world size), weights, gradients and adamw_bnb_8bit's state in bf16 without a master copy, and no
    offload or FSDP strategy to suggest; the advice names DeepSpeed or FSDP in words (no edit of the recipe)."""
    monkeypatch.setenv("HF_HUB_CACHE", str(cache_with(tmp_path, ["google/gemma-3-4b-it"])))
    # the recipe as a full fine-tune (no `adapter:`: axolotl trains every parameter, load_in_4bit then unused)
    source = (RECIPES / "axolotl/examples/gemma3/gemma-3-4b-qlora.yml").read_text()
    assert "adapter: qlora\n" in source
    recipe = str(write(tmp_path, "gemma-3-4b-full.yml", source.replace("adapter: qlora\n", "")))
    figures = {}
    for ranks in ("1", "8"):
        done = run_zeromem("estimate", "-v", "--config", recipe, "--world-size", ranks, "--gpu-memory", "8GiB",
                           "--format", "json")
        assert done.returncode == 0 and not done.stderr  # over the budget, but DDP is only assumed: no failure
        figures[ranks] = data = json.loads(done.stdout)
        # one GPU and no engine: plain torch, nothing assumed; eight: DDP is an assumption
        assert data["approximate"] is True and (data["engine_assumed"] is None) == (ranks == "1")
        # axolotl's unfrozen_parameters (only the language model and the head train) is named, not modelled
        assert [item["key"] for item in data["ignored"]] == ["unfrozen_parameters"] and data["fits"] == {"ddp": False}
        named = run_zeromem("estimate", "-v", "--config", recipe, "--world-size", ranks, "--gpu-memory", "8GiB",
                            "--engine", "torch", "--format", "json")  # the engine named: certain, exit 1
        assert json.loads(named.stdout)["engine_assumed"] is None  # the engine named: no longer an assumption
        inputs = data["inputs"]
        assert data["stage"] == "ddp" and set(data["fits"]) == {"ddp"}
        assert data["peak_inputs"]["engine"]["value"] == "torch"
        assert inputs["bytes_per_parameter"] == {"parameter": 2, "gradient": 2, "optimizer": 2}
        assert data["ddp"] == inputs["parameter_bytes"] + inputs["gradient_bytes"] + inputs["optimizer_bytes"]
    # the embedding's adamw_bnb_8bit state at 32 bits (HF Trainer's nn.Embedding override): 6 B more a parameter
    embedding = 262_208 * 2_560  # gemma-3-4b's text vocabulary × hidden size
    assert figures["1"]["ddp"] == figures["8"]["ddp"] == 6 * figures["8"]["inputs"]["parameters"] + 6 * embedding
    (over,) = [item for item in findings("--world-size", "8", "--gpu-memory", "8GiB", recipe) if item["code"] == "ZM101"]
    assert over["severity"] == "warning" and over["message"].endswith(
        "torch DDP is assumed (the recipe names no engine and no Accelerate config is paired with it))")
    assert over["message"].startswith(f"DDP needs 25.4 GiB per GPU ({figures['8']['ddp']:,} B)")
    assert "NO_SHARD" not in over["message"] and "offload" not in over["message"]
    assert "DeepSpeed (a `deepspeed:` config with ZeRO-2/3) or FSDP (an `fsdp_config`)" in over["message"]
    text = run_zeromem("estimate", "-v", "--config", recipe, "--world-size", "8", "--gpu-memory", "8GiB").stdout
    assert "engine torch" in text and "NO_SHARD" not in text and "(torch: no separate master copy)" in text
    assert "nothing peaks within the budget under DDP" in text
    # the 8-bit AdamW's full fine-tuning step is derived from bitsandbytes (memory/optimizer_step.py): its uint8 m, v
    # and block scales (2 B per parameter and a little more; the embedding's fp32 m, v 6 B more) are a part of the
    # known peak, labelled derived
    phase, parameters = figures["8"]["phases"]["ddp"], figures["8"]["inputs"]["parameters"]
    state = phase["parts"]["8-bit m, v + block scales (derived)"] - 6 * embedding
    assert 2 * parameters < state < 2.05 * parameters
    assert figures["8"]["peak"]["ddp"] == sum(phase["parts"].values()) + phase["reserved_bytes"]
    # with torch AdamW and 8192 tokens the peak is known and sits in backward: budgets the model state fits but
    # the peak does not, from the shown phases
    adamw = str(write(tmp_path, "gemma-3-4b-adamw.yml", source.replace("adapter: qlora\n", "").replace(
        "optimizer: adamw_bnb_8bit", "optimizer: adamw_torch").replace("sequence_len: 2048", "sequence_len: 8192")))

    def peak(*extra: str) -> tuple[int, int]:
        done = run_zeromem("estimate", "-v", "--config", adamw, "--format", "json", *extra)
        data = json.loads(done.stdout)
        phase = data["phases"]["ddp"]
        assert data["peak"]["ddp"] == sum(phase["parts"].values()) + phase["reserved_bytes"]
        return data["peak"]["ddp"], data["ddp"]

    (two, state), (one, _) = peak(), peak("--micro-batch", "1")
    assert state < one < two  # the recipe's micro-batch 2, and 1
    (found,) = [item for item in findings("--gpu-memory", str((one + two) // 2), adamw) if item["code"] == "ZM106"]
    assert "the cheapest whose peak fits is DDP with micro-batch 1" in found["message"]
    assert "offload" not in found["message"]
    (found,) = [item for item in findings("--gpu-memory", str((state + one) // 2), adamw) if item["code"] == "ZM106"]
    assert ("nothing peaks within the budget under DDP, which keeps the whole model state on every rank; DeepSpeed "
            "(a `deepspeed:` config with ZeRO-2/3) or FSDP (an `fsdp_config`) would shard it over the ranks"
            in found["message"]) and found["severity"] == "warning"


def test_a_lora_run_on_a_recipe_without_an_engine_is_costed_as_peft_under_torch(tmp_path, monkeypatch):
    """The adapter settings on a torch DDP recipe: PEFT's bytes (adapters in fp32, no DeepSpeed recast, no FSDP
    gradient rule), only the DDP stage, and DDP = P + G + O of those terms."""
    monkeypatch.setenv("HF_HUB_CACHE", str(cache_with(tmp_path, ["google/gemma-3-4b-it"])))
    recipe = str(RECIPES / "axolotl/examples/gemma3/gemma-3-4b-qlora.yml")
    done = run_zeromem("estimate", "-v", "--config", recipe, "--lora-rank", "32", "--quantization", "nf4", "--format", "json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    inputs = data["inputs"]
    assert data["stage"] == "ddp" and inputs["adapter"]["engine"] == "peft"
    assert data["ddp"] == inputs["parameter_bytes"] + inputs["gradient_bytes"] + inputs["optimizer_bytes"]
    assert inputs["gradient_bytes"] == 4 * inputs["trainable_parameters"]  # fp32 adapters' gradients (PEFT autocast)


def test_a_qlora_recipe_with_fsdp_cpu_offload_has_the_frozen_base_peak(tmp_path, monkeypatch):
    """qlora-fsdp-70b.yaml (FSDP, cpu offload): with an adapter the frozen-base step places P, G, O itself — all on
    the host — so the peak is known: gathered weights, LoRA activations and the loss's tensors, no optimizer work
    on the GPU (a full fine-tune with FSDP CPU offload stays unknown: the full step has no FSDP offload)."""
    monkeypatch.setenv("HF_HUB_CACHE", str(cache_with(tmp_path, ["casperhansen/llama-3-70b-fp16"], LLAMA)))
    plan = _plan(RECIPES / "axolotl/examples/llama-3/qlora-fsdp-70b.yaml")
    assert plan.family == "fsdp" and plan.inputs.adapter is not None and plan.peak.offload.moves(plan.stage) == (
        True, True, True)
    step = plan.peak.stage_peak(plan.stage)
    for phase in step.phases.values():
        held = dict(phase.parts)
        assert "parameters" not in held and "optimizer states" not in held and "optimizer scratch" not in held
        assert phase.peak == sum(held.values())
    assert dict(step.phases["backward"].parts)["activations"] == plan.peak.lora_activations.total
    assert step.total == step.held.peak + step.reserved


def test_a_safe_fix_never_renames_a_key_another_reader_knows_or_onto_a_key_already_set(tmp_path, monkeypatch):
    """Issue 26: axolotl's expert-parallel example names `expert_parallel_size` (a key of its bundled
    expert_parallel plugin, listed in `plugins:`); `check --fix` renamed it to context_parallel_size. A plugin's key
    is known; a near miss of a key that is already set, or a key another tool reads, is reported but not renamed."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    text = ("base_model: Qwen/Qwen3-30B-A3B\nplugins:\n  - axolotl.integrations.expert_parallel.ExpertParallelPlugin\n"
            "expert_parallel_size: 4\nmicro_batch_size: 1\n")
    recipe = write(tmp_path, "ep.yml", text)
    done = run_zeromem("check", "--fix", "--unsafe-fixes", str(recipe))
    assert done.returncode in (0, 1) and recipe.read_text() == text
    assert not [item for item in findings(str(recipe)) if item["code"] in ("ZM353", "ZM310")]
    shadow = "base_model: org/m\nmicro_batch_size: 2\nmicro_batchsize: 4\n"  # the new name is set: no rename
    recipe = write(tmp_path, "shadow.yml", shadow)
    (warned,) = [item for item in findings(str(recipe)) if item["code"] == "ZM353"]
    assert "not renamed: micro_batch_size is already set" in warned["message"] and not warned.get("fixes")
    run_zeromem("check", "--fix", str(recipe))
    assert recipe.read_text() == shadow
    other = "model_name_or_path: Qwen/Qwen3-4B\nfinetuning_type: lora\nsequence_len: 2048\n"  # axolotl's key
    recipe = write(tmp_path, "lf.yaml", other)
    run_zeromem("check", "--fix", str(recipe))
    assert recipe.read_text() == other
    misspelt = write(tmp_path, "typo.yml", "base_model: org/m\nmicro_batchsize: 4\n")  # still fixed
    run_zeromem("check", "--fix", str(misspelt))
    assert misspelt.read_text() == "base_model: org/m\nmicro_batch_size: 4\n"


def test_a_trl_script_key_is_a_warning_with_the_nearest_key(tmp_path, monkeypatch):
    """open-r1's GRPO recipes set keys its own GRPOScriptArguments declare (known now); a key no class declares
    is a ZM357 warning, never an error: the script might declare it."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    text = ("model_name_or_path: Qwen/Qwen2.5-1.5B\nnum_generations: 8\ndataset_prompt_column: problem\n"
            "system_prompt: be brief\nmy_script_flag: 3\n")
    recipe = write(tmp_path, "grpo.yaml", text)
    found = findings(str(recipe))
    assert [item["code"] for item in found if item["code"] in ("ZM310", "ZM357")] == ["ZM357"]
    (warned,) = [item for item in found if item["code"] == "ZM357"]
    assert warned["severity"] == "warning" and "my_script_flag" in warned["message"]
    # TrlParser refuses unknown config keys only from TRL 0.19 (fail_with_unknown_args); open-r1 pins 0.18.0, which
    # drops them: the message does not claim the launch stops whatever the TRL
    assert "TRL 0.19 and later; older releases drop the key silently" in warned["message"]
    done = run_zeromem("check", "-q", str(recipe))
    assert done.returncode == 0  # warnings only


def test_a_directory_run_folds_the_launch_files_budget_notes_into_one_line(tmp_path, monkeypatch):
    """Issue 26: a repo-wide `check --gpu-memory` printed "cannot check the budget" for every standalone DeepSpeed /
    Accelerate file; in a directory run they are one line (each one with -v; JSON keeps them all)."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    done = run_zeromem("check", "--gpu-memory", "80GiB", str(RECIPES))
    launch = [line for line in done.stdout.splitlines() if line.split(":")[0].endswith((".json", "_configs/zero3.yaml"))]
    assert launch == []
    (line,) = [line for line in done.stdout.splitlines() if "launch files" in line]
    count = int(line.split()[0])
    verbose = run_zeromem("check", "-v", "--gpu-memory", "80GiB", str(RECIPES))
    listed = {line.split(":")[0] for line in verbose.stdout.splitlines() if " ZM103 " in line
              and not line.split(":")[0].endswith((".yml", ".yaml")) or "accelerate" in line.split(":")[0]}
    assert count >= 4 and len(listed) >= 4 and "launch files" not in verbose.stdout
    as_json = json.loads(run_zeromem("check", "--format", "json", "--gpu-memory", "80GiB", str(RECIPES)).stdout)
    assert sum(item["code"] == "ZM103" and item["path"].endswith(".json") for item in as_json["findings"]) >= 3
    single = run_zeromem("check", "--gpu-memory", "80GiB", str(RECIPES / "axolotl/deepspeed_configs/zero3.json"))
    assert " ZM103 " in single.stdout  # one file named: its own note


@pytest.mark.parametrize(("flags", "widths", "credited"), [
    ("bf16: true\n", {"parameter": 4, "gradient": 4, "optimizer": 8}, "upcasts the trainable parameters to float32"),
    ("bf16: true\npure_bf16: true\n", {"parameter": 2, "gradient": 2, "optimizer": 4}, "pure_bf16"),
    ("pure_bf16: true\n", {"parameter": 2, "gradient": 2, "optimizer": 4}, "pure_bf16"),
])
def test_llamafactory_full_tuning_upcasts_to_fp32_unless_pure_bf16(tmp_path, flags, widths, credited):
    """LLaMA-Factory loads the model in compute_dtype, then init_adapter (model/adapter.py) casts the trainable
    parameters to float32 unless pure_bf16 (or BAdam): torch DDP's P, G, O follow; pure_bf16 keeps all in bf16
    (AdamW's state like the parameter), credited to pure_bf16."""
    (tmp_path / "m").mkdir()
    shutil.copy(DATA / "models" / "Qwen2.5-7B" / "config.json", tmp_path / "m" / "config.json")
    recipe = write(tmp_path, "full.yaml", "model_name_or_path: ./m\nstage: sft\nfinetuning_type: full\ncutoff_len: 1024\n"
                   "per_device_train_batch_size: 1\n" + flags)
    done = run_zeromem("estimate", "--config", str(recipe), "-R", "1", "--format", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["inputs"]["bytes_per_parameter"] == widths
    assert any(credited in line for line in report["assumptions"]), report["assumptions"]
    assert report["peak_inputs"]["dtype"]["value"] == "bf16"  # the compute dtype stays bf16 either way


def test_llamafactory_refuses_pure_bf16_with_zero3(tmp_path, monkeypatch):
    """hparams/parser.py get_train_args: '`pure_bf16` is incompatible with DeepSpeed ZeRO-3' (an error on pure_bf16);
    ZeRO-2 with pure_bf16, or ZeRO-3 without it, is fine."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    for stage in (2, 3):
        write(tmp_path, f"z{stage}.json", json.dumps({"zero_optimization": {"stage": stage},
                                                      "train_micro_batch_size_per_gpu": "auto"}))
    base = "model_name_or_path: org/m\nfinetuning_type: full\nbf16: true\n"
    refused = write(tmp_path, "pure3.yaml", base + "pure_bf16: true\ndeepspeed: z3.json\n")
    (found,) = [item for item in findings(str(refused)) if "pure_bf16" in item["message"]]
    assert found["code"] == "ZM104" and found["severity"] == "error" and found["range"]["start"]["line"] == 3
    assert run_zeromem("check", "-q", str(refused)).returncode == 1
    for text in (base + "pure_bf16: true\ndeepspeed: z2.json\n", base + "deepspeed: z3.json\n"):
        fine = write(tmp_path, "fine.yaml", text)
        assert not [item for item in findings(str(fine)) if "pure_bf16" in item["message"]]


def test_a_value_of_another_type_than_the_tool_declares_is_a_warning(tmp_path, monkeypatch):
    """ZM358 (issue 26, bad input): the types come from the tools' annotations (the key inventory's TYPES). YAML 1.1
    reads `1e-4` as a string, which LLaMA-Factory's dataclass takes as it is; axolotl's pydantic converts "8"."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    factory = write(tmp_path, "lf.yaml", "model_name_or_path: Qwen/Qwen3-4B\nfinetuning_type: lora\n"
                    "learning_rate: 1e-4\nbf16: 'yes'\n")
    found = [item for item in findings(str(factory)) if item["code"] == "ZM358"]
    assert [(item["severity"], item["range"]["start"]["line"]) for item in found] == [("warning", 2), ("warning", 3)]
    assert "declares learning_rate as a number; got '1e-4'" in found[0]["message"]
    assert "declares bf16 as true or false" in found[1]["message"]
    fixed = write(tmp_path, "ok.yaml", "model_name_or_path: Qwen/Qwen3-4B\nfinetuning_type: lora\nlearning_rate: 1.0e-4\n"
                  "bf16: true\nnum_train_epochs: 3\n")  # a whole number where a number is declared: fine
    assert not [item for item in findings(str(fixed)) if item["code"] == "ZM358"]
    lax = write(tmp_path, "ax.yml", "base_model: org/m\nmicro_batch_size: '8'\nsample_packing: 'true'\n")
    assert not [item for item in findings(str(lax)) if item["code"] == "ZM358"]  # pydantic converts them
    wrong = write(tmp_path, "ax2.yml", "base_model: org/m\nsample_packing: often\n")
    (item,) = [item for item in findings(str(wrong)) if item["code"] == "ZM358"]
    assert "axolotl declares sample_packing as true or false; got 'often'" in item["message"]
