"""Exact parameter counts from a Hugging Face model's `config.json` (no weights, no network).

Counted from the architecture the way the Transformers modelling code builds it: embeddings,
per-layer attention (q/k/v/o, with biases where the family has them), MLP or experts + router,
norms (RMSNorm: a weight; LayerNorm: weight + bias), the final norm, and the output head unless
`tie_word_embeddings` shares it with the input embedding. Buffers (rotary tables) are not parameters.

Families: llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3_text, phi3 (llama layout), mixtral and
qwen3_moe (experts), gpt2, gpt_neox, phi, olmo2, olmo3, olmoe, qwen2_moe, granite, smollm3, starcoder2, cohere, cohere2,
deepseek_v3, glm4_moe, gpt_oss (the dequantized layout), qwen3_next, llama4_text, phimoe (configs/families.py); and the
vision-language composites (qwen2_vl, qwen2_5_vl, qwen3_vl, gemma3, llava, llava_next, mistral3, llama4) whole: their
language model as one of those families, their vision tower and projector per configs/vision.py, each part named
(`ParameterCount.parts`). Anything else raises `UnsupportedModel` with the list.
Checked against published counts in tests/unit/test_model_config.py (Llama-3-8B 8,030,261,248;
Mistral-7B-v0.1 7,241,732,096; GPT-2 124,439,808; ...).
"""

from __future__ import annotations

import json
from typing import NamedTuple

from zeromem_lsp.configs.families import FAMILIES, Family, weights
from zeromem_lsp.configs.families import ModelShape as ModelShape  # re-exported: its readers import it from here
from zeromem_lsp.configs.model_defaults import FilledConfig, text_model_type
from zeromem_lsp.configs.image_tokens import ImageSettings
from zeromem_lsp.configs.vision import (COMPOSITES, FLAT_TEXT, MEASURED, MEASURED_TOWER, UnknownTower,
                                        ProcessorUnmodelled, UnsupportedVision, tied, vision_kept, vision_parts)


class UnsupportedModel(ValueError):
    """The config cannot be counted (unknown model_type or a missing field)."""


class UnknownFamily(UnsupportedModel):
    """The model_type is none zeromem describes (configs/meta_count.py may count it with Transformers)."""


class ImageTokensUnmodelled(UnsupportedModel):
    """A vision-language model: counted whole, but its image tokens' activations are not modelled (no peak)."""


class ParameterCount(NamedTuple):
    total: int
    model_type: str
    note: str  # e.g. "llama: 32 layers, tied embeddings"
    largest_layer: int = 0  # parameters of the largest decoder layer (what FSDP gathers per wrapped unit)
    parts: tuple[tuple[str, int], ...] = ()  # a vision-language model's named parts (vision_tower,
    # multi_modal_projector, image_newline, language_model: its embeddings, layers, norm and head), in that order


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


SUPPORTED = tuple(FAMILIES)


def _layer_indices(config: dict, name: str) -> set[int]:
    value = config.get(name)
    if value is None:
        return set()
    if not isinstance(value, list) or len(value) > MAX_COUNT:
        raise UnsupportedModel(f"config.json {name} must be a list of layer indices, got {_show(value)}")
    return {_checked(name, index, minimum=0) for index in value}


def _language_model(config: object) -> tuple[FilledConfig, str | None]:
    """The language model's config (a multimodal wrapper's text_config) over Transformers' defaults, and its
    model_type."""
    if not isinstance(config, dict):
        raise UnsupportedModel("config.json is not a JSON object")
    model_type = config.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise UnsupportedModel(f"config.json model_type must be a string, got {_show(model_type)}")
    if model_type in COMPOSITES and COMPOSITES[model_type][1]:  # Qwen-VL: a text config class of its own
        _, own_class, family = COMPOSITES[model_type]
        text = config.get("text_config")
        if text is None:  # Qwen2VLConfig.__post_init__: a flat config's top-level text fields, else the defaults
            text = {key: value for key, value in config.items() if key != "vision_config"} \
                if model_type in FLAT_TEXT else {}
        if not isinstance(text, dict):
            raise UnsupportedModel(f"config.json text_config must be an object, got {_show(text)}")
        return FilledConfig({**text, "model_type": family}, family, defaults_of=own_class), family
    text = config.get("text_config")
    if isinstance(text, dict) and model_type not in SUPPORTED:
        return _language_model({**text, "model_type": text_model_type(model_type, text)})
    return FilledConfig(config, model_type), model_type


def _composite(config: object) -> str | None:
    """The vision-language model_type of a config counted whole (configs/vision.py), else None."""
    model_type = config.get("model_type") if isinstance(config, dict) else None
    return model_type if isinstance(model_type, str) and model_type in COMPOSITES else None


