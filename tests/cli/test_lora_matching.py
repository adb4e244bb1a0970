"""PEFT's target matching (regex targets, layers_to_transform, rank_pattern, exclude_modules) through the real
entry points: `zeromem estimate` flags, a `zeromem` block read by `check` / `estimate --config`, and recipes.

Expected counts are PEFT's own (tests/data/adapters/peft_counts_full_size.json, Llama-3-8B on the meta device,
written by benchmarks/adapters/full_size_counts.py) or r·(in + out) by hand from the published shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import run_zeromem

ROOT = Path(__file__).resolve().parents[2]
LLAMA3 = ROOT / "tests/data/models/Meta-Llama-3-8B/config.json"
PEFT = {case["id"]: case for case in
        json.loads((ROOT / "tests/data/adapters/peft_counts_full_size.json").read_text())["cases"]}
H, KV, LAYERS = 4096, 1024, 32
BASE = ("estimate", "--format", "json", "--model-config", str(LLAMA3), "-R", "8", "--lora-rank", "16")


def trainable(*args: str) -> int:
    done = run_zeromem(*BASE, *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["inputs"]["trainable_parameters"]


def test_a_regex_target_counts_what_pefts_regex_adapts():
    case = PEFT["llama3-8b-regex-qv-r16"]
    assert case["lora"]["target_modules"] == r".*\.(q_proj|v_proj)"
    assert trainable("--lora-target-regex", case["lora"]["target_modules"]) == case["measured"]["trainable"]
    assert case["measured"]["trainable"] == LAYERS * 16 * ((H + H) + (H + KV))


def test_layers_and_rank_pattern_count_what_peft_adapts():
    case = PEFT["llama3-8b-qv-layers-rank-pattern"]
    got = trainable("--lora-targets", "q_proj,v_proj", "--layers-to-transform", "0,1,30,31",
                    "--lora-rank-pattern", "v_proj=64", "--lora-rank-pattern", "layers.31.self_attn.q_proj=8")
    # q at r 16 in layers 0, 1, 30; q at r 8 in layer 31; v at r 64 in the four layers
    by_hand = 3 * 16 * (H + H) + 8 * (H + H) + 4 * 64 * (H + KV)
    assert got == case["measured"]["trainable"] == by_hand


@pytest.mark.parametrize("args, wanted", [
    (("--lora-target-regex", "(q_proj"), "--lora-target-regex: '(q_proj' is not a valid Python regular expression: "
                                        "missing ), unterminated subpattern at position 0"),
    (("--lora-target-regex", "q_proj"), "regex 'q_proj' (matched against each module's full name, e.g. "
                                        "model.layers.0.self_attn.q_proj) match no module"),
    (("--lora-target-regex", ".*proj", "--layers-to-transform", "1"), "--layers-to-transform: layers_to_transform "
                                                                        "cannot be used when target_modules is a string"),
    (("--lora-target-regex", r".*\.mlp"), "model.layers.0.mlp, a module holding other modules"),
    (("--lora-rank-pattern", "v_proj[=8"), "--lora-rank-pattern: 'v_proj[' is not a valid Python regular expression"),
    (("--lora-rank-pattern", "v_proj"), "expected REGEX=R"),
    (("--layers-to-transform", "a,1"), "--layers-to-transform: expected layer indices"),
])
def test_bad_matching_options_are_usage_errors_without_a_traceback(args, wanted):
    done = run_zeromem(*BASE, *args)
    assert done.returncode == 2 and wanted in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def write_ds_config(tmp_path: Path, block: dict) -> Path:
    path = tmp_path / "ds_config.json"
    config = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "zero_optimization": {"stage": 2},
              "zeromem": {"world_size": 8, "parameters": {"from_config": str(LLAMA3)}, "lora_rank": 16, **block}}
    path.write_text(json.dumps(config, indent=2))
    return path


def test_a_zeromem_block_takes_the_same_matching_as_the_flags(tmp_path):
    path = write_ds_config(tmp_path, {"lora_targets": ["q_proj", "v_proj"], "layers_to_transform": [0, 1, 30, 31],
                                      "lora_rank_pattern": {"v_proj": 64, "layers.31.self_attn.q_proj": 8}})
    done = run_zeromem("estimate", "--format", "json", "--config", str(path))
    assert done.returncode == 0, done.stderr
    inputs = json.loads(done.stdout)["inputs"]
    assert inputs["trainable_parameters"] == PEFT["llama3-8b-qv-layers-rank-pattern"]["measured"]["trainable"]
    assert inputs["adapter"]["rank_pattern"] == {"v_proj": 64, "layers.31.self_attn.q_proj": 8}
    regex = write_ds_config(tmp_path, {"lora_targets": {"regex": r".*\.(q_proj|v_proj)"}})
    done = run_zeromem("estimate", "--format", "json", "--config", str(regex))
    assert json.loads(done.stdout)["inputs"]["trainable_parameters"] == PEFT["llama3-8b-regex-qv-r16"]["measured"][
        "trainable"]
    # exclude_modules: every linear but o_proj, by hand
    excluded = write_ds_config(tmp_path, {"exclude_modules": ["o_proj"]})
    done = run_zeromem("estimate", "--format", "json", "--config", str(excluded))
    per_layer = (H + H) + 2 * (H + KV) + 2 * (H + 14336) + (14336 + H)
    assert json.loads(done.stdout)["inputs"]["trainable_parameters"] == LAYERS * 16 * per_layer


@pytest.mark.parametrize("block, key, wanted", [
    ({"lora_targets": {"regex": "(q"}}, "lora_targets", "not a valid Python regular expression"),
    ({"lora_rank_pattern": {"v_proj": 0}}, "lora_rank_pattern", "expected a rank from 1"),
    ({"lora_targets": {"regex": ".*proj"}, "layers_to_transform": [1]}, "layers_to_transform", "cannot be used when"),
    ({"lora_targets": ["q_proj"], "exclude_modules": {"regex": ".*"}}, "exclude_modules", "every module is excluded"),
    ({"lora_targets": ["q_proj"], "layers_to_transform": [40]}, "lora_targets", "(layers_to_transform (40,))"),
])
def test_bad_matching_settings_are_zm104_on_their_key(tmp_path, block, key, wanted):
    path = write_ds_config(tmp_path, block)
    done = run_zeromem("check", "--format", "json", str(path))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    found = [f for f in json.loads(done.stdout)["findings"] if f["code"] == "ZM104"]
    assert len(found) == 1 and wanted in found[0]["message"], done.stdout
    line = next(i for i, text in enumerate(path.read_text().splitlines()) if f'"{key}"' in text)
    assert found[0]["range"]["start"]["line"] == line


def test_recipes_pass_their_matching_keys_as_their_tools_do(tmp_path):
    axolotl = tmp_path / "axolotl.yaml"
    axolotl.write_text(f"base_model: {LLAMA3.parent}\nadapter: lora\nlora_r: 16\nlora_alpha: 32\n"
                       "lora_target_modules: '.*\\.(q_proj|v_proj)'\nsequence_len: 512\nmicro_batch_size: 1\n")
    done = run_zeromem("estimate", "--format", "json", "--config", str(axolotl))
    assert done.returncode == 0, done.stderr + done.stdout
    assert json.loads(done.stdout)["inputs"]["trainable_parameters"] == PEFT["llama3-8b-regex-qv-r16"]["measured"][
        "trainable"]
    axolotl.write_text(f"base_model: {LLAMA3.parent}\nadapter: lora\nlora_r: 16\nlora_alpha: 32\n"
                       "lora_target_modules: [q_proj, v_proj]\npeft_layers_to_transform: [0, 1, 30, 31]\n"
                       "lora_rank_pattern:\n  v_proj: 64\n  layers.31.self_attn.q_proj: 8\n"
                       "sequence_len: 512\nmicro_batch_size: 1\n")
    done = run_zeromem("estimate", "--format", "json", "--config", str(axolotl))
    assert json.loads(done.stdout)["inputs"]["trainable_parameters"] == PEFT["llama3-8b-qv-layers-rank-pattern"][
        "measured"]["trainable"]
    # TRL's ModelConfig turns a one-entry list into its string: a regex, which names no full module here
    trl = tmp_path / "sft.yaml"
    trl.write_text(f"model_name_or_path: {LLAMA3.parent}\nuse_peft: true\nlora_r: 16\n"
                   "lora_target_modules: [q_proj]\nper_device_train_batch_size: 1\nmax_length: 512\n")
    done = run_zeromem("check", "--format", "json", str(trl))
    found = [f for f in json.loads(done.stdout)["findings"] if f["code"] == "ZM104"]
    assert found and "regex 'q_proj'" in found[0]["message"], done.stdout


def test_the_tools_linear_names_are_a_list_as_they_pass_it(tmp_path):
    # axolotl lora_target_linear with peft_layers_to_transform: a list of names, so PEFT filters by layer (with
    # PEFT's all-linear string, LoraConfig would refuse layers_to_transform)
    axolotl = tmp_path / "axolotl.yaml"
    axolotl.write_text(f"base_model: {LLAMA3.parent}\nadapter: lora\nlora_r: 16\nlora_target_linear: true\n"
                       "peft_layers_to_transform: [0, 1]\nsequence_len: 512\nmicro_batch_size: 1\n")
    done = run_zeromem("estimate", "--format", "json", "--config", str(axolotl))
    assert done.returncode == 0, done.stderr + done.stdout
    per_layer = (H + H) + 2 * (H + KV) + (H + H) + 2 * (H + 14336) + (14336 + H)
    assert json.loads(done.stdout)["inputs"]["trainable_parameters"] == 2 * 16 * per_layer
    # LLaMA-Factory lora_target all on a transformers 5 Mixtral: the attention projections only (the experts and
    # router are not nn.Linear), as PEFT counted it with the tools' list
    case = next(c for c in json.loads((ROOT / "tests/data/adapters/peft_counts.json").read_text())["cases"]
                if c["id"] == "mixtral_linear_names-1")
    model = tmp_path / "mixtral"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(case["config"]))
    recipe = tmp_path / "llamafactory.yaml"
    recipe.write_text(f"model_name_or_path: {model}\nstage: sft\nfinetuning_type: lora\nlora_target: all\n"
                      f"lora_rank: {case['lora']['r']}\ncutoff_len: 64\nper_device_train_batch_size: 1\n"
                      "template: default\n")
    done = run_zeromem("estimate", "--format", "json", "--config", str(recipe))
    assert done.returncode == 0, done.stderr + done.stdout
    assert json.loads(done.stdout)["inputs"]["trainable_parameters"] == case["measured"]["trainable"]


def test_a_recipes_bad_pattern_is_zm104_on_its_key(tmp_path):
    axolotl = tmp_path / "axolotl.yaml"
    axolotl.write_text(f"base_model: {LLAMA3.parent}\nadapter: lora\nlora_r: 16\nlora_target_modules: '(q_proj'\n"
                       "lora_rank_pattern:\n  v_proj: 0\nsequence_len: 512\nmicro_batch_size: 1\n")
    done = run_zeromem("check", "--format", "json", str(axolotl))
    assert "Traceback" not in done.stderr
    found = {f["range"]["start"]["line"]: f["message"] for f in json.loads(done.stdout)["findings"] if f["code"] == "ZM104"}
    assert "not a valid Python regular expression" in found.get(3, ""), done.stdout
    assert "expected a rank from 1" in found.get(4, "") + found.get(5, ""), done.stdout
