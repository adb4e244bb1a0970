"""LoRA on routed experts through the real entry point: axolotl's `lora_target_parameters` (its expert-parallel
Qwen3-30B-A3B example names the experts in a comment) and `--lora-target-parameters` reach PEFT's target_parameters;
the adapted stacks' folded weights are counted as saved for backward (docs/adapters.md, "LoRA on a mixture of
experts"); under expert parallelism the peak is refused, naming the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import run_zeromem

DATA = Path(__file__).resolve().parents[1] / "data"
EXPERT = DATA / "recipes" / "axolotl" / "examples" / "expert_parallel" / "qwen3_30ba3b_ep_lora_4gpu.yaml"
STACKS = ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]


@pytest.fixture(autouse=True)
def hub_cache(monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(DATA / "hf_cache"))


def recipe(tmp_path: Path, experts: bool, expert_parallel: bool) -> Path:
    """The example with its commented lora_target_parameters taken in or not, with its expert-parallel plugin or not,
    without checkpointing (every layer keeps what it saves)."""
    lines = []
    for line in EXPERT.read_text(encoding="utf-8").splitlines():
        if experts and line.startswith("# lora_target_parameters:"):
            line = "lora_target_parameters:"
        elif experts and line.startswith("#   - mlp.experts."):
            line = line[1:]
        elif not expert_parallel and ("ExpertParallelPlugin" in line or line.startswith("expert_parallel_size")):
            continue
        lines.append("gradient_checkpointing: false" if line.startswith("gradient_checkpointing:") else line)
    path = tmp_path / f"experts-{experts}-ep-{expert_parallel}.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def estimate(path: Path, *extra: str) -> dict:
    done = run_zeromem("estimate", "--config", str(path), "--offline", "--world-size", "4", "--format", "json",
                       *extra)
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout)


def test_the_recipe_key_adapts_the_routed_experts_and_their_folded_stacks_are_kept(tmp_path):
    plain, adapted = (estimate(recipe(tmp_path, experts, False)) for experts in (False, True))
    assert adapted["inputs"]["adapter"]["target_parameters"] == STACKS
    # Qwen3-30B-A3B, r = 32: 48 layers × 128 experts × 32 × ((2048 + 1536) + (768 + 2048)) expert adapter parameters
    extra = 48 * 128 * 32 * (2048 + 1536 + 768 + 2048)
    assert adapted["inputs"]["trainable_parameters"] - plain["inputs"]["trainable_parameters"] == extra
    # each MoE layer keeps its folded stacks (128 × 3 × 2048 × 768 bf16), far more than the adapters themselves
    kept = adapted["activations"]["bytes"] - plain["activations"]["bytes"]
    assert kept > 48 * 2 * 128 * 3 * 2048 * 768
    assert adapted["peak"]["ddp"] > plain["peak"]["ddp"] + kept  # (and the adapters' P, G, O)


def test_under_expert_parallelism_the_peak_is_refused_naming_the_key(tmp_path):
    found = estimate(recipe(tmp_path, True, True))
    assert found["peak"]["ddp"] is None
    assert "target_parameters" in json.dumps(found) and "expert parallelism is not modelled" in json.dumps(found)
    assert estimate(recipe(tmp_path, False, True))["peak"]["ddp"] is not None  # attention adapters only: derived


def test_the_flag_names_the_parameters(tmp_path):
    config = json.loads((DATA / "model_families" / "configs" / "tiny-qwen3-next-layer-types-mlp-only.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    done = run_zeromem("estimate", "--model-config", str(path), "--lora-rank", "4", "--lora-targets", "q_proj",
                       "--lora-target-parameters", ",".join(STACKS), "-R", "1", "--sequence-length", "64",
                       "--engine", "torch", "--format", "json")
    assert done.returncode in (0, 1), done.stderr
    assert json.loads(done.stdout)["inputs"]["adapter"]["target_parameters"] == STACKS
    refused = run_zeromem("estimate", "--model-config", str(path), "--lora-rank", "4", "--lora-target-parameters",
                          "input_layernorm.weight", "-R", "1", "--sequence-length", "64")  # 1-D: PEFT refuses it
    assert refused.returncode == 2 and "--lora-target-parameters" in refused.stderr, refused.stderr
