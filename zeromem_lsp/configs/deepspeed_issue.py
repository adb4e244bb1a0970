"""The issue record shared by the DeepSpeed checks, and the fixed set of issue kinds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

#: kind -> severity. "error": DeepSpeed refuses the config at launch; "warning": it starts anyway.
ISSUE_KINDS: dict[str, str] = {
    "unknown_key": "error",
    "alias_conflict": "error",
    "invalid_value": "error",
    "invalid_combination": "error",
    "fp16_and_bf16": "error",
    "deprecated_with_replacement": "error",
    "partial_offload_below_stage3": "error",
    "removed_feature": "error",
    "batch_missing": "error",
    "batch_non_positive": "error",
    "batch_inconsistent": "error",
    "unknown_optimizer": "warning",
    "incompatible_optimizer": "warning",
    "unsupported_optimizer_param": "warning",
    "deprecated_key": "warning",
    "offload_param_below_stage3": "warning",
    "auto_not_filled": "warning",
    "top_level_near_miss": "warning",
    "suspicious_value": "warning",
}

#: Kinds raised by deepspeed.initialize (engine) rather than by DeepSpeedConfig: warnings, because the
#: config loader itself accepts them (and a client optimizer passed in code bypasses the section).
ENGINE_LEVEL_KINDS: frozenset[str] = frozenset(
    {"unknown_optimizer", "incompatible_optimizer", "unsupported_optimizer_param"}
)


@dataclass(frozen=True)
class ConfigIssue:
    """One finding about a DeepSpeed config."""

    kind: str  # one of ISSUE_KINDS
    severity: str  # "error" (DeepSpeed refuses at launch) | "warning"
    path: tuple[Union[str, int], ...]  # key path, e.g. ("zero_optimization", "stage")
    target: str  # "key" (highlight the key) or "value" (highlight the value)
    message: str
    replacement: Optional[str] = None  # suggested key name for a quick fix


def dotted(path: tuple[Union[str, int], ...]) -> str:
    """("a", "b", 0) -> "a.b[0]"."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def issue(kind: str, path: tuple, target: str, message: str, *, replacement: Optional[str] = None) -> ConfigIssue:
    return ConfigIssue(kind, ISSUE_KINDS[kind], tuple(path), target, message, replacement)


def is_auto(value: object) -> bool:
    """HF's placeholder: the string "auto" (filled by Transformers / Accelerate, dropped by DeepSpeed)."""
    return isinstance(value, str) and value == "auto"


def mapping_error(path: tuple, value: object) -> ConfigIssue:
    """A section that must be an object but is not: DeepSpeed fails on it at launch."""
    if not path:
        return issue("invalid_value", (), "value",
                     f"The top level must be an object, got {_shape(value)}: DeepSpeed fails on it at launch.")
    return issue(
        "invalid_value", path, "value",
        f"'{dotted(path)}' must be an object, got {value!r}: DeepSpeed fails on it at launch.",
    )


def _shape(value: object) -> str:
    """'an array', 'null'... for a value that is not an object."""
    if value is None:
        return "null"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value)
