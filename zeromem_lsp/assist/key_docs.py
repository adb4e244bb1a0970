"""Documentation of a key under the cursor: a DeepSpeed field (type, default, meaning) or a zeromem
setting (kind, meaning, value in effect). Shared by hover and completion."""

from __future__ import annotations

import json
import typing

from zeromem_lsp.assist.cursor import KeyPath
from zeromem_lsp.configs.deepspeed.catalog import field_doc
from zeromem_lsp.configs.settings import BYTE_SETTINGS, SETTING_NAMES, ZeromemSettings
from zeromem_lsp.present import human_and_exact
from zeromem_lsp.provenance import Origin
from zeromem_lsp.units import format_count, format_parameters


def _type_text(type_name: str) -> str:
    return " | ".join(part for part in type_name.split(" | ") if part != "NoneType")


def _json(value: object) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def key_doc(path: KeyPath, settings: ZeromemSettings, origins: dict[str, Origin] | None = None) -> str:
    """Type, default and meaning of a DeepSpeed key or a zeromem setting (with the value in effect and
    the layer it came from, when `origins` says)."""
    if path[0] == "zeromem":
        return zeromem_doc(path[1:], settings, origins)
    doc = field_doc(path)
    if doc is None:
        return ""
    head = f"**`{path[-1]}`** · `{'.'.join(path)}` · {_type_text(doc.type)}"
    if doc.default is not None:
        head += f" · default `{_json(doc.default)}`"
    lines = [head, "", doc.description or "(no description)"]
    if doc.enum_values:
        lines += ["", "Values: " + " · ".join(f"`{_json(value)}`" for value in doc.enum_values)]
    if doc.is_deprecated:
        lines += ["", f"**Deprecated**{f': use `{doc.replacement}`' if doc.replacement else ''}."]
    if doc.aliases:
        lines += ["", "Also spelled: " + ", ".join(f"`{alias}`" for alias in doc.aliases)]
    return "\n".join(lines)


def setting_values(name: str) -> tuple[object, ...]:
    """The allowed values of an enum-like zeromem setting (precision, optimizer), else ()."""
    field = ZeromemSettings.model_fields.get(name)
    if field is None:
        return ()
    for candidate in (field.annotation, *typing.get_args(field.annotation)):
        if typing.get_origin(candidate) is typing.Literal:
            return typing.get_args(candidate)
    return ()


def _setting_kind(name: str) -> str:
    if name in BYTE_SETTINGS:
        return 'bytes: a number or a string such as "80GiB"'
    if name == "parameters":
        return 'count: a number or a string such as "7B"'
    if setting_values(name):
        return "enum"
    return {"world_size": "integer ≥ 1", "warn_fraction": "number in (0, 1]"}.get(name, "")


def _in_effect(name: str, value: object) -> str:
    if value is None:
        return ""
    if not isinstance(value, int) or isinstance(value, bool):
        return f"`{_json(value)}`"
    if name in BYTE_SETTINGS:
        return human_and_exact(value)
    if name == "parameters":
        return f"{format_parameters(value)} ({format_count(value)})"
    return f"`{_json(value)}`"


def zeromem_doc(rest: tuple[str, ...], settings: ZeromemSettings, origins: dict[str, Origin] | None = None) -> str:
    if not rest:
        names = ", ".join(f"`{name}`" for name in SETTING_NAMES)
        return f"**`zeromem`** — {ZeromemSettings.__doc__}\n\nSettings: {names}"
    field = ZeromemSettings.model_fields.get(rest[0])
    if field is None or len(rest) > 1:
        return ""
    name = rest[0]
    lines = [f"**`{name}`** · zeromem setting · {_setting_kind(name)}", "", field.description or ""]
    values = setting_values(name)
    if values:
        lines += ["", "Values: " + " · ".join(f"`{value}`" for value in values)]
    effective = _in_effect(name, getattr(settings, name))
    if effective:
        origin = (origins or {}).get(name)
        lines += ["", f"In effect: {effective}" + (f" — {origin.note}" if origin else "")]
    return "\n".join(lines)
