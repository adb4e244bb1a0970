"""ZM101-ZM105: the memory plan against the declared budget, and the zeromem settings themselves."""

from __future__ import annotations

from collections.abc import Iterator

from zeromem_lsp.configs.training import implied_world_size
from zeromem_lsp.edits import set_value
from zeromem_lsp.estimate import STAGE_LABELS, STAGE_NUMBERS
from zeromem_lsp.findings import Finding, Fix
from zeromem_lsp.plan import MemoryPlan, Suggestion, Unplanned
from zeromem_lsp.present import percent_of
from zeromem_lsp.rules.context import Context
from zeromem_lsp.units import format_bytes


def _budget_span_path(context: Context, plan_stage_path):
    if plan_stage_path is not None:
        return plan_stage_path
    if context.exists(("zeromem", "gpu_memory")):
        return ("zeromem", "gpu_memory")
    return None


def describe_suggestion(suggestion: Suggestion) -> str:
    offload = suggestion.offload
    text = STAGE_LABELS[suggestion.stage]
    if offload.optimizer or offload.param:
        text += f" with {offload.describe()}"
    return f"{text} ({format_bytes(suggestion.gpu_bytes)}/GPU)"


def _suggestion_fixes(context: Context, plan: MemoryPlan, suggestion: Suggestion | None) -> tuple[Fix, ...]:
    if suggestion is None:
        return ()
    edits = []
    number = STAGE_NUMBERS[suggestion.stage]
    if suggestion.stage != plan.stage:
        edits.append(set_value(context.document, ("zero_optimization", "stage"), str(number)))
    if suggestion.offload.optimizer and not plan.offload.optimizer:
        edits.append(set_value(context.document, ("zero_optimization", "offload_optimizer"), '{"device": "cpu"}'))
    if suggestion.offload.param and not plan.offload.param:
        edits.append(set_value(context.document, ("zero_optimization", "offload_param"), '{"device": "cpu"}'))
    if not edits or any(edit is None for edit in edits) or len(edits) > 1 and _overlap(edits):
        return ()
    return (Fix(f"Switch to {describe_suggestion(suggestion)}", tuple(edits), preferred=True),)


def _overlap(edits) -> bool:
    ordered = sorted(edits, key=lambda e: e.start)
    return any(a.end > b.start or (a.start == b.start == a.end == b.end) for a, b in zip(ordered, ordered[1:]))


def budget_findings(context: Context) -> Iterator[Finding]:
    plan = context.plan
    budget = context.settings.gpu_memory
    if budget is None:
        return
    if isinstance(plan, Unplanned):
        missing = "; ".join(plan.missing)
        path = _budget_span_path(context, context.setup.stage_path)
        yield context.finding("ZM103", f"cannot check the {format_bytes(budget)} GPU budget: missing {missing}", path)
        return
    path = _budget_span_path(context, plan.stage_path)
    label = STAGE_LABELS[plan.stage]
    figure = plan.gpu_bytes
    if plan.exceeds:
        excess = figure - budget
        suggestion = plan.cheapest_fit()
        advice = (
            f"the cheapest that fits is {describe_suggestion(suggestion)}"
            if suggestion
            else "nothing fits even with ZeRO-3 and full offload; add GPUs"
        )
        yield context.finding(
            "ZM101",
            f"{label} needs {format_bytes(figure)} per GPU ({figure:,} B) for model state, "
            f"{format_bytes(excess)} over the {format_bytes(budget)} budget; {advice}",
            path,
            fixes=_suggestion_fixes(context, plan, suggestion),
        )
    elif plan.near_budget:
        yield context.finding(
            "ZM102",
            f"{label} needs {format_bytes(figure)} per GPU ({figure:,} B), {percent_of(figure, budget)} of the "
            f"{format_bytes(budget)} budget (warn above {plan.warn_fraction:g}); activations come on top",
            path,
        )


def world_size_findings(context: Context) -> Iterator[Finding]:
    declared = context.settings.world_size
    implied = implied_world_size(context.setup)
    if declared is None or implied is None or declared == implied or not context.exists(("zeromem", "world_size")):
        return
    setup = context.setup
    yield context.finding(
        "ZM105",
        f"world_size {declared} contradicts the batch sizes: train_batch_size {setup.train_batch_size} / "
        f"(micro {setup.micro_batch_size} × accumulation {setup.gradient_accumulation_steps}) = {implied}",
        ("zeromem", "world_size"),
    )


def check(context: Context) -> Iterator[Finding]:
    yield from world_size_findings(context)
    yield from budget_findings(context)
