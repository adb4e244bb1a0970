"""`zeromem estimate --optimizer X` for a full fine-tune: the peak follows the optimizer's own step (states and
scratch, memory/optimizer_step.py), names its parts, and says plainly what is not modelled (never as a bad input)."""

import json
from pathlib import Path

import pytest

from tests.cli.conftest import run_zeromem, run_zeromem_subprocess

ROOT = Path(__file__).resolve().parents[2]
QWEN = "tests/data/models/Qwen2.5-7B/config.json"  # h 3584, 28 q / 4 kv heads of 128, I 18944, V 152064, 28 layers
COMMON = ("estimate", "-v", "-R", "8", "--model-config", QWEN, "--sequence-length", "2048", "--micro-batch", "1")


def estimate(*extra: str) -> dict:
    done = run_zeromem(*COMMON, "--format", "json", *extra)
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def text(*extra: str) -> str:
    done = run_zeromem(*COMMON, *extra)
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr
    return done.stdout


@pytest.mark.parametrize("optimizer", ["sgd", "sgd_momentum", "adagrad", "adafactor", "lion", "lamb", "adam8bit"])
def test_every_stage_has_a_peak_under_deepspeed(optimizer):
    found = estimate("--optimizer", optimizer)
    assert all(isinstance(found["peak"][stage], int) for stage in ("ddp", "zero1", "zero2", "zero3")), found["phases"]
    assert "must be one of" not in text("--optimizer", optimizer)


def test_sgd_keeps_no_state_and_momentum_one_copy_of_the_weights():
    parameters = 7_615_616_512
    plain = estimate("--optimizer", "sgd", "--engine", "torch")["phases"]["ddp"]
    momentum = estimate("--optimizer", "sgd_momentum", "--engine", "torch")["phases"]["ddp"]
    assert not any("state" in name or "momentum" in name for name in plain["parts"])
    assert momentum["parts"]["momentum buffers"] == 2 * parameters  # bf16, torch.optim.SGD's `grad.clone()`
    assert momentum["phases"]["optimizer"] - plain["phases"]["optimizer"] == 2 * parameters


def test_adafactor_keeps_row_and_column_means_far_below_adamw():
    found = estimate("--optimizer", "adafactor", "--engine", "torch")["phases"]["ddp"]
    adamw = estimate("--optimizer", "adamw", "--engine", "torch")["phases"]["ddp"]
    h, kv, inter, vocab, layers = 3584, 4 * 128, 18944, 152064, 28
    matrices = (h + h) + 2 * (kv + h) + (h + h) + 3 * (inter + h)  # q, k, v, o, gate, up, down: rows + columns
    vectors = h + kv + kv + 2 * h  # q/k/v biases and two norms: the whole second moment
    factors = 4 * (layers * (matrices + vectors) + 2 * (vocab + h) + h)  # fp32 (`.to(grad)` after `grad.float()`)
    assert found["parts"]["Adafactor factors"] == factors
    assert factors * 1000 < adamw["parts"]["optimizer states"]
    # its step holds the largest tensor (the 152064 × 3584 head) in fp32 four times
    assert found["peak_phase"] == "optimizer"
    assert found["parts"]["optimizer scratch"] >= 16 * vocab * h


def test_what_is_not_modelled_says_why_not_bad_input():
    shown = text("--optimizer", "lamb", "--engine", "torch")
    assert "peak unknown: the optimizer step of lamb is modelled under DeepSpeed only" in shown
    assert "must be one of" not in shown
    shown = text("--optimizer", "adafactor", "--engine", "fsdp")
    assert "not modelled" in shown and "must be one of" not in shown


def test_derived_steps_are_labelled_derived():
    for optimizer in ("lion", "lamb", "adam8bit"):
        assert "(derived)" in text("--optimizer", optimizer), optimizer