def _language_shape(config: dict, full: bool) -> tuple[ModelShape, FilledConfig]:
    """The language model's shape (a composite's head tied as the composite's config says)."""
    filled, model_type = _language_model(config)
    if model_type not in FAMILIES:
        raise UnknownFamily(
            f"cannot count parameters for model_type {model_type!r}; supported: {', '.join(SUPPORTED)} "
            '(declare "parameters" as a number instead)')
    shape = _read(filled, FAMILIES[model_type], full)
    if _composite(config):
        shape = shape._replace(tied=tied(config, shape.tied))
    return shape, filled


def _with_defaults_note(counted: ParameterCount, config: FilledConfig) -> ParameterCount:
    note = config.defaults_note()
    return counted._replace(note=f"{counted.note}; {note}") if note else counted


def count_parameters(config: dict) -> ParameterCount:
    """Exact parameter count of the model a config.json describes; raises UnsupportedModel."""
    composite = _composite(config)
    shape, filled = _language_shape(config, full=False)
    model_type = shape.model_type
    found = weights(shape)
    total = sum(w.parameters * w.instances for w in found if not (w.role == "head" and shape.tied))
    members = {id(w.layers): set(w.layers) for w in found if w.layers}  # every layer, the dense, the sparse ones
    largest = max(sum(w.parameters for w in found if w.layers and index in members[id(w.layers)])
                  for index in {min(layers) for layers in members.values()})
    if total <= 0:
        raise UnsupportedModel(f"config.json describes a model of {total} parameters")
    experts = f", {shape.experts} experts" if FAMILIES[model_type].moe else ""
    note = f"{model_type}: {shape.layers} layers{experts}, {'tied' if shape.tied else 'untied'} embeddings"
    if composite:
        try:
            parts = vision_parts(config, shape.hidden)
        except UnsupportedVision as error:  # an unknown tower: Transformers may count it (configs/meta_count.py)
            raise (UnknownFamily if isinstance(error, UnknownTower) else UnsupportedModel)(str(error)) from None
        named = tuple((part.name, part.parameters) for part in parts) + (("language_model", total),)
        total = sum(count for _, count in named)
        note = f"{composite}: " + " + ".join(f"{name} {count:,}" for name, count in named) + \
            f" (language model {note})"
        return _with_defaults_note(ParameterCount(total, composite, note, largest, named), filled)
    return _with_defaults_note(ParameterCount(total, model_type, note, largest), filled)


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


# --- the shape (configs/families.ModelShape) the activation models need, read per the family's traits ---

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


def _rotary_fraction(config: dict, fallback: float) -> float:
    rope = config.get("rope_parameters")
    rope = rope if isinstance(rope, dict) else {}
    name = next((key for key in ("rotary_pct", "partial_rotary_factor") if key in config),
                "rope_parameters.partial_rotary_factor")
    value = config.get(name, rope.get("partial_rotary_factor", fallback))
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise UnsupportedModel(f"config.json {name} must be a fraction in (0, 1], got {_show(value)}")
    return float(value)


def _sliding(config: dict, family: Family, layers: int) -> tuple[int, int]:
    """(window, sliding layers) the way the family's config lays out its layer types."""
    rule = family.sliding
    if rule is None or (rule.flag and not config.get(rule.flag, False)):
        return 0, 0
    window = config.get(rule.window_key, rule.window)
    if window is None:
        return 0, 0
    window = _checked(rule.window_key, window)
    types = config.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) > MAX_COUNT or not all(isinstance(t, str) for t in types):
            raise UnsupportedModel(f"config.json layer_types must be a list of strings, got {_show(types)}")
        return window, sum(1 for kind in types[:layers] if kind == rule.kind)
    if rule.global_every:  # every n-th layer is global
        key, every = rule.global_every
        pattern = _int(config, key, default=every) if key else every
        return window, layers - layers // pattern
    if rule.full_below:
        return window, max(0, layers - _int(config, rule.full_below[0], default=rule.full_below[1], minimum=0))
    if rule.even_below:
        below = min(layers, _int(config, rule.even_below[0], default=rule.even_below[1], minimum=0))
        return window, (below + 1) // 2
    return window, layers


def _dropout(config: dict, key: tuple[str, float] | None) -> float:
    return _probability(config, *key) if key else 0.0


