"""TRL's SFTTrainer scores through its fused LM head from TRL 1.15 (trl/trainer/sft_trainer.py `add_fused_lm_head`,
outputs log_probs, entropy, is_top1), through its chunked NLL from 1.4 to 1.14 when `loss_type` resolves to it
(the default from 1.7): a TRL SFT recipe's forward holds no logits of every token, the model's own loss otherwise
(label smoothing, another loss_type, or an older TRL)."""

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
    monkeypatch.setattr(recipes, "running", lambda package: ("1.6.0", True))  # its default: "nll"
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


@pytest.mark.parametrize("version, data, expected", [
    ("1.14.0", {}, "chunked_nll"),  # SFTConfig's default from 1.7 (sft_config.py __post_init__)
    ("1.13.0", {"loss_type": "chunked_nll"}, "chunked_nll"),
    ("1.12.0", {}, "chunked_nll_fp32"),  # the chunk and the head weight upcast for the matmul (before 1.13)
    ("1.7.0", {}, "chunked_nll_fp32"),
    ("1.5.1", {"loss_type": "chunked_nll"}, "chunked_nll_fp32"),  # asked for, not yet the default
    ("1.6.0", {}, None),  # the default was still "nll"
    ("1.14.0", {"loss_type": "nll"}, None),
    ("1.14.0", {"use_liger_kernel": True}, None),  # the default is "nll" with Liger
    ("1.14.0", {"label_smoothing_factor": 0.1}, None),  # the label smoother calls the model without labels
    ("1.15.0", {"loss_type": "chunked_nll"}, "fused"),  # an alias of "nll" from 1.15
])
def test_the_trl_release_and_loss_type_choose_the_chunked_nll(monkeypatch, version, data, expected):
    monkeypatch.setattr(recipes, "running", lambda package: (version, True))
    found = recipes.trl_sft_loss(data)
    assert (found.value if found is not None else None) == expected
    if expected is not None and expected != "fused":
        assert f"TRL {version} (installed)" in found.note and "chunks of 256 tokens" in found.note


def test_a_project_that_pins_trl_1_14_runs_its_chunked_nll(tmp_path, monkeypatch):
    """TRL 1.14 pinned: the model's fp32 logits of every token give way to one 256-token chunk's at a time."""
    monkeypatch.setattr(recipes, "running", lambda package: ("1.16", False))
    folder = tmp_path / "recipes" / "Qwen" / "sft"
    folder.mkdir(parents=True)
    (tmp_path / "setup.py").write_text('install_requires = ["trl==1.6.0"]\n')  # its default: the model's loss
    model_loss = _estimate(folder, RECIPE)
    (tmp_path / "setup.py").write_text('install_requires = ["trl==1.14.0"]\n')
    chunked = _estimate(folder, RECIPE)
    assert model_loss["peak_inputs"]["sft_loss"]["value"] == "model"
    assert chunked["peak_inputs"]["sft_loss"]["value"] == "chunked_nll"
    assert "TRL 1.14.0 (pinned in" in chunked["peak_inputs"]["sft_loss"]["from"]
    before, after = model_loss["phases"]["ddp"]["phases"], chunked["phases"]["ddp"]["phases"]
    # ForCausalLMLoss's fp32 log-softmax of 2 × 4096 tokens × 152,064 entries is gone from the forward and backward
    assert before["forward"] - after["forward"] > 4 * 2 * 4096 * 152_064
    assert before["backward"] > after["backward"]
    assert before["optimizer"] == after["optimizer"]
    path = folder / "config_sft.yaml"
    text = run_zeromem("estimate", "--config", str(path), "--world-size", "8")
    assert text.returncode == 0, text.stderr
    flat = " ".join(text.stdout.split())  # the versions line names the pinned TRL, not the newest followed
    assert "TRL 1.14.0 (its SFT loss; the rest as 1.16)" in flat and "TRL 1.16," not in flat
    text = run_zeromem("estimate", "-v", "--config", str(path), "--world-size", "8")
    assert "SFT loss chunked_nll — TRL 1.14.0 (pinned in" in text.stdout
    assert "its chunked NLL keeps" in text.stdout


def test_the_versions_line_follows_the_trl_whose_sft_loss_runs(monkeypatch):
    from zeromem_lsp import present

    monkeypatch.setattr(present, "installed", {"trl": "1.14.0"}.get)
    note = present.versions_note(trl="1.14.0")  # the installed TRL chose the loss: named once, as followed
    assert "TRL 1.14.0 (its SFT loss; the rest as 1.16)" in note and "installed here" not in note
    assert present.versions_note(trl="1.16.0") == present.MODELLED_FOR  # the newest followed: nothing to add
    assert recipes.TRL_PINNED.match("TRL 1.14.0 (installed) SFTTrainer").group(1) == "1.14.0"
    assert recipes.TRL_PINNED.match("TRL 1.16 (the newest followed) SFTTrainer") is None
