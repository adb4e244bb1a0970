"""A recipe paired with the Accelerate YAML it is launched with (`accelerate_config`, `--accelerate-config`),
through `zeromem check` / `zeromem estimate --config`: the alignment-handbook's own recipe and launch files
(tests/data/recipes/SOURCES.md). World size, engine and precision come from the YAML and are credited to it;
an unusable YAML is exit 2 (the flag) or ZM312 on the setting; a recipe's own DeepSpeed file beside a YAML
that sets ZeRO is ZM313 (Accelerate refuses the launch), beside an FSDP YAML ZM356 (the file wins)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.cli.conftest import run_zeromem

HANDBOOK = Path(__file__).resolve().parents[1] / "data" / "recipes" / "alignment-handbook"
AXOLOTL = Path(__file__).resolve().parents[1] / "data" / "recipes" / "axolotl"
LLAMAFACTORY_ZERO2 = Path(__file__).resolve().parents[1] / "data" / "recipes" / "llamafactory" / "examples" / "deepspeed" \
    / "ds_z2_config.json"
LLAMA = Path(__file__).resolve().parents[1] / "data" / "models" / "Meta-Llama-3-8B" / "config.json"
RECIPE = "recipes/zephyr-7b-beta/sft/config_full.yaml"  # full SFT, bf16, AdamW (Transformers' default)
N = 7_000_000_000  # --parameters 7B (Mistral-7B is not in tests/data)


@pytest.fixture
def project(tmp_path) -> Path:
    """The handbook's recipes in a project of their own (the root the tools are launched from)."""
    shutil.copytree(HANDBOOK / "recipes", tmp_path / "recipes")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    return tmp_path


def estimate(project: Path, *args: str) -> dict:
    done = run_zeromem("estimate", "-v", "--config", str(project / RECIPE), "--parameters", "7B", "--format", "json", *args,
                       cwd=project)
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def check(path: Path, *args: str, cwd: Path) -> tuple[int, list[dict]]:
    done = run_zeromem("check", "--format", "json", "-q", str(path), *args, cwd=cwd)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)["findings"]


