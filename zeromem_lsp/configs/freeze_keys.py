"""Which parts of a vision-language model a recipe trains: the trainers' freeze keys, as data.

LLaMA-Factory (hiyouga/LLaMA-Factory at ff6d4d12eeb035d6ce06805a5733dd7b29f2ac30):
- src/llamafactory/hparams/finetuning_args.py, FinetuningArguments: `freeze_vision_tower` (default true),
  `freeze_multi_modal_projector` (default true), `freeze_language_model` (default false);
- src/llamafactory/model/model_utils/visual.py: COMPOSITE_MODELS (`_register_composite_model`) names, per
  model_type, the module keys of the vision tower, the projector and the language model (defaults
  ["vision_tower"], ["multi_modal_projector"], ["language_model", "lm_head"]); `get_forbidden_modules` collects the
  keys of each part its freeze key freezes, and a parameter is frozen when any of them is a substring of its name
  (full and freeze tuning, `_setup_full_tuning`); under LoRA the same keys (and `lora_conflict_keys`) are taken out
  of the target modules (`patch_target_modules`), the base being frozen anyway.

Note the split differs from the model's modules: Qwen3-VL's deepstack mergers are vision-tower keys, not the
projector's; a parameter under no key (llava_next's `model.image_newline`) is never frozen by these keys.
axolotl (axolotl-ai-cloud/axolotl at 067b021c8b87a9e5e380b9173c704cf7340e30f5): `freeze_mm_modules` (schemas/config.py,
default None: off) calls utils/freeze.py `freeze_mm_modules`, which freezes every parameter with a dotted name
component among `_MM_MODULE_PREFIXES` (vision_tower, vision_model, vision_encoder, embed_vision,
multi_modal_projector, visual, audio_tower, audio_model, embed_audio): the tower and projector, never the language
model. TRL has no such key (the model as given).

Not wired into the model state yet: memory/ takes one trainable count per model (see `trained`); what it would need
is described in docs/model-families.md ("Vision-language models").
"""

from __future__ import annotations

from typing import NamedTuple

from zeromem_lsp.configs.families import ModelShape
from zeromem_lsp.configs.image_tokens import LLAMAFACTORY_PIXELS, ImageSettings, Processor

#: recipe key -> (default, the part of COMPOSITE_MODELS it freezes)
LLAMAFACTORY_FREEZE_KEYS: dict[str, tuple[bool, str]] = {
    "freeze_vision_tower": (True, "vision"),
    "freeze_multi_modal_projector": (True, "projector"),
    "freeze_language_model": (False, "language"),
}

_DEFAULT = {"projector": ("multi_modal_projector",), "vision": ("vision_tower",), "language": ("language_model",
                                                                                              "lm_head")}
_QWEN = {"projector": ("visual.merger",), "vision": ("visual.patch_embed", "visual.blocks"),
         "language": ("language_model", "lm_head")}
#: model_type -> part -> the module keys LLaMA-Factory's COMPOSITE_MODELS registers (for the types zeromem counts)
LLAMAFACTORY_PARTS: dict[str, dict[str, tuple[str, ...]]] = {
    "gemma3": _DEFAULT,
    "llama4": {**_DEFAULT, "vision": ("vision_model",)},
    "llava": _DEFAULT,
    "llava_next": _DEFAULT,
    "mistral3": {**_DEFAULT, "projector": ("model.multi_modal_projector",)},
    "qwen2_vl": _QWEN,
    "qwen2_5_vl": _QWEN,
    "qwen3_vl": {**_QWEN, "vision": ("visual.pos_embed", "visual.patch_embed", "visual.blocks",
                                     "visual.deepstack_merger_list")},
}


#: axolotl utils/freeze.py _MM_MODULE_PREFIXES: a parameter with one of these as a name component is frozen
AXOLOTL_MM_PREFIXES = ("vision_tower", "vision_model", "vision_encoder", "embed_vision", "multi_modal_projector",
                       "visual", "audio_tower", "audio_model", "embed_audio")


class Trained(NamedTuple):
    """Parameters trained and frozen under a recipe's freeze keys, and the keys' values as read."""

    trained: int
    frozen: int
    frozen_parts: tuple[str, ...]  # vision / projector / language, in LLAMAFACTORY_FREEZE_KEYS' order
    keys: tuple[tuple[str, bool, bool], ...]  # (key, value, whether the recipe set it)


def forbidden(model_type: str, recipe: dict) -> tuple[tuple[str, ...], Trained]:
    """LLaMA-Factory's forbidden module keys for a composite under the recipe's freeze keys (the defaults where it
    sets none), and the parts they freeze (counts zero: see `trained`)."""
    parts = LLAMAFACTORY_PARTS[model_type]
    keys: list[tuple[str, bool, bool]] = []
    frozen_parts: list[str] = []
    modules: list[str] = []
    for key, (default, part) in LLAMAFACTORY_FREEZE_KEYS.items():
        value = recipe.get(key, default)
        value = value if isinstance(value, bool) else default
        keys.append((key, value, key in recipe))
        if value:
            frozen_parts.append(part)
            modules += parts[part]
    return tuple(modules), Trained(0, 0, tuple(frozen_parts), tuple(keys))


