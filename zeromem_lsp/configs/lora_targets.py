"""PEFT's rules for which module names a LoraConfig targets, on plain names (pure; mirrors peft 0.21.2).

`matches` is `check_target_module_exists` (peft/tuners/tuners_utils.py), `pattern_key` `get_pattern_key`
(peft/utils/other.py), `check_spec` what `LoraConfig.__post_init__` (peft/tuners/lora/config.py) refuses; the order
and the rules: docs/adapters.md. Every regular expression is compiled first: an invalid one is a message with its
position, never a traceback.
"""

from __future__ import annotations

import re
from typing import NamedTuple


class TargetSpecError(ValueError):
    """An adapter setting PEFT refuses; `field` names it (lora_r, lora_target_modules, exclude_modules, ...)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class TargetSpec(NamedTuple):
    """The matching fields of a LoraConfig: a string target is a regex, a tuple a list of names."""

    targets: tuple[str, ...] | frozenset[str] | str
    exclude: tuple[str, ...] | str = ()
    modules_to_save: tuple[str, ...] = ()
    layers_to_transform: tuple[int, ...] | int | None = None
    layers_pattern: tuple[str, ...] | str = ()


class Excluded:
    """check_target_module_exists' _ExcludedModule: falsy, but told apart from "no match"."""

    def __bool__(self) -> bool:
        return False


EXCLUDED = Excluded()


def checked_regex(pattern: object, field: str, what: str) -> str:
    """`pattern` if Python's re compiles it, else TargetSpecError saying where it breaks."""
    if not isinstance(pattern, str):
        raise TargetSpecError(field, f"{what} must be a string, got {pattern!r}")
    try:
        re.compile(pattern)
    except re.error as error:
        where = f" at position {error.pos}" if error.pos is not None else ""
        raise TargetSpecError(field, f"{what} {pattern!r} is not a valid Python regular expression: "
                                     f"{error.msg}{where}") from None
    return pattern


def check_spec(spec: TargetSpec) -> TargetSpec:
    """LoraConfig.__post_init__'s refusals, and every pattern PEFT hands to `re` compiled once."""
    if isinstance(spec.targets, str):
        checked_regex(spec.targets, "lora_target_modules", "target_modules")
        if spec.layers_to_transform is not None:
            raise TargetSpecError("layers_to_transform", "layers_to_transform cannot be used when target_modules "
                                  "is a string (a regular expression, or all-linear): list the module names instead "
                                  "(peft LoraConfig)")
        if spec.layers_pattern:
            raise TargetSpecError("layers_pattern", "layers_pattern cannot be used when target_modules is a string "
                                  "(peft LoraConfig)")
    if spec.layers_pattern and spec.layers_to_transform is None:
        raise TargetSpecError("layers_pattern", "layers_pattern needs layers_to_transform (peft LoraConfig)")
    if isinstance(spec.exclude, str):
        checked_regex(spec.exclude, "exclude_modules", "exclude_modules")
    for name in spec.modules_to_save:  # used inside a regex: (^|.*\.){name}($|\..*)
        checked_regex(name, "modules_to_save", "modules_to_save entry")
    patterns = (spec.layers_pattern,) if isinstance(spec.layers_pattern, str) else spec.layers_pattern
    for pattern in patterns:
        checked_regex(pattern, "layers_pattern", "layers_pattern")
    layers = spec.layers_to_transform
    for index in (layers,) if isinstance(layers, int) else layers or ():
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise TargetSpecError("layers_to_transform", f"layers_to_transform must be layer indices (integers "
                                  f"≥ 0), got {index!r}")
    return spec


def layer_index(key: str, layers_pattern: tuple[str, ...] | str) -> int | None:
    """The first numbered segment after a named one ("model.layers.3.mlp" → 3), or after a layers_pattern."""
    if not layers_pattern:
        found = re.match(r".*?\.[^.]*\.(?P<idx>\d+)\.", key)
    else:
        found = None
        for pattern in (layers_pattern,) if isinstance(layers_pattern, str) else layers_pattern:
            found = re.match(rf"(?:^|.*?\.){pattern}\.(?P<idx>\d+)\.", key)
            if found is not None:
                break
    return None if found is None else int(found.group("idx"))


def matches(spec: TargetSpec, key: str) -> bool | Excluded:
    """check_target_module_exists for one module name."""
    if spec.exclude:
        if isinstance(spec.exclude, str):
            if re.fullmatch(spec.exclude, key):
                return EXCLUDED
        elif key in spec.exclude or any(key.endswith(f".{name}") for name in spec.exclude):
            return EXCLUDED
    if any(re.match(rf"(^|.*\.){name}($|\..*)", key) for name in spec.modules_to_save):
        return EXCLUDED
    if isinstance(spec.targets, str):
        return re.fullmatch(spec.targets, key) is not None
    if key in spec.targets:
        return True  # named in full: layers_to_transform is not consulted
    if not any(key.endswith(f".{name}") for name in spec.targets):
        return False
    layers = spec.layers_to_transform
    if layers is None or (not isinstance(layers, int) and len(layers) == 0):
        return True
    index = layer_index(key, spec.layers_pattern)
    if index is None:
        return False
    return index == layers if isinstance(layers, int) else index in layers


def pattern_key(keys: tuple[str, ...], key: str) -> str | None:
    """get_pattern_key: the first rank_pattern / alpha_pattern key that `(.*\\.)?(key)$` matches from the start."""
    for pattern in keys:
        if re.match(rf"(.*\.)?({pattern})$", key):
            return pattern
    return None


def suffix_matches(names: set[str] | frozenset[str] | tuple[str, ...], key: str) -> bool:
    """target_parameters (BaseTuner._inject_parameters): the parameter name equals an entry or ends with "." + it."""
    return key in names or any(key.endswith(f".{name}") for name in names)
