"""Project settings: `[tool.zeromem]` in pyproject.toml or a standalone zeromem.toml.

Found from a config file's directory upward (the nearest file that has zeromem settings wins).
Keys are spelled with hyphens or underscores (`gpu-memory` = `gpu_memory`). `overrides` apply to
files matching their globs (relative to the settings file). Precedence, highest first: command-line
flags, the file's own `zeromem` block, matching overrides (later ones win), these defaults, editor
settings (configs/layers.py resolves them once).
"""

from __future__ import annotations

import fnmatch
import re
import sys
from pathlib import Path
from typing import Callable, NamedTuple

from zeromem_lsp.configs.layers import PROJECT, SettingsLayer, resolve
from zeromem_lsp.configs.settings import ParametersFromConfig, ZeromemSettings, validate_settings
from zeromem_lsp.configs.image_tokens import Processor
from zeromem_lsp.configs.model_source import HubAccess, ModelSource, find_model_config, is_repo_id, read_small_text



def _toml():
    """The TOML reader, imported only when a settings file is found (most checks have none)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    return tomllib

SETTINGS_FILES = ("zeromem.toml", "pyproject.toml")
PROJECT_ROOT_MARKERS = (".git", "pyproject.toml", "setup.py")
NO_SETTINGS = ZeromemSettings()


class SettingsProblem(NamedTuple):
    path: Path
    line: int  # zero-based
    message: str


class ProjectSettings(NamedTuple):
    source: Path | None
    defaults: ZeromemSettings = NO_SETTINGS
    overrides: tuple[tuple[tuple[str, ...], ZeromemSettings], ...] = ()
    problems: tuple[SettingsProblem, ...] = ()

    def for_file(self, path: Path) -> ZeromemSettings:
        """The project settings in effect for the config at `path` (overrides merged over the defaults)."""
        return resolve(self.layers_for(path)).settings

    def layers_for(self, path: Path) -> tuple[SettingsLayer, ...]:
        """The project's layers for the config at `path`, highest first: matching overrides (later ones
        first), then the defaults; each names the file and table it was written in."""
        if self.source is None:
            return (SettingsLayer(self.defaults, PROJECT, "project settings"),)
        try:
            relative = path.resolve().relative_to(self.source.parent.resolve()).as_posix()
        except ValueError:
            relative = path.name
        table = "" if self.source.name == "zeromem.toml" else "tool.zeromem"
        layers = [SettingsLayer(self._absolute(self.defaults), PROJECT,
                                f"{self.source.name} [{table}]" if table else self.source.name)]
        for globs, override in self.overrides:
            if any(fnmatch.fnmatch(relative, pattern) or fnmatch.fnmatch(path.name, pattern) for pattern in globs):
                where = f"{self.source.name} [[{table + '.' if table else ''}overrides]]"
                layers.insert(0, SettingsLayer(self._absolute(override), PROJECT, where))
        return tuple(layers)

    def _absolute(self, settings: ZeromemSettings) -> ZeromemSettings:
        """`parameters.from_config` and `accelerate_config` are relative to the settings file, not to the config."""
        if settings.accelerate_config is not None and self.source is not None:
            absolute = str((self.source.parent / settings.accelerate_config).resolve())
            settings = settings.model_copy(update={"accelerate_config": absolute})
        wanted = settings.parameters
        if not isinstance(wanted, ParametersFromConfig) or self.source is None:
            return settings
        model = (self.source.parent / wanted.from_config).resolve()
        if not model.exists() and is_repo_id(wanted.from_config):
            return settings  # a hub id, looked up in the Hugging Face cache
        return settings.model_copy(update={"parameters": ParametersFromConfig(str(model), wanted.revision)})


def _normalise(table: dict) -> dict:
    return {str(key).replace("-", "_"): value for key, value in table.items()}


def _line_of(text: str, key: str, after: int = 0) -> int:
    """Zero-based line of `key = ...` (hyphen or underscore spelling) at or after line `after`."""
    spellings = {key, key.replace("_", "-")}
    pattern = re.compile(r"^\s*(" + "|".join(map(re.escape, spellings)) + r")\s*=")
    lines = text.splitlines()
    for number in range(after, len(lines)):
        if pattern.match(lines[number]):
            return number
    return after


def _section_line(text: str, header: str, occurrence: int = 0) -> int:
    found = -1
    for number, line in enumerate(text.splitlines()):
        if line.strip().replace(" ", "") == header:
            found += 1
            if found == occurrence:
                return number
    return 0


def _validate(table: dict, path: Path, text: str, section_line: int) -> tuple[ZeromemSettings, list[SettingsProblem]]:
    settings, found = validate_settings(_normalise(table))
    problems = [
        SettingsProblem(path, _line_of(text, problem.name, section_line),
                        f"{problem.name.replace('_', '-')}: {problem.message}" if not problem.unknown
                        else f"{problem.name.replace('_', '-')}: unknown setting {problem.name.replace('_', '-')!r}")
        for problem in found
    ]
    return settings, problems


def _zeromem_table(path: Path, data: dict) -> tuple[dict | None, str]:
    if path.name == "zeromem.toml":
        return data, ""
    table = data.get("tool", {}).get("zeromem") if isinstance(data.get("tool"), dict) else None
    return table, "[tool.zeromem]"


def load_settings_file(path: Path) -> ProjectSettings | None:
    """Settings from one file; None when it has no zeromem settings (keep searching upward)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    except UnicodeDecodeError as error:
        return ProjectSettings(path, problems=(SettingsProblem(path, 0, f"invalid TOML: {error}"),))
    return settings_from_text(path, text)


