"""The pure half of generate.py: classify the raw key sets with classes.py and render key_inventory.py.

No network, no sources: `render(SOURCES, RAW, HANDBOOK_OWN)` on the values the generated module stores gives
that module's text back byte for byte (tests/unit/test_key_inventory.py checks it).
"""

from __future__ import annotations

import pprint
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import classes  # noqa: E402

FORMATS = ("axolotl", "llamafactory", "trl", "transformers", "accelerate", "deepspeed")
CLASSES = ("modelled", "inert", "not_modelled")


def _named(fmt: str) -> dict[str, tuple[str, str]]:
    """key -> (class, why) for the keys classes.py names for `fmt` (explicit entries only)."""
    found: dict[str, tuple[str, str]] = {}
    for kind, table in (("modelled", classes.MODELLED), ("not_modelled", classes.NOT_MODELLED),
                        ("inert", classes.INERT)):
        for group, entries in table.items():
            if fmt not in group:
                continue
            for key, why in entries.items():
                if key in found:
                    raise ValueError(f"{fmt}: {key!r} is named twice in classes.py ({found[key][0]} and {kind})")
                found[key] = (kind, why)
    return found


def _rule(fmt: str, key: str) -> str | None:
    """The reason of the first inert rule of classes.INERT_RULES that matches `key` in `fmt`."""
    for group, how, text, why in classes.INERT_RULES:
        if fmt not in group:
            continue
        if (how == "prefix" and key.startswith(text)) or (how == "suffix" and key.endswith(text)) or (
                how == "contains" and text in key):
            return why
    return None


def stale(raw: dict[str, dict[str, object]]) -> list[str]:
    """Keys classes.py names for a format that the format's inventory does not have."""
    out = []
    for table in (classes.MODELLED, classes.NOT_MODELLED, classes.INERT):
        for group, entries in table.items():
            for fmt in group:
                out += [f"{fmt}: {key}" for key in entries if key not in raw[fmt]]
    return sorted(out)


def classify_all(raw: dict[str, dict[str, object]]) -> dict[str, dict[str, tuple[str, object, str]]]:
    """fmt -> key -> (class, default, why), for every key of every format; raises on a key no entry or rule
    classifies, a key named twice, or a named key the inventory does not have."""
    missing = stale(raw)
    if missing:
        raise ValueError("classes.py names keys the sources do not have: " + ", ".join(missing))
    out: dict[str, dict[str, tuple[str, object, str]]] = {}
    unclassified = []
    for fmt in FORMATS:
        named = _named(fmt)
        out[fmt] = {}
        for key in sorted(raw[fmt]):
            if key in named:
                kind, why = named[key]
            elif (why := _rule(fmt, key)) is not None:
                kind = "inert"
            else:
                unclassified.append(f"{fmt}: {key}")
                continue
            out[fmt][key] = (kind, raw[fmt][key], why)
    if unclassified:
        raise ValueError(f"{len(unclassified)} keys classified by no entry or rule of classes.py: "
                         + ", ".join(unclassified))
    return out


def as_modelled(table: dict[str, dict[str, tuple[str, object, str]]]) -> dict[str, dict[str, list]]:
    """fmt -> key -> the values of a not-modelled key that the step model assumes (classes.AS_MODELLED); raises on a
    key that is not classified not_modelled in that format."""
    out: dict[str, dict[str, list]] = {}
    for group, entries in getattr(classes, "AS_MODELLED", {}).items():
        for fmt in group:
            for key, (values, _why) in entries.items():
                if table[fmt].get(key, ("",))[0] != "not_modelled":
                    raise ValueError(f"classes.AS_MODELLED names {fmt}: {key!r}, which is not classified not_modelled")
                out.setdefault(fmt, {})[key] = list(values)
    return out


def simple_type(annotation: str) -> str | None:
    """"bool", "int" or "float" when a field's annotation admits only that (and None), else None: what a recipe's
    value can be checked against without guessing (`bool | Literal[...]`, strings, lists are not checked)."""
    text = annotation.replace(" ", "")
    for wrapper in ("Optional[", "Union["):
        while wrapper in text:
            start = text.index(wrapper)
            depth, end = 0, start + len(wrapper) - 1
            for end in range(start + len(wrapper) - 1, len(text)):
                depth += {"[": 1, "]": -1}.get(text[end], 0)
                if depth == 0:
                    break
            text = text[:start] + text[start + len(wrapper):end].replace(",", "|") + "|None" * (wrapper == "Optional[") + text[end + 1:]
    if "[" in text:
        return None
    names = {name for name in text.split("|") if name not in ("None", "NoneType")}
    if names == {"bool"}:
        return "bool"
    if names == {"int"}:
        return "int"
    if names in ({"float"}, {"int", "float"}):
        return "float"
    return None


