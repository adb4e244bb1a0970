"""Issue 30 through the real entry points: `zeromem estimate --config` shows the degrees axolotl's ALST, TP × CP and
expert-parallel examples set (with the key each came from) in `-v` and in JSON's `parallelism`; the flags of the same
names override them; `zeromem check` reports degrees that do not fit the world (ZM109) at their key."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.cli.conftest import run_zeromem, run_zeromem_subprocess

DATA = Path(__file__).resolve().parents[1] / "data"
RECIPES = DATA / "recipes"
ALST = "axolotl/examples/alst/llama3-8b-deepspeed-alst.yaml"
TP_CP = "axolotl/examples/distributed-parallel/qwen3-8b-fsdp-tp-cp.yaml"
EXPERT = "axolotl/examples/expert_parallel/qwen3_30ba3b_ep_lora_4gpu.yaml"


@pytest.fixture(autouse=True)
def hub_cache(monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(DATA / "hf_cache"))


def estimate(recipe: str, *extra: str) -> dict:
    done = run_zeromem("estimate", "--config", str(RECIPES / recipe), "--offline", "--format", "json", *extra)
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout)


def test_alst_example_resolves_its_degrees_with_their_keys():
    found = estimate(ALST, "--world-size", "8")["parallelism"]
    assert (found["context"], found["activation_offload"], found["tiled_mlp_shards"]) == (8, "cpu", 2)
    assert found["tensor"] == found["ulysses"] == found["expert"] == 1
    assert found["sources"]["context"] == {"source": "context_parallel_size", "path": ["context_parallel_size"]}
    assert found["sources"]["activation_offload"]["path"] == ["activation_offloading"]


def test_tp_cp_example_and_the_flags_over_it():
    found = estimate(TP_CP, "--world-size", "8")["parallelism"]
    assert (found["tensor"], found["context"]) == (2, 2)
    flagged = estimate(TP_CP, "--world-size", "8", "--tensor-parallel", "4", "--context-parallel", "1",
                       "--activation-offload", "cpu_all", "--tiled-mlp", "3")["parallelism"]
    assert (flagged["tensor"], flagged["context"], flagged["activation_offload"], flagged["tiled_mlp_shards"]) == (
        4, 1, "cpu_all", 3)
    assert flagged["sources"]["tensor"]["source"].startswith("--tensor-parallel (overrides tensor_parallel_size")


def test_expert_example_in_the_verbose_text():
    done = run_zeromem("estimate", "--config", str(RECIPES / EXPERT), "--offline", "--world-size", "4", "-v")
    assert "expert parallel 4 — expert_parallel_size" in done.stdout, done.stdout + done.stderr


def test_a_recipe_without_degrees_has_no_parallelism_object():
    assert "parallelism" not in estimate("axolotl/examples/llama-3/lora-1b.yml", "--world-size", "2")


def test_the_flags_without_a_config():
    model = next((DATA / "hf_cache/models--meta-llama--Llama-3.1-8B").glob("snapshots/*/config.json"))
    done = run_zeromem("estimate", "--world-size", "8", "--sequence-length", "4096", "--model-config", str(model),
                       "--ulysses", "8", "--format", "json")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)["parallelism"]
    assert found["ulysses"] == 8 and found["sources"]["ulysses"] == {"source": "--ulysses"}


def test_the_flags_without_a_config_make_the_figures_as_approximate_as_the_recipes_keys():
    """The options alone derive an expert or context-parallel degree as the recipe's key does: the figures say so (they
    said "every key the inputs set is modelled" while `estimate --config` of the same degree said "derived")."""
    moe = next((DATA / "hf_cache/models--Qwen--Qwen3-30B-A3B-Instruct-2507").glob("snapshots/*/config.json"))
    said = {}
    for model, flag in ((moe, "--expert-parallel"), (DATA / "models/Qwen2.5-7B/config.json", "--context-parallel")):
        workload = ("--model-config", str(model), "--world-size", "4", "--sequence-length", "2048", "--micro-batch",
                    "1", "--format", "json")
        plain = json.loads(run_zeromem("estimate", *workload).stdout)
        assert plain["approximate"] is False and plain["ignored"] == []
        done = run_zeromem("estimate", *workload, flag, "4")
        assert done.returncode == 0, done.stderr
        found = json.loads(done.stdout)
        assert found["approximate"] is True and [item["key"] for item in found["ignored"]] == [flag]
        said[flag] = found["ignored"][0]["why"]
        assert said[flag].startswith("derived, not measured")
        assert found["peak"] != plain["peak"]  # the degree is in the figures the note qualifies
    recipe = estimate(EXPERT, "--world-size", "4")  # the recipe's own key: the same derivation, said the same way
    (expert,) = [item for item in recipe["ignored"] if item["key"] == "expert_parallel_size"]
    assert expert["why"] == said["--expert-parallel"]


@pytest.mark.parametrize("flag, value", [("--tensor-parallel", "0"), ("--tiled-mlp", "none"),
                                         ("--activation-offload", "gpu")])
def test_a_bad_flag_is_a_usage_error(flag, value):
    done = run_zeromem("estimate", "--parameters", "1B", "--world-size", "8", flag, value)
    assert done.returncode == 2 and flag in done.stderr and "Traceback" not in done.stderr


def test_check_reports_degrees_that_do_not_divide_the_world(tmp_path):
    folder = tmp_path / "axolotl"
    shutil.copytree(RECIPES / "axolotl", folder)
    recipe = folder / TP_CP.removeprefix("axolotl/")
    text = recipe.read_text(encoding="utf-8").replace("context_parallel_size: 2", "context_parallel_size: 3")
    recipe.write_text(text + "\nzeromem:\n  world_size: 8\n", encoding="utf-8")
    done = run_zeromem("check", "--format", "json", "--offline", str(recipe))
    found = [item for item in json.loads(done.stdout)["findings"] if item["code"] == "ZM109"]
    assert done.returncode == 1 and len(found) == 1, done.stdout
    assert "does not divide the world size 8" in found[0]["message"]
    line = text.splitlines()[found[0]["range"]["start"]["line"]]
    assert line.startswith("tensor_parallel_size") or line.startswith("context_parallel_size")


def test_check_accepts_the_examples_as_published():
    for recipe, world in ((TP_CP, 8), (EXPERT, 4), (ALST, 8)):
        done = run_zeromem("check", "--format", "json", "--offline", "--world-size", str(world),
                           str(RECIPES / recipe))
        assert "ZM109" not in {item["code"] for item in json.loads(done.stdout)["findings"]}, done.stdout


def test_the_expert_lora_example_has_a_peak_that_moves_with_the_expert_degree(tmp_path):
    """Issue 30: LoRA under expert parallelism (axolotl's Qwen3-30B-A3B example, q/k/v/o adapters, experts frozen):
    a derived peak whose frozen routed experts are divided by e; the model-state column is not (docs)."""
    text = (RECIPES / EXPERT).read_text(encoding="utf-8")
    found = {}
    for e in (1, 2, 4):
        recipe = tmp_path / f"ep{e}.yaml"
        recipe.write_text(text.replace("expert_parallel_size: 4", f"expert_parallel_size: {e}"), encoding="utf-8")
        done = run_zeromem_subprocess("estimate", "--config", str(recipe), "--offline", "--world-size", "4",
                                      "--format", "json")
        assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr
        found[e] = json.loads(done.stdout)
    peaks = {e: result["peak"]["ddp"] for e, result in found.items()}
    assert all(peaks.values()) and peaks[1] > peaks[2] > peaks[4]
    held = {e: result["phases"]["ddp"]["parts"]["parameters"] for e, result in found.items()}
    routed = 2 * 48 * 128 * 3 * 2048 * 768  # bf16 × layers × experts × (gate, up, down) × hidden × moe width
    assert (held[1] - held[2], held[1] - held[4]) == (routed // 2, routed - routed // 4)
    assert found[1]["inputs"]["parameter_bytes"] == found[4]["inputs"]["parameter_bytes"]  # the pooled contract
    assert "DeepEP dispatch / combine buffer" in found[4]["phases"]["ddp"]["parts"]
    why = {item["key"]: item["why"] for item in found[4]["ignored"]}["expert_parallel_size"]
    assert why.startswith("derived, not measured: the peak divides the routed experts by e")
    assert found[4]["activations"]["lora"]["checkpointing"] is True  # LoRA's own activations, not full FT's


def test_lora_under_tensor_parallelism_stays_unknown():
    found = estimate(EXPERT, "--world-size", "4", "--tensor-parallel", "2")
    assert found["peak"]["ddp"] is None
    assert found["phases"]["ddp"]["unknown"] == "a LoRA step under tensor, context or Ulysses parallelism is not modelled"


HSDP_TP = "axolotl/examples/distributed-parallel/llama-3_1-8b-hsdp-tp.yaml"
ALST_FSDP = "axolotl/examples/alst/llama3-8b-fsdp2-alst.yaml"
EXPERT_FFT = "axolotl/examples/expert_parallel/qwen3_30ba3b_ep_fft_4gpu.yaml"


def test_check_gives_the_examples_no_error_without_a_world_size():
    """The recipes name no world size (axolotl takes it from the launcher): nothing is certain, so no error."""
    recipes = [str(RECIPES / recipe) for recipe in (ALST, ALST_FSDP, TP_CP, HSDP_TP, EXPERT, EXPERT_FFT)]
    done = run_zeromem_subprocess("check", "--format", "json", "--offline", *recipes)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    found = json.loads(done.stdout)["findings"]
    assert not [item for item in found if item["severity"] == "error" or item["code"] == "ZM109"], found


def test_a_given_world_that_the_degrees_do_not_divide_is_still_an_error():
    done = run_zeromem_subprocess("check", "--format", "json", "--offline", "--world-size", "6",
                                  str(RECIPES / EXPERT_FFT))
    found = [item for item in json.loads(done.stdout)["findings"] if item["code"] == "ZM109"]
    assert done.returncode == 1 and len(found) == 1 and found[0]["severity"] == "error", done.stdout
    assert "expert_parallel_size 4 = 4 does not divide the world size 6" in found[0]["message"]


@pytest.mark.parametrize("recipe, degrees", [
    (EXPERT_FFT, {"expert_parallel_size": 4}),
    (ALST, {"context_parallel_size": 8}),
    (TP_CP, {"tensor_parallel_size": 2, "context_parallel_size": 2, "dp_shard_size": 2}),
    (HSDP_TP, {"tensor_parallel_size": 2, "dp_shard_size": 4, "dp_replicate_size": 2}),
])
def test_without_a_world_size_the_smallest_world_that_runs_the_degrees_is_assumed(recipe, degrees):
    """The degrees as the recipe writes them (read from its text here), multiplied: axolotl gives each its own ranks
    (utils/distributed.py _get_parallel_config_kwargs); the world is credited as an assumption, never as a source."""
    text = (RECIPES / recipe).read_text(encoding="utf-8")
    written = {key: int(line.split(":", 1)[1].split("#")[0]) for line in text.splitlines() for key in degrees
               if line.startswith(key + ":")}
    assert written == degrees
    smallest = 1
    for value in written.values():
        smallest *= value
    found = estimate(recipe)
    assert found["inputs"]["world_size"] == smallest
    assert found["world_size_from"].startswith("the smallest world that runs ")
    assert all(f"{key} {value}" in found["world_size_from"] for key, value in degrees.items())
    assert "give --world-size" in found["world_size_from"]
    assert found["approximate"] and found["world_assumed"].startswith(f"the world size {smallest} is assumed")
    given = estimate(recipe, "--world-size", str(2 * smallest))
    assert given["inputs"]["world_size"] == 2 * smallest and given["world_size_from"] == "--world-size"
    assert given["world_assumed"] is None


def test_the_assumed_world_in_the_verbose_text():
    done = run_zeromem("estimate", "--config", str(RECIPES / EXPERT_FFT), "--offline", "-v")
    assert done.returncode in (0, 1), done.stderr
    assert "R = 4 ranks — the smallest world that runs expert_parallel_size 4; give --world-size" in done.stdout
    assert "the world size is assumed" in done.stdout


def test_an_assumed_world_is_not_given_to_deepspeeds_batch_check(tmp_path):
    """Ulysses ranks share a batch (DeepSpeedConfig divides the world by sequence_parallel_size): 6 samples at a
    micro-batch of 1 run on 4 Ulysses ranks (one data-parallel rank, 6 accumulation steps), so no batch error, with
    the world assumed or given."""
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps({"train_batch_size": 6, "train_micro_batch_size_per_gpu": 1,
                                "sequence_parallel_size": 4, "zero_optimization": {"stage": 3}}), encoding="utf-8")
    for extra in ((), ("--world-size", "4"), ("--world-size", "8")):  # 1 and 2 data-parallel ranks: 6 and 3 steps
        done = run_zeromem("check", "--format", "json", "--offline", *extra, str(path))
        errors = [item for item in json.loads(done.stdout)["findings"] if item["severity"] == "error"]
        assert not errors, (extra, errors)
    done = run_zeromem("check", "--format", "json", "--offline", "--world-size", "16", str(path))
    errors = [item for item in json.loads(done.stdout)["findings"] if item["severity"] == "error"]
    assert errors and "world size 4" in " ".join(item["message"] for item in errors), errors  # 16 / 4: not whole


def test_the_budget_finding_follows_the_peak_when_it_is_known():
    """EP full fine-tuning on 4 × 80 GiB: the pooled model state (170.6 GiB, experts not divided) is over the
    budget, the step's peak (experts ÷ 4) is not. The verdict follows the peak: no ZM101 claiming an OOM that the
    estimate says does not happen; a budget under the peak still gets its finding, a warning (derived)."""
    recipe = str(RECIPES / EXPERT_FFT)
    fits = estimate(EXPERT_FFT, "--world-size", "4", "--gpu-memory", "80GiB")
    assert fits["ddp"] > 80 * 2**30 > fits["peak"]["ddp"] and fits["fits"]["ddp"] and not fits["model_state_fits"]["ddp"]
    done = run_zeromem_subprocess("check", "--format", "json", "--offline", "--world-size", "4",
                                  "--gpu-memory", "80GiB", recipe)
    codes = {item["code"] for item in json.loads(done.stdout)["findings"]}
    assert "ZM101" not in codes and "ZM106" not in codes, done.stdout
    below = fits["peak"]["ddp"] // 2**30 - 8  # GiB, under the peak
    done = run_zeromem_subprocess("check", "--format", "json", "--offline", "--world-size", "4",
                                  "--gpu-memory", f"{below}GiB", recipe)
    found = [item for item in json.loads(done.stdout)["findings"] if item["code"] in ("ZM101", "ZM106")]
    assert [item["severity"] for item in found] == ["warning"], done.stdout  # a derived figure: never an error
