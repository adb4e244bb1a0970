"""ZM101-ZM105: the memory plan against the declared budget, and the zeromem settings themselves."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import cast

from zeromem_lsp.configs.training import implied_world_size
from zeromem_lsp.document import Document, Member
from zeromem_lsp.edits import insert_member, replace_value, set_value
from zeromem_lsp.memory.stages import stage as stage_named
from zeromem_lsp.findings import Finding, Fix, TextEdit, overlapping
from zeromem_lsp.memory.plan import MODEL_SIZE, MemoryPlan, Suggestion, Unplanned
from zeromem_lsp.present import (
    approximation_note, describe_suggestion, no_fit, percent_of, settings_elsewhere, stage_label,
)
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


def micro_batch_edits(context: Context, micro, size: int) -> tuple[list[TextEdit], str] | None:
    """Set the micro-batch (a Given with its path) to `size`, dividing it by a whole factor k, and multiply
    gradient_accumulation_steps by k so the global batch stays; (edits, title) or None when it cannot."""
    if micro is None or micro.path is None or not context.exists(micro.path) or micro.value % size:
        return None
    factor = micro.value // size
    if micro.path[0] == "zeromem":  # a declaration, not what the launcher reads: the script must match it
        edit = set_value(context.document, micro.path, str(size))
        return ([edit], f"Declare the micro-batch {size} (and run the script with it)") if edit is not None else None
    verb = "Halve the micro-batch" if factor == 2 else f"Divide the micro-batch by {factor}"
    more = "double" if factor == 2 else f"multiply by {factor}"
    accumulation_path = (*micro.path[:-1], "gradient_accumulation_steps")
    container = context.data
    for step in micro.path[:-1]:
        container = container.get(step) if isinstance(container, dict) else None
    written = container.get("gradient_accumulation_steps") if isinstance(container, dict) else None
    found = [set_value(context.document, micro.path, str(size))]
    if written is None and isinstance(container, dict) and "train_batch_size" in container:
        title = f"{verb} to {size} (DeepSpeed {'doubles' if factor == 2 else 'multiplies'} the derived accumulation)"
    elif written is None or (isinstance(written, int) and not isinstance(written, bool) and written > 0):
        steps = 1 if written is None else written
        found.append(set_value(context.document, accumulation_path, str(factor * steps)))
        title = f"{verb} to {size} and {more} gradient accumulation to {factor * steps} (global batch unchanged)"
    else:
        return None
    edits = [edit for edit in found if edit is not None]
    if len(edits) != len(found) or overlapping(edits):
        return None
    return edits, title


def _with_micro_batch(context: Context, plan: MemoryPlan, suggestion: Suggestion, fixes: tuple[Fix, ...]):
    """The stage / offload fixes plus the smaller micro-batch the suggestion needs (none when it cannot be set)."""
    if suggestion.micro_batch is None:
        return fixes
    micro = plan.peak.inputs.get("micro_batch") if plan.peak is not None else None
    found = micro_batch_edits(context, micro, suggestion.micro_batch)
    if found is None:
        return ()
    edits, title = found
    merged = tuple(Fix(f"{fix.title}; {title[0].lower()}{title[1:]}", (*fix.edits, *edits), preferred=fix.preferred)
                   for fix in fixes)
    if any(overlapping(list(fix.edits)) for fix in merged):
        return ()
    return merged or (Fix(title, tuple(edits), preferred=True),)


def checkpointing_edit(context: Context) -> tuple[TextEdit, str] | None:
    """Switch gradient checkpointing on where the file says it (a recipe's key; LLaMA-Factory's
    `disable_gradient_checkpointing` set to false), or declare it in the zeromem block (the training script must
    then enable it): (edit, title), or None when it cannot be written."""
    # a key path: a bool setting's keys, no list index in it
    path = cast("tuple[str, ...] | None", context.workload.checkpointing_path) or ("zeromem", "gradient_checkpointing")
    value = "false" if path[-1] == "disable_gradient_checkpointing" else "true"
    edit = set_value(context.document, path, value)
    if edit is None:
        return None
    title = ("Enable gradient checkpointing" if context.workload.checkpointing_path else
             "Declare gradient checkpointing (and enable it in the training script)")
    return edit, title


def _with_checkpointing(context: Context, suggestion: Suggestion, fixes: tuple[Fix, ...]) -> tuple[Fix, ...]:
    """The fixes plus switching gradient checkpointing on, when the suggestion needs it (none when it cannot be
    written)."""
    if not suggestion.checkpointing:
        return fixes
    found = checkpointing_edit(context)
    if found is None:
        return ()
    edit, title = found
    merged = tuple(Fix(f"{fix.title}; {title[0].lower()}{title[1:]}", (*fix.edits, edit), preferred=fix.preferred)
                   for fix in fixes)
    if any(overlapping(list(fix.edits)) for fix in merged):
        return ()
    return merged or (Fix(title, (edit,), preferred=True),)


def suggestion_fixes(context: Context, plan: MemoryPlan, suggestion: Suggestion | None) -> tuple[Fix, ...]:
    if suggestion is None:
        return ()
    return _with_checkpointing(context, suggestion, _lever_fixes(context, plan, suggestion))


def _lever_fixes(context: Context, plan: MemoryPlan, suggestion: Suggestion) -> tuple[Fix, ...]:
    """The stage, offload and micro-batch edits of a suggestion."""
    delegated = fsdp_rules.suggestion_fixes(context, plan, suggestion)
    if delegated is not None:
        return _with_micro_batch(context, plan, suggestion, delegated)
    updates: dict[str, str] = {}
    if suggestion.stage != plan.stage:
        updates["stage"] = str(stage_named(suggestion.stage).number)
    if suggestion.offload.optimizer and not plan.offload.optimizer:
        updates["offload_optimizer"] = '{"device": "cpu"}'
    if suggestion.offload.param and not plan.offload.param:
        updates["offload_param"] = '{"device": "cpu"}'
    edits = zero_edits(context.document, updates) if updates else None
    if updates and (not edits or overlapping(edits)):
        return ()
    fixes = (Fix(f"Switch to {describe_suggestion(suggestion, plan.family)}", tuple(edits), preferred=True),) if edits \
        else ()
    return _with_micro_batch(context, plan, suggestion, fixes)


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


def state_exceeds(plan: MemoryPlan) -> bool:
    """ZM101's case: the chosen stage's model state is over the budget and the verdict rests on it. Every verdict
    follows the peak when it is known: a peak below the model state (LoRA's frozen base; the experts or shards N-D
    divides; DeepSpeed's bucketed gradients) says the step never holds that figure at once, so the peak judges
    (ZM106), whether it fits or not; a peak at or above the model state holds all of it."""
    if not plan.exceeds:
        return False
    peak = plan.known_peak
    total = peak.at(plan.chosen) if peak is not None else None
    return total is None or total >= plan.gpu_bytes


def budget_findings(context: Context) -> Iterator[Finding]:
    plan = context.plan
    budget = context.settings.gpu_memory
    if budget is None:
        return
    if isinstance(plan, Unplanned):
        # a recipe's unreadable model has its own finding, naming the model and every place looked
        missing = "; ".join(item for item in plan.missing if not (context.model_unread and item.startswith(MODEL_SIZE)))
        if not missing:
            return
        path = _budget_span_path(context, context.setup.stage_path)
        yield context.finding(NOT_COMPUTABLE, f"cannot check the {format_bytes(budget)} GPU budget: missing {missing}", path)
        return
    path = _budget_span_path(context, plan.stage_path)
    label = stage_label(plan.chosen, plan.family)
    figure = plan.gpu_bytes
    if state_exceeds(plan):
        excess = figure - budget
        suggestion = plan.cheapest_fit()
        judged = "whose peak fits" if plan.peak_known else "that fits"
        advice = (
            f"the cheapest {judged} is {describe_suggestion(suggestion, plan.family)}"
            if suggestion
            else no_fit(plan.family, plan.peak_known)
        )
        elsewhere = settings_elsewhere(context.planned_setup, plan, suggestion)
        advice += f"; {elsewhere}" if elsewhere else ""
        approximate = approximation_note(plan) if plan.state_approximate else ""
        yield context.finding(
            EXCEEDS,
            f"{label} needs {format_bytes(figure)} per GPU ({format_count(figure)} B) for model state, "
            f"{format_bytes(excess)} over the {format_bytes(budget)} budget; {advice}"
            + (f" ({approximate})" if approximate else ""),
            path,
            fixes=suggestion_fixes(context, plan, suggestion),
            lesser=plan.state_approximate,  # keys that change only the step's transient memory leave it exact
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
