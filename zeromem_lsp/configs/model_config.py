"""Exact parameter counts from a Hugging Face model's `config.json` (no weights, no network).

Counted from the architecture the way the Transformers modelling code builds it: embeddings,
per-layer attention (q/k/v/o, with biases where the family has them), MLP or experts + router,
norms (RMSNorm: a weight; LayerNorm: weight + bias), the final norm, and the output head unless
`tie_word_embeddings` shares it with the input embedding. Buffers (rotary tables) are not parameters.

Families: llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3_text, phi3 (llama layout), mixtral and
qwen3_moe (experts), gpt2, gpt_neox, phi. Anything else raises `UnsupportedModel` with the list.
Checked against published counts in tests/unit/test_model_config.py (Llama-3-8B 8,030,261,248;
Mistral-7B-v0.1 7,241,732,096; GPT-2 124,439,808; ...).
"""

from __future__ import annotations

import json
from dataclasses import dataclass


class UnsupportedModel(ValueError):
    """The config cannot be counted (unknown model_type or a missing field)."""


@dataclass(frozen=True)
class ParameterCount:
    total: int
    model_type: str
    note: str  # e.g. "llama: 32 layers, tied embeddings"


def _int(config: dict, *names: str, default: int | None = None) -> int:
    for name in names:
        value = config.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    if default is not None:
        return default
    raise UnsupportedModel(f"config.json has no integer {' / '.join(names)}")


def _tied(config: dict, default: bool) -> bool:
    value = config.get("tie_word_embeddings", default)
    return value if isinstance(value, bool) else default


# Per family: (qkv bias, o bias, norms per layer, q/k norm, tie default)
LLAMA_LIKE = {
    "llama": (None, None, 2, False, False),
    "mistral": (False, False, 2, False, False),
    "qwen2": (True, False, 2, False, False),
    "qwen3": (None, None, 2, True, False),
    "gemma": (None, None, 2, False, True),
    "gemma2": (None, None, 4, False, True),
    "gemma3_text": (None, None, 4, True, True),
    "phi3": (False, False, 2, False, False),
    "mixtral": (False, False, 2, False, False),
    "qwen3_moe": (None, None, 2, True, False),
}
SUPPORTED = tuple(LLAMA_LIKE) + ("gpt2", "gpt_neox", "phi")


