"""Completion of keys and enum values in DeepSpeed sections and the `zeromem` block, with docs."""

from __future__ import annotations

import json
from dataclasses import dataclass

from zeromem_lsp.analysis import Analysis
from zeromem_lsp.assist.cursor import Cursor, KeyPath, cursor_at
from zeromem_lsp.assist.key_docs import key_doc, setting_values
from zeromem_lsp.configs.deepspeed.catalog import field_doc, section_keys
from zeromem_lsp.configs.settings import SETTING_NAMES
from zeromem_lsp.memory.stages import ALL as ALL_STAGES
from zeromem_lsp.memory.plan import MemoryPlan
from zeromem_lsp.present import per_gpu_summary

STAGE_PATH = ("zero_optimization", "stage")


@dataclass(frozen=True)
class Candidate:
    """One completion: replace [start, end) with `new_text`."""

    label: str
    kind: str  # "key" | "value"
    start: int
    end: int
    new_text: str
    detail: str = ""
    documentation: str = ""
    deprecated: bool = False
    sort_text: str = ""
    filter_text: str | None = None


def complete(analysis: Analysis, offset: int) -> list[Candidate]:
    cursor = cursor_at(analysis, offset)
    if cursor is None:
        return []
    if cursor.object_path is not None:
        return key_candidates(analysis, cursor, offset)
    if cursor.location.in_value and cursor.member_path:
        return value_candidates(analysis, cursor, offset)
    return []


def keys_at(path: KeyPath) -> list[str]:
    if path == ():
        return [*section_keys(()), "zeromem"]
    if path == ("zeromem",):
        return list(SETTING_NAMES)
    return section_keys(path)


def key_candidates(analysis: Analysis, cursor: Cursor, offset: int) -> list[Candidate]:
    path = cursor.object_path or ()
    location = cursor.location
    typed = location.member if location.in_key else None
    container = location.object_node
    present = {m.key for m in (container.members or []) if m is not typed} if container is not None else set()
    if typed is not None:
        start, end = typed.key_start, typed.key_end
        suffix = "" if typed.colon is not None else ": "
        quoted = analysis.text[start : start + 1] in ('"', "'")
    else:
        start = end = offset
        suffix, quoted = ": ", False
    candidates = []
    for index, key in enumerate(keys_at(path)):
        if key in present:
            continue
        doc = field_doc((*path, key)) if path[:1] != ("zeromem",) else None
        candidates.append(Candidate(
            label=key,
            kind="key",
            start=start,
            end=end,
            new_text=json.dumps(key) + suffix,
            detail=doc.type.replace(" | NoneType", "") if doc else ("zeromem setting" if path == ("zeromem",) else ""),
            documentation=key_doc((*path, key), analysis.settings),
            deprecated=bool(doc and doc.is_deprecated),
            sort_text=f"{index:04d}",
            filter_text=json.dumps(key) if quoted else key,
        ))
    return candidates


def _values(analysis: Analysis, path: KeyPath) -> list[tuple[object, str]]:
    """(value, detail) pairs for the value at `path`."""
    plan = analysis.plan
    if path == STAGE_PATH:
        figures = plan.placement.gpu if isinstance(plan, MemoryPlan) else {}
        budget = plan.gpu_memory if isinstance(plan, MemoryPlan) else None
        return [(stage.number, stage.label + (f" {per_gpu_summary(figures[stage.key], budget)}" if figures else ""))
                for stage in ALL_STAGES]
    if path[0] == "zeromem":
        return [(value, "zeromem") for value in setting_values(path[-1])] if len(path) == 2 else []
    doc = field_doc(path)
    if doc is None:
        return []
    if doc.enum_values:
        return [(value, doc.type) for value in doc.enum_values]
    if "boolean" in doc.type.split(" | "):
        return [(True, "boolean"), (False, "boolean")]
    return []


def value_candidates(analysis: Analysis, cursor: Cursor, offset: int) -> list[Candidate]:
    member = cursor.location.member
    path = cursor.member_path or ()
    value = member.value if member is not None else None
    if value is not None and value.kind in ("object", "array"):
        return []
    start, end = (value.start, value.end) if value is not None else (offset, offset)
    space = " " if value is None and analysis.text[offset - 1 : offset] == ":" else ""
    documentation = key_doc(path, analysis.settings)
    return [
        Candidate(label=json.dumps(item), kind="value", start=start, end=end, new_text=space + json.dumps(item),
                  detail=detail, documentation=documentation, sort_text=f"{index:04d}")
        for index, (item, detail) in enumerate(_values(analysis, path))
    ]