def trained(model_type: str, recipe: dict, parameters: list[tuple[str, int]]) -> Trained:
    """Parameters trained and frozen by a full / freeze fine-tune, from (name, numel) pairs: a name holding any
    forbidden key is frozen (get_forbidden_modules, `forbidden_module in name`)."""
    modules, found = forbidden(model_type, recipe)
    frozen = sum(count for name, count in parameters if any(module in name for module in modules))
    return found._replace(trained=sum(count for _, count in parameters) - frozen, frozen=frozen)


#: where the language model's parameters live in each composite (LLaMA-Factory's language keys match them all)
LANGUAGE_PREFIX = {"llama4": "language_model"}


def parameters_of(config: dict) -> list[tuple[str, int]]:
    """(name, numel) of a composite's vision tower and projector (their named_parameters), and its language model as
    one entry under its module name (every language parameter holds `language_model` or is `lm_head`)."""
    from zeromem_lsp.configs.model_config import count_parameters, weights_shape
    from zeromem_lsp.configs.vision import named_parameters, vision_parts

    found = [(name, _numel(shape)) for part in vision_parts(config, weights_shape(config).hidden)
             for name, shape in named_parameters(part)]
    language = dict(count_parameters(config).parts)["language_model"]
    return found + [(LANGUAGE_PREFIX.get(config["model_type"], "model.language_model"), language)]


def _numel(shape: tuple[int, ...]) -> int:
    total = 1
    for size in shape:
        total *= size
    return total


def axolotl_frozen(parameters: list[tuple[str, int]]) -> int:
    """Parameters axolotl's `freeze_mm_modules: true` freezes (a name component among AXOLOTL_MM_PREFIXES)."""
    return sum(count for name, count in parameters if any(part in AXOLOTL_MM_PREFIXES for part in name.split(".")))


def note(config: dict, recipe: dict, finetuning_type: object, tool: str = "llamafactory") -> str | None:
    """What the recipe's freeze keys do to this composite, for the model state's assumptions (None: nothing)."""
    if tool == "axolotl":
        if recipe.get("freeze_mm_modules") is not True:
            return None
        everything = parameters_of(config)
        held = axolotl_frozen(everything)
        return (f"axolotl's freeze_mm_modules freezes the vision tower and projector: "
                f"{sum(count for _, count in everything) - held:,} parameters trainable, {held:,} frozen "
                "(not yet applied to the model state)")
    found = trained(config["model_type"], recipe, parameters_of(config))
    names = {"vision": "vision tower", "projector": "projector", "language": "language model"}
    parts = [names[part] for part in found.frozen_parts]
    frozen = " and ".join([", ".join(parts[:-1]), parts[-1]] if len(parts) > 1 else parts) or "nothing"
    if finetuning_type in ("full", "freeze"):
        return (f"LLaMA-Factory's freeze keys freeze the {frozen}: {found.trained:,} parameters trained, "
                f"{found.frozen:,} frozen (not yet applied to the model state, which trains them all)")
    return (f"LLaMA-Factory's freeze keys keep LoRA off the {frozen} (the base model is frozen under LoRA either way)")


#: a LoRA run named by zeromem's own settings (flags, a settings block): the base, vision tower included, frozen
ADAPTER = {"adapter": "lora"}
#: no recipe (`recipe_vision(config, AS_GIVEN, "transformers")`): the model as given, every part trained
AS_GIVEN: dict = {}


def recipe_vision(config: dict, recipe: dict, tool: str,
                  processor: Processor | None = None) -> tuple[ModelShape | None, str | None]:
    """A composite's shape with its image tokens (configs/image_tokens.py) under a recipe: LLaMA-Factory's
    image_max_pixels (default 768·768) bounds an image, its freeze keys (or LoRA, axolotl's freeze_mm_modules) freeze
    the tower and projector, LLaMA-Factory checkpoints without Transformers' input-grad hook; `processor`: the image
    processor config the run loads (configs/processor_config.py); (None, why) where that is not measured (the recipe
    trains one of tower and projector but not the other, a type or state not measured, a processor setting not
    modelled). An empty recipe of no tool (`AS_GIVEN`): the model as given, its tower trained."""
    from zeromem_lsp.configs.model_config import UnsupportedModel, model_shape

    adapter = recipe.get("finetuning_type", "lora") == "lora" if tool == "llamafactory" else bool(recipe.get("adapter"))
    pixels: tuple[int, str] | None = None
    if tool == "llamafactory":
        given = recipe.get("image_max_pixels")
        pixels = (LLAMAFACTORY_PIXELS[0], "LLaMA-Factory's default image_max_pixels 768·768")
        if isinstance(given, int) and not isinstance(given, bool) and given > 0:
            pixels = (given, "LLaMA-Factory image_max_pixels")
        tower, projector = (recipe.get(key, default) is not False for key, (default, part)
                            in LLAMAFACTORY_FREEZE_KEYS.items() if part in ("vision", "projector"))
        if tower != projector and not adapter:
            return None, ("the peak is unknown: the recipe freezes one of the vision tower and the projector but not "
                          "the other, which is not measured")
        frozen = adapter or tower
    else:
        frozen = adapter or recipe.get("freeze_mm_modules") is True
    try:
        return model_shape(config, ImageSettings(not frozen, tool != "llamafactory", pixels, processor)), None
    except UnsupportedModel as error:
        return None, str(error)