def _llama_like(config: dict, model_type: str) -> ParameterCount:
    qkv_bias, o_bias, norms, qk_norm, tie_default = LLAMA_LIKE[model_type]
    attention_bias = bool(config.get("attention_bias", False))
    qkv_bias = attention_bias if qkv_bias is None else qkv_bias
    o_bias = attention_bias if o_bias is None else o_bias
    hidden = _int(config, "hidden_size")
    layers = _int(config, "num_hidden_layers")
    heads = _int(config, "num_attention_heads")
    kv_heads = _int(config, "num_key_value_heads", default=heads)
    head_dim = _int(config, "head_dim", default=hidden // heads)
    vocab = _int(config, "vocab_size")
    intermediate = _int(config, "intermediate_size")
    mlp_bias = bool(config.get("mlp_bias", False))
    q_width, kv_width = heads * head_dim, kv_heads * head_dim
    attention = hidden * q_width + 2 * hidden * kv_width + q_width * hidden
    if qkv_bias:
        attention += q_width + 2 * kv_width
    if o_bias:
        attention += hidden
    if qk_norm:
        attention += 2 * head_dim
    dense_mlp = 3 * hidden * intermediate + (2 * intermediate + hidden if mlp_bias else 0)
    per_layer_norms = norms * hidden
    total_layers = 0
    note = f"{layers} layers"
    if model_type == "mixtral":
        experts = _int(config, "num_local_experts")
        moe = experts * 3 * hidden * intermediate + hidden * experts
        total_layers = layers * (attention + moe + per_layer_norms)
        note += f", {experts} experts"
    elif model_type == "qwen3_moe":
        experts = _int(config, "num_experts")
        expert_size = _int(config, "moe_intermediate_size")
        step = _int(config, "decoder_sparse_step", default=1)
        dense_only = set(config.get("mlp_only_layers") or [])
        moe = experts * 3 * hidden * expert_size + hidden * experts
        for index in range(layers):
            sparse = index not in dense_only and experts > 0 and (index + 1) % step == 0
            total_layers += attention + per_layer_norms + (moe if sparse else dense_mlp)
        note += f", {experts} experts"
    else:
        total_layers = layers * (attention + dense_mlp + per_layer_norms)
    tied = _tied(config, tie_default)
    total = vocab * hidden + total_layers + hidden + (0 if tied else vocab * hidden)
    return ParameterCount(total, model_type, f"{model_type}: {note}, {'tied' if tied else 'untied'} embeddings")


def _gpt2(config: dict) -> ParameterCount:
    hidden = _int(config, "n_embd", "hidden_size")
    layers = _int(config, "n_layer", "num_hidden_layers")
    vocab = _int(config, "vocab_size")
    positions = _int(config, "n_positions", "max_position_embeddings")
    inner = config.get("n_inner") or 4 * hidden
    per_layer = (2 * hidden  # ln_1
                 + hidden * 3 * hidden + 3 * hidden  # c_attn
                 + hidden * hidden + hidden  # attn c_proj
                 + 2 * hidden  # ln_2
                 + hidden * inner + inner  # c_fc
                 + inner * hidden + hidden)  # mlp c_proj
    tied = _tied(config, True)
    total = vocab * hidden + positions * hidden + layers * per_layer + 2 * hidden + (0 if tied else vocab * hidden)
    return ParameterCount(total, "gpt2", f"gpt2: {layers} layers, {'tied' if tied else 'untied'} embeddings")


def _gpt_neox(config: dict) -> ParameterCount:
    hidden = _int(config, "hidden_size")
    layers = _int(config, "num_hidden_layers")
    vocab = _int(config, "vocab_size")
    intermediate = _int(config, "intermediate_size")
    bias = bool(config.get("attention_bias", True))
    attention = hidden * 3 * hidden + hidden * hidden + ((3 * hidden + hidden) if bias else 0)
    mlp = hidden * intermediate + intermediate + intermediate * hidden + hidden
    per_layer = 4 * hidden + attention + mlp  # two LayerNorms (weight + bias)
    tied = _tied(config, False)
    total = vocab * hidden + layers * per_layer + 2 * hidden + (0 if tied else vocab * hidden)
    return ParameterCount(total, "gpt_neox", f"gpt_neox: {layers} layers, {'tied' if tied else 'untied'} embeddings")


def _phi(config: dict) -> ParameterCount:
    hidden = _int(config, "hidden_size")
    layers = _int(config, "num_hidden_layers")
    heads = _int(config, "num_attention_heads")
    kv_heads = _int(config, "num_key_value_heads", default=heads)
    head_dim = hidden // heads
    vocab = _int(config, "vocab_size")
    intermediate = _int(config, "intermediate_size")
    q_width, kv_width = heads * head_dim, kv_heads * head_dim
    attention = (hidden * q_width + q_width) + 2 * (hidden * kv_width + kv_width) + (q_width * hidden + hidden)
    if config.get("qk_layernorm"):
        attention += 2 * 2 * head_dim
    mlp = hidden * intermediate + intermediate + intermediate * hidden + hidden
    per_layer = 2 * hidden + attention + mlp  # one LayerNorm: attention and MLP run in parallel
    tied = _tied(config, False)
    head = 0 if tied else vocab * hidden + vocab  # phi's lm_head has a bias
    total = vocab * hidden + layers * per_layer + 2 * hidden + head
    return ParameterCount(total, "phi", f"phi: {layers} layers, {'tied' if tied else 'untied'} embeddings")


def count_parameters(config: dict) -> ParameterCount:
    """Exact parameter count of the model a config.json describes; raises UnsupportedModel."""
    if not isinstance(config, dict):
        raise UnsupportedModel("config.json is not a JSON object")
    model_type = config.get("model_type")
    if isinstance(config.get("text_config"), dict) and model_type not in SUPPORTED:
        return count_parameters({**config["text_config"], "model_type": config["text_config"].get("model_type")})
    if model_type in LLAMA_LIKE:
        return _llama_like(config, model_type)
    if model_type == "gpt2":
        return _gpt2(config)
    if model_type == "gpt_neox":
        return _gpt_neox(config)
    if model_type == "phi":
        return _phi(config)
    raise UnsupportedModel(
        f"cannot count parameters for model_type {model_type!r}; supported: {', '.join(SUPPORTED)} "
        '(declare "parameters" as a number instead)')


def count_parameters_from_text(text: str) -> ParameterCount:
    try:
        config = json.loads(text)
    except ValueError as error:
        raise UnsupportedModel(f"config.json is not valid JSON: {error}") from None
    return count_parameters(config)
