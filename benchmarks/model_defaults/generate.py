"""Record Transformers' configuration defaults for the model types zeromem counts (needs transformers).

    /work/venv-measure/bin/python benchmarks/model_defaults/generate.py          # print
    /work/venv-measure/bin/python benchmarks/model_defaults/generate.py --write  # refresh the module

`PreTrainedConfig.from_dict` builds `cls(**config_dict)` (transformers/configuration_utils.py), so a key a
config.json leaves out takes the configuration class's own default. Transformers 5 declares those classes as
dataclasses: each field's default is read with `dataclasses.fields`, before `__post_init__` derives anything
(a None stays None: head_dim, num_key_value_heads, layer_types ... are derived from the others by
zeromem_lsp/configs/model_config.py the way the class derives them). Only JSON-like defaults are kept.

A composite (multimodal) config builds its `text_config` from `sub_configs_defaults["text_config"]`
(`SubConfigSpec.create_subconfig`): a fixed configuration class ignores the dict's model_type; an AutoConfig
spec takes the dict's model_type, else the spec's. Both are recorded, with the spec's `init_kwargs`.

The vision-language composites zeromem counts whole (configs/vision.py, VISION_LANGUAGE) also get: the composite
class's own defaults (projector keys, tie_word_embeddings ...) and attribute_map, their `text_config` class's
defaults where it is a class of its own (qwen2_vl_text ...), and how `vision_config` is built (VISION_CONFIGS:
the class's model_type, whether the class is fixed, the spec's init_kwargs used when vision_config is absent) with
that class's defaults and attribute_map (a model_type a dict may name: clip_vision_model, siglip_vision_model,
pixtral, llama4_vision_model ...).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pprint
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "zeromem_lsp" / "configs" / "transformers_defaults.py"
sys.path.insert(0, str(ROOT))

from zeromem_lsp.configs.model_config import SUPPORTED  # noqa: E402  (pure module: json and typing only)

SCALARS = (type(None), bool, int, float, str)


def _json_like(value: object) -> bool:
    if isinstance(value, SCALARS):
        return True
    if isinstance(value, (list, tuple)):
        return all(_json_like(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(key, str) and _json_like(item) for key, item in value.items())
    return False


def _default(field: dataclasses.Field) -> object:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return field.default_factory()  # type: ignore[misc]
    return dataclasses.MISSING


# Fields of PreTrainedConfig itself (output flags, label maps, dtype ...): the same for every model, never a shape.
def _base_fields() -> set[str]:
    from transformers import PreTrainedConfig

    return {field.name for field in dataclasses.fields(PreTrainedConfig)}


def class_defaults(config_class) -> dict:
    base = _base_fields()
    found = {}
    for field in dataclasses.fields(config_class):
        if field.name in base or field.name.startswith("_"):
            continue
        value = _default(field)
        if value is not dataclasses.MISSING and _json_like(value):
            found[field.name] = list(value) if isinstance(value, tuple) else value
    return found


def text_configs(supported: set[str]) -> dict:
    """composite model_type -> (text model_type, fixed by the class?).

    The spec's init_kwargs are left out: `create_subconfig` uses them only when text_config is absent."""
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    found = {}
    for model_type in sorted(CONFIG_MAPPING.keys()):
        try:
            config_class = CONFIG_MAPPING[model_type]
        except Exception:  # a model whose module cannot be imported here
            continue
        spec = (getattr(config_class, "sub_configs_defaults", None) or {}).get("text_config")
        if spec is None:
            continue
        fixed = spec.config_class is not AutoConfig
        if spec.model_type not in supported:  # an AutoConfig spec with a dict naming its model_type needs no entry
            continue
        found[model_type] = (spec.model_type, fixed)
    return found


#: the vision-language composites counted whole (configs/vision.py) and the vision model_types their configs name
VISION_LANGUAGE = ("gemma3", "llama4", "llava", "llava_next", "mistral3", "qwen2_5_vl", "qwen2_vl", "qwen3_vl")
VISION_TYPES = ("clip_vision_model", "pixtral", "siglip_vision_model")