def settings_from_text(path: Path, text: str) -> ProjectSettings | None:
    """Settings from the text of the settings file at `path` (as on disk, or as open in an editor)."""
    tomllib = _toml()
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        line = getattr(error, "lineno", 1) or 1
        return ProjectSettings(path, problems=(SettingsProblem(path, line - 1, f"invalid TOML: {error}"),))
    table, header = _zeromem_table(path, data)
    if not isinstance(table, dict):
        return None
    table = dict(table)
    raw_overrides = table.pop("overrides", [])
    section = _section_line(text, header) if header else 0
    defaults, problems = _validate(table, path, text, section)
    overrides = []
    override_header = "[[tool.zeromem.overrides]]" if header else "[[overrides]]"
    for index, entry in enumerate(raw_overrides if isinstance(raw_overrides, list) else []):
        line = _section_line(text, override_header, index)
        entry = dict(entry) if isinstance(entry, dict) else {}
        files = entry.pop("files", None)
        if isinstance(files, str):
            files = [files]
        if not isinstance(files, list) or not files or not all(isinstance(f, str) for f in files):
            problems.append(SettingsProblem(path, line, "overrides: each entry needs files = [\"glob\", ...]"))
            continue
        settings, more = _validate(entry, path, text, line)
        problems += more
        overrides.append((tuple(files), settings))
    return ProjectSettings(path, defaults, tuple(overrides), tuple(problems))


def discover(start: Path) -> ProjectSettings:
    """The nearest settings at or above `start` (a file or directory)."""
    directory = start if start.is_dir() else start.parent
    for folder in (directory.resolve(), *directory.resolve().parents):
        for name in SETTINGS_FILES:
            candidate = folder / name
            if candidate.is_file():
                settings = load_settings_file(candidate)
                if settings is not None:
                    return settings
    return ProjectSettings(None)


class FileLoader(NamedTuple):
    """Reads files a config names, relative to the config's folder (absolute paths as given).

    Called with a name it returns the text, or None; `why_unreadable(name)` then says why.
    `model_config(name)` also finds a model directory's or a hub id's config.json: in the caches, and from the
    Hub as `hub` allows (model_source.HubAccess; `landed` is called when a background fetch is done)."""

    folder: Path
    hub: HubAccess = "cache"
    landed: Callable[[], None] | None = None

    def __call__(self, name: str) -> str | None:
        return read_small_text(self.folder / name)[0]

    @property
    def may_block(self) -> bool:
        """Whether slow work may run in the analysis (the command line, which fetches): counting a family zeromem
        does not describe with Transformers in a subprocess (configs/meta_count.py). Never in the editor."""
        return self.hub == "fetch"

    def why_unreadable(self, name: str) -> str:
        return read_small_text(self.folder / name)[1] or "file not found"

    def model_config(self, name: str, revision: str | None = None) -> ModelSource:
        return find_model_config(name, self.folder, revision=revision, hub=self.hub, landed=self.landed)

    def processor_config(self, name: str, revision: str | None = None) -> Processor:
        """The preprocessor_config.json that goes with the model `model_config(name)` finds
        (configs/processor_config.py), looked for the same way."""
        from zeromem_lsp.configs.processor_config import find_processor_config

        return find_processor_config(name, self.folder, revision=revision, hub=self.hub, landed=self.landed)

    def launch_file(self, name: str) -> tuple[str | None, str, str]:
        """(text, path found, where it was looked for) for a path a recipe names: the tools open it from the
        directory they are launched in, so the config's folder, then each parent up to the project root
        (the nearest folder with .git, pyproject.toml or setup.py; else the filesystem root)."""
        tried = []
        for folder in (self.folder, *self.folder.resolve().parents):
            candidate = folder / name
            text, why = read_small_text(candidate)
            if text is not None:
                return text, str(candidate), ""
            tried.append(str(candidate))
            if Path(name).is_absolute() or any((folder / marker).exists() for marker in PROJECT_ROOT_MARKERS):
                break
        return None, name, "looked for " + ", ".join(tried)


def file_loader(path: Path, hub: HubAccess = "cache", landed: Callable[[], None] | None = None) -> FileLoader:
    """The loader for files named in the config at `path` (a hub model fetched as `hub` allows)."""
    return FileLoader(path.parent, hub, landed)
