"""Exact parameter counts from config.json files written here, against published counts."""

import pytest

from zeromem_lsp.configs.model_config import UnsupportedModel, count_parameters, count_parameters_from_text

LLAMA3_8B = {"model_type": "llama", "vocab_size": 128256, "hidden_size": 4096, "num_hidden_layers": 32,
             "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
             "tie_word_embeddings": False, "rms_norm_eps": 1e-5, "rope_theta": 500000.0}
MISTRAL_7B = {"model_type": "mistral", "vocab_size": 32000, "hidden_size": 4096, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
              "tie_word_embeddings": False}
MIXTRAL_8X7B = {**MISTRAL_7B, "model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2}
QWEN2_7B = {"model_type": "qwen2", "vocab_size": 152064, "hidden_size": 3584, "num_hidden_layers": 28,
            "num_attention_heads": 28, "num_key_value_heads": 4, "intermediate_size": 18944,
            "tie_word_embeddings": False}
GEMMA_7B = {"model_type": "gemma", "vocab_size": 256000, "hidden_size": 3072, "num_hidden_layers": 28,
            "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256, "intermediate_size": 24576}
GPT2 = {"model_type": "gpt2", "vocab_size": 50257, "n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024}
PYTHIA_160M = {"model_type": "gpt_neox", "vocab_size": 50304, "hidden_size": 768, "num_hidden_layers": 12,
               "num_attention_heads": 12, "intermediate_size": 3072, "tie_word_embeddings": False}
PHI_2 = {"model_type": "phi", "vocab_size": 51200, "hidden_size": 2560, "num_hidden_layers": 32,
         "num_attention_heads": 32, "intermediate_size": 10240, "tie_word_embeddings": False}


@pytest.mark.parametrize(("config", "published"), [
    (LLAMA3_8B, 8_030_261_248),  # Meta-Llama-3-8B
    (MISTRAL_7B, 7_241_732_096),  # Mistral-7B-v0.1
    (MIXTRAL_8X7B, 46_702_792_704),  # Mixtral-8x7B-v0.1
    (QWEN2_7B, 7_615_616_512),  # Qwen2-7B
    (GEMMA_7B, 8_537_680_896),  # gemma-7b (tied embeddings)
    (GPT2, 124_439_808),  # gpt2
    (PYTHIA_160M, 162_322_944),  # pythia-160m
    (PHI_2, 2_779_683_840),  # phi-2 (lm_head has a bias)
], ids=["llama3-8b", "mistral-7b", "mixtral-8x7b", "qwen2-7b", "gemma-7b", "gpt2", "pythia-160m", "phi-2"])
def test_published_counts(config, published):
    assert count_parameters(config).total == published


def test_tying_the_embeddings_removes_the_head():
    untied = count_parameters(LLAMA3_8B).total
    tied = count_parameters({**LLAMA3_8B, "tie_word_embeddings": True}).total
    assert untied - tied == 128256 * 4096


def test_biases_and_defaults():
    base = count_parameters(LLAMA3_8B).total
    with_bias = count_parameters({**LLAMA3_8B, "attention_bias": True}).total
    assert with_bias - base == 32 * (4096 + 2 * 1024 + 4096)
    no_kv = {k: v for k, v in LLAMA3_8B.items() if k != "num_key_value_heads"}
    assert count_parameters(no_kv).total - base == 32 * 2 * 4096 * (4096 - 1024)


def test_qwen3_moe_counts_experts_and_router():
    config = {"model_type": "qwen3_moe", "vocab_size": 100, "hidden_size": 8, "num_hidden_layers": 2,
              "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4, "intermediate_size": 16,
              "moe_intermediate_size": 4, "num_experts": 3, "tie_word_embeddings": True}
    attention = 8 * 8 + 2 * 8 * 4 + 8 * 8 + 2 * 4
    moe = 3 * 3 * 8 * 4 + 8 * 3
    assert count_parameters(config).total == 100 * 8 + 2 * (attention + moe + 2 * 8) + 8


def test_unknown_model_type_is_a_clear_error():
    with pytest.raises(UnsupportedModel, match="model_type 't5'.*supported: llama"):
        count_parameters({"model_type": "t5"})
    with pytest.raises(UnsupportedModel, match="not valid JSON"):
        count_parameters_from_text("{nope")
    with pytest.raises(UnsupportedModel, match="no integer hidden_size"):
        count_parameters({"model_type": "llama"})