def vision_facts() -> dict:
    """Defaults and attribute_maps of the composites, their own text / vision config classes, and the vision spec."""
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    classes, specs = {}, {}
    for model_type in VISION_LANGUAGE:
        config_class = CONFIG_MAPPING[model_type]
        classes[model_type] = config_class
        for key, spec in config_class.sub_configs_defaults.items():
            fixed = spec.config_class is not AutoConfig
            sub_class = spec.config_class if fixed else CONFIG_MAPPING[spec.model_type]
            if key == "vision_config":
                specs[model_type] = (sub_class.model_type, fixed, dict(sorted((spec.init_kwargs or {}).items())))
            if fixed:  # a class of its own (qwen2_vl_vision, qwen2_vl_text, llama4_vision_model ...)
                classes[sub_class.model_type] = sub_class
    for model_type in VISION_TYPES:
        classes[model_type] = CONFIG_MAPPING[model_type]
    return {
        "defaults": {name: class_defaults(cls) for name, cls in sorted(classes.items())},
        "aliases": {name: dict(sorted(cls.attribute_map.items())) for name, cls in sorted(classes.items())
                    if cls.attribute_map},
        "vision_configs": dict(sorted(specs.items())),
    }


def collect() -> dict:
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    supported = set(SUPPORTED)
    return {
        "vision": vision_facts(),
        "version": transformers.__version__,
        "defaults": {model_type: class_defaults(CONFIG_MAPPING[model_type]) for model_type in sorted(supported)},
        "aliases": {model_type: dict(sorted(CONFIG_MAPPING[model_type].attribute_map.items()))
                    for model_type in sorted(supported) if CONFIG_MAPPING[model_type].attribute_map},
        "text_configs": text_configs(supported),
    }


HEADER = '''"""GENERATED by `benchmarks/model_defaults/generate.py --write` from Transformers {version} (do not edit).

DEFAULTS: model_type -> the configuration class's default per field (what `cls(**config_dict)` uses for a key a
config.json leaves out; None where the class derives the value in __post_init__).
ALIASES: model_type -> the class's attribute_map (a key written under its alias sets the field it names, so
the field's default does not apply).
TEXT_CONFIGS: composite model_type -> (text model_type, fixed by the class): how its `text_config` is built
(SubConfigSpec.create_subconfig); not fixed: the dict's own model_type wins.
VISION_DEFAULTS / VISION_ALIASES: the same for the vision-language composites, their own text / vision config
classes and the vision model_types their configs name; VISION_CONFIGS: composite model_type -> (vision model_type,
fixed by the class, the spec's init_kwargs when vision_config is absent).
"""

'''


def render(facts: dict) -> str:
    body = [HEADER.format(version=facts["version"]),
            f"TRANSFORMERS_VERSION = {facts['version']!r}\n\n",
            "DEFAULTS: dict[str, dict[str, object]] = " + pprint.pformat(facts["defaults"], width=110, sort_dicts=True) + "\n\n",
            "ALIASES = " + pprint.pformat(facts["aliases"], width=110, sort_dicts=True) + "\n\n",
            "TEXT_CONFIGS = " + pprint.pformat(facts["text_configs"], width=110, sort_dicts=True) + "\n\n",
            "VISION_DEFAULTS: dict[str, dict[str, object]] = " + pprint.pformat(facts["vision"]["defaults"], width=110,
                                                                               sort_dicts=True) + "\n\n",
            "VISION_ALIASES = " + pprint.pformat(facts["vision"]["aliases"], width=110, sort_dicts=True) + "\n\n",
            "VISION_CONFIGS = " + pprint.pformat(facts["vision"]["vision_configs"], width=110, sort_dicts=True) + "\n"]
    return "".join(body)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {TARGET.relative_to(ROOT)}")
    parser.add_argument("--json", action="store_true", help="print the facts as JSON")
    args = parser.parse_args()
    facts = collect()
    if args.json:
        print(json.dumps(facts, indent=2))
    elif args.write:
        TARGET.write_text(render(facts), encoding="utf-8")
        print(f"wrote {TARGET.relative_to(ROOT)} (Transformers {facts['version']})")
    else:
        print(render(facts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
