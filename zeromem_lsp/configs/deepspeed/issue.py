"""Helpers shared by the DeepSpeed checks, and the fixed set of DeepSpeed issue kinds."""

from __future__ import annotations

from typing import Optional, Union

from zeromem_lsp.configs.issue import ConfigIssue
from zeromem_lsp.rules.kinds import severities

#: kind -> severity ("error": DeepSpeed refuses the config at launch; "warning": it starts anyway),
#: read from the rule registry through rules/kinds.py.
ISSUE_KINDS: dict[str, str] = severities("deepspeed")

#: Kinds raised by deepspeed.initialize (engine) rather than by DeepSpeedConfig: warnings, because the
#: config loader itself accepts them (and a client optimizer passed in code bypasses the section).
ENGINE_LEVEL_KINDS: frozenset[str] = frozenset(
    {"unknown_optimizer", "incompatible_optimizer", "unsupported_optimizer_param"}
)


def dotted(path: tuple[Union[str, int], ...]) -> str:
    """("a", "b", 0) -> "a.b[0]"."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def issue(kind: str, path: tuple, target: str, message: str, *, replacement: Optional[str] = None) -> ConfigIssue:
    if kind not in ISSUE_KINDS:
        raise KeyError(kind)
    return ConfigIssue(kind, tuple(path), target, message, replacement)


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
