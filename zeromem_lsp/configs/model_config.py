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
from typing import NamedTuple

from zeromem_lsp.configs.model_defaults import FilledConfig, text_model_type


class UnsupportedModel(ValueError):
    """The config cannot be counted (unknown model_type or a missing field)."""


class ParameterCount(NamedTuple):
    total: int
    model_type: str
    note: str  # e.g. "llama: 32 layers, tied embeddings"
    largest_layer: int = 0  # parameters of the largest decoder layer (what FSDP gathers per wrapped unit)


#: Upper bounds on what a config.json may declare: counts (layers, heads, experts) and sizes (widths,
#: vocabulary, positions). Far beyond any real model; they keep hostile values from hanging or
#: overflowing the count.
MAX_COUNT = 10**6
MAX_SIZE = 10**9
COUNT_FIELDS = frozenset({"num_hidden_layers", "n_layer", "num_attention_heads", "num_key_value_heads", "n_head",
                          "num_local_experts", "num_experts", "decoder_sparse_step"})


def _show(value: object) -> str:
    """A config value for a message: huge integers and long lists are not spelled out."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return f"a {len(str(abs(value))) if abs(value) < 10**4000 else 'several thousand'}-digit number"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _checked(name: str, value: object, minimum: int = 1, label: str | None = None) -> int:
    """`value` as the integer field `name`, or UnsupportedModel naming the field (or `label`)."""
    label = label or name
    if not isinstance(value, int) or isinstance(value, bool):
        raise UnsupportedModel(f"config.json {label} must be an integer, got {_show(value)}")
    maximum = MAX_COUNT if name in COUNT_FIELDS else MAX_SIZE
    if not minimum <= value <= maximum:
        raise UnsupportedModel(f"config.json {label} must be between {minimum} and {maximum:,}, got {_show(value)}")
    return value


def _int(config: dict, *names: str, default: int | None = None, minimum: int = 1) -> int:
    """The first of `names` present (not null) in the config, checked to be an integer in range."""
    for name in names:
        value = config.get(name)
        if value is not None:
            return _checked(name, value, minimum)
    if default is not None:
        return _checked(names[0], default, minimum, f"{names[0]} (absent; its default)")
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


def _layer_indices(config: dict, name: str) -> set[int]:
    value = config.get(name)
    if value is None:
        return set()
    if not isinstance(value, list) or len(value) > MAX_COUNT:
        raise UnsupportedModel(f"config.json {name} must be a list of layer indices, got {_show(value)}")
    return {_checked(name, index, minimum=0) for index in value}


def _attention_biases(config: dict, model_type: str) -> tuple[bool, bool]:
    """(q/k/v biases, output bias): the family's own, else what `attention_bias` says (LLAMA_LIKE None)."""
    qkv_bias, o_bias = LLAMA_LIKE[model_type][:2]
    attention_bias = bool(config.get("attention_bias", False))
    return (attention_bias if qkv_bias is None else qkv_bias), (attention_bias if o_bias is None else o_bias)


def _llama_like(config: dict, model_type: str) -> ParameterCount:
    _, _, norms, qk_norm, tie_default = LLAMA_LIKE[model_type]
    qkv_bias, o_bias = _attention_biases(config, model_type)
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
        largest = attention + moe + per_layer_norms
        note += f", {experts} experts"
    elif model_type == "qwen3_moe":
        experts = _int(config, "num_experts", minimum=0)  # 0: every layer is dense
        expert_size = _int(config, "moe_intermediate_size")
        step = _int(config, "decoder_sparse_step", default=1)
        dense_only = _layer_indices(config, "mlp_only_layers")
        moe = experts * 3 * hidden * expert_size + hidden * experts
        # Layer i is sparse when i is not in mlp_only_layers and (i + 1) % step == 0 (Qwen3MoeDecoderLayer).
        sparse = 0
        if experts > 0:
            sparse = layers // step - sum(1 for index in dense_only if index < layers and (index + 1) % step == 0)
        total_layers = layers * (attention + per_layer_norms) + sparse * moe + (layers - sparse) * dense_mlp
        largest = attention + per_layer_norms + max(moe if sparse else 0, dense_mlp if sparse < layers else 0)
        note += f", {experts} experts"
    else:
        total_layers = layers * (attention + dense_mlp + per_layer_norms)
        largest = attention + dense_mlp + per_layer_norms
    tied = _tied(config, tie_default)
    total = vocab * hidden + total_layers + hidden + (0 if tied else vocab * hidden)
    return ParameterCount(total, model_type, f"{model_type}: {note}, {'tied' if tied else 'untied'} embeddings",
                          largest)


