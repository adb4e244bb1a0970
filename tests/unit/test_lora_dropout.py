"""lora_dropout > 0 through the real entry points: each adapter keeps its dropped-out input and, where its input
carries a gradient, a 1-byte mask (a GPU's fused dropout); memory/lora_activations.py, measured on CPU."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.conftest import run_zeromem
from zeromem_lsp.configs import recipes

MODEL = Path(__file__).resolve().parents[1] / "data" / "models" / "Meta-Llama-3-8B" / "config.json"
# Llama-3-8B, q and v adapters (bf16, the model's dtype: without dropout they share their input), no checkpointing
FLAGS = ["estimate", "--format", "json", "--model-config", str(MODEL), "-R", "1", "--engine", "torch",
         "--precision", "bf16", "--param-dtype", "bf16", "--sequence-length", "1024", "--micro-batch", "1",
         "--lora-rank", "16", "--lora-targets", "q_proj,v_proj"]


def _lora(*extra: str) -> dict:
    done = run_zeromem(*FLAGS, *extra)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["activations"]["lora"]


def test_dropout_adds_each_adapters_input_and_mask_by_hand():
    plain, dropped = _lora(), _lora("--lora-dropout", "0.05")
    tokens, hidden, layers = 1024, 4096, 32  # (PEFT's fp32 adapters keep their own fp32 input copy either way)
    # a layer whose input carries a gradient: + a 1-byte mask for q's and for v's input
    assert dropped["per_layer_bytes"] - plain["per_layer_bytes"] == 2 * tokens * hidden
    # the first layer's input (the frozen embedding's) carries none: no mask, the copies as before
    assert dropped["first_layer_bytes"] == plain["first_layer_bytes"]
    assert dropped["total"] - plain["total"] == (layers - 1) * 2 * tokens * hidden


def test_a_bad_probability_is_a_usage_error():
    done = run_zeromem(*FLAGS, "--lora-dropout", "1.5")
    assert done.returncode == 2 and "expected a probability" in done.stderr


def test_trl_recipes_default_to_trls_dropout():
    setup = recipes.READ["trl"]({"model_name_or_path": "x", "use_peft": True}, [])
    assert setup.adapter is not None and setup.adapter.dropout.value == 0.05
    assert "TRL ModelConfig's default" in setup.adapter.dropout.note
