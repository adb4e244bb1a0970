"""Full fine-tuning under a bitsandbytes 8-bit AdamW (HF's adamw_bnb_8bit / adamw_8bit / paged_adamw_8bit): HF Trainer
keeps the input embedding's state at 32 bits (fp32 m, v: 8 B a parameter; measured through Trainer.create_optimizer in
tests/data/step/bnb_embedding_state.json), in the model-state column and in the peak, through `zeromem estimate` on
axolotl's fft-8b.yaml (Llama-3-8B, untied). torchao's adamw_torch_8bit gets no override; DeepSpeed's flat partitions
escape it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import run_zeromem

DATA = Path(__file__).resolve().parents[1] / "data"
RECIPE = DATA / "recipes" / "axolotl" / "examples" / "llama-3" / "fft-8b.yaml"
H, V, KV, I, LAYERS = 4096, 128256, 1024, 14336, 32
EMBEDDING = V * H
PARAMETERS = 2 * EMBEDDING + LAYERS * (2 * H * H + 2 * KV * H + 3 * I * H + 2 * H) + H


def estimate(tmp_path: Path, monkeypatch, optimizer: str, extra: str = "") -> dict:
    monkeypatch.setenv("HF_HUB_CACHE", str(DATA / "hf_cache"))
    text = RECIPE.read_text(encoding="utf-8").replace("optimizer: paged_adamw_8bit", f"optimizer: {optimizer}") + extra
    path = tmp_path / RECIPE.name
    path.write_text(text, encoding="utf-8")
    done = run_zeromem("estimate", "--config", str(path), "--offline", "--world-size", "1", "--format", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def blocks(n: int) -> int:
    return -(-n // 256)


@pytest.mark.parametrize("optimizer", ["adamw_bnb_8bit", "paged_adamw_8bit", "adamw_8bit"])
def test_the_embeddings_8bit_adam_state_is_fp32_under_hf_trainer(tmp_path, monkeypatch, optimizer):
    result = estimate(tmp_path, monkeypatch, optimizer)
    assert result["inputs"]["parameters"] == PARAMETERS and result["inputs"]["optimizer"] == "adam8bit"
    # 2 B a parameter, the embedding's 6 B more (8 B: fp32 m and v); the head (an nn.Linear) stays at 2 B
    assert result["inputs"]["optimizer_bytes"] == 2 * PARAMETERS + 6 * EMBEDDING
    # the peak's state: every tensor of at least 4096 elements 8-bit (two uint8 codes + two fp32 absmax a 256-block,
    # the norms' 4096 included), the embedding fp32 m, v, and two 256-entry fp32 quantile maps
    eight_bit = [V * H] + LAYERS * [H * H, KV * H, KV * H, H * H, I * H, I * H, I * H, H, H] + [H]
    state = 8 * EMBEDDING + sum(2 * n + 8 * blocks(n) for n in eight_bit) + 2 * 256 * 4
    assert result["phases"]["ddp"]["parts"]["8-bit m, v + block scales (derived)"] == state


def test_torchaos_8bit_adamw_and_deepspeed_get_no_override(tmp_path, monkeypatch):
    torchao = estimate(tmp_path, monkeypatch, "adamw_torch_8bit")
    assert torchao["inputs"]["optimizer"] == "adam8bit_torchao"
    assert torchao["inputs"]["optimizer_bytes"] == 2 * PARAMETERS
    # Trainer registers the override, but DeepSpeed hands the optimizer its flat fp32 partition: no id matches
    zero2 = tmp_path / "zero2.json"
    zero2.write_text(json.dumps({"zero_optimization": {"stage": 2}, "bf16": {"enabled": "auto"},
                                 "train_micro_batch_size_per_gpu": "auto"}), encoding="utf-8")
    deepspeed = estimate(tmp_path, monkeypatch, "adamw_bnb_8bit", f"deepspeed: {zero2}\n")
    assert deepspeed["stage"] == "zero2"
    assert deepspeed["inputs"]["optimizer_bytes"] == (2 + 4) * PARAMETERS  # 8-bit state + the fp32 master