def zero(stage: int, p: int, g: int, o: int, ranks: int) -> int:
    """The contract formula, written out here from P, G, O and R."""
    return {1: p + g + -(-o // ranks), 2: p + -(-(g + o) // ranks), 3: -(-(p + g + o) // ranks)}[stage]


def test_zero3_yaml_gives_the_recipe_8_ranks_and_zero3(project):
    found = estimate(project, "--accelerate-config", "recipes/accelerate_configs/zero3.yaml")
    assert found["stage"] == "zero3" and found["inputs"]["world_size"] == 8
    assert found["world_size_from"] == "recipes/accelerate_configs/zero3.yaml num_processes"
    # DeepSpeed bf16 mixed precision: 2 B weights, 2 B gradients, fp32 master + Adam moments 12 B
    assert found["zero3"] == zero(3, 2 * N, 2 * N, 12 * N, 8)
    text = run_zeromem("estimate", "-v", "--config", str(project / RECIPE), "--parameters", "7B",
                       "--accelerate-config", "recipes/accelerate_configs/zero3.yaml", cwd=project).stdout
    assert "R = 8 ranks — recipes/accelerate_configs/zero3.yaml num_processes" in text


def test_the_handbooks_zero2_yaml_is_zero2(project):
    found = estimate(project, "--accelerate-config", "recipes/accelerate_configs/deepspeed_zero2.yaml")
    assert found["stage"] == "zero2" and found["zero2"] == zero(2, 2 * N, 2 * N, 12 * N, 8)


def test_fsdp_and_ddp_yamls_plan_fsdp_and_torch_ddp(project):
    fsdp = estimate(project, "--accelerate-config", "recipes/accelerate_configs/fsdp.yaml")
    # FULL_SHARD of the bf16-loaded model: 2 B weights, 2 B gradients, AdamW state in bf16 4 B, over 8 ranks
    assert fsdp["stage"] == "zero3" and fsdp["zero3"] == zero(3, 2 * N, 2 * N, 4 * N, 8)
    ddp = estimate(project, "--accelerate-config", "recipes/accelerate_configs/ddp.yaml")
    assert ddp["stage"] == "ddp" and ddp["ddp"] == 8 * N and ddp["inputs"]["world_size"] == 8
    assert ddp["world_size_from"] == "recipes/accelerate_configs/ddp.yaml num_processes"
    with_model = estimate(project, "--accelerate-config", "recipes/accelerate_configs/ddp.yaml",
                          "--model-config", str(LLAMA))  # the peak's inputs name the engine's source
    assert with_model["peak_inputs"]["engine"] == {
        "value": "torch", "from": "recipes/accelerate_configs/ddp.yaml distributed_type MULTI_GPU: torch DDP"}


def test_a_deepspeed_config_file_named_by_the_yaml_is_followed_from_the_launch_folder(project):
    shutil.copy(LLAMAFACTORY_ZERO2, project / "ds_zero2.json")
    (project / "recipes" / "accelerate_configs" / "file.yaml").write_text(
        "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds_zero2.json\nnum_processes: 4\n")
    found = estimate(project, "--accelerate-config", "recipes/accelerate_configs/file.yaml")
    assert found["stage"] == "zero2" and found["zero2"] == zero(2, 2 * N, 2 * N, 12 * N, 4)
    (project / "ds_zero2.json").unlink()
    status, findings = check(project / RECIPE, "--parameters", "7B", "--accelerate-config",
                             "recipes/accelerate_configs/file.yaml", cwd=project)
    [missing] = [item for item in findings if item["code"] == "ZM311"]
    assert status == 1 and "ds_zero2.json" in missing["message"] and "looked for" in missing["message"]


def test_a_world_size_flag_beats_the_yaml(project):
    found = estimate(project, "--accelerate-config", "recipes/accelerate_configs/zero3.yaml", "--world-size", "16")
    assert found["inputs"]["world_size"] == 16 and found["world_size_from"] == "--world-size"


@pytest.mark.parametrize(("fields", "ranks", "credit"), [
    ("num_processes: 16\nnum_machines: 2\n", 16, "num_processes 16 over num_machines 2: 8 per machine × 2"),
    ("num_processes: 10\nnum_machines: 3\n", 9, "num_processes 10 over num_machines 3: 3 per machine × 3"),
    ("num_processes: 4\n", 4, "num_processes"),
])
def test_num_processes_is_the_total_over_all_machines(project, fields, ranks, credit):
    """accelerate launch starts num_processes // num_machines per machine (utils/launch.py)."""
    (project / "launch.yaml").write_text("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n" + fields)
    found = estimate(project, "--accelerate-config", "launch.yaml")
    assert found["inputs"]["world_size"] == ranks and found["world_size_from"] == f"launch.yaml {credit}"


def test_distributed_type_no_is_one_process_and_a_missing_num_processes_is_said(project):
    (project / "one.yaml").write_text("distributed_type: 'NO'\nnum_processes: 8\nmixed_precision: bf16\n")
    assert estimate(project, "--accelerate-config", "one.yaml")["inputs"]["world_size"] == 1
    (project / "none.yaml").write_text("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\n")
    done = run_zeromem("estimate", "-v", "--config", str(project / RECIPE), "--parameters", "7B",
                       "--accelerate-config", "none.yaml", cwd=project)
    assert done.returncode == 2 and "none.yaml has no num_processes" in done.stderr


def test_an_unusable_accelerate_config_flag_is_exit_2_naming_the_path(project):
    for command in (["check", str(project / RECIPE)], ["estimate", "-v", "--config", str(project / RECIPE)]):
        done = run_zeromem(*command, "--accelerate-config", "recipes/accelerate_configs/zero9.yaml", cwd=project)
        assert done.returncode == 2 and str(project / "recipes/accelerate_configs/zero9.yaml") in done.stderr
        done = run_zeromem(*command, "--accelerate-config", RECIPE, cwd=project)
        assert done.returncode == 2 and "is not an Accelerate config" in done.stderr
    (project / "broken.yaml").write_text("distributed_type: [DEEPSPEED\n")
    done = run_zeromem("check", str(project / RECIPE), "--accelerate-config", "broken.yaml", cwd=project)
    assert done.returncode == 2 and "does not parse as YAML" in done.stderr


def test_a_recipe_block_and_project_settings_name_it_relative_to_themselves(project, tmp_path):
    """axolotl keeps a zeromem block (it drops unknown keys): the path is relative to the recipe; in
    [tool.zeromem] (and its overrides) relative to pyproject.toml."""
    recipe = project / "axolotl" / "lora.yml"
    recipe.parent.mkdir()
    text = (AXOLOTL / "examples" / "llama-3" / "lora-1b.yml").read_text(encoding="utf-8")
    text = text.replace("base_model: NousResearch/Llama-3.2-1B", f"base_model: {LLAMA.parent}")
    recipe.write_text(text + "zeromem:\n  accelerate_config: ../recipes/accelerate_configs/zero3.yaml\n")
    done = run_zeromem("estimate", "-v", "--config", str(recipe), "--format", "json", cwd=tmp_path)
    found = json.loads(done.stdout)
    assert found["stage"] == "zero3" and found["inputs"]["world_size"] == 8
    assert found["world_size_from"] == "../recipes/accelerate_configs/zero3.yaml num_processes"

    recipe.write_text(text)
    (project / "pyproject.toml").write_text(
        "[tool.zeromem]\naccelerate_config = 'recipes/accelerate_configs/ddp.yaml'\n"
        "[[tool.zeromem.overrides]]\nfiles = ['axolotl/*.yml']\n"
        "accelerate_config = 'recipes/accelerate_configs/fsdp.yaml'\n")
    found = json.loads(run_zeromem("estimate", "-v", "--config", str(recipe), "--format", "json", cwd=project).stdout)
    assert found["world_size_from"] == "recipes/accelerate_configs/fsdp.yaml num_processes"
    handbook = json.loads(run_zeromem("estimate", "-v", "--config", str(project / RECIPE), "--parameters", "7B",
                                      "--format", "json", cwd=project).stdout)
    assert handbook["stage"] == "ddp" and handbook["world_size_from"].endswith("ddp.yaml num_processes")


def test_a_missing_file_in_the_recipe_block_is_zm312_on_its_value(project):
    recipe = project / "axolotl" / "lora.yml"
    recipe.parent.mkdir()
    text = (AXOLOTL / "examples" / "llama-3" / "lora-1b.yml").read_text(encoding="utf-8")
    recipe.write_text(text + "zeromem:\n  accelerate_config: launch/zero3.yml\n")
    status, found = check(recipe, cwd=project)
    [missing] = [item for item in found if item["code"] == "ZM312"]
    line = recipe.read_text().splitlines().index("  accelerate_config: launch/zero3.yml")
    assert status == 1 and missing["range"]["start"] == {"line": line, "character": len("  accelerate_config: ")}
    assert str(project / "axolotl" / "launch" / "zero3.yml") in missing["message"]


def test_a_recipes_deepspeed_file_beside_a_zero_yaml_is_refused_and_beside_fsdp_wins(project):
    """TRL recipes refuse a zeromem block: the flag names the YAML."""
    shutil.copy(LLAMAFACTORY_ZERO2, project / "ds_zero2.json")  # ZeRO-2, no offload, "auto" precision
    recipe = project / "sft.yaml"
    recipe.write_text((project / RECIPE).read_text(encoding="utf-8") + "\ndeepspeed: ds_zero2.json\n")
    status, found = check(recipe, "--parameters", "7B", "--accelerate-config", "recipes/accelerate_configs/zero3.yaml",
                          cwd=project)
    [refused] = [item for item in found if item["code"] == "ZM313"]
    assert status == 1 and refused["severity"] == "error" and "zero_stage" in refused["message"]
    assert "mixed_precision" in refused["message"]
    assert refused["range"]["start"]["line"] == recipe.read_text().splitlines().index("deepspeed: ds_zero2.json")

    status, found = check(recipe, "--parameters", "7B", "--accelerate-config", "recipes/accelerate_configs/fsdp.yaml",
                          cwd=project)
    [wins] = [item for item in found if item["code"] == "ZM356"]
    assert status == 0 and wins["severity"] == "warning" and "wins over" in wins["message"]
    found = estimate(project, "--accelerate-config", "recipes/accelerate_configs/fsdp.yaml")  # the handbook recipe
    assert found["stage"] == "zero3"
    done = run_zeromem("estimate", "-v", "--config", str(recipe), "--parameters", "7B", "--format", "json",
                       "--accelerate-config", "recipes/accelerate_configs/fsdp.yaml", cwd=project)
    paired = json.loads(done.stdout)
    assert paired["stage"] == "zero2" and paired["inputs"]["world_size"] == 8  # the file's ZeRO-2, the YAML's ranks
    assert paired["zero2"] == zero(2, 2 * N, 2 * N, 12 * N, 8)


def test_an_axolotl_fsdp_recipe_launched_with_deepspeed_runs_deepspeed(project):
    recipe = project / "fsdp.yml"
    text = (AXOLOTL / "examples" / "llama-3" / "qlora-fsdp-70b.yaml").read_text(encoding="utf-8")
    recipe.write_text(text.replace("base_model: casperhansen/llama-3-70b-fp16", f"base_model: {LLAMA.parent}"))
    status, found = check(recipe, "--accelerate-config", "recipes/accelerate_configs/zero3.yaml", cwd=project)
    [overridden] = [item for item in found if item["code"] == "ZM356"]
    assert "DeepSpeed, which wins over this fsdp_config" in overridden["message"]
    done = run_zeromem("estimate", "-v", "--config", str(recipe), "--format", "json",
                       "--accelerate-config", "recipes/accelerate_configs/zero3.yaml", cwd=project)
    assert json.loads(done.stdout)["stage"] == "zero3" and "fsdp" not in json.loads(done.stdout)["world_size_from"]


def test_estimate_refuses_the_flag_without_a_recipe(project):
    done = run_zeromem("estimate", "-v", "--parameters", "7B", "--world-size", "8", "--accelerate-config",
                       "recipes/accelerate_configs/zero3.yaml", cwd=project)
    assert done.returncode == 2 and "goes with --config" in done.stderr
    (project / "ds.json").write_text('{"zero_optimization": {"stage": 2}, "zeromem": {"world_size": 2}}')
    done = run_zeromem("estimate", "-v", "--config", "ds.json", "--parameters", "7B", "--accelerate-config",
                       "recipes/accelerate_configs/zero3.yaml", cwd=project)
    assert done.returncode == 2 and "pairs a recipe" in done.stderr


def test_a_missing_file_named_in_pyproject_is_zm312_naming_the_settings_file_and_the_path(project):
    (project / "pyproject.toml").write_text("[tool.zeromem]\naccelerate_config = 'launch/zero3.yaml'\n")
    status, found = check(project / RECIPE, "--parameters", "7B", cwd=project)
    [missing] = [item for item in found if item["code"] == "ZM312"]
    first_key = next(number for number, line in enumerate((project / RECIPE).read_text().splitlines())
                     if line and not line.startswith("#"))
    assert status == 1 and missing["range"]["start"] == {"line": first_key, "character": 0}  # not in the recipe: its top
    assert "pyproject.toml [tool.zeromem]" in missing["message"]
    assert str(project / "launch" / "zero3.yaml") in missing["message"]


def test_zm101_names_the_keys_to_set_in_the_file_that_holds_the_deepspeed_settings(project):
    """The recipe cannot take the stage or offload (no quick fix there): ZM101 says what to set, as that file spells
    it — the YAML's deepspeed_config keys, or the DeepSpeed JSON the recipe names."""
    recipe = project / RECIPE
    launch = "recipes/accelerate_configs/deepspeed_zero2.yaml"
    _, findings = check(recipe, "--parameters", "7B", "--gpu-memory", "12GiB", "--accelerate-config", launch,
                        cwd=project)
    [overflow] = [item for item in findings if item["code"] == "ZM101"]
    assert "the cheapest that fits is ZeRO-3 with optimizer → cpu" in overflow["message"]
    assert overflow["message"].endswith(f"; set `zero_stage: 3` and `offload_optimizer_device: cpu` in {launch}")

    (recipe.parent / "ds_z2.json").write_text(LLAMAFACTORY_ZERO2.read_text(encoding="utf-8"))
    recipe.write_text(recipe.read_text(encoding="utf-8").rstrip("\n") + "\ndeepspeed: ds_z2.json\n")
    _, findings = check(recipe, "--parameters", "7B", "--gpu-memory", "12GiB", "--world-size", "8", cwd=project)
    [overflow] = [item for item in findings if item["code"] == "ZM101"]
    assert overflow["message"].endswith('; set `"stage": 3` and `"offload_optimizer": {"device": "cpu"}` in ds_z2.json')
