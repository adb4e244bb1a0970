"""Inlay hint after the ZeRO stage value (in a recipe, after its model): `≈ 16.6 GiB/GPU · 69% of 24.0 GiB`
(the CLI's figure)."""

from __future__ import annotations

from dataclasses import dataclass

from zeromem_lsp.analysis import Analysis
from zeromem_lsp.document import Member
from zeromem_lsp.memory.plan import MemoryPlan
from zeromem_lsp.present import peak_sum, per_gpu_summary, percent_of, stage_label
from zeromem_lsp.units import format_bytes, format_count


@dataclass(frozen=True)
class InlayLabel:
    offset: int
    label: str
    tooltip: str


def inlay_hints(analysis: Analysis, start: int, end: int) -> list[InlayLabel]:
    """The per-GPU figure after the stage value, if it lies within [start, end]."""
    plan = analysis.plan
    if not isinstance(plan, MemoryPlan) or analysis.document is None:
        return []
    anchor = plan.stage_path
    if anchor is None and analysis.recipe is not None:  # a recipe: after the model it names
        named = analysis.origins.get("parameters")
        anchor = named.path if named is not None else None
    if anchor is None:
        return []
    member = analysis.document.find(anchor)
    if not isinstance(member, Member):
        return []
    value = member.value
    if value is None:
        offset = member.key_end
    elif value.kind == "object":  # `"zero_optimization": {` without a stage: DeepSpeed's default 0
        offset = value.start + 1
    else:
        offset = value.end
    if not start <= offset <= end:
        return []
    label = per_gpu_summary(plan.gpu_bytes, plan.gpu_memory)
    if plan.host_bytes:
        label += f" + {format_bytes(plan.host_bytes)} host"
    tooltip = (f"{stage_label(plan.chosen, plan.family)}: {format_count(plan.gpu_bytes)} B of model state per GPU "
               "(parameters, gradients, optimizer state). Hover the stage (in a recipe, its model or deepspeed key) "
               "for every stage and the inputs.")
    peak = plan.peak.at(plan.chosen) if plan.peak is not None else None
    if peak is not None:
        label += f" · peak ≈ {format_bytes(peak)}"
        if plan.gpu_memory:
            label += f" ({percent_of(peak, plan.gpu_memory)})"
        tooltip += f" Peak: {peak_sum(plan.peak, plan.chosen)}."
    return [InlayLabel(offset, label, tooltip)]