def test_a_ds_config_adagrad_section_is_torch_adagrad_with_its_first_sums(tmp_path):
    """DeepSpeed builds torch.optim.Adagrad for `optimizer.type: Adagrad` (engine.py `_configure_basic_optimizer`): its
    foreach step, its sums of the fp32 partition, and the sums its __init__ made for the model before DeepSpeed
    swapped the param groups (measured: opt-ds-z2-r2-adagrad) — not FusedAdam's nothing. 16 tokens: the optimizer
    phase holds the peak, so its parts are shown."""
    config = {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
              "optimizer": {"type": "Adagrad", "params": {"lr": 1e-4}}, "zero_optimization": {"stage": 2},
              "zeromem": {"parameters": {"from_config": str(Path(QWEN).resolve())}, "sequence_length": 16,
                          "world_size": 8}}
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(config))
    done = run_zeromem("estimate", "-v", "--config", str(path), "--format", "json")
    data = json.loads(done.stdout)
    assert data["peak_inputs"]["optimizer_impl"]["value"] == "foreach"
    assert "torch Adagrad" in data["peak_inputs"]["optimizer_impl"]["from"]
    phase = data["phases"][data["stage"]]
    assert data["stage"] == "zero2"
    shard = -(-7_615_616_512 // 8)
    assert phase["parts"]["Adagrad sums"] == 4 * shard
    assert phase["parts"]["optimizer scratch"] == 2 * 4 * shard  # `_foreach_sqrt` and `_foreach_mul`
    assert phase["parts"]["Adagrad sums made before DeepSpeed"] == 4 * 7_615_616_512


def test_the_alst_fsdp2_example_with_torchaos_8bit_adamw_gets_a_peak(monkeypatch):
    """axolotl's ALST example (`optimizer: adamw_torch_8bit`, FSDP2): HF builds torchao's AdamW8bit, modelled over
    each rank's local shards; the peak is known, its state named, never bitsandbytes' refusal under FSDP."""
    monkeypatch.setenv("HF_HUB_CACHE", str(ROOT / "tests/data/hf_cache"))
    done = run_zeromem_subprocess("estimate", "--offline", "--format", "json", "--config",
                                  "tests/data/recipes/axolotl/examples/alst/llama3-8b-fsdp2-alst.yaml", cwd=ROOT)
    assert done.returncode in (0, 1), done.stderr
    found = json.loads(done.stdout)
    assert isinstance(found["peak"]["zero3"], int) and found["peak"]["zero3"] > 0, found
    assert "8-bit m, v + block scales" in found["phases"]["zero3"]["parts"]


def test_torchaos_8bit_adamw_under_fsdp1_is_not_modelled(monkeypatch, tmp_path):
    """FSDP1 hands the optimizer one flat parameter per wrapped unit; torchao's 8-bit rule is per tensor and was
    measured over FSDP2's shards only: the FSDP1 peak is unknown, said with the reason, not a figure."""
    monkeypatch.setenv("HF_HUB_CACHE", str(ROOT / "tests/data/hf_cache"))
    source = ROOT / "tests/data/recipes/axolotl/examples/llama-3/fft-8b-liger-fsdp.yaml"
    text = source.read_text(encoding="utf-8").replace("fsdp_offload_params: true", "fsdp_offload_params: false")
    recipe = tmp_path / "fft-8b-ao-fsdp1.yaml"
    recipe.write_text("\n".join("optimizer: adamw_torch_8bit" if line.startswith("optimizer:") else line
                                for line in text.splitlines()) + "\n", encoding="utf-8")
    done = run_zeromem_subprocess("estimate", "--offline", "--format", "json", "--world-size", "8", "--config",
                                  str(recipe), cwd=ROOT)
    assert done.returncode in (0, 1), done.stderr
    found = json.loads(done.stdout)
    assert found["peak"]["zero3"] is None, found["peak"]
    said = json.dumps(found)
    assert "adam8bit_torchao under FSDP1 is not modelled" in said
