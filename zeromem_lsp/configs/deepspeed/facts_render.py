"""Generate facts.py from the pydantic models: what the pydantic-free pre-check and the
catalog need (field names, aliases, kinds, bounds, enums, defaults, which rules apply).

Run `python -m zeromem_lsp.configs.deepspeed.facts_render --write` after changing the models;
tests/unit/test_deepspeed_precheck.py fails while the committed module is stale.

A section is "vouchable" only when every validator it has is one whose rule lives in
section_checks.py (listed in SHARED_RULES) and its configuration is StrictSection's.
Fields of a kind the pre-check does not model are "other": present in a file, they send the section
to pydantic.
"""

from __future__ import annotations

import enum
import math
import sys
import typing
from pathlib import Path
from pprint import pformat
from typing import Any, Union

import annotated_types
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from . import models as m
from .catalog import STRICT_SECTION_NAMES

TARGET = Path(__file__).with_name("facts.py")
#: Validator (model, method) -> the plain function in section_checks.py it calls.
SHARED_RULES = {
    ("ZeroConfig", "_cross_field"): "zero_cross_field",
    ("FP16Config", "_dynamic_scaling"): "fp16_dynamic_scaling",
    ("FP16Config", "_loss_scale"): "fp16_loss_scale",
    ("FP16Config", "_integer_only"): "fp16_integer_only",
}
BOUNDS = (("ge", annotated_types.Ge), ("gt", annotated_types.Gt), ("le", annotated_types.Le), ("lt", annotated_types.Lt))
BASIC = {bool: "bool", int: "int", float: "float", str: "str"}
HEADER = '''"""GENERATED from models.py by `python -m zeromem_lsp.configs.deepspeed.facts_render --write`.
Do not edit: tests/unit/test_deepspeed_precheck.py fails when this is stale.

SECTIONS: model name -> {"vouch": the pre-check may accept it, "keys": accepted key -> field,
"fields": field -> (kind, detail, optional, bounds, default, rule before), "after": rule after}.
"""

from typing import Any, Optional, TypedDict

from zeromem_lsp.configs.deepspeed.enums import OffloadDevice, QuantType, ZeroStage  # noqa: F401

#: A field's facts: (kind, detail, optional, bounds (ge, gt, le, lt), default (how, value), rule before).
FieldFacts = tuple[str, Any, bool, tuple[Any, Any, Any, Any], tuple[str, Any], Optional[str]]


class Section(TypedDict):
    """A section model's facts (SECTIONS)."""

    vouch: bool  # the pre-check may accept it
    keys: dict[str, str]  # accepted key -> field
    fields: dict[str, FieldFacts]
    after: Optional[str]  # the rule run after the fields


'''


def _kind(annotation: Any) -> tuple[str, Any, bool]:
    """(kind, detail, optional) for an annotation the pre-check models; kind "other" otherwise."""
    optional = False
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is Union and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            return "other", None, True
        annotation, optional = rest[0], True
    if annotation in BASIC:
        return BASIC[annotation], None, optional
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        values = tuple(member.value for member in annotation)
        if len({type(v) for v in values}) == 1 and type(values[0]) in (int, str):
            return "enum", values, optional
    if typing.get_origin(annotation) is typing.Literal:
        values = typing.get_args(annotation)
        if all(type(v) is str for v in values):
            return "enum", values, optional
    if isinstance(annotation, type) and issubclass(annotation, m.StrictSection):
        return "model", annotation.__name__, optional
    return "other", None, optional


def _bounds(metadata: list) -> tuple | None:
    """(ge, gt, le, lt) from the field's constraints; None when it has any other constraint."""
    found = dict.fromkeys(name for name, _ in BOUNDS)
    for item in metadata:
        for name, kind in BOUNDS:
            if type(item) is kind:
                found[name] = getattr(item, name)
                break
        else:
            return None
    return tuple(found.values())


