"""TRL's SFTTrainer scores through its fused LM head from TRL 1.15 (trl/trainer/sft_trainer.py `add_fused_lm_head`,
outputs log_probs, entropy, is_top1): a TRL SFT recipe's forward holds no logits of every token, the model's own
loss otherwise (label smoothing, or an older TRL installed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import run_zeromem
from zeromem_lsp.configs import recipes

MODEL = Path(__file__).resolve().parents[1] / "data" / "models" / "Qwen2.5-7B"
RECIPE = f"""model_name_or_path: {MODEL}
dtype: bfloat16
bf16: true
max_length: 4096
per_device_train_batch_size: 2
gradient_checkpointing: true
learning_rate: 2.0e-05
"""


def _estimate(tmp_path: Path, text: str) -> dict:
    path = tmp_path / "config_sft.yaml"
    path.write_text(text, encoding="utf-8")
    done = run_zeromem("estimate", "--format", "json", "--config", str(path), "--world-size", "8")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_trl_sft_recipe_runs_the_fused_head_and_says_so(tmp_path):
    fused = _estimate(tmp_path, RECIPE)
    smoothed = _estimate(tmp_path, RECIPE + "label_smoothing_factor: 0.1\n")
    assert fused["peak_inputs"]["sft_loss"]["value"] == "fused"
    assert "fused LM head" in fused["peak_inputs"]["sft_loss"]["from"]
    assert "sft_loss" not in smoothed["peak_inputs"]  # the label smoother needs the full logits: the model's loss
    forward, full = fused["phases"]["ddp"]["phases"]["forward"], smoothed["phases"]["ddp"]["phases"]["forward"]
    # the fp32 logits of 2 × 4096 tokens × 152,064 entries (and their 16-bit copy) are not made
    assert full - forward > 4 * 2 * 4096 * 152_064
    assert fused["phases"]["ddp"]["phases"]["optimizer"] == smoothed["phases"]["ddp"]["phases"]["optimizer"]


def test_an_older_trl_installed_keeps_the_models_own_loss(tmp_path, monkeypatch):
    monkeypatch.setattr(recipes, "running", lambda package: ("1.14.0", True))
    assert recipes.trl_sft_loss({}) is None
    monkeypatch.setattr(recipes, "running", lambda package: ("1.15.0", True))
    found = recipes.trl_sft_loss({})
    assert found is not None and found.value == "fused" and "TRL 1.15.0 (installed)" in found.note


@pytest.mark.parametrize("key", ["rpo_alpha", "num_generations"])
def test_a_preference_recipe_is_not_priced_as_sft(tmp_path, key):
    data = _estimate(tmp_path, RECIPE + f"{key}: 1\n")
    assert "sft_loss" not in data["peak_inputs"]


def test_the_versions_line_names_an_installed_release_the_peak_does_not_follow(monkeypatch):
    from zeromem_lsp import present

    monkeypatch.setattr(present, "installed", {"transformers": "4.46.3", "trl": "1.16.0"}.get)
    note = present.versions_note()
    assert note.startswith(present.MODELLED_FOR)
    assert note.endswith("(installed here: Transformers 4.46.3)")  # TRL 1.16 is the one followed: not named
    monkeypatch.setattr(present, "installed", lambda package: None)
    assert present.versions_note() == present.MODELLED_FOR


def test_a_project_that_pins_an_older_trl_runs_the_models_own_loss(tmp_path, monkeypatch):
    """open-r1's setup.py pins `trl[vllm]==0.18.0`: its SFT recipes run Transformers' loss, whatever TRL is newest."""
    monkeypatch.setattr(recipes, "running", lambda package: ("1.16", False))  # none installed beside zeromem
    (tmp_path / "setup.py").write_text('_deps = [\n    "transformers==4.52.3",\n    "trl[vllm]==0.18.0",\n]\n')
    folder = tmp_path / "recipes" / "Qwen" / "sft"
    folder.mkdir(parents=True)
    pinned = _estimate(folder, RECIPE)
    assert pinned["peak_inputs"]["sft_loss"]["value"] == "model"
    assert "TRL 0.18.0 (pinned in" in pinned["peak_inputs"]["sft_loss"]["from"]
    (tmp_path / "setup.py").write_text('install_requires = ["trl==1.15.0"]\n')
    fused = _estimate(folder, RECIPE)
    assert fused["peak_inputs"]["sft_loss"]["value"] == "fused" and "TRL 1.15.0 (pinned in" in \
        fused["peak_inputs"]["sft_loss"]["from"]
    assert pinned["phases"]["ddp"]["phases"]["forward"] > fused["phases"]["ddp"]["phases"]["forward"]


def test_the_pin_is_an_exact_trl_pin_only():
    assert recipes.TRL_PIN.search('"trl[vllm]==0.18.0",').group(1) == "0.18.0"
    assert recipes.TRL_PIN.search("trl >= 0.19.1") is None  # a floor: the newest allowed runs
    assert recipes.TRL_PIN.search("ctrl==1.0") is None and recipes.TRL_PIN.search("trl-utils==1.0") is None
