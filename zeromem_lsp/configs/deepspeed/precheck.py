"""A pydantic-free pre-check of DeepSpeed strict sections: "certainly valid", or no verdict.

`vouch(model_name, data)` returns what `Model.model_validate(data)` would return (the same values
as attributes, `model_fields_set`) when it can prove the section is valid, and None at the least
doubt: an unknown key, a value of any type or form the check does not model, a name and its alias
together, a bound not met, a rule broken. The caller then validates with pydantic exactly as before,
so every error message stays pydantic's. The facts come from the models (facts.py,
generated); the rules from section_checks.py, which the models call too.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from .facts import DEPRECATED_PAIRS, SECTIONS
from .section_checks import fp16_dynamic_scaling, fp16_integer_only, fp16_loss_scale, zero_cross_field

_DOUBT = object()
_BEFORE = {
    "fp16_loss_scale": lambda field, value: fp16_loss_scale(value),
    "fp16_integer_only": fp16_integer_only,
}
_AFTER = {
    "zero_cross_field": lambda values, given, pairs: zero_cross_field(
        int(values["stage"]), values["compute_grad_norm"], values["offload_optimizer"], given, pairs),
    "fp16_dynamic_scaling": lambda values, given, pairs: fp16_dynamic_scaling(
        values["enabled"], values["loss_scale"], values["loss_scale_window"], values["min_loss_scale"]),
}


class Vouched:
    """A validated section without pydantic: field values as attributes, like the model instance."""

    def __init__(self, model: str, values: dict, given: set[str]):
        self.__dict__.update(values)
        self.model_name = model
        self.model_fields_set = given

    def __repr__(self) -> str:
        return f"Vouched({self.model_name})"


def vouch(model: str, data: Any) -> Optional[Vouched]:
    """The validated section when `data` is certainly valid for `model`, else None."""
    section = SECTIONS.get(model)
    if section is None or not section["vouch"] or type(data) is not dict:
        return None
    keys, fields = section["keys"], section["fields"]
    values: dict = {}
    for key, raw in data.items():
        field = keys.get(key) if type(key) is str else None
        if field is None or field in values:
            return None
        value = _field_value(fields[field], field, raw)
        if value is _DOUBT:
            return None
        values[field] = value
    given = set(values)
    values = _with_defaults(model, values)
    after = section["after"]
    if after is not None and _AFTER[after](values, given, DEPRECATED_PAIRS.get(model, ())) is not None:
        return None
    return Vouched(model, values, given)


def _with_defaults(model: str, given: dict) -> dict:
    """`given` completed with the defaults of every other field (made fresh where pydantic does)."""
    plan = _DEFAULT_PLANS.get(model)
    if plan is None:
        fields = SECTIONS[model]["fields"]
        plain = {field: spec[4][1] for field, spec in fields.items() if spec[4][0] == "value"}
        made = [(field, spec[4]) for field, spec in fields.items() if spec[4][0] != "value"]
        plan = _DEFAULT_PLANS[model] = (plain, made)
    plain, made = plan
    values = {**plain, **given}
    for field, default in made:
        if field not in given:
            values[field] = _default(default)
    return values


_DEFAULT_PLANS: dict[str, tuple[dict, list]] = {}


def _default(default: tuple) -> Any:
    how, value = default
    if how == "model":
        return _defaults_of(value)
    return _fresh(value) if how == "copy" else value


def _fresh(value: Any) -> Any:
    """A new copy of a literal default (lists and dicts of plain values), as a default_factory makes."""
    if type(value) is list:
        return [_fresh(item) for item in value]
    if type(value) is dict:
        return {key: _fresh(item) for key, item in value.items()}
    return value


def _defaults_of(model: str) -> Vouched:
    return Vouched(model, _with_defaults(model, {}), set())


def _field_value(spec: tuple, field: str, value: Any) -> Any:
    kind, detail, optional, bounds, _default_value, before = spec
    if before is not None:
        try:
            value = _BEFORE[before](field, value)
        except ValueError:
            return _DOUBT
    if value is None:
        return None if optional else _DOUBT
    kind_of = type(value)
    if kind == "bool":
        return value if kind_of is bool else _DOUBT
    if kind == "str":
        return value if kind_of is str else _DOUBT
    if kind == "int":
        if kind_of is float and math.isfinite(value) and value.is_integer() and abs(value) < 2**53:
            value = int(value)
        elif kind_of is not int:
            return _DOUBT
        return value if _within(value, bounds) else _DOUBT
    if kind == "float":
        if kind_of is int and abs(value) < 2**53:
            value = float(value)
        elif kind_of is not float or not math.isfinite(value):
            return _DOUBT
        return value if _within(value, bounds) else _DOUBT
    if kind == "enum":
        return value if kind_of is type(detail[0]) and value in detail else _DOUBT
    if kind == "model":
        checked = vouch(detail, value)
        return _DOUBT if checked is None else checked
    return _DOUBT


def _within(value: Any, bounds: tuple) -> bool:
    ge, gt, le, lt = bounds
    return ((ge is None or value >= ge) and (gt is None or value > gt)
            and (le is None or value <= le) and (lt is None or value < lt))


def unknown_keys(model: str, data: Any) -> Optional[list[str]]:
    """The keys of `data` that `model` refuses as unknown, when they are its only problem (everything
    else vouches); else None. Then pydantic would report exactly one `extra_forbidden` per such key,
    so the caller words them without loading the models (a misspelt key is the common finding)."""
    section = SECTIONS.get(model)
    if section is None or not section["vouch"] or type(data) is not dict:
        return None
    keys, fields = section["keys"], section["fields"]
    unknown = [key for key in data if key not in keys]
    if not unknown or any(type(key) is not str or key in fields for key in unknown):
        return None  # a field's own name refused in favour of its alias: pydantic words that differently
    rest = {key: value for key, value in data.items() if key in keys}
    return unknown if vouch(model, rest) is not None else None


def accepted_keys(model: str) -> list[str]:
    """Every key `model` accepts (field names and aliases), as `section_keys` lists them for a strict
    section, without the models: the candidates of a did-you-mean."""
    return sorted(key for key in SECTIONS[model]["keys"] if key != "steps_per_epoch")