def _default(info: Any) -> tuple:
    if info.default_factory is None:
        return ("value", info.default)
    made = info.default_factory()
    if isinstance(made, m.StrictSection):
        assert made == type(made)(), "a model default must be the model's own defaults"
        return ("model", type(made).__name__)
    return ("copy", made)


def _literal_ok(value: Any) -> bool:
    """Can the value be written as a Python literal that reads back equal (and of the same type)?"""
    if isinstance(value, enum.Enum):
        return type(value).__name__ in ("ZeroStage", "OffloadDevice", "QuantType")
    if isinstance(value, float):
        return math.isfinite(value)
    if value is None or type(value) in (bool, int, str):
        return True
    if type(value) in (list, tuple):
        return all(_literal_ok(v) for v in value)
    if type(value) is dict:
        return all(type(k) is str and _literal_ok(v) for k, v in value.items())
    return False


def _section(model: type[BaseModel]) -> dict:
    name = model.__name__
    decorators = model.__pydantic_decorators__
    vouch = dict(model.model_config) == dict(m.StrictSection.model_config)
    before: dict[str, str | None] = {}
    for method, decorator in decorators.field_validators.items():
        rule = SHARED_RULES.get((name, method))
        vouch = vouch and rule is not None and decorator.info.mode == "before"
        for field in decorator.info.fields:
            before[field] = rule
    after = None
    for method, validator in decorators.model_validators.items():
        rule = SHARED_RULES.get((name, method))
        vouch = vouch and rule is not None and validator.info.mode == "after" and after is None
        after = rule
    other = (decorators.validators or decorators.root_validators or decorators.field_serializers
             or decorators.model_serializers or decorators.computed_fields)
    vouch = vouch and not other
    keys, fields = {}, {}
    for field, info in model.model_fields.items():
        kind, detail, optional = _kind(info.annotation)
        bounds = _bounds(info.metadata)
        if bounds is None or (any(b is not None for b in bounds) and kind not in ("int", "float")):
            kind, detail = "other", None
        if info.validation_alias not in (None, info.alias) or info.alias_priority not in (None, 2):
            vouch = False
        default = _default(info)
        if not _literal_ok(default[1]):
            vouch = False
            default = ("value", None)
        keys[field] = field
        if info.alias:
            keys[info.alias] = field
        fields[field] = (kind, detail, optional, bounds or (None,) * 4, default, before.get(field))
    return {"vouch": vouch, "keys": keys, "fields": fields, "after": after}


def _models() -> list[type[BaseModel]]:
    """Every strict section model and the section models nested in them."""
    seen: dict[str, type[BaseModel]] = {}
    todo = [getattr(m, name) for name in STRICT_SECTION_NAMES.values()]
    while todo:
        model = todo.pop(0)
        if model.__name__ in seen:
            continue
        seen[model.__name__] = model
        for info in model.model_fields.values():
            kind, detail, _ = _kind(info.annotation)
            if kind == "model":
                todo.append(getattr(m, detail))
    return sorted(seen.values(), key=lambda model: model.__name__)


def render() -> str:
    sections = {model.__name__: _section(model) for model in _models()}
    pairs = {model.__name__: m.deprecated_pairs(model) for model in _models() if m.deprecated_pairs(model)}
    body = [
        f"KNOWN_TOP_LEVEL_KEYS = {pformat(tuple(m.DeepSpeedTopLevel.model_fields), width=110)}\n",
        f"DEPRECATED_PAIRS = {pformat(pairs, width=110)}\n",
        f"SECTIONS: dict[str, Section] = {pformat(sections, width=110, sort_dicts=False)}\n",
    ]
    text = HEADER + "\n".join(body)
    for enum_type in (m.ZeroStage, m.OffloadDevice, m.QuantType):
        for member in enum_type:
            text = text.replace(repr(member), f"{enum_type.__name__}.{member.name}")
    return text


def main(argv: list[str]) -> int:
    text = render()
    if "--write" in argv:
        TARGET.write_text(text, encoding="utf-8")
        return 0
    current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
    print("facts.py is current" if current == text else "facts.py is stale: run with --write")
    return 0 if current == text else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
