"""The plain parts of the `zeromem` settings, shared by settings.py (the immutable value and its
pydantic-free check) and settings_model.py (the pydantic model of record): names, patterns and the
value checks both call. Imports neither of them, so the two do not import each other.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

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
    "sequence_length",
    "micro_batch",
    "gradient_checkpointing",
    "attention",
    "reserved",
)
BYTE_SIZE_PATTERN = r"^\s*[0-9][0-9_,]*(\.[0-9]+)?([eE][+-]?[0-9]+)?\s*([kKMGTPE]i?[bB]?|[bB])?\s*$"
COUNT_PATTERN = r"^\s*[0-9][0-9_,]*(\.[0-9]+)?([eE][+-]?[0-9]+)?\s*[kKmMbBtT]?\s*$"
DEFAULT_WARN_FRACTION = 0.9
ATTENTIONS = ("sdpa", "eager")
#: The settings that are byte sizes ("80GiB"): checked as bytes, shown as bytes (hover, completion).
BYTE_SETTINGS = ("parameter_bytes", "gradient_bytes", "optimizer_bytes", "gpu_memory", "reserved")


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
        return _parsed(parse, value) if type(value) is str else parse(value)
    except UnitError as error:
        raise ValueError(str(error)) from None


@lru_cache(maxsize=512)
def _parsed(parse, text: str) -> int:
    """A size written as text, parsed once: every config of a project repeats "80GiB" and "7B"."""
    return parse(text)


def check_bytes(value: object) -> object:
    """A byte size ("80GiB", 85899345920) -> exact int; ValueError with the reason otherwise."""
    return _size(parse_bytes, value)


def check_count(value: object) -> object:
    """A parameter count ("7B", 7e9) -> exact int; ValueError with the reason otherwise."""
    return _size(parse_parameter_count, value)


class ParametersFromConfig(NamedTuple):
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


class SettingProblem(NamedTuple):
    """One invalid setting: its name, why, and whether the name itself is unknown."""

    name: str
    message: str
    unknown: bool = False
