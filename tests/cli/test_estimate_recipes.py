"""`zeromem estimate --config RECIPE`: the same peak as `zeromem check`, with the recipe's own keys named as the
inputs. Skipped where `estimate` has no `--config` (it arrives with issue 19's estimate work)."""

from __future__ import annotations

import json

import pytest

from tests.cli.conftest import run_zeromem
from tests.cli.test_check_recipes import RECIPE_FILES, RECIPES, _plan, cache_with

if "--config" not in run_zeromem("estimate", "--help").stdout:
    pytest.skip("zeromem estimate has no --config here", allow_module_level=True)


@pytest.mark.parametrize("name", [
    "axolotl/examples/gemma3/gemma-3-4b-qlora.yml",  # its own model's config.json; DDP
    "axolotl/examples/llama-3/lora-1b-ray.yml",  # DeepSpeed ZeRO-3 file from the repository root
    "llamafactory/examples/train_lora/qwen3_lora_sft_ds3.yaml",
    "alignment-handbook/recipes/zephyr-7b-beta/sft/config_qlora.yaml",
])
def test_estimate_config_gives_the_recipes_peak(name, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(cache_with(tmp_path, set(RECIPE_FILES.values()))))
    done = run_zeromem("estimate", "--config", str(RECIPES / name), "-R", "8", "--format", "json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    plan = _plan(RECIPES / name)
    assert result["stage"] == plan.stage and result["peak"][plan.stage] == plan.peak.at(plan.stage)
    sequence_key = {"axolotl": "sequence_len", "llamafactory": "cutoff_len"}.get(name.split("/")[0], "max_seq_length")
    assert result["peak_inputs"]["sequence_length"]["from"] == sequence_key
