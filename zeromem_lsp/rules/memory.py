"""ZM101-ZM105: the memory plan against the declared budget, and the zeromem settings themselves."""

from __future__ import annotations

import json
from collections.abc import Iterator

from zeromem_lsp.configs.training import implied_world_size
from zeromem_lsp.document import Document, Member
from zeromem_lsp.edits import insert_member, replace_value, set_value
from zeromem_lsp.memory.stages import stage as stage_named
from zeromem_lsp.findings import Finding, Fix, TextEdit, overlapping
from zeromem_lsp.memory.plan import MemoryPlan, Suggestion, Unplanned
from zeromem_lsp.present import describe_suggestion, percent_of, stage_label
from zeromem_lsp.rules import fsdp as fsdp_rules
from zeromem_lsp.rules.context import Context
from zeromem_lsp.rules.registry import rule

EXCEEDS, NEAR, NOT_COMPUTABLE, WORLD_SIZE_CONFLICT = rule("ZM101"), rule("ZM102"), rule("ZM103"), rule("ZM105")
from zeromem_lsp.units import format_bytes, format_count


def _budget_span_path(context: Context, plan_stage_path):
    if plan_stage_path is not None:
        return plan_stage_path
    written = context.origins.get("gpu_memory")  # a budget declared in this file's block: there
    if written is not None and written.path is not None and context.exists(written.path):
        return written.path
    return None


def _suggestion_fixes(context: Context, plan: MemoryPlan, suggestion: Suggestion | None) -> tuple[Fix, ...]:
    if suggestion is None:
        return ()
    delegated = fsdp_rules.suggestion_fixes(context, plan, suggestion)
    if delegated is not None:
        return delegated
    updates: dict[str, str] = {}
    if suggestion.stage != plan.stage:
        updates["stage"] = str(stage_named(suggestion.stage).number)
    if suggestion.offload.optimizer and not plan.offload.optimizer:
        updates["offload_optimizer"] = '{"device": "cpu"}'
    if suggestion.offload.param and not plan.offload.param:
        updates["offload_param"] = '{"device": "cpu"}'
    edits = zero_edits(context.document, updates) if updates else None
    if not edits or overlapping(edits):
        return ()
    return (Fix(f"Switch to {describe_suggestion(suggestion, plan.family)}", tuple(edits), preferred=True),)


def zero_edits(document: Document, updates: dict[str, str]) -> list[TextEdit] | None:
    """Set keys of zero_optimization: replace those present, insert the missing ones in one edit."""
    section = document.find(("zero_optimization",))
    container = section.value if isinstance(section, Member) else None
    if container is None or container.kind != "object" or not container.members:
        body = ", ".join(f"{json.dumps(key)}: {value}" for key, value in updates.items())
        edit = set_value(document, ("zero_optimization",), "{" + body + "}")
        return [edit] if edit is not None else None
    edits, inserts = [], []
    for key, value in updates.items():
        member = container.get(key)
        if member is not None:
            edits.append(replace_value(member, value))
        else:  # every insertion lands after the last member: join them into one edit
            inserts.append(insert_member(document, container, key, value))
    if inserts:
        edits.append(TextEdit(inserts[0].start, inserts[0].end, "".join(edit.new_text for edit in inserts)))
    return edits


def budget_findings(context: Context) -> Iterator[Finding]:
    plan = context.plan
    budget = context.settings.gpu_memory
    if budget is None:
        return
    if isinstance(plan, Unplanned):
        missing = "; ".join(plan.missing)
        path = _budget_span_path(context, context.setup.stage_path)
        yield context.finding(NOT_COMPUTABLE, f"cannot check the {format_bytes(budget)} GPU budget: missing {missing}", path)
        return
    path = _budget_span_path(context, plan.stage_path)
    label = stage_label(plan.stage, plan.family)
    figure = plan.gpu_bytes
    if plan.exceeds:
        excess = figure - budget
        suggestion = plan.cheapest_fit()
        advice = (
            f"the cheapest that fits is {describe_suggestion(suggestion, plan.family)}"
            if suggestion
            else "nothing fits even with ZeRO-3 and full offload; add GPUs"
        )
        yield context.finding(
            EXCEEDS,
            f"{label} needs {format_bytes(figure)} per GPU ({format_count(figure)} B) for model state, "
            f"{format_bytes(excess)} over the {format_bytes(budget)} budget; {advice}",
            path,
            fixes=_suggestion_fixes(context, plan, suggestion),
        )
    elif plan.near_budget:
        yield context.finding(
            NEAR,
            f"{label} needs {format_bytes(figure)} per GPU ({format_count(figure)} B), {percent_of(figure, budget)} of the "
            f"{format_bytes(budget)} budget (warn above {plan.warn_fraction:g}); activations come on top",
            path,
        )


def world_size_findings(context: Context) -> Iterator[Finding]:
    block = context.data.get("zeromem") if isinstance(context.data, dict) else None
    declared = block.get("world_size") if isinstance(block, dict) else None  # the file's own value
    implied = implied_world_size(context.setup)
    if type(declared) is not int or implied is None or declared == implied:
        return
    setup = context.setup
    yield context.finding(
        WORLD_SIZE_CONFLICT,
        f"world_size {declared} contradicts the batch sizes: train_batch_size {setup.train_batch_size} / "
        f"(micro {setup.micro_batch_size} × accumulation {setup.gradient_accumulation_steps}) = {implied}",
        ("zeromem", "world_size"),
    )


def check(context: Context) -> Iterator[Finding]:
    yield from world_size_findings(context)
    yield from budget_findings(context)