def _gpt2(config: dict) -> ParameterCount:
    hidden = _int(config, "n_embd", "hidden_size")
    layers = _int(config, "n_layer", "num_hidden_layers")
    vocab = _int(config, "vocab_size")
    positions = _int(config, "n_positions", "max_position_embeddings")
    inner = _int(config, "n_inner", default=4 * hidden)  # null: 4 × n_embd
    per_layer = (2 * hidden  # ln_1
                 + hidden * 3 * hidden + 3 * hidden  # c_attn
                 + hidden * hidden + hidden  # attn c_proj
                 + 2 * hidden  # ln_2
                 + hidden * inner + inner  # c_fc
                 + inner * hidden + hidden)  # mlp c_proj
    tied = _tied(config, True)
    total = vocab * hidden + positions * hidden + layers * per_layer + 2 * hidden + (0 if tied else vocab * hidden)
    return ParameterCount(total, "gpt2", f"gpt2: {layers} layers, {'tied' if tied else 'untied'} embeddings",
                          per_layer)


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
    return ParameterCount(total, "gpt_neox", f"gpt_neox: {layers} layers, {'tied' if tied else 'untied'} embeddings",
                          per_layer)


def _phi(config: dict) -> ParameterCount:
    hidden = _int(config, "hidden_size")
    layers = _int(config, "num_hidden_layers")
    heads = _int(config, "num_attention_heads")
    kv_heads = _int(config, "num_key_value_heads", default=heads)
    head_dim = _checked("head_dim", hidden // heads, label="hidden_size / num_attention_heads")
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
    return ParameterCount(total, "phi", f"phi: {layers} layers, {'tied' if tied else 'untied'} embeddings",
                          per_layer)


def _language_model(config: object) -> tuple[FilledConfig, str | None]:
    """The language model's config (a multimodal wrapper's text_config) over Transformers' defaults, and its
    model_type."""
    if not isinstance(config, dict):
        raise UnsupportedModel("config.json is not a JSON object")
    model_type = config.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise UnsupportedModel(f"config.json model_type must be a string, got {_show(model_type)}")
    text = config.get("text_config")
    if isinstance(text, dict) and model_type not in SUPPORTED:
        return _language_model({**text, "model_type": text_model_type(model_type, text)})
    return FilledConfig(config, model_type), model_type


def _with_defaults_note(counted: ParameterCount, config: FilledConfig) -> ParameterCount:
    note = config.defaults_note()
    return counted._replace(note=f"{counted.note}; {note}") if note else counted


def count_parameters(config: dict) -> ParameterCount:
    """Exact parameter count of the model a config.json describes; raises UnsupportedModel."""
    config, model_type = _language_model(config)
    if model_type in LLAMA_LIKE:
        counted = _llama_like(config, model_type)
    elif model_type == "gpt2":
        counted = _gpt2(config)
    elif model_type == "gpt_neox":
        counted = _gpt_neox(config)
    elif model_type == "phi":
        counted = _phi(config)
    else:
        raise UnsupportedModel(
            f"cannot count parameters for model_type {model_type!r}; supported: {', '.join(SUPPORTED)} "
            '(declare "parameters" as a number instead)')
    if counted.total <= 0:
        raise UnsupportedModel(f"config.json describes a model of {counted.total} parameters")
    return _with_defaults_note(counted, config)


def _from_text(text: str, reader):
    """`reader(config)` on the parsed text; every failure becomes UnsupportedModel."""
    try:
        config = json.loads(text)
    except ValueError as error:
        raise UnsupportedModel(f"config.json is not valid JSON: {error}") from None
    except RecursionError:
        raise UnsupportedModel("config.json is nested too deeply to read") from None
    try:
        return reader(config)
    except (ArithmeticError, TypeError, ValueError, RecursionError) as error:
        if isinstance(error, UnsupportedModel):
            raise
        raise UnsupportedModel(f"config.json cannot be counted: {type(error).__name__}: {error}") from None


def count_parameters_from_text(text: str) -> ParameterCount:
    return _from_text(text, count_parameters)


# --- the shape the activation model needs (zeromem_lsp.memory.activations) ---

class ModelShape(NamedTuple):
    """What a config.json says about a model's activations; defaults are the Transformers config defaults."""

    model_type: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int  # dense MLP width (gpt2: n_inner, else 4 × n_embd)
    vocab: int
    tied: bool
    attention_dropout: float = 0.0  # probability on the attention weights (eager keeps its mask)
    hidden_dropout: float = 0.0  # residual / hidden-state dropout after attention and MLP
    embedding_dropout: float = 0.0
    experts: int = 0  # MoE: experts per sparse layer (0: dense)
    experts_per_token: int = 0
    expert_intermediate: int = 0
    sparse_layers: int = 0  # layers whose MLP is the MoE block
    normalize_top_k: bool = False  # MoE: top-k routing weights renormalized to sum 1 (mixtral always)
    attention_softcap: bool = False  # gemma2: tanh softcapping of the attention scores
    final_softcap: bool = False  # gemma2 / gemma3: tanh softcapping of the logits
    rotary_dim: int = 0  # gpt_neox: rotated channels per head (partial rotary)
    parallel_residual: bool = False  # gpt_neox: attention and MLP read the same input
    sliding_window: int = 0  # tokens a sliding-attention layer sees (0: no sliding layers)
    sliding_layers: int = 0  # layers with sliding-window attention
    positions: int = 0  # gpt2: learned position embeddings (n_positions rows)
    qkv_bias: bool = False  # q/k/v projections with biases (qwen2; attention_bias where the family reads it)
    o_bias: bool = False  # the output projection with a bias (attention_bias where the family reads it)
    mlp_bias: bool = False  # the dense MLP's projections with biases (mlp_bias)


def _probability(config: dict, name: str, default: float = 0.0) -> float:
    value = config.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise UnsupportedModel(f"config.json {name} must be a probability between 0 and 1, got {_show(value)}")
    return float(value)


def _softcap(config: dict, name: str, default: float | None) -> bool:
    value = config.get(name, default)
    if value is None:
        return False
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise UnsupportedModel(f"config.json {name} must be a positive number or null, got {_show(value)}")
    return True


def _rotary_fraction(config: dict) -> float:
    rope = config.get("rope_parameters")
    rope = rope if isinstance(rope, dict) else {}
    name = "rotary_pct" if "rotary_pct" in config else "rope_parameters.partial_rotary_factor"
    value = config.get("rotary_pct", rope.get("partial_rotary_factor", 0.25))
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise UnsupportedModel(f"config.json {name} must be a fraction in (0, 1], got {_show(value)}")
    return float(value)


def _sliding(config: dict, model_type: str, layers: int) -> tuple[int, int]:
    """(window, sliding layers) the way each family's config lays out its layer types."""
    default = {"gemma2": 4096, "gemma3_text": 4096, "mistral": 4096}.get(model_type)
    window = config.get("sliding_window", default)
    if model_type in ("qwen2", "qwen3", "qwen3_moe") and not config.get("use_sliding_window", False):
        window = None
    if window is None or model_type in ("llama", "gemma"):
        return 0, 0
    window = _checked("sliding_window", window)
    types = config.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) > MAX_COUNT or not all(isinstance(t, str) for t in types):
            raise UnsupportedModel(f"config.json layer_types must be a list of strings, got {_show(types)}")
        return window, sum(1 for kind in types[:layers] if kind == "sliding_attention")
    if model_type == "gemma2":
        return window, (layers + 1) // 2  # layers 0, 2, 4, ... slide
    if model_type == "gemma3_text":
        pattern = _int(config, "sliding_window_pattern", default=6)
        return window, layers - layers // pattern  # every pattern-th layer is global
    if model_type.startswith("qwen"):
        return window, max(0, layers - _int(config, "max_window_layers", default=28, minimum=0))
    return window, layers


