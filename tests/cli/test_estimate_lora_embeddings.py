"""`zeromem estimate` on axolotl's flagship LoRA recipe, which trains the input embedding and the head in full beside
the adapters (`lora_modules_to_save: [embed_tokens, lm_head]`): it gets a peak (the LoRA activation model covers a
trained input embedding: tests/unit/test_lora_activations.py, measured in tests/data/adapters/lora_activations.json and
tests/data/step/measured_lora.json), and the embedding's copy keeps 32-bit optimizer state under its 8-bit AdamW."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.conftest import run_zeromem

DATA = Path(__file__).resolve().parents[1] / "data"
RECIPE = DATA / "recipes" / "axolotl" / "examples" / "llama-3" / "lora-8b.yml"


def test_axolotls_lora_8b_with_embed_tokens_and_lm_head_in_modules_to_save_gets_a_peak(monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(DATA / "hf_cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    done = run_zeromem("estimate", "--config", str(RECIPE), "--world-size", "1", "--format", "json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert not result["peak_missing"] and result["peak"]["ddp"] > 0
    adapter = result["inputs"]["adapter"]
    assert adapter["modules_to_save"] == ["embed_tokens", "lm_head"] and adapter["optimizer"] == "adam8bit"
    # Llama-3-8B (h 4096, V 128256, 32 layers, kv 1024, I 14336): r 32 on every linear layer, two V × h copies
    copy = 128256 * 4096
    adapters = 32 * 32 * ((4096 + 4096) * 2 + (4096 + 1024) * 2 + (4096 + 14336) * 3)
    assert adapter["adapter_parameters"] == adapters == 83_886_080
    assert adapter["saved_copy_parameters"] == 2 * copy
    # bf16 copies (no k-bit preparation under axolotl); 8-bit AdamW: 2 B per adapter and head parameter, the
    # embedding's copy fp32 m and v (HF Trainer's nn.Embedding override)
    assert result["inputs"]["optimizer_bytes"] == 2 * adapters + 2 * copy + 8 * copy
    assert result["inputs"]["gradient_bytes"] == 4 * adapters + 2 * 2 * copy
