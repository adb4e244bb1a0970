"""The settings layers of one analysis and their one resolution.

Highest first: command-line flags, the file's own `zeromem` block, project settings (matching
overrides, then `[tool.zeromem]` / `zeromem.toml`), editor settings. `resolve` merges them once;
every value keeps an `Origin` naming its layer — the flag, the block's key path, the project file,
the editor setting — which hover, messages and `estimate --format json` show as they are.
"""

from __future__ import annotations

from typing import NamedTuple

from zeromem_lsp.configs.settings import SETTING_NAMES, ZeromemSettings
from zeromem_lsp.provenance import Origin, Path

COMMAND_LINE, FILE_BLOCK, PROJECT, EDITOR, UNNAMED = "command line", "file", "project", "editor", "settings"
CONFIG = "config"  # what the training config itself says (a recipe's model and dtype), below its zeromem block


def camel_case(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


class SettingsLayer(NamedTuple):
    """One layer's values and the place they were written."""

    settings: ZeromemSettings
    layer: str  # COMMAND_LINE | FILE_BLOCK | PROJECT | EDITOR | UNNAMED (a caller that did not say)
    where: str = ""  # PROJECT: "pyproject.toml [tool.zeromem]", "zeromem.toml [[overrides]]"
    block_path: Path | None = None  # FILE_BLOCK: where the block is in the document
    origins: tuple[tuple[str, Origin], ...] = ()  # CONFIG: each value's key in the config

    def origin(self, name: str) -> Origin:
        if self.layer == COMMAND_LINE:
            return Origin("--" + name.replace("_", "-"))
        if self.layer == FILE_BLOCK:
            path = (*(self.block_path or ("zeromem",)), name)
            return Origin(".".join(map(str, path)), path)
        if self.layer == CONFIG:
            return dict(self.origins).get(name, Origin(name))
        if self.layer == PROJECT:
            return Origin(self.where)
        if self.layer == EDITOR:
            return Origin(f"editor setting zeromem.{camel_case(name)}")
        return Origin(f"zeromem.{name} (project or editor settings)")


def command_line(settings: ZeromemSettings) -> SettingsLayer:
    return SettingsLayer(settings, COMMAND_LINE)


def file_block(settings: ZeromemSettings, block_path: Path) -> SettingsLayer:
    return SettingsLayer(settings, FILE_BLOCK, block_path=block_path)


def config_values(settings: ZeromemSettings, origins: dict[str, Origin]) -> SettingsLayer:
    """What the training config says that a setting carries (a recipe's base model), each at its key."""
    return SettingsLayer(settings, CONFIG, origins=tuple(origins.items()))


def editor(settings: ZeromemSettings) -> SettingsLayer:
    return SettingsLayer(settings, EDITOR)


def as_layers(settings: ZeromemSettings | tuple[SettingsLayer, ...]) -> tuple[SettingsLayer, ...]:
    """A front end's defaults as layers: a bare `ZeromemSettings` is one layer of unnamed origin."""
    return settings if isinstance(settings, tuple) else (SettingsLayer(settings, UNNAMED),)


class Resolved(NamedTuple):
    """The settings in effect and, for each value set, where it came from."""

    settings: ZeromemSettings
    origins: dict[str, Origin]

    def origin(self, name: str) -> Origin | None:
        return self.origins.get(name)

    def commanded(self, name: str) -> bool:
        """Whether `name` came from a command-line flag, which beats even what the config itself says."""
        origin = self.origins.get(name)
        return origin is not None and origin == SettingsLayer(self.settings, COMMAND_LINE).origin(name)


def resolve(layers: tuple[SettingsLayer, ...]) -> Resolved:
    """Each setting from the highest layer that sets it (`layers` highest first)."""
    values: dict[str, object] = {}
    origins: dict[str, Origin] = {}
    for layer in layers:
        for name in SETTING_NAMES:
            value = getattr(layer.settings, name)
            if value is not None and name not in values:
                values[name], origins[name] = value, layer.origin(name)
    return Resolved(ZeromemSettings.from_checked(values), origins)