def _llama_like_shape(config: dict, model_type: str) -> ModelShape:
    hidden = _int(config, "hidden_size")
    heads = _int(config, "num_attention_heads")
    experts = per_token = expert_width = sparse = 0
    layers = _int(config, "num_hidden_layers")
    normalize = model_type == "mixtral"
    if model_type == "mixtral":
        experts = _int(config, "num_local_experts")
        per_token = _int(config, "num_experts_per_tok", default=2)
        expert_width, sparse = _int(config, "intermediate_size"), layers
    elif model_type == "qwen3_moe":
        experts = _int(config, "num_experts", minimum=0)
        per_token = _int(config, "num_experts_per_tok", default=8)
        expert_width = _int(config, "moe_intermediate_size")
        step = _int(config, "decoder_sparse_step", default=1)
        dense_only = _layer_indices(config, "mlp_only_layers")
        normalize = config.get("norm_topk_prob", False) is True
        if experts:
            sparse = layers // step - sum(1 for index in dense_only if index < layers and (index + 1) % step == 0)
    if experts and per_token > experts:
        raise UnsupportedModel(f"config.json num_experts_per_tok ({per_token}) exceeds the {experts} experts")
    gemma2 = model_type == "gemma2"
    window, sliding = _sliding(config, model_type, layers)
    qkv_bias, o_bias = _attention_biases(config, model_type)
    return ModelShape(
        model_type=model_type, hidden=hidden, layers=layers, heads=heads,
        kv_heads=_int(config, "num_key_value_heads", default=heads),
        head_dim=_int(config, "head_dim", default=hidden // heads),
        intermediate=_int(config, "intermediate_size"), vocab=_int(config, "vocab_size"),
        tied=_tied(config, LLAMA_LIKE[model_type][4]),
        attention_dropout=_probability(config, "attention_dropout"),
        hidden_dropout=_probability(config, "resid_pdrop") if model_type == "phi3" else 0.0,
        experts=experts, experts_per_token=per_token, expert_intermediate=expert_width, sparse_layers=sparse,
        sliding_window=window, sliding_layers=sliding, normalize_top_k=normalize, qkv_bias=qkv_bias, o_bias=o_bias,
        mlp_bias=bool(config.get("mlp_bias", False)),
        attention_softcap=model_type in ("gemma2", "gemma3_text") and _softcap(
            config, "attn_logit_softcapping", 50.0 if gemma2 else None),
        final_softcap=model_type in ("gemma2", "gemma3_text") and _softcap(
            config, "final_logit_softcapping", 30.0 if gemma2 else None))


def _gpt2_shape(config: dict) -> ModelShape:
    hidden = _int(config, "n_embd", "hidden_size")
    heads = _int(config, "n_head", "num_attention_heads")
    head_dim = _checked("head_dim", hidden // heads, label="n_embd / n_head")
    return ModelShape(
        model_type="gpt2", hidden=hidden, layers=_int(config, "n_layer", "num_hidden_layers"), heads=heads,
        kv_heads=heads, head_dim=head_dim, intermediate=_int(config, "n_inner", default=4 * hidden),
        vocab=_int(config, "vocab_size"), tied=_tied(config, True),
        positions=_int(config, "n_positions", "max_position_embeddings"),
        attention_dropout=_probability(config, "attn_pdrop", 0.1),
        hidden_dropout=_probability(config, "resid_pdrop", 0.1),
        embedding_dropout=_probability(config, "embd_pdrop", 0.1))


def _gpt_neox_shape(config: dict) -> ModelShape:
    hidden = _int(config, "hidden_size")
    heads = _int(config, "num_attention_heads")
    head_dim = _checked("head_dim", hidden // heads, label="hidden_size / num_attention_heads")
    parallel = config.get("use_parallel_residual", True)
    return ModelShape(
        model_type="gpt_neox", hidden=hidden, layers=_int(config, "num_hidden_layers"), heads=heads,
        kv_heads=heads, head_dim=head_dim, intermediate=_int(config, "intermediate_size"),
        vocab=_int(config, "vocab_size"), tied=_tied(config, False),
        attention_dropout=_probability(config, "attention_dropout"),
        hidden_dropout=_probability(config, "hidden_dropout"),
        embedding_dropout=_probability(config, "hidden_dropout"),  # GPTNeoXModel.emb_dropout
        rotary_dim=int(head_dim * _rotary_fraction(config)), parallel_residual=parallel is not False)


def model_shape(config: dict) -> ModelShape:
    """The activation-relevant shape of a config.json; raises UnsupportedModel naming the field."""
    config, model_type = _language_model(config)
    if model_type in LLAMA_LIKE:
        return _llama_like_shape(config, model_type)
    if model_type == "gpt2":
        return _gpt2_shape(config)
    if model_type == "gpt_neox":
        return _gpt_neox_shape(config)
    supported = ", ".join(name for name in SUPPORTED if name != "phi")
    raise UnsupportedModel(f"no activation model for model_type {model_type!r}; supported: {supported}")


def model_shape_from_text(text: str) -> ModelShape:
    return _from_text(text, model_shape)
