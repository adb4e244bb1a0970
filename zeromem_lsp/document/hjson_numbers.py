"""Numbers as `hjson.load` (DeepSpeed's loader for a config path) returns them.

hjson turns a literal with a fraction or an exponent into an int when its value is whole and
below 1e10 (`1.0` -> 1, `5e8` -> 500000000, `1e30` stays a float): hjson/decoder.py, scantfnns.
json.load keeps `1.0` a float, so this applies only where DeepSpeed itself opens the file.
"""

from __future__ import annotations

HJSON_INT_LIMIT = 1e10  # hjson: `if int(res) == res and abs(res) < 1e10: res = int(res)`


def hjson_numbers(value: object) -> object:
    """`value` with every whole float below 1e10 made an int, as hjson reads it (a new tree)."""
    if type(value) is float:
        return int(value) if value.is_integer() and abs(value) < HJSON_INT_LIMIT else value
    if isinstance(value, dict):
        return {key: hjson_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [hjson_numbers(item) for item in value]
    return value
