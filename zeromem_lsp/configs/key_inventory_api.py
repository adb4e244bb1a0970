"""The functions of configs/key_inventory.py over its generated INVENTORY (pure: plain dicts in, tuples out).

`classify(inventory, fmt, key)` looks a key up (a dotted path for nested keys: accelerate's
`fsdp_config.fsdp_version`, DeepSpeed's `zero_optimization.stage`). `not_modelled(inventory, fmt, data)` walks a
config in document order: a mapping whose path has keys of its own in the inventory is walked into, anything else
is looked up; a key classified not_modelled is reported when it is set, that is when its value is not its default
(value == default, a value None or False where the default is None or False, and 1 for a size or degree whose
default is None, all count as not set).
"""

from __future__ import annotations

Entry = tuple[str, object, str]


def defaults(inventory: dict[str, dict[str, Entry]]) -> dict[str, dict[str, object]]:
    """format -> key -> its declared default: the key sets the generator read, from the inventory's entries."""
    return {fmt: {key: entry[1] for key, entry in table.items()} for fmt, table in inventory.items()}


def classify(inventory: dict[str, dict[str, Entry]], fmt: str, key: str) -> Entry | None:
    return inventory.get(fmt, {}).get(key)


def _parents(keys) -> frozenset[str]:
    found: set[str] = set()
    for key in keys:
        parts = key.split(".")
        found.update(".".join(parts[:end]) for end in range(1, len(parts)))
    return frozenset(found)


_PARENTS: dict[int, frozenset[str]] = {}


def is_set(key: str, value: object, default: object) -> bool:
    """Whether `value` differs from the declared `default` (see the module's docstring)."""
    if value is None or (value is False and (default is None or default is False)):
        return False
    if value == default and isinstance(value, bool) == isinstance(default, bool):
        return False
    last = key.rsplit(".", 1)[-1]
    return not (default is None and last.endswith(("_size", "_degree")) and value == 1
                and not isinstance(value, bool))


def not_modelled(inventory: dict[str, dict[str, Entry]], fmt: str, data: dict,
                 assumed: dict[str, list] | None = None) -> list[tuple[tuple[str, ...], object, str]]:
    """`assumed`: key -> the values of a not-modelled key that the step model assumes (not reported)."""
    table = inventory.get(fmt, {})
    assumed = assumed or {}
    parents = _PARENTS.get(id(table))
    if parents is None:
        parents = _PARENTS[id(table)] = _parents(table)
    out: list[tuple[tuple[str, ...], object, str]] = []

    def walk(mapping: dict, path: tuple[str, ...]) -> None:
        for key, value in mapping.items():
            if not isinstance(key, str):
                continue
            here = (*path, key)
            dotted = ".".join(here)
            if isinstance(value, dict) and dotted in parents:
                walk(value, here)
                continue
            entry = table.get(dotted)
            if entry is not None and entry[0] == "not_modelled" and is_set(dotted, value, entry[1]) and not any(
                    value == known and isinstance(value, bool) == isinstance(known, bool)
                    for known in assumed.get(dotted, ())):
                out.append((here, value, entry[2]))

    if isinstance(data, dict):
        walk(data, ())
    return out
