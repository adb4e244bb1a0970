"""ZM106: the chosen stage's model state fits the budget but its peak does not; ZM103 when a peak was asked
for (a sequence length is known) but an input is missing. ZM101 stays the model-state error."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from typing import TypeVar, cast

from zeromem_lsp.findings import Finding, Fix, overlapping
from zeromem_lsp.memory.peak import MODEL_UNCERTAINTY, Peak
from zeromem_lsp.memory.optimizer_step import STATE_PARTS as OPTIMIZER_STATES
from zeromem_lsp.memory.plan import MemoryPlan
from zeromem_lsp.provenance import Given, Path
from zeromem_lsp.present import approximation_note, describe_suggestion, no_fit, peak_sum, stage_label
from zeromem_lsp.rules.context import Context
from zeromem_lsp.rules.memory import (checkpointing_edit, micro_batch_edits, state_exceeds, suggestion_fixes,
                                     zero_edits)
from zeromem_lsp.rules.registry import rule
from zeromem_lsp.units import format_bytes

PEAK_EXCEEDS, NOT_COMPUTABLE = rule("ZM106"), rule("ZM103")
#: Parts of a phase that grow with the tokens per micro-batch (micro-batch × sequence length).
ACTIVATION_PARTS = ("activations", "logits", "fp32 logits copy", "log-softmax gradients", "recomputed layer",
                    "layer backward", "logits gradient", "embedding gradient")
#: Parts of a phase that a zero_optimization size bounds, with those sizes (largest first in the config).
BUCKET_PARTS = {"reduce bucket": ("reduce_bucket_size",), "bucket copy": ("reduce_bucket_size",),
                "gathered parameters": ("stage3_prefetch_bucket_size", "stage3_max_live_parameters",
                                        "stage3_max_reuse_distance")}
#: The persistent state in a phase: the model state's own shares, not a driver of the peak.
STATE_PARTS = ("parameters", "fp32 master", *OPTIMIZER_STATES, "gradient partitions", "gradients")


def _driver_path(context: Context, plan: MemoryPlan, peak: Peak, largest: str) -> Path | None:
    """Where the value that drives the largest component is written: micro-batch, sequence length, a bucket."""
    candidates: list[Given | None] = []
    if largest in ACTIVATION_PARTS:
        candidates = [peak.inputs.get("micro_batch"), peak.inputs.get("sequence_length")]
    elif largest in BUCKET_PARTS:
        candidates = [context.workload.zero.get(name) for name in BUCKET_PARTS[largest]]
    for item in candidates:
        if item is not None and item.path is not None and context.exists(item.path):
            return item.path
    return plan.stage_path


def _halve_micro_batch(context: Context, peak: Peak) -> Fix | None:
    micro = peak.inputs.get("micro_batch")
    if micro is None or not isinstance(micro.value, int) or micro.value % 2:
        return None
    found = micro_batch_edits(context, micro, micro.value // 2)
    if found is None:
        return None
    edits, title = found
    return Fix(title, tuple(edits))


def _enable_checkpointing(context: Context, peak: Peak) -> Fix | None:
    current = peak.inputs.get("gradient_checkpointing")
    if current is not None and current.value:
        return None
    found = checkpointing_edit(context)
    return Fix(found[1], (found[0],)) if found is not None else None


#: Per Peak (by identity, while it lives): what was derived from it here, so that a plan reused across keystrokes
#: (analysis.Memo) is not searched again. Peak is unhashable (its fields hold dicts), hence id + a weak reference.
_DERIVED: dict[int, tuple[weakref.ref[Peak], dict[tuple[object, ...], object]]] = {}
T = TypeVar("T")


def _derived(peak: Peak | None, key: tuple[object, ...], make: Callable[[], T]) -> T:
    """`make()`, once per live `peak` and `key`."""
    if peak is None:
        return make()
    ident = id(peak)
    entry = _DERIVED.get(ident)
    if entry is None or entry[0]() is not peak:

        def forget(_: object, ident: int = ident) -> None:
            _DERIVED.pop(ident, None)

        try:
            reference = weakref.ref(peak, forget)
        except TypeError:  # not weakly referable: nothing is kept
            return make()
        entry = _DERIVED[ident] = (reference, {})
    found = entry[1]
    if key not in found:
        found[key] = make()
    return cast(T, found[key])


def shrunk_bucket_size(plan: MemoryPlan, budget: int) -> int | None:
    """The largest element count which, given to every bucket of the chosen ZeRO stage, brings its peak within
    the budget (exact: a bisection over the phase model, whose peak grows with the bucket sizes); searched once
    per peak, stage and budget."""
    return _derived(plan.peak, ("shrunk_bucket_size", plan.stage, budget), lambda: _search_bucket_size(plan, budget))


def _search_bucket_size(plan: MemoryPlan, budget: int) -> int | None:
    peak, stage = plan.peak, plan.chosen
    if peak is None or not peak.buffers:
        return None

    def fits(size: int) -> bool:
        sizes = {"reduce_bucket_size": size, "allgather_bucket_size": size, "stage3_prefetch_bucket_size": size}
        total = peak.with_zero(sizes).at(stage)
        return total is not None and total <= budget

    if not fits(1):
        return None
    low, high = 1, max(part.elements for part in peak.buffers[stage].parts)
    while low < high:  # the largest size with a peak within the budget
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    return low


def _shrink_buckets(context: Context, plan: MemoryPlan, peak: Peak, budget: int) -> Fix | None:
    if plan.family != "deepspeed" or context.workload.zero_root != () or not peak.buffers:
        return None
    size = shrunk_bucket_size(plan, budget)
    if size is None:
        return None
    names = [part.name for part in peak.buffers[plan.chosen].parts if part.name != "stage3_max_live_parameters"]
    edits = zero_edits(context.document, {name: str(size) for name in names})
    if not edits or overlapping(edits):
        return None
    return Fix(f"Shrink {' and '.join(names)} to {size:,} elements", tuple(edits))


def check(context: Context) -> Iterator[Finding]:
    plan, budget = context.plan, context.settings.gpu_memory
    if budget is None or not isinstance(plan, MemoryPlan) or plan.peak is None or state_exceeds(plan):
        return
    peak, stage = plan.peak, plan.chosen
    label = stage_label(stage, plan.family)
    if peak.missing:
        if peak.inputs.get("sequence_length") is not None:
            yield context.finding(NOT_COMPUTABLE, f"cannot check the peak of {label} against the "
                                  f"{format_bytes(budget)} budget: missing {'; '.join(peak.missing)}", plan.stage_path)
        return
    total = peak.at(stage)
    unknown = peak.unknown(stage)
    if total is None and unknown is not None:
        blamed = peak.unknown_input(stage)
        where = blamed.path if blamed is not None and blamed.path is not None and context.exists(blamed.path) \
            else plan.stage_path
        yield context.finding(NOT_COMPUTABLE, f"cannot check the peak of {label} against the {format_bytes(budget)} "
                              f"budget: {unknown}; only the model state is checked", where)
        return
    if total is None or total <= budget:
        return
    within = total <= budget * (1 + MODEL_UNCERTAINTY)  # exact: MODEL_UNCERTAINTY is a Fraction
    approximate = approximation_note(plan)
    margin = (f"within the model's ±{MODEL_UNCERTAINTY * 100}% uncertainty" if within else
              f"beyond the model's ±{MODEL_UNCERTAINTY * 100}% uncertainty, but the figure is approximate" if approximate
              else f"beyond the model's ±{MODEL_UNCERTAINTY * 100}% uncertainty: the run is expected to fail")
    state = (f"though its model state ({format_bytes(peak.state[stage])}) fits" if not plan.exceeds else
             f"below its model state ({format_bytes(peak.state[stage])}: P, G and O held together, which the step "
             "never does at full size)")
    found = peak.stage_peak(stage)
    assert found is not None  # `total` is its total
    beside = [part for part in found.held.parts if part.name not in STATE_PARTS] or list(found.held.parts)
    largest, size = beside[0]
    suggestion = plan.cheapest_fit()
    advice = (f"; the cheapest whose peak fits is {describe_suggestion(suggestion, plan.family)}" if suggestion
              else f"; {no_fit(plan.family, True)}" if plan.family == "torch"
              else "; nothing peaks within the budget even with ZeRO-3 and full offload")
    fixes = tuple(fix for fix in (_halve_micro_batch(context, peak), _enable_checkpointing(context, peak),
                                  _shrink_buckets(context, plan, peak, budget)) if fix is not None)
    fixes += tuple(fix._replace(preferred=False) for fix in suggestion_fixes(context, plan, suggestion))
    fixes = tuple({fix.title: fix for fix in fixes}.values())  # a suggestion may be the halving itself
    yield context.finding(
        PEAK_EXCEEDS,
        f"{label} peaks at {format_bytes(total)} per GPU, {format_bytes(total - budget)} over the "
        f"{format_bytes(budget)} budget ({margin}), {state}: {peak_sum(peak, stage)}; the largest part beside model "
        f"state is {largest} ({format_bytes(size)})"
        f"{advice}" + (f" ({approximate})" if approximate else ""),
        _driver_path(context, plan, peak, largest), fixes=fixes, lesser=within or plan.approximate)