def _read(config: dict, family: Family, full: bool) -> ModelShape:
    """The config as a ModelShape. Not `full` (the parameter count): only the fields the weights need, in the
    order the count has always read them (its defaults note names what it read)."""
    key, (attention_key, mlp_key) = family.key, family.bias_keys
    attention_bias = family.attention_bias
    if None in (family.qkv_bias, family.o_bias, family.mlp_bias):  # read where any bias is the config's
        attention_bias = bool(config.get(attention_key, family.attention_bias))
    qkv_bias, o_bias = (attention_bias if bias is None else bias for bias in (family.qkv_bias, family.o_bias))
    hidden = _int(config, *key("hidden"))
    layers = _int(config, *key("layers"))
    heads = kv_heads = 1
    head_dim = hidden
    if full or family.gqa:
        heads = _int(config, *key("heads"))
        kv_heads = _int(config, "num_key_value_heads", default=heads) if family.gqa else heads
        if family.head_dim_key:
            head_dim = _int(config, "head_dim", default=hidden // heads)
        else:
            head_dim = _checked("head_dim", hidden // heads, label=f"{key('hidden')[0]} / {key('heads')[0]}")
    vocab = _int(config, "vocab_size")
    positions = _int(config, *key("positions")) if family.positions else 0
    intermediate = _int(config, *key("intermediate"), default=family.inner * hidden or None)
    mlp_bias = bool(config.get(mlp_key, False)) if family.mlp_bias is None else family.mlp_bias
    moe, experts, per_token, width, sparse, step, dense_only, shared = family.moe, 0, 0, 0, 0, 1, set(), 0
    if moe:
        experts = _int(config, moe.experts, minimum=0 if moe.stepped else 1)  # stepped, 0: every layer is dense
        width, sparse = _int(config, moe.width), layers
        shared = _int(config, moe.shared, minimum=0) if moe.shared else 0
        if moe.shared_times:  # DeepseekV3MoE: shared_experts = MLP(moe_intermediate_size × n_shared_experts)
            shared *= width
        if moe.first_dense:  # DeepseekV3DecoderLayer: MoE where layer_idx >= first_k_dense_replace
            dense_only = set(range(min(layers, _int(config, moe.first_dense, default=0, minimum=0))))
        if moe.interleave:  # Llama4TextConfig: moe_layers, else range(step - 1, layers, step)
            chosen = _layer_indices(config, "moe_layers") if config.get("moe_layers") is not None else set(
                range(_int(config, "interleave_moe_layer_step", default=1) - 1, layers,
                      _int(config, "interleave_moe_layer_step", default=1)))
            dense_only = set(range(layers)) - chosen
        sparse -= len(dense_only)
        if moe.stepped:
            step = _int(config, "decoder_sparse_step", default=1)
            dense_only = _layer_indices(config, "mlp_only_layers")
            # Layer i is sparse when i is not in mlp_only_layers and (i + 1) % step == 0 (Qwen3MoeDecoderLayer).
            sparse = layers // step - sum(1 for i in dense_only if i < layers and (i + 1) % step == 0) if experts else 0
    qk_norm = family.qk_norm if isinstance(family.qk_norm, bool) else bool(config.get(family.qk_norm))
    extra: dict = {}
    if family.mla:  # DeepseekV3Attention: qk_head_dim = qk_nope_head_dim + qk_rope_head_dim
        rope = _int(config, "qk_rope_head_dim", minimum=0)
        head_dim = _int(config, "qk_nope_head_dim", minimum=0) + rope
        extra.update(q_lora_rank=_int(config, "q_lora_rank", default=0, minimum=0) if config.get("q_lora_rank")
                     is not None else 0, kv_lora_rank=_int(config, "kv_lora_rank"), qk_rope_dim=rope,
                     v_head_dim=_int(config, "v_head_dim"))
    if family.hybrid:  # Qwen3NextConfig: layer_types, else every full_attention_interval-th layer is full
        types = config.get("layer_types")
        if types is None:
            every = _int(config, "full_attention_interval", default=4)
            types = ["linear_attention" if (i + 1) % every else "full_attention" for i in range(layers)]
        if not isinstance(types, list) or len(types) > MAX_COUNT or not all(isinstance(t, str) for t in types):
            raise UnsupportedModel(f"config.json layer_types must be a list of strings, got {_show(types)}")
        extra.update(linear_layers=tuple(i for i, kind in enumerate(types[:layers]) if kind == "linear_attention"),
                     linear_heads=tuple(_int(config, name) for name in (
                         "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                         "linear_value_head_dim", "linear_conv_kernel_dim")))
    if isinstance(family.head_bias, str):
        extra["head_bias"] = bool(config.get(family.head_bias, False))
    shape = ModelShape(family.name, hidden, layers, heads, kv_heads, head_dim, intermediate, vocab,
                       _tied(config, family.tie), experts=experts, expert_intermediate=width, sparse_layers=sparse,
                       positions=positions, qkv_bias=qkv_bias, o_bias=o_bias, mlp_bias=mlp_bias, qk_norm=qk_norm,
                       sparse_step=step, dense_only=tuple(sorted(dense_only)), shared_intermediate=shared,
                       **extra)
    if not full:
        return shape
    if moe:
        per_token = _int(config, "num_experts_per_tok", default=moe.per_token)
        if experts and per_token > experts:
            raise UnsupportedModel(f"config.json num_experts_per_tok ({per_token}) exceeds the {experts} experts")
    window, sliding = _sliding(config, family, layers)
    caps = [False, False]
    for index, name in enumerate(("attn_logit_softcapping", "final_logit_softcapping")):
        caps[index] = family.softcaps is not None and _softcap(config, name, family.softcaps[index])
    parallel = family.parallel_residual and config.get("use_parallel_residual", True) is not False
    rotated = config.get("no_rope_layers") or [  # Llama4TextConfig: 1 where the layer uses rope
        (i + 1) % _int(config, "no_rope_layer_interval", default=4) != 0 for i in range(layers)]
    if not isinstance(rotated, list) or len(rotated) > MAX_COUNT:
        raise UnsupportedModel(f"config.json no_rope_layers must be a list of 0 / 1 per layer, got {_show(rotated)}")
    return shape._replace(
        attention_dropout=_dropout(config, family.attention_dropout),
        hidden_dropout=_dropout(config, family.hidden_dropout),
        embedding_dropout=_dropout(config, family.embedding_dropout),
        experts_per_token=per_token, sliding_window=window, sliding_layers=sliding,
        normalize_top_k=moe is not None and (moe.normalize if isinstance(moe.normalize, bool) else config.get(
            moe.normalize, moe.normalized) is True),
        attention_softcap=caps[0], final_softcap=caps[1], parallel_residual=parallel,
        rotary_dim=int(head_dim * _rotary_fraction(config, family.partial_rotary)) if family.partial_rotary else 0,
        nope_layers=sum(not flag for flag in rotated[:layers]) if family.no_rope else 0,
        routing_groups=(_int(config, moe.groups[0][0], default=moe.groups[0][1]), _int(
            config, moe.groups[1][0], default=moe.groups[1][1])) if moe and moe.groups else (0, 0))


def weights_shape(config: dict) -> ModelShape:
    """The fields of a config.json the weights inventory needs (configs/families.weights), for every family the
    count covers, an activation model or not; raises UnsupportedModel."""
    try:
        return _language_shape(config, full=False)[0]
    except UnknownFamily as error:
        raise UnsupportedModel(str(error).split(" (declare")[0]) from None


def model_shape(config: dict, images: ImageSettings = ImageSettings()) -> ModelShape:
    """The activation-relevant shape of a config.json; raises UnsupportedModel naming the field (a vision-language
    model whose image tokens under `images` are not measured: ImageTokensUnmodelled, the peak unknown)."""
    composite = _composite(config)
    whole, (config, model_type) = config, _language_model(config)
    family = FAMILIES.get(model_type) if model_type else None
    active = family is not None and family.activations
    if family is not None and active and not composite:
        return _read(config, family, full=True)
    if composite:
        vision = None
        if active:
            text = _language_shape(whole, full=True)[0]
            try:
                vision = vision_kept(whole, text, images)
            except ProcessorUnmodelled as error:  # what the image processor config sets: not an error in the model
                raise ImageTokensUnmodelled(f"{error}; its parameters are counted whole (model state only)") from None
            except UnsupportedVision as error:
                raise UnsupportedModel(str(error)) from None
            if vision is not None:
                return text._replace(vision=vision)
        states = {True: "trained", False: "frozen"}
        measured = " or ".join(states[state] for state in MEASURED.get(composite, ()))
        measured_types = [name + (f" ({MEASURED_TOWER[name][2]})" if name in MEASURED_TOWER else "")
                          for name in MEASURED]
        raise ImageTokensUnmodelled(
            f"the peak is unknown for model_type {composite!r}: its image tokens' activations are measured for "
            f"{', '.join(measured_types[:-1])} and {measured_types[-1]}, the vision tower trained or frozen"
            + (f" (here {states[images.trained]}: measured {measured} only)"
               if measured and images.trained not in MEASURED[composite] else "")
            + f"; its parameters are counted whole, the language model as {model_type} (model state only)")
    supported = ", ".join(name for name, family in FAMILIES.items() if family.activations)
    raise UnsupportedModel(f"no activation model for model_type {model_type!r}; supported: {supported}")


def model_shape_from_text(text: str) -> ModelShape:
    return _from_text(text, model_shape)
