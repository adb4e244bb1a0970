"""Editor settings (initializationOptions, workspace/configuration `zeromem`) → `ZeromemSettings`.

Raw client options are untrusted: camelCase names (the VS Code extension sends `gpuMemory`) are
accepted, unset values (None, "") are ignored, and anything invalid is reported and dropped, so the
rest still applies.
"""

from __future__ import annotations

import re

from pydantic import ValidationError

from zeromem_lsp.configs.settings import SETTING_NAMES, ZeromemSettings

_CAMEL = re.compile(r"(?<=[a-z0-9])([A-Z])")
CLIENT_SIDE_KEYS = {"path", "interpreter", "trace"}  # editor extension settings, not the server's


def snake_case(name: str) -> str:
    return _CAMEL.sub(r"_\1", name).lower()


def settings_section(raw: object) -> object:
    """The `zeromem` section if `raw` holds one ({"zeromem": {...}}), else `raw` itself."""
    if isinstance(raw, dict) and isinstance(raw.get("zeromem"), dict):
        return raw["zeromem"]
    return raw


def resolve_settings(raw: object) -> tuple[ZeromemSettings, list[str]]:
    """Valid settings from raw editor options, and one message per problem."""
    raw = settings_section(raw)
    if raw is None:
        return ZeromemSettings(), []
    if not isinstance(raw, dict):
        return ZeromemSettings(), [f"zeromem settings must be an object, got {type(raw).__name__}"]
    values: dict[str, object] = {}
    problems: list[str] = []
    for key, value in raw.items():
        name = snake_case(str(key))
        if value is None or value == "" or name in CLIENT_SIDE_KEYS:
            continue
        if name not in SETTING_NAMES:
            problems.append(f"unknown zeromem setting {key!r}; known: {', '.join(SETTING_NAMES)}")
            continue
        try:
            ZeromemSettings.model_validate({name: value})
        except ValidationError as error:
            message = error.errors()[0]["msg"].removeprefix("Value error, ")
            problems.append(f"zeromem setting {key!r}: {message}")
            continue
        values[name] = value
    return ZeromemSettings.model_validate(values), problems
