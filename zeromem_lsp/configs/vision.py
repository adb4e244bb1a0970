"""The vision-language models a fine-tune loads whole: vision tower, projector and language model, each part named.

A composite config (`model_type` qwen2_vl, qwen2_5_vl, qwen3_vl, gemma3, llava, llava_next, mistral3, llama4) is
built by Transformers 5.24 as …ForConditionalGeneration (AutoModelForImageTextToText): the language model is one of
the text families of configs/families.py (read by model_config from `text_config`, or for Qwen2-VL / Qwen2.5-VL from
the flat top level), and beside it a vision tower and a projector, inventoried here as `Weight` rows with their
full parameter names. Their fields are read the way Transformers reads the vision_config: the class's defaults for
absent keys and its attribute_map aliases (transformers_defaults.VISION_DEFAULTS / VISION_ALIASES, generated), the
class chosen as `SubConfigSpec.create_subconfig` does (VISION_CONFIGS: fixed, else the dict's model_type).

Read off the modelling code (transformers/models/<type>/modeling_<type>.py, 5.24):
- qwen2_vl (Qwen2VisionTransformerPretrainedModel): a bias-free Conv3d patch embedding (in_channels →
  embed_dim, kernel temporal_patch_size × patch_size²), `depth` blocks of LayerNorm / fused qkv / proj / fc1-fc2
  (embed_dim × mlp_ratio), all biased; the merger (PatchMerger): LayerNorm, Linear(embed_dim·m², same),
  Linear(embed_dim·m², hidden_size) with m = spatial_merge_size.
- qwen2_5_vl: RMSNorms (weight only), a gated biased MLP of `intermediate_size`; the merger's output is
  `out_hidden_size`.
- qwen3_vl: a biased Conv3d, a learned position embedding (`num_position_embeddings`), qwen2_vl-like blocks with
  linear_fc1 / linear_fc2 of `intermediate_size`; the merger (LayerNorm over hidden) and one deepstack merger per
  `deepstack_visual_indexes` entry (LayerNorm over hidden·m²), each linear_fc1 (hidden·m² square) and linear_fc2
  (→ out_hidden_size).
- siglip_vision_model (gemma3, llava): a biased Conv2d, a position embedding of (image_size / patch_size)² rows,
  CLIP-like layers, post_layernorm, and when `vision_use_head` the attention-pooling head (probe,
  nn.MultiheadAttention, LayerNorm, MLP).
- clip_vision_model (llava, llava_next): class_embedding, a bias-free Conv2d, (image_size / patch_size)² + 1
  positions, pre_layrnorm, the layers, post_layernorm (all built, whatever vision_feature_layer selects).
- pixtral (mistral3): a bias-free Conv2d, ln_pre and attention_norm / ffn_norm RMSNorms, gated bias-free MLPs and
  bias-free q/k/v/o of hidden × hidden.
- llama4_vision_model: a bias-free unfold linear (channels · patch² → hidden), class_embedding, positions
  ((image_size / patch_size)² + 1), biased LayerNorms before and after, biased layers, the pixel-shuffle adapter
  (fc1 intermediate_size → projector_input_dim, fc2 projector_output_dim², bias-free).
- projectors: llava / llava_next's linear_1 (vision hidden × number of feature layers → text hidden), linear_2
  (text hidden²), biased as `multimodal_projector_bias`; llava_next's `image_newline` (text hidden) when
  `use_image_newline_parameter` is not false; gemma3's mm_input_projection_weight (vision hidden, text hidden) and
  mm_soft_emb_norm (vision hidden); mistral3's RMSNorm (vision hidden), patch_merger.merging_layer (hidden·m² →
  hidden, no bias), linear_1 / linear_2 as llava's; llama4's linear_1 (vision_output_dim → text hidden, no bias).
Checked against what Transformers builds on the meta device: tests/unit/test_vision_language.py.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from zeromem_lsp.configs.families import ModelShape, Weight
from zeromem_lsp.configs.image_tokens import (LLAMA4_MAX_TILES, LLAVA_NEXT_PINPOINTS, PROCESSOR_NAME, QWEN_PIXELS,
                                              QWEN_TAPS, ImageSettings, Masks, Processor, Tower, VisionKept,
                                              anyres_tokens, llama4_tiles, pixtral_grid, qwen_image_tokens)
from zeromem_lsp.configs.transformers_defaults import VISION_ALIASES, VISION_CONFIGS, VISION_DEFAULTS

#: composite model_type -> (the inner module holding the vision tower, the text config's own class (None: the
#: family's; its defaults apply), the family its language model is counted as where that is not the text type)
COMPOSITES: dict[str, tuple[str, str | None, str | None]] = {
    "qwen2_vl": ("model.visual", "qwen2_vl_text", "qwen2"),
    "qwen2_5_vl": ("model.visual", "qwen2_5_vl_text", "qwen2"),
    "qwen3_vl": ("model.visual", "qwen3_vl_text", "qwen3"),
    "gemma3": ("model.vision_tower", None, None),
    "llava": ("model.vision_tower", None, None),
    "llava_next": ("model.vision_tower", None, None),
    "mistral3": ("model.vision_tower", None, None),
    "llama4": ("vision_model", None, None),
}
VISION_LANGUAGE = tuple(COMPOSITES)
#: configs saved by Transformers 4 keep Qwen2-VL's text fields at the top level (Qwen2VLConfig.__post_init__ moves
#: them into text_config); these composites read the language model from there when no text_config is given
FLAT_TEXT = frozenset({"qwen2_vl", "qwen2_5_vl"})
#: composites whose config forwards a text_config's tie_word_embeddings to the outer one when that is false (the
#: "BC: pre-v5 saves" branch of Qwen2VLConfig / Qwen2_5_VLConfig / LlavaConfig.__post_init__)
TIE_FROM_TEXT = frozenset({"qwen2_vl", "qwen2_5_vl", "llava"})


class UnsupportedVision(ValueError):
    """A vision_config zeromem cannot read (an unknown tower type or a bad field)."""


class UnknownTower(UnsupportedVision):
    """A vision tower type zeromem does not describe (Transformers may count it on the meta device)."""


class ProcessorUnmodelled(UnsupportedVision):
    """The image processor config the run loads sets what the image-token bound does not model (pan-and-scan, no
    resizing, a value of the wrong type): the peak unknown, not an error in the config."""


class Part(NamedTuple):
    """One named part of a composite model: its weights (full names, `{i}` for a layer index) and its total."""

    name: str
    weights: tuple[Weight, ...]

    @property
    def parameters(self) -> int:
        return sum(w.parameters * w.instances for w in self.weights)


def tied(config: dict, text_tied: bool) -> bool:
    """Whether the composite's head shares the language model's embedding (the outer tie_word_embeddings, or its
    class default; TIE_FROM_TEXT: the text config's where the outer is false)."""
    model_type = config["model_type"]
    value = config.get("tie_word_embeddings")
    outer = value if isinstance(value, bool) else bool(VISION_DEFAULTS[model_type].get("tie_word_embeddings"))
    return outer or (model_type in TIE_FROM_TEXT and text_tied)


def filled(own: dict, model_type: str) -> dict:
    """A sub-config's own keys over its class's recorded defaults, an attribute_map alias setting its field."""
    merged = {**VISION_DEFAULTS.get(model_type, {}), **own}
    for alias, field in VISION_ALIASES.get(model_type, {}).items():
        if alias in own and field not in own:
            merged[field] = own[alias]
    return merged


def vision_config(config: dict) -> tuple[str, dict]:
    """(the vision model_type Transformers builds, its fields over that class's defaults)."""
    kind, fixed, init_kwargs = VISION_CONFIGS[config["model_type"]]
    own = config.get("vision_config")
    if own is None:  # create_subconfig: the spec's class with its init_kwargs
        return kind, filled(dict(init_kwargs) if isinstance(init_kwargs, dict) else {}, kind)
    if not isinstance(own, dict):
        raise UnsupportedVision(f"config.json vision_config must be an object, got {type(own).__name__}")
    if not fixed and own.get("model_type") is not None:
        kind = own["model_type"]
    if kind not in VISION_DEFAULTS or kind not in TOWERS:
        raise UnknownTower(f"cannot count a vision tower of model_type {kind!r}; supported: "
                                f"{', '.join(sorted(TOWERS))}")
    return kind, filled(own, kind)


def _int(config: dict, key: str, minimum: int = 1) -> int:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= 10**9:
        raise UnsupportedVision(f"config.json vision_config.{key} must be an integer ≥ {minimum}, got {value!r}")
    return value


def _fraction(config: dict, key: str) -> float:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise UnsupportedVision(f"config.json vision_config.{key} must be a fraction in (0, 1], got {value!r}")
    return float(value)


def _linear(path: str, fan_in: int, fan_out: int, layers, bias: bool = True) -> Weight:
    return Weight(path, fan_in, fan_out, layers, "linear", bias)


def _norm(path: str, width: int, layers, bias: bool = True) -> Weight:
    return Weight(path, 1, width, layers, "norm", bias)


def _bare(path: str, shape: tuple[int, ...], layers=None) -> Weight:
    """A parameter that is no module's weight (class_embedding, probe, image_newline ...): its name is `path`."""
    return Weight(path, 1, shape[-1], layers, "parameter", False, 0, "", shape)


def _conv(path: str, channels: int, width: int, kernel: tuple[int, ...], bias: bool) -> Weight:
    return Weight(path, channels, width, None, "conv", bias, 0, "", (width, channels) + kernel)


def _encoder_layer(prefix: str, h: int, inner: int, layers, attention: tuple[str, ...], order: str) -> list[Weight]:
    """CLIP / SigLIP / Llama 4 vision layers: biased q/k/v/o and fc1/fc2, two biased LayerNorms, in `order`."""
    attn = [_linear(f"{prefix}self_attn.{name}", h, h, layers) for name in attention]
    mlp = [_linear(f"{prefix}mlp.fc1", h, inner, layers), _linear(f"{prefix}mlp.fc2", inner, h, layers)]
    names = {"clip": ("layer_norm1", "layer_norm2"), "llama4": ("input_layernorm", "post_attention_layernorm")}
    first, second = (_norm(prefix + name, h, layers) for name in names["llama4" if order == "llama4" else "clip"])
    if order == "clip":  # CLIPEncoderLayer registers self_attn, layer_norm1, mlp, layer_norm2
        return attn + [first] + mlp + [second]
    if order == "siglip":  # SiglipEncoderLayer: layer_norm1, self_attn, layer_norm2, mlp
        return [first] + attn + [second] + mlp
    return attn + mlp + [first, second]  # Llama4VisionEncoderLayer


def _qwen(kind: str, v: dict, base: str) -> tuple[list[Weight], list[Weight]]:
    """Qwen2-VL / Qwen2.5-VL / Qwen3-VL: (the tower, the merger(s))."""
    depth, merge = _int(v, "depth"), _int(v, "spatial_merge_size")
    channels, temporal, patch = _int(v, "in_channels"), _int(v, "temporal_patch_size"), _int(v, "patch_size")
    h = _int(v, "embed_dim" if kind == "qwen2_vl_vision" else "hidden_size")
    layers, block = tuple(range(depth)), f"{base}.blocks.{{i}}."
    qwen3 = kind == "qwen3_vl_vision"
    tower = [_conv(f"{base}.patch_embed.proj", channels, h, (temporal, patch, patch), bias=qwen3)]
    if qwen3:
        tower.append(Weight(f"{base}.pos_embed", _int(v, "num_position_embeddings"), h, None, "embedding"))
    layer_norm = kind != "qwen2_5_vl_vision"  # Qwen2.5-VL: RMSNorms without bias
    tower += [_norm(block + "norm1", h, layers, layer_norm), _norm(block + "norm2", h, layers, layer_norm),
              _linear(block + "attn.qkv", h, 3 * h, layers), _linear(block + "attn.proj", h, h, layers)]
    if kind == "qwen2_vl_vision":
        inner = h * _int(v, "mlp_ratio")
        tower += [_linear(block + "mlp.fc1", h, inner, layers), _linear(block + "mlp.fc2", inner, h, layers)]
    elif kind == "qwen2_5_vl_vision":
        inner = _int(v, "intermediate_size")
        tower += [_linear(block + f"mlp.{name}", h, inner, layers) for name in ("gate_proj", "up_proj")]
        tower.append(_linear(block + "mlp.down_proj", inner, h, layers))
    else:
        inner = _int(v, "intermediate_size")
        tower += [_linear(block + "mlp.linear_fc1", h, inner, layers),
                  _linear(block + "mlp.linear_fc2", inner, h, layers)]
    wide = h * merge * merge
    if not qwen3:
        out = _int(v, "hidden_size" if kind == "qwen2_vl_vision" else "out_hidden_size")
        return tower, [_norm(f"{base}.merger.ln_q", h, None, layer_norm), _linear(f"{base}.merger.mlp.0", wide, wide,
                                                                                  None),
                       _linear(f"{base}.merger.mlp.2", wide, out, None)]
    out = _int(v, "out_hidden_size")
    deepstack = v.get("deepstack_visual_indexes") or []
    if not isinstance(deepstack, list):
        raise UnsupportedVision(f"config.json vision_config.deepstack_visual_indexes must be a list, got {deepstack!r}")
    mergers = [_norm(f"{base}.merger.norm", h, None), _linear(f"{base}.merger.linear_fc1", wide, wide, None),
               _linear(f"{base}.merger.linear_fc2", wide, out, None)]
    if deepstack:
        every = tuple(range(len(deepstack)))
        stack = f"{base}.deepstack_merger_list.{{i}}."
        mergers += [_norm(stack + "norm", wide, every), _linear(stack + "linear_fc1", wide, wide, every),
                    _linear(stack + "linear_fc2", wide, out, every)]
    return tower, mergers


def _siglip_or_clip(kind: str, v: dict, base: str) -> list[Weight]:
    h, inner, depth = _int(v, "hidden_size"), _int(v, "intermediate_size"), _int(v, "num_hidden_layers")
    channels, patch, image = _int(v, "num_channels"), _int(v, "patch_size"), _int(v, "image_size")
    positions, layers = (image // patch) ** 2, tuple(range(depth))
    attention = ("k_proj", "v_proj", "q_proj", "out_proj")
    prefix = f"{base}.encoder.layers.{{i}}."
    if kind == "clip_vision_model":
        return [_bare(f"{base}.embeddings.class_embedding", (h,)),
                _conv(f"{base}.embeddings.patch_embedding", channels, h, (patch, patch), bias=False),
                Weight(f"{base}.embeddings.position_embedding", positions + 1, h, None, "embedding"),
                _norm(f"{base}.pre_layrnorm", h, None)] + _encoder_layer(prefix, h, inner, layers, attention,
                                                                         "clip") + [_norm(f"{base}.post_layernorm",
                                                                                          h, None)]
    found = [_conv(f"{base}.embeddings.patch_embedding", channels, h, (patch, patch), bias=True),
             Weight(f"{base}.embeddings.position_embedding", positions, h, None, "embedding")]
    found += _encoder_layer(prefix, h, inner, layers, attention, "siglip") + [_norm(f"{base}.post_layernorm", h, None)]
    if v.get("vision_use_head", True) is not False:  # SiglipMultiheadAttentionPoolingHead
        head = f"{base}.head."
        found += [_bare(head + "probe", (1, 1, h)), _bare(head + "attention.in_proj_weight", (3 * h, h)),
                  _bare(head + "attention.in_proj_bias", (3 * h,)), _linear(head + "attention.out_proj", h, h, None),
                  _norm(head + "layernorm", h, None), _linear(head + "mlp.fc1", h, inner, None),
                  _linear(head + "mlp.fc2", inner, h, None)]
    return found


def _pixtral(v: dict, base: str) -> list[Weight]:
    h, inner, layers = _int(v, "hidden_size"), _int(v, "intermediate_size"), tuple(range(_int(v, "num_hidden_layers")))
    channels, patch = _int(v, "num_channels"), _int(v, "patch_size")
    block = f"{base}.transformer.layers.{{i}}."
    return [_conv(f"{base}.patch_conv", channels, h, (patch, patch), bias=False), _norm(f"{base}.ln_pre", h, None,
                                                                                        False),
            _norm(block + "attention_norm", h, layers, False),
            _linear(block + "feed_forward.gate_proj", h, inner, layers, False),
            _linear(block + "feed_forward.up_proj", h, inner, layers, False),
            _linear(block + "feed_forward.down_proj", inner, h, layers, False)] + [
        _linear(block + f"attention.{name}", h, h, layers, False) for name in ("k_proj", "v_proj", "q_proj",
                                                                                "o_proj")] + [
        _norm(block + "ffn_norm", h, layers, False)]


def _llama4(v: dict, base: str) -> list[Weight]:
    h, inner, depth = _int(v, "hidden_size"), _int(v, "intermediate_size"), _int(v, "num_hidden_layers")
    channels, patch, image = _int(v, "num_channels"), _int(v, "patch_size"), _int(v, "image_size")
    layers = tuple(range(depth))
    return [_bare(f"{base}.class_embedding", (h,)), _bare(f"{base}.positional_embedding_vlm",
                                                         ((image // patch) ** 2 + 1, h)),
            _linear(f"{base}.patch_embedding.linear", channels * patch * patch, h, None, False),
            _norm(f"{base}.layernorm_pre", h, None), _norm(f"{base}.layernorm_post", h, None)] + _encoder_layer(
        f"{base}.model.layers.{{i}}.", h, inner, layers, ("q_proj", "k_proj", "v_proj", "o_proj"), "llama4") + [
        _linear(f"{base}.vision_adapter.mlp.fc1", inner, _int(v, "projector_input_dim"), None, False),
        _linear(f"{base}.vision_adapter.mlp.fc2", _int(v, "projector_output_dim"), _int(v, "projector_output_dim"),
                None, False)]


TOWERS = frozenset({"qwen2_vl_vision", "qwen2_5_vl_vision", "qwen3_vl_vision", "clip_vision_model",
                    "siglip_vision_model", "pixtral", "llama4_vision_model"})


def _feature_layers(top: dict) -> int:
    value = top.get("vision_feature_layer", -1)
    return len(value) if isinstance(value, list) else 1


def _projector_bias(top: dict) -> bool:
    return bool(top.get("multimodal_projector_bias"))


def vision_parts(config: dict, text_hidden: int) -> tuple[Part, ...]:
    """The vision tower, the projector (and llava_next's image_newline) of a composite config, in the order
    named_parameters() lists them; `text_hidden` is the language model's hidden size."""
    model_type = config["model_type"]
    top = filled({k: value for k, value in config.items() if k not in ("text_config", "vision_config")}, model_type)
    kind, v = vision_config(config)
    base = COMPOSITES[model_type][0]
    projector: list[Weight] = []
    front: list[Part] = []
    if kind in ("qwen2_vl_vision", "qwen2_5_vl_vision", "qwen3_vl_vision"):
        tower, projector = _qwen(kind, v, base)
    elif kind in ("clip_vision_model", "siglip_vision_model"):
        tower = _siglip_or_clip(kind, v, base)
    elif kind == "pixtral":
        tower = _pixtral(v, base)
    else:
        tower = _llama4(v, base)
    vh = _int(v, "embed_dim" if kind == "qwen2_vl_vision" else "hidden_size")
    bias = _projector_bias(top)
    if model_type in ("llava", "llava_next"):
        projector = [_linear("model.multi_modal_projector.linear_1", vh * _feature_layers(top), text_hidden, None,
                             bias), _linear("model.multi_modal_projector.linear_2", text_hidden, text_hidden, None,
                                            bias)]
        if model_type == "llava_next" and top.get("use_image_newline_parameter", True) is not False:
            front = [Part("image_newline", (_bare("model.image_newline", (text_hidden,)),))]
    elif model_type == "gemma3":
        projector = [_bare("model.multi_modal_projector.mm_input_projection_weight", (vh, text_hidden)),
                     _norm("model.multi_modal_projector.mm_soft_emb_norm", vh, None, False)]
    elif model_type == "mistral3":
        merge = _int(top, "spatial_merge_size")
        projector = [_norm("model.multi_modal_projector.norm", vh, None, False),
                     _linear("model.multi_modal_projector.patch_merger.merging_layer", vh * merge * merge, vh, None,
                             False),
                     _linear("model.multi_modal_projector.linear_1", vh * _feature_layers(top), text_hidden, None,
                             bias), _linear("model.multi_modal_projector.linear_2", text_hidden, text_hidden, None,
                                            bias)]
    elif model_type == "llama4":
        projector = [_linear("multi_modal_projector.linear_1", _int(v, "vision_output_dim"), text_hidden, None,
                             False)]
    return tuple(front) + (Part("vision_tower", tuple(tower)), Part("multi_modal_projector", tuple(projector)))


def named_parameters(part: Part) -> list[tuple[str, tuple[int, ...]]]:
    """The part's parameters as named_parameters() lists them (a layer's weights together, layer by layer)."""
    found: list[tuple[str, tuple[int, ...]]] = []
    rows = list(part.weights)
    index = 0
    while index < len(rows):
        row = rows[index]
        if row.layers is None:
            found += _names(row, row.path)
            index += 1
            continue
        group = [w for w in rows[index:] if w.layers == row.layers and w.path.split("{i}")[0] ==
                 row.path.split("{i}")[0]]
        end = index
        while end < len(rows) and rows[end] in group:
            end += 1
        for i in row.layers:
            for w in rows[index:end]:
                found += _names(w, w.path.replace("{i}", str(i)))
        index = end
    return found


def _names(weight: Weight, path: str) -> list[tuple[str, tuple[int, ...]]]:
    shapes = weight.shapes()
    if weight.kind == "parameter":
        return [(path, shapes[0])]
    return [(path + ".weight", shapes[0])] + ([(path + ".bias", shapes[1])] if weight.bias else [])


#: composite -> the tower states whose image tokens are measured (True: trained, False: frozen)
MEASURED = {"qwen2_vl": (True, False), "qwen2_5_vl": (True, False), "gemma3": (True, False), "llava": (True, False),
            "llava_next": (True, False), "mistral3": (True, False), "qwen3_vl": (True, False), "llama4": (True, False)}
#: composite -> (the tower measured, the config values as measured, said in the peak-unknown message); a key absent
#: from the config takes Transformers' default (AS_MEASURED_DEFAULTS); "feature layers": how many vision_feature_layer
#: names
MEASURED_TOWER: dict[str, tuple[str, dict[str, object], str]] = {
    "gemma3": ("siglip_vision_model", {"vision_use_head": False}, "a SigLIP tower without its pooling head"),
    "llava": ("clip_vision_model", {"feature layers": 1}, "a CLIP tower and one feature layer"),
    "llava_next": ("clip_vision_model", {"feature layers": 1, "vision_feature_select_strategy": "default"},
                   "a CLIP tower, one feature layer and the default strategy"),
    "mistral3": ("pixtral", {"feature layers": 1}, "a Pixtral tower and one feature layer"),
    "llama4": ("llama4_vision_model", {}, "its tiled pixel-shuffle vision model")}
AS_MEASURED_DEFAULTS: dict[str, object] = {"vision_use_head": True, "vision_feature_select_strategy": "default"}


def _as_measured(model_type: str, kind: str, v: dict[str, object], top: dict[str, object]) -> bool:
    tower, values, _ = MEASURED_TOWER.get(model_type, (kind, {}, ""))
    found = {**AS_MEASURED_DEFAULTS, **v, **top, "feature layers": _feature_layers(top)}
    return kind == tower and all(found[key] == value for key, value in values.items())


def _processor(images: ImageSettings) -> tuple[dict, Processor, str]:
    """(the processor config's values ({}: none read), the read, why the figure is approximate): a processor config
    looked for and not found leaves the class defaults, approximate; one that is not a JSON object, or that turns
    resizing off (the image tokens then grow with the image), leaves the peak unknown."""
    found = images.processor or Processor()
    if found.broken:
        raise ProcessorUnmodelled(f"the peak is unknown: {PROCESSOR_NAME} {found.where} is not a JSON object, so the "
                                  f"image processor it configures (and the image tokens it makes) cannot be read")
    if found.values is None:
        return {}, found, (f"no {PROCESSOR_NAME} was read ({found.missing}): the image processor class's defaults "
                           f"bound the image tokens" if images.processor is not None else "")
    resize = found.values.get("do_resize")
    if resize is not None and not resize:  # the processor tests it for truth (`if do_resize:`): 0 and "" turn it off
        raise ProcessorUnmodelled(f"the peak is unknown: {PROCESSOR_NAME} {found.where} sets do_resize "
                                  f"{'false' if resize is False else repr(resize)}, so "
                                  f"the images keep their size and their tokens have no bound but the sequence")
    return found.values, found, ""


def _setting(values: dict, found: Processor, key: str, default: Any, kind: type = int) -> tuple[Any, str]:
    """(the processor config's `key` — else `default` — , the clause saying which): `kind` checked."""
    value = values.get(key)
    if value is None:
        return default, ""
    wrong = isinstance(value, bool) != (kind is bool) or not isinstance(value, kind)
    if wrong or (kind is int and value < 1):
        raise ProcessorUnmodelled(f"the peak is unknown: {PROCESSOR_NAME} {found.where} {key} must be "
                                  f"{'true or false' if kind is bool else 'a positive integer'}, got {value!r}")
    return value, found.said(f"{key} {value:,}" if kind is int else f"{key} {str(value).lower()}")


def _qwen_pixels(kind: str, values: dict, found: Processor, factor: int) -> tuple[tuple[int, int], str]:
    """Qwen2VLImageProcessor's (min_pixels, max_pixels) as Transformers 5.24 builds them (image_processing_qwen2_vl
    .py:108-119, `__init__`): the config's `size` (else the class's {shortest_edge, longest_edge}), then min_pixels /
    max_pixels over its edges; the processor's patch_size · merge_size must be the tower's factor."""
    low, high = QWEN_PIXELS[kind]
    size = values.get("size")  # null: the class's (Qwen2VLImageProcessor.__init__)
    size = {"shortest_edge": low, "longest_edge": high} if size is None else size
    if not isinstance(size, dict):
        raise ProcessorUnmodelled(f"the peak is unknown: {PROCESSOR_NAME} {found.where} size must be an object of "
                                  f"shortest_edge and longest_edge, got {size!r}")
    edges = {"shortest_edge": size.get("shortest_edge"), "longest_edge": size.get("longest_edge")}
    for key, edge in (("min_pixels", "shortest_edge"), ("max_pixels", "longest_edge")):
        if values.get(key) is not None:
            edges[edge] = _setting(values, found, key, None)[0]
    low, _ = _setting(edges, found, "shortest_edge", None)
    high, _ = _setting(edges, found, "longest_edge", None)
    if low is None or high is None:  # Qwen2VLImageProcessor.resize raises ValueError without both
        raise ProcessorUnmodelled(f"the peak is unknown: {PROCESSOR_NAME} {found.where} size has no "
                                  f"{'shortest_edge' if low is None else 'longest_edge'} (the processor refuses it)")
    if low + factor * math.sqrt(low) * 201 / math.sqrt(200) + factor * factor > high:  # smart_resize's scale-up
        # (image_processing_qwen2_vl.py `smart_resize`): each side rounded up to the factor, aspect at most 200
        named = [f"{edge} {value:,}" for edge, value in (("min_pixels" if values.get("min_pixels") is not None else
                 "size.shortest_edge", low), ("max_pixels" if values.get("max_pixels") is not None else
                 "size.longest_edge", high))]
        raise ProcessorUnmodelled(f"the peak is unknown: {PROCESSOR_NAME} {found.where} {named[0]} is not far enough "
                                  f"below {named[1]}: smart_resize scales a smaller image up to at least the first, "
                                  f"rounding each side up to a multiple of {factor}, so an image may take more than "
                                  f"the second (not modelled)")
    patch, _ = _setting(values, found, "patch_size", None)
    merge, _ = _setting(values, found, "merge_size", None)
    if patch is not None and merge is not None and patch * merge != factor:
        raise ProcessorUnmodelled(f"the peak is unknown: {PROCESSOR_NAME} {found.where} patch_size {patch} · "
                                  f"merge_size {merge} is not the vision tower's patch_size · spatial_merge_size "
                                  f"{factor}")
    key = "max_pixels" if values.get("max_pixels") is not None else (
        "size.longest_edge" if values.get("size") is not None else "")
    said = found.said(f"the image processor's {key} {high:,}") if key else f"the image processor's default " \
        f"max_pixels {high:,}" + (f" ({PROCESSOR_NAME} {found.where} sets none)" if found.values is not None else "")
    return (low, high), said


def vision_kept(config: dict, text: ModelShape, images: ImageSettings = ImageSettings()) -> VisionKept | None:
    """What a composite keeps for backward beside its language model `text` (configs/image_tokens.py) under the
    recipe's image settings; None where that is not measured (MEASURED)."""
    model_type = config["model_type"]
    if images.trained not in MEASURED.get(model_type, ()):
        return None
    kind, v = vision_config(config)
    if not _as_measured(model_type, kind, v, config):
        return None
    if model_type not in PROCESSOR_BOUNDS:  # LLaVA: (image_size / patch_size)² whatever the processor says
        return _vision_kept(config, text, images, kind, v, {}, Processor())
    values, found, approximate = _processor(images)
    return _vision_kept(config, text, images, kind, v, values, found)._replace(approximate=approximate)


#: the composites whose image tokens the image processor config bounds (`_vision_kept`)
PROCESSOR_BOUNDS = frozenset({"qwen2_vl", "qwen2_5_vl", "qwen3_vl", "gemma3", "llava_next", "mistral3", "llama4"})


def _vision_kept(config: dict, text: ModelShape, images: ImageSettings, kind: str, v: dict, values: dict,
                 found: Processor) -> VisionKept:
    """`vision_kept` with the processor config's `values` ({}: its class defaults)."""
    model_type = config["model_type"]
    frozen = "" if images.trained else "; vision tower and projector frozen"
    if model_type == "gemma3":  # the processor resizes every image to image_size: mm_tokens_per_image tokens
        top = filled({k: value for k, value in config.items() if k not in ("text_config", "vision_config")},
                     model_type)
        tokens, patch = _int(top, "mm_tokens_per_image"), _int(v, "patch_size")
        patches = (_int(v, "image_size") // patch) ** 2
        tower = Tower(kind, patches, math.isqrt(patches // tokens), _int(v, "hidden_size"),
                      _int(v, "intermediate_size"), _int(v, "num_attention_heads"), _int(v, "num_hidden_layers"),
                      _int(v, "num_channels") * patch * patch)
        masks = Masks(text.layers, text.heads, text.kv_heads, text.head_dim, text.sliding_layers, text.sliding_window)
        if _setting(values, found, "do_pan_and_scan", False, bool)[0]:  # Gemma3ImageProcessor: more crops per image
            raise ProcessorUnmodelled(f"the peak is unknown: {PROCESSOR_NAME} {found.where} sets do_pan_and_scan "
                                      f"true: Gemma 3's pan-and-scan crops (up to pan_and_scan_max_num_crops more "
                                      f"images of mm_tokens_per_image tokens each) are not modelled")
        off = found.said("do_pan_and_scan off") if values else "pan-and-scan off"
        return VisionKept(tower, images.trained, images.input_grads, 1, tokens, 0, f"Gemma 3's mm_tokens_per_image "
                          f"{tokens:,} per image (every image resized to image_size; {off}), 1 image per "
                          f"sample{frozen}", masks)
    if model_type in ("llava", "llava_next"):  # get_image_features: the feature layer's patches, CLS dropped by
        # default; LLaVA-NeXT: every crop's
        top = filled({k: value for k, value in config.items() if k not in ("text_config", "vision_config")},
                     model_type)
        patch, size = _int(v, "patch_size"), _int(v, "image_size")
        patches = (size // patch) ** 2
        tokens = patches + (top.get("vision_feature_select_strategy") == "full")
        tower = Tower(kind, patches + 1, 1, _int(v, "hidden_size"), _int(v, "intermediate_size"),
                      _int(v, "num_attention_heads"), _int(v, "num_hidden_layers"), _int(v, "num_channels") * patch *
                      patch, text.hidden)
        strategy = f"vision_feature_select_strategy {top.get('vision_feature_select_strategy')!r}"
        if model_type == "llava":
            return VisionKept(tower, images.trained, images.input_grads, 1, tokens, 0, f"LLaVA's (image_size / "
                              f"patch_size)² = {tokens:,} image tokens per image ({strategy}), 1 image per "
                              f"sample{frozen}")
        # the processor counts an image's tokens under its own pinpoints (LlavaNextProcessor._get_number_of_features
        # reads image_processor.image_grid_pinpoints), the model unpads under the config's: they must agree
        pinpoints = values.get("image_grid_pinpoints") or top.get("image_grid_pinpoints") or LLAVA_NEXT_PINPOINTS
        where = found.said("image_grid_pinpoints") if values.get("image_grid_pinpoints") else "config.json"
        if not isinstance(pinpoints, list) or not all(isinstance(pair, list) and len(pair) == 2 and all(
                isinstance(side, int) and not isinstance(side, bool) and side >= size for side in pair)
                for pair in pinpoints):
            raise UnsupportedVision(f"{where} image_grid_pinpoints must be a list of [height, width] pairs of "
                                    f"at least image_size {size}, got {pinpoints!r}")
        most, crops, (height, width) = anyres_tokens(pinpoints, size, size // patch, tokens)
        return VisionKept(tower, images.trained, images.input_grads, crops, tokens, 0, f"LLaVA-NeXT's most image "
                          f"tokens per image, {most:,} (an image of the {height} × {width} grid pinpoint: the base "
                          f"image, its grid unpadded by nothing and one newline per row; {crops} crops through the "
                          f"tower; {strategy}; the pinpoints of {where}), 1 image per sample{frozen}")
    if model_type == "mistral3":  # PixtralVisionModel: every image's patches in one sequence, merged 2 × 2 after
        top = filled({k: value for k, value in config.items() if k not in ("text_config", "vision_config")},
                     model_type)
        merge, patch, longest = _int(top, "spatial_merge_size"), _int(v, "patch_size"), _int(v, "image_size")
        scaled = values.get("size")  # PixtralImageProcessor: the longest edge an image is scaled down to (its
        # patch_size is the processor's patch_size · spatial_merge_size, processing_pixtral.py:88); null: the class's
        if scaled is not None and (not isinstance(scaled, dict) or scaled.get("longest_edge") is None):
            raise ProcessorUnmodelled(f"the peak is unknown: {PROCESSOR_NAME} {found.where} size must name a "
                                      f"longest_edge, got {scaled!r}")
        longest, edge = _setting(scaled or {}, found, "longest_edge", longest)
        pixels = images.pixels
        rows, columns = pixtral_grid(patch * merge, longest, pixels[0] if pixels else None)
        tokens = rows * columns
        tower = Tower(kind, tokens * merge * merge, merge, _int(v, "hidden_size"), _int(v, "intermediate_size"),
                      _int(v, "num_attention_heads"), _int(v, "num_hidden_layers"), _int(v, "num_channels") * patch *
                      patch, text.hidden)
        bound = f"{pixels[1]} = {pixels[0]:,} pixels" if pixels else (f"the image processor's {edge}" if edge else
                                                                      f"vision_config.image_size {longest:,} as the "
                                                                      f"processor's longest_edge")
        bound += f" within the image processor's {edge}" if pixels and edge else ""
        return VisionKept(tower, images.trained, images.input_grads, 1, tokens, 0, f"{bound}: at most {rows} × "
                          f"{columns} = {tokens:,} image tokens per image (and one break per row), 1 image per "
                          f"sample{frozen}")
    if model_type == "llama4":  # Llama4VisionModel: each tile, and past one tile the global one, through the tower
        # alone, its N − 1 patches shuffled to (N − 1)·ratio² tokens (Llama4Processor.replace_image_token)
        patch, size = _int(v, "patch_size"), _int(v, "image_size")
        per_side, merge = size // patch, round(1 / _fraction(v, "pixel_shuffle_ratio"))
        tokens, pixels = per_side * per_side // (merge * merge), images.pixels
        most, said = _setting(values, found, "max_patches", LLAMA4_MAX_TILES)
        canvas, stretched = _setting(values, found, "resize_to_max_canvas", False, bool)  # get_best_fit's largest
        # upscale: a small image takes many tiles, so image_max_pixels bounds nothing below max_patches
        tiles = llama4_tiles(size, most, pixels[0] if pixels and not canvas else None)
        chunks = tiles + (tiles > 1)
        tower = Tower(kind, per_side * per_side + 1, merge, _int(v, "hidden_size"), _int(v, "intermediate_size"),
                      _int(v, "num_attention_heads"), _int(v, "num_hidden_layers"), _int(v, "num_channels") * patch *
                      patch, _int(v, "projector_output_dim"))
        bound = (f"{pixels[1]} = {pixels[0]:,} pixels, " if pixels else "") + (
            f"the image processor's {said}" if said else f"the image processor's default max_patches {most}") + (
            f", {stretched}" if canvas else "")
        tiled = f"{tiles} tiles of {size} pixels and the global tile" if tiles > 1 else f"1 tile of {size} pixels"
        return VisionKept(tower, images.trained, images.input_grads, chunks, tokens, 0, f"{bound}: at most {tiled}, "
                          f"{chunks} × {tokens:,} = {chunks * tokens:,} image tokens per image, 1 image per "
                          f"sample{frozen}")
    merge, patch = _int(v, "spatial_merge_size"), _int(v, "patch_size")
    qwen2 = kind == "qwen2_vl_vision"
    (low, high), said = _qwen_pixels(kind, values, found, patch * merge)
    pixels = images.pixels
    tokens = qwen_image_tokens(patch * merge, (low, high), pixels[0] if pixels else None)
    settings = (f"{pixels[1]} = {pixels[0]:,} pixels" if pixels else said) + f": at most {tokens:,} image tokens " \
        f"per image, 1 image per sample{frozen}" + (f"; within {said}" if pixels and values else "")
    hidden = _int(v, "embed_dim" if qwen2 else "hidden_size")
    depth = _int(v, "depth")
    deepstack = (v.get("deepstack_visual_indexes") or ()) if kind == "qwen3_vl_vision" else ()  # each index's merger
    # runs after that block (Qwen3VLVisionModel.forward): those within depth
    tower = Tower(kind, tokens * merge * merge, merge, hidden, hidden * _int(v, "mlp_ratio") if qwen2 else _int(
        v, "intermediate_size"), _int(v, "num_heads"), depth,
                  _int(v, "in_channels") * _int(v, "temporal_patch_size") * patch * patch,
                  taps=QWEN_TAPS.get(kind, 0), deepstack=len({index for index in deepstack if index in range(depth)}))
    return VisionKept(tower, images.trained, images.input_grads, 1, tokens, text.head_dim, settings)
