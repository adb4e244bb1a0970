"""Editor settings (initializationOptions, workspace/configuration `zeromem`) → `ZeromemSettings`.

Raw client options are untrusted: camelCase names (the VS Code extension sends `gpuMemory`) are
accepted, unset values (None, "") are ignored, and anything invalid is reported and dropped, so the
rest still applies. An empty list is no settings too: Lua (Neovim) encodes an empty table as `[]`.
"""

from __future__ import annotations

import re


from zeromem_lsp.configs.settings import validate_settings, SETTING_NAMES, ZeromemSettings

_CAMEL = re.compile(r"(?<=[a-z0-9])([A-Z])")
CLIENT_SIDE_KEYS = {"path", "interpreter", "trace"}  # editor extension settings, not the server's


def snake_case(name: str) -> str:
    return _CAMEL.sub(r"_\1", name).lower()


def settings_section(raw: object) -> object:
    """The `zeromem` section if `raw` holds one ({"zeromem": ...}: no setting has that name), else `raw`."""
    if isinstance(raw, dict) and "zeromem" in raw:
        return raw["zeromem"]
    return raw


def resolve_settings(raw: object) -> tuple[ZeromemSettings, list[str]]:
    """Valid settings from raw editor options, and one message per problem."""
    raw = settings_section(raw)
    if raw is None or raw == []:  # [] is Lua's empty table (Neovim's default `settings = {}`)
        return ZeromemSettings(), []
    if not isinstance(raw, dict):
        return ZeromemSettings(), [f"zeromem settings must be an object, got {type(raw).__name__}"]
    values: dict[str, object] = {}
    problems: list[tuple[int, str]] = []  # (position in raw, message): reported in the order written
    order = {snake_case(str(key)): (index, key) for index, key in enumerate(raw)}
    for key, value in raw.items():
        name = snake_case(str(key))
        if value is None or value == "" or name in CLIENT_SIDE_KEYS:
            continue
        if name not in SETTING_NAMES:
            problems.append((order[name][0], f"unknown zeromem setting {key!r}; known: {', '.join(SETTING_NAMES)}"))
            continue
        values[name] = value
    settings, found = validate_settings(values)
    problems += [(order[p.name][0], f"zeromem setting {order[p.name][1]!r}: {p.message}") for p in found]
    return settings, [message for _, message in sorted(problems)]
