"""One model, one count (issue 27): the parameters the step model holds equal the plan's P — also for GPT-2 (its
learned position embedding) and a llama with `attention_bias` / `mlp_bias`, which the step model once left out."""

from __future__ import annotations

import json

import pytest

from zeromem_lsp.configs.model_config import count_parameters_from_text, model_shape_from_text
from zeromem_lsp.memory.step import parameter_tensors

GPT2 = {"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024, "vocab_size": 50257}
LLAMA_BIASED = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1376, "num_attention_heads": 8,
                "num_key_value_heads": 4, "num_hidden_layers": 4, "vocab_size": 32000, "attention_bias": True,
                "mlp_bias": True, "tie_word_embeddings": False}
QWEN2 = {"model_type": "qwen2", "hidden_size": 512, "intermediate_size": 1376, "num_attention_heads": 8,
         "num_key_value_heads": 4, "num_hidden_layers": 4, "vocab_size": 32000, "tie_word_embeddings": True}


@pytest.mark.parametrize("config", [GPT2, LLAMA_BIASED, QWEN2, {**LLAMA_BIASED, "attention_bias": False}],
                         ids=["gpt2", "llama-biased", "qwen2", "llama-mlp-bias"])
def test_the_step_holds_the_parameters_the_plan_counts(config):
    text = json.dumps(config)
    assert parameter_tensors(model_shape_from_text(text)).total == count_parameters_from_text(text).total


def test_the_ddp_peak_holds_p_bytes_of_parameters(tmp_path):
    """Through the whole estimate: the parameters part of DDP's peak phase is the plan's P (bf16, 2 B each)."""
    from tests.cli.conftest import run_zeromem

    for config in (GPT2, LLAMA_BIASED):
        path = tmp_path / "config.json"
        path.write_text(json.dumps(config))
        done = run_zeromem("estimate", "--model-config", str(path), "-R", "1", "--sequence-length", "128",
                           "--micro-batch", "1", "--engine", "torch", "--format", "json")
        data = json.loads(done.stdout)
        assert data["phases"]["ddp"]["parts"]["parameters"] == data["inputs"]["parameter_bytes"]
