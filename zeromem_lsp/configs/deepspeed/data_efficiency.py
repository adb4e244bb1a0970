"""`data_efficiency`, read the way DeepSpeed 0.19.8 reads it (runtime/data_pipeline/config.py).

DeepSpeedConfig walks this block even when it is disabled: each sub-block it reaches must be an
object, `curriculum_learning` and `dynamic_batching` assert on a missing key when their `enabled`
is truthy (any non-empty string, "false" included), and `dynamic_batching` turns its sizes into
integers with `int()` whether or not it is enabled.
"""

from __future__ import annotations

import json
from typing import Any

from .issue import ConfigIssue, dotted, issue, mapping_error

#: dynamic_batching keys converted with int() whenever present, enabled or not.
INT_CONVERTED = ("min_batch_size", "max_batch_size")


def check_data_efficiency(efficiency: dict, out: list[ConfigIssue]) -> None:
    """`efficiency` is the `data_efficiency` object (its own shape is checked by the caller)."""
    base = ("data_efficiency",)
    sampling = _object_or_report(efficiency, "data_sampling", base, out)
    if sampling is not None:
        curriculum = _object_or_report(sampling, "curriculum_learning", base + ("data_sampling",), out)
        if curriculum is not None:
            _check_curriculum(curriculum, base + ("data_sampling", "curriculum_learning"), out)
        dynamic = _object_or_report(sampling, "dynamic_batching", base + ("data_sampling",), out)
        if dynamic is not None:
            _check_dynamic_batching(dynamic, base + ("data_sampling", "dynamic_batching"), out)
    routing = _object_or_report(efficiency, "data_routing", base, out)
    if routing is not None:
        _object_or_report(routing, "random_ltd", base + ("data_routing",), out)


def _object_or_report(parent: dict, key: str, path: tuple, out: list[ConfigIssue]) -> dict | None:
    """The sub-block at `key` when it is an object; absent is an empty one; anything else is reported."""
    if key not in parent:
        return {}
    value = parent[key]
    if isinstance(value, dict):
        return value
    out.append(mapping_error(path + (key,), value))
    return None


def _truthiness(path: tuple, value: Any) -> str:
    """Why `enabled` counts as on, spelled out when it is a string such as "false"."""
    if isinstance(value, str):
        return f"'{dotted(path)}' is the string {json.dumps(value)}, which DeepSpeed treats as true,"
    return f"'{dotted(path)}' is {json.dumps(value)},"


def _check_curriculum(curriculum: dict, path: tuple, out: list[ConfigIssue]) -> None:
    enabled = curriculum.get("enabled", False)
    if enabled and "curriculum_metrics" not in curriculum:
        out.append(issue("invalid_combination", path + ("enabled",), "value",
                         f"{_truthiness(path + ('enabled',), enabled)} but 'curriculum_metrics' is missing:"
                         " DeepSpeed refuses curriculum learning without it."))


def _check_dynamic_batching(dynamic: dict, path: tuple, out: list[ConfigIssue]) -> None:
    for key in INT_CONVERTED:
        if key in dynamic:
            _check_int(dynamic[key], path + (key,), out)
    enabled = dynamic.get("enabled", False)
    if not enabled:
        return
    if "max_tokens" not in dynamic:
        out.append(issue("invalid_combination", path + ("enabled",), "value",
                         f"{_truthiness(path + ('enabled',), enabled)} but 'max_tokens' is missing:"
                         " DeepSpeed refuses dynamic batching without it."))
    else:
        _check_int(dynamic["max_tokens"], path + ("max_tokens",), out)


def _check_int(value: Any, path: tuple, out: list[ConfigIssue]) -> None:
    """DeepSpeed calls int() on the value: whatever int() refuses makes it fail at launch."""
    try:
        int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: 1e400 (inf), which hjson fails on anyway
        out.append(issue("invalid_value", path, "value",
                         f"DeepSpeed fails on {value!r} for '{dotted(path)}': it converts the value with int();"
                         " use an integer."))
