"""Numbers as `hjson.load` (DeepSpeed's loader for a config path) returns them.

hjson turns a literal with a fraction or an exponent into an int when its value is whole and
below 1e10 (`1.0` -> 1, `5e8` -> 500000000, `1e30` stays a float): hjson/decoder.py, scantfnns.
json.load keeps `1.0` a float, so this applies only where DeepSpeed itself opens the file.
"""

from __future__ import annotations

from typing import Any

HJSON_INT_LIMIT = 1e10  # hjson: `if int(res) == res and abs(res) < 1e10: res = int(res)`


def hjson_numbers(value: object) -> object:
    """`value` with every whole float below 1e10 made an int, as hjson reads it (a new tree; no
    recursion, so a deeply nested document is no problem)."""
    root = [value]
    # (a list and an index in it, or a dict and one of its keys): Any, as list and dict take different keys
    pending: list[tuple[Any, Any]] = [(root, 0)]
    while pending:
        parent, key = pending.pop()
        item = parent[key]
        if type(item) is float:
            if item.is_integer() and abs(item) < HJSON_INT_LIMIT:
                parent[key] = int(item)
        elif isinstance(item, dict):
            parent[key] = members = dict(item)
            pending.extend((members, name) for name in members)
        elif isinstance(item, list):
            parent[key] = items = list(item)
            pending.extend((items, index) for index in range(len(items)))
    return root[0]
