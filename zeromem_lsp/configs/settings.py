"""The `zeromem` settings: what a config cannot say about itself (model size, ranks, GPU budget).

One type serves the `zeromem` block inside a config, `[tool.zeromem]` / `zeromem.toml`, editor
settings and CLI flags. Sizes are accepted as numbers or strings ("7B", "80GiB") and resolved
to exact ints.

`ZeromemSettings` here is a plain immutable value. Its validator of record is the pydantic model in
settings_model.py (the source of schemas/ and of every error message); this module answers without
importing pydantic only when it is certain the values are valid — the same checks, called from there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from zeromem_lsp.precision import OPTIMIZERS, PRECISIONS
from zeromem_lsp.units import UnitError, parse_bytes, parse_parameter_count

SETTING_NAMES = (
    "parameters",
    "parameter_bytes",
    "gradient_bytes",
    "optimizer_bytes",
    "precision",
    "optimizer",
    "world_size",
    "gpu_memory",
    "warn_fraction",
)
BYTE_SIZE_PATTERN = r"^\s*[0-9][0-9_,]*(\.[0-9]+)?([eE][+-]?[0-9]+)?\s*([kKMGTPE]i?[bB]?|[bB])?\s*$"
COUNT_PATTERN = r"^\s*[0-9][0-9_,]*(\.[0-9]+)?([eE][+-]?[0-9]+)?\s*[kKmMbBtT]?\s*$"
DEFAULT_WARN_FRACTION = 0.9
_BYTE_FIELDS = ("parameter_bytes", "gradient_bytes", "optimizer_bytes", "gpu_memory")


def _size(parse, value: object) -> object:
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"expected a number or a string such as '80GiB', got {value!r}")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"expected a whole number, got {value!r}")
        value = int(value)
    if not isinstance(value, (int, str)):
        raise ValueError(f"expected a number or a string, got {value!r}")
    try:
        return parse(value)
    except UnitError as error:
        raise ValueError(str(error)) from None


def check_bytes(value: object) -> object:
    """A byte size ("80GiB", 85899345920) -> exact int; ValueError with the reason otherwise."""
    return _size(parse_bytes, value)


def check_count(value: object) -> object:
    """A parameter count ("7B", 7e9) -> exact int; ValueError with the reason otherwise."""
    return _size(parse_parameter_count, value)


@dataclass(frozen=True)
class ParametersFromConfig:
    """Count the parameters from a local Hugging Face `config.json` (path relative to the config file;
    in project settings, relative to the settings file)."""

    from_config: str


def check_parameters(value: object) -> object:
    """A count ("7B", 8030261248) or {"from_config": path}: one error message either way."""
    if isinstance(value, ParametersFromConfig):
        return value
    if isinstance(value, dict):
        unknown = sorted(set(value) - {"from_config"})
        path = value.get("from_config")
        if unknown or not isinstance(path, str) or not path.strip():
            raise ValueError('expected {"from_config": "path/to/config.json"}'
                             + (f"; unknown key {unknown[0]!r}" if unknown else ""))
        return ParametersFromConfig(path)
    count = check_count(value)
    if isinstance(count, int) and count <= 0:
        raise ValueError("Input should be greater than 0")
    return count


class _ModelFields:
    """`ZeromemSettings.model_fields`: the pydantic model's fields (descriptions for hover), on demand."""

    def __get__(self, instance: object, owner: type) -> dict:
        from zeromem_lsp.configs.settings_model import ZeromemSettings as Model

        return Model.model_fields


class ZeromemSettings:
    """Declarations for zeromem; DeepSpeed ignores this top-level block."""

    __slots__ = SETTING_NAMES
    model_fields = _ModelFields()

    def __init__(self, **values: Any):
        checked = certainly_valid(values)
        if checked is None:  # pydantic decides, and raises its ValidationError as before
            from zeromem_lsp.configs.settings_model import construct

            checked = {name: getattr(construct(values), name) for name in SETTING_NAMES}
        for name in SETTING_NAMES:
            object.__setattr__(self, name, checked.get(name))

    @classmethod
    def from_checked(cls, values: dict) -> ZeromemSettings:
        """Settings from values already validated (no check)."""
        settings = object.__new__(cls)
        for name in SETTING_NAMES:
            object.__setattr__(settings, name, values.get(name))
        return settings

    def __setattr__(self, name: str, value: object) -> None:
        raise TypeError("ZeromemSettings is immutable; use model_copy(update=...)")

    def __copy__(self) -> ZeromemSettings:  # immutable: a copy is itself
        return self

    def __deepcopy__(self, memo: dict) -> ZeromemSettings:
        return self

    def __reduce__(self) -> tuple:
        return ZeromemSettings.from_checked, (dict(zip(SETTING_NAMES, self._values())),)

    def _values(self) -> tuple:
        return tuple(getattr(self, name) for name in SETTING_NAMES)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        return "ZeromemSettings(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in SETTING_NAMES) + ")"

    def model_copy(self, update: dict | None = None) -> ZeromemSettings:
        """A copy with `update` applied as given (not validated, like pydantic's model_copy)."""
        return ZeromemSettings.from_checked({**dict(zip(SETTING_NAMES, self._values())), **(update or {})})

    def merged_over(self, lower: ZeromemSettings) -> ZeromemSettings:
        """These settings, falling back to `lower` for anything unset."""
        values = {name: getattr(self, name) for name in SETTING_NAMES}
        return lower.model_copy(update={k: v for k, v in values.items() if v is not None})


@dataclass(frozen=True)
class SettingProblem:
    """One invalid setting: its name, why, and whether the name itself is unknown."""

    name: str
    message: str
    unknown: bool = False


def certainly_valid(values: dict) -> dict | None:
    """The validated values when every one is certainly valid (what the pydantic model would hold),
    else None: the caller then asks the model, which also words the problems."""
    checked: dict = {}
    for name, value in values.items():
        if name not in SETTING_NAMES:
            return None
        try:
            result = _certain(name, value)
        except ValueError:
            return None
        if result is _DOUBT:
            return None
        checked[name] = result
    return checked


_DOUBT = object()


def _certain(name: str, value: object) -> object:
    if value is None:
        return None
    if name == "parameters":
        result = check_parameters(value)
        return result if type(result) is ParametersFromConfig or (type(result) is int and result > 0) else _DOUBT
    if name in _BYTE_FIELDS:
        result = check_bytes(value)
        return result if type(result) is int and result >= 0 else _DOUBT
    if name == "precision":
        return value if type(value) is str and value in PRECISIONS else _DOUBT
    if name == "optimizer":
        return value if type(value) is str and value in OPTIMIZERS else _DOUBT
    if name == "world_size":
        return value if type(value) is int and value >= 1 else _DOUBT
    if name == "warn_fraction":
        if type(value) is int and abs(value) < 2**53:
            value = float(value)
        if type(value) is not float or not math.isfinite(value):
            return _DOUBT
        return value if 0 < value <= 1 else _DOUBT
    return _DOUBT


def validate_settings(values: dict) -> tuple[ZeromemSettings, list[SettingProblem]]:
    """Settings from raw values: every problem reported, the valid values kept (one bad value does not
    discard the rest). The caller words the problems for its own surface (block, TOML, editor, CLI)."""
    checked = certainly_valid(values) if isinstance(values, dict) else None
    if checked is not None:
        return ZeromemSettings.from_checked(checked), []
    from zeromem_lsp.configs.settings_model import validate

    return validate(values)