def step_only(table: dict[str, dict[str, tuple[str, object, str]]]) -> dict[str, list[str]]:
    """fmt -> the not-modelled keys whose effect is on the step's transient memory only (classes.STEP_ONLY and
    STEP_ONLY_WHYS): set, they leave the model-state figure exact."""
    out: dict[str, list[str]] = {}
    named = {fmt: set() for fmt in FORMATS}
    for group, keys in getattr(classes, "STEP_ONLY", {}).items():
        for fmt in group:
            named[fmt].update(keys)
    whys = getattr(classes, "STEP_ONLY_WHYS", ())
    for fmt in FORMATS:
        found = sorted(key for key, (kind, _, why) in table[fmt].items() if kind == "not_modelled" and (
            key in named[fmt] or any(why.startswith(text) for text in whys)))
        if found:
            out[fmt] = found
    return out


def _dict_text(name: str, value: dict, annotation: str = "") -> str:
    """`name = {...}`; `annotation`: its declared type, where mypy would infer a looser one from the literal."""
    declared = f": {annotation}" if annotation else ""
    return f"{name}{declared} = {pprint.pformat(value, width=120, sort_dicts=True)}\n"


def render(sources: dict[str, str], raw: dict[str, dict[str, object]], handbook_own: frozenset[str],
           types: dict[str, dict[str, str]] | None = None) -> str:
    table = classify_all(raw)
    counts = {fmt: {kind: sum(1 for entry in table[fmt].values() if entry[0] == kind) for kind in CLASSES}
              for fmt in FORMATS}
    header = (
        '"""GENERATED by benchmarks/recipe_keys/generate.py from the sources below and the hand-written\n'
        "classification benchmarks/recipe_keys/classes.py: do not edit. Per format, every key the tool reads:\n"
        "(class, default as the source declares it (None: absent or not a literal), why).\n\n"
        + "".join(f"{fmt}: {sources[fmt]}\n" for fmt in FORMATS)
        + "\nCounts (modelled / inert / not_modelled): "
        + "; ".join(f"{fmt} {c['modelled']} / {c['inert']} / {c['not_modelled']}" for fmt, c in counts.items())
        + '\n"""\n\n'
    )
    body = (
        "from __future__ import annotations\n\n"
        "from zeromem_lsp.configs import key_inventory_api as _api\n\n"
        f"FORMATS = {FORMATS!r}\n\n"
        + _dict_text("SOURCES", sources) + "\n"
        + "#: alignment-handbook's own keys (beside TRL's and Transformers')\n"
        + f"HANDBOOK_OWN = frozenset({sorted(handbook_own)!r})\n\n"
        + "#: format -> key -> (class, default, why)\n"
        + _dict_text("INVENTORY", table, "dict[str, dict[str, _api.Entry]]") + "\n"
        + "#: the raw facts, format -> key -> default as declared: what the generator read (derived, not stored twice)\n"
        + "RAW = _api.defaults(INVENTORY)\n\n"
        + "#: recipe format -> key -> the type its annotation admits (bool / int / float, None allowed): simple_type\n"
        + _dict_text("TYPES", types or {}) + "\n"
        + "#: format -> the not-modelled keys that change only the step's transient memory, not P, G, O\n"
        + _dict_text("STEP_ONLY", step_only(table)) + "\n"
        + "#: format -> key -> the values of a not-modelled key that the step model assumes (classes.AS_MODELLED)\n"
        + _dict_text("AS_MODELLED", as_modelled(table), "dict[str, dict[str, list[object]]]") + "\n"
        + "\n\ndef classify(fmt: str, key: str) -> tuple[str, object, str] | None:\n"
        + '    """(class, default, why) of `key` in `fmt` (a dotted path for nested keys), or None when unknown."""\n'
        + "    return _api.classify(INVENTORY, fmt, key)\n\n\n"
        + "def changes_model_state(fmt: str, key: str) -> bool:\n"
        + '    """Whether a not-modelled key may change the model state P, G, O (not only the step\'s transient memory)."""\n'
        + "    return key not in STEP_ONLY.get(fmt, ())\n\n\n"
        + "def not_modelled(fmt: str, data: dict) -> list[tuple[tuple[str, ...], object, str]]:\n"
        + '    """(key path, value, why) of each key set in `data` to a value other than its default that affects\n'
        + '    per-GPU memory but is not modelled, in document order (key_inventory_api.not_modelled)."""\n'
        + "    return _api.not_modelled(INVENTORY, fmt, data, AS_MODELLED.get(fmt, {}))\n"
    )
    return header + body
