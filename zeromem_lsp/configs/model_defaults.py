"""A config.json as Transformers reads it: the fields it leaves out take the configuration class's defaults.

`PreTrainedConfig.from_dict` builds `cls(**config_dict)` (transformers/configuration_utils.py), so an absent
key gets the class's default (recorded per Transformers version in `transformers_defaults.py`), and a key
written under an alias of the class's `attribute_map` (gpt2's `hidden_size` for `n_embd`) sets that field.
A composite (multimodal) config's `text_config` is built by `SubConfigSpec.create_subconfig`: a fixed class
(gemma3 → gemma3_text) whatever the dict says, else the dict's own model_type, else the spec's default.
"""

from __future__ import annotations

from zeromem_lsp.configs.transformers_defaults import (ALIASES, DEFAULTS, TEXT_CONFIGS, TRANSFORMERS_VERSION,
                                                       VISION_ALIASES, VISION_DEFAULTS)


class FilledConfig(dict):
    """The config's own fields over the class defaults; remembers which defaults were read."""

    def __init__(self, own: dict, model_type: str | None, defaults_of: str | None = None) -> None:
        """`defaults_of`: the configuration class whose defaults apply when it is not the family's own (a
        composite's text config class: qwen2_vl_text, recorded in VISION_DEFAULTS / VISION_ALIASES)."""
        own = dict(own)
        if defaults_of:
            aliases, defaults = VISION_ALIASES.get(defaults_of, {}), VISION_DEFAULTS.get(defaults_of, {})
        else:
            aliases, defaults = ALIASES.get(model_type or "", {}), DEFAULTS.get(model_type or "", {})
        for alias, field in aliases.items():  # one value under both names: the file's (either name), else the default
            for name in (field, alias):
                if name in own:
                    own[field] = own[alias] = own[name]
                    break
        filled = {**defaults, **own}
        for alias, field in aliases.items():  # a default recorded under either name is readable under both
            for name in (field, alias):
                if name in filled and (field not in own):
                    filled[field] = filled[alias] = filled[name]
                    break
        super().__init__(filled)
        self.defaulted = frozenset(filled) - frozenset(own)
        self.read: set[str] = set()

    def get(self, key, default=None):
        if key in self.defaulted:
            self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        if key in self.defaulted:
            self.read.add(key)
        return super().__getitem__(key)

    def defaults_note(self) -> str:
        """The defaults the count used, e.g. "Transformers 5.24.0 defaults: head_dim=256, vocab_size=262208"."""
        used = sorted(key for key in self.read if dict.get(self, key) is not None)
        if not used:
            return ""
        return f"Transformers {TRANSFORMERS_VERSION} defaults: " + ", ".join(
            f"{key}={dict.get(self, key)!r}" for key in used)


def text_model_type(composite: str | None, text_config: dict) -> object:
    """The model_type Transformers builds a composite's text_config as."""
    spec = TEXT_CONFIGS.get(composite or "")
    if spec is None:
        return text_config.get("model_type")
    default, fixed = spec
    own = text_config.get("model_type")
    return default if fixed or own is None else own
