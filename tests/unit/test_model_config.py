"""Exact parameter counts from config.json files written here, against published counts."""

import json

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
    with pytest.raises(UnsupportedModel, match="no integer hidden_size"):  # null: no default applies
        count_parameters({"model_type": "llama", "hidden_size": None})


# --- hostile or odd config.json files: UnsupportedModel naming the field, never a crash or a hang ---

TINY_LLAMA = {"model_type": "llama", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "intermediate_size": 128}
TINY_GPT2 = {"model_type": "gpt2", "vocab_size": 100, "n_embd": 64, "n_layer": 2, "n_positions": 10}
TINY_QWEN3_MOE = {"model_type": "qwen3_moe", "vocab_size": 100, "hidden_size": 8, "num_hidden_layers": 2,
                  "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4, "intermediate_size": 16,
                  "moe_intermediate_size": 4, "num_experts": 3, "tie_word_embeddings": True}


@pytest.mark.parametrize(("config", "field"), [
    ({**TINY_LLAMA, "num_attention_heads": 0}, "num_attention_heads"),
    ({"model_type": []}, "model_type"),
    ({"model_type": {"a": 1}, "text_config": TINY_LLAMA}, "model_type"),
    ({**TINY_LLAMA, "vocab_size": -100_000_000}, "vocab_size"),
    ({**TINY_LLAMA, "hidden_size": 10**10}, "hidden_size"),
    ({**TINY_LLAMA, "num_key_value_heads": "8"}, "num_key_value_heads"),
    ({**TINY_LLAMA, "hidden_size": 2, "num_attention_heads": 4}, "head_dim"),
    ({**TINY_GPT2, "n_inner": "x"}, "n_inner"),
    ({**TINY_GPT2, "n_inner": -5}, "n_inner"),
    ({**TINY_QWEN3_MOE, "decoder_sparse_step": 0}, "decoder_sparse_step"),
    ({**TINY_QWEN3_MOE, "mlp_only_layers": 5}, "mlp_only_layers"),
    ({**TINY_QWEN3_MOE, "mlp_only_layers": [0, "1"]}, "mlp_only_layers"),
    ({**TINY_QWEN3_MOE, "num_hidden_layers": 1e12}, "num_hidden_layers"),
    ({**TINY_QWEN3_MOE, "num_experts": 10**7}, "num_experts"),
    ({"model_type": "phi", "vocab_size": 100, "hidden_size": 2, "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 8}, "hidden_size / num_attention_heads"),
], ids=["zero-heads", "list-model-type", "dict-model-type-with-text-config", "negative-vocab", "huge-hidden",
        "string-kv-heads", "zero-head-dim", "string-n-inner", "negative-n-inner", "zero-sparse-step",
        "int-mlp-only-layers", "string-layer-index", "float-layers", "ten-million-experts",
        "phi-zero-head-dim"])
def test_hostile_configs_are_unsupported_naming_the_field(config, field):
    with pytest.raises(UnsupportedModel, match=field.replace("/", "\\/")):
        count_parameters_from_text(json.dumps(config))


def test_unreadable_config_text_is_unsupported():
    with pytest.raises(UnsupportedModel, match="nested too deeply"):
        count_parameters_from_text("[" * 100_000)
    with pytest.raises(UnsupportedModel, match="not valid JSON"):
        count_parameters_from_text('{"model_type": "llama", "hidden_size": 1' + "0" * 5000 + "}")


def test_unexpected_errors_are_reported_as_unsupported(monkeypatch):
    from zeromem_lsp.configs import model_config

    def broken(*_, **__):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(model_config, "_read", broken)
    with pytest.raises(UnsupportedModel, match="ZeroDivisionError"):
        count_parameters_from_text('{"model_type": "gpt_neox"}')


def _qwen3_moe_by_layer(config: dict) -> int:
    """The per-layer reference (Qwen3MoeDecoderLayer's rule), for small configs only."""
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    kv, head_dim = config["num_key_value_heads"], config["head_dim"]
    experts, step = config["num_experts"], config.get("decoder_sparse_step", 1)
    attention = hidden * heads * head_dim * 2 + 2 * hidden * kv * head_dim + 2 * head_dim
    moe = experts * 3 * hidden * config["moe_intermediate_size"] + hidden * experts
    dense = 3 * hidden * config["intermediate_size"]
    total = config["vocab_size"] * hidden + hidden
    for index in range(config["num_hidden_layers"]):
        sparse = index not in config.get("mlp_only_layers", []) and experts > 0 and (index + 1) % step == 0
        total += attention + 2 * hidden + (moe if sparse else dense)
    return total


@pytest.mark.parametrize(("layers", "step", "dense_only", "experts"), [
    (2, 1, [], 3), (7, 2, [], 3), (12, 3, [2, 5, 6, 40], 3), (9, 4, [0, 3, 7, 8], 1), (5, 1, [1], 0), (3, 5, [], 3),
])
def test_qwen3_moe_sparse_layers_are_counted_arithmetically(layers, step, dense_only, experts):
    config = {**TINY_QWEN3_MOE, "num_hidden_layers": layers, "decoder_sparse_step": step,
              "mlp_only_layers": dense_only, "num_experts": experts}
    assert count_parameters(config).total == _qwen3_moe_by_layer(config)


def test_qwen3_moe_with_a_trillion_layers_is_refused_at_once():
    import signal

    def stop(*_):
        raise TimeoutError("qwen3_moe counted layer by layer")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(10)
    try:
        with pytest.raises(UnsupportedModel, match="num_hidden_layers"):
            count_parameters({**TINY_QWEN3_MOE, "num_hidden_layers": 10**12})
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_qwen3_moe_with_a_million_layers_is_counted_at_once():
    config = {**TINY_QWEN3_MOE, "num_hidden_layers": 10**6, "decoder_sparse_step": 3, "mlp_only_layers": [2, 4]}
    assert count_parameters(config).total > 0


def test_largest_layer_is_one_decoder_layer():
    # Llama-3-8B: q,o 4096² each + k,v 4096·1024 each + 3 × 4096·14336 MLP + two 4096 norms
    assert count_parameters(LLAMA3_8B).largest_layer == 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 8192
    gpt2 = count_parameters(GPT2)
    assert gpt2.largest_layer == (124_439_808 - 50257 * 768 - 1024 * 768 - 2 * 768) // 12
    attention = 8 * 8 + 2 * 8 * 4 + 8 * 8 + 2 * 4
    # layer 0 sparse (3 experts of width 4 + router: 312), layer 1 dense (width 16: 384): the dense one is larger
    mixed = {**TINY_QWEN3_MOE, "mlp_only_layers": [1]}
    assert count_parameters(mixed).largest_layer == attention + 2 * 8 + 3 * 8 * 16
    sparse_only = {**TINY_QWEN3_MOE, "num_experts": 5}  # 5 experts: 3·5·8·4 + 8·5 = 520
    assert count_parameters(sparse_only).largest_layer == attention + 2 * 8 + 3 * 5 * 8 * 4 + 8 * 5
