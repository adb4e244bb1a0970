"""The step of an estimate as plain data for a picture: per stage, every moment of every phase with its parts.

Pure: an `Estimate` in, a `StepReport` out. Every figure is read from the estimate (the plan's model state and
verdicts, `Peak.stage_step`'s phases and their moments, `reserved`), never recomputed, so the page shows the
integers `zeromem estimate --format json` prints: a stage's tallest column is its `peak`, each phase's tallest
column its `phases[stage].phases[phase]` plus reserved, the column holding the peak has the JSON's `parts`.
"""

from __future__ import annotations

from typing import NamedTuple

from zeromem_lsp.memory.peak import INPUT_LABELS, StagePeak, UnknownPeak
from zeromem_lsp.memory.step import Part
from zeromem_lsp.provenance import Given
from zeromem_lsp.present import approximation_lines, approximation_note, peak_rows, stage_label
from zeromem_lsp.units import format_count

#: The part every column carries on top of the step's own: CUDA context, workspaces, allocator (peak.reserved).
RESERVED = "reserved"
NO_PEAK = ("no peak: the step needs the model's shape, the sequence length and the micro-batch "
           "(--model-config, --sequence-length, --micro-batch; or the config's zeromem block)")


class Column(NamedTuple):
    """One moment of the step: what is alive together then, reserved included (`total` bytes per GPU)."""

    phase: str  # forward, backward, optimizer
    moment: str  # "the loss's backward", ...
    parts: tuple[Part, ...]  # the moment's parts as the step model gives them, then reserved
    total: int
    phase_peak: bool  # the largest moment of its phase (its total is the phase's peak + reserved)
    stage_peak: bool  # the moment holding the stage's peak (its total is the stage's peak)


class StageView(NamedTuple):
    """One stage: its row of the table and its columns (none, with `why`, when its peak is not known)."""

    key: str  # ddp, zero1, zero2, zero3
    label: str  # "ZeRO-1", "FULL_SHARD (ZeRO-3)", ...
    chosen: bool  # the config's stage (`estimate --config`)
    state: int  # model state per GPU (the contract figure)
    host: int  # bytes offloaded to the host
    peak: int | None
    reserved: int
    percent: str  # of the budget, of the verdict figure ("" without a budget)
    verdict: str  # fits / exceeds ("" without a budget)
    judged_by: str  # "peak" or "model state"
    peak_phase: str | None
    peak_moment: str | None
    phases: dict[str, int]  # each phase's peak, reserve not included (JSON `phases[stage].phases`)
    columns: tuple[Column, ...]
    why: str | None  # why there are no columns


class InputRow(NamedTuple):
    """A row of the inputs table: the peak's input (a `Given`: its value and where it came from) by setting name."""

    name: str  # the setting's name (JSON `peak_inputs` key)
    label: str
    given: Given  # value and note (JSON `peak_inputs[name]`: `value`, `from`)


class StepReport(NamedTuple):
    family: str  # deepspeed, fsdp, torch
    budget: int | None  # --gpu-memory
    world_size: int
    parameters: int | None
    parameter_bytes: int
    gradient_bytes: int
    optimizer_bytes: int
    world_size_from: str | None
    stages: tuple[StageView, ...]
    inputs: tuple[InputRow, ...]
    missing: tuple[str, ...]  # the peak's missing inputs
    cheapest: str | None  # the lowest stage that fits (its label)
    assumptions: tuple[str, ...]
    approximate: str  # approximation_note ("" when the figures are not approximate)
    approximations: tuple[str, ...]  # one line per key not modelled, and the engine assumption


def columns(found: StagePeak) -> tuple[Column, ...]:
    """Every moment of every phase, in the step's order, with the reserve on top of each."""
    found_columns = []
    for name, phase in found.phases.items():
        moments = phase.moments or ()
        for moment in moments:
            held = moment.name == phase.moment and moment.total == phase.peak
            found_columns.append(Column(name, moment.name, (*moment.parts, Part(RESERVED, found.reserved)),
                                        moment.total + found.reserved, held,
                                        held and name == found.peak_phase))
    return _first_holders(tuple(found_columns))


def _first_holders(found: tuple[Column, ...]) -> tuple[Column, ...]:
    """Only the first column of equal ones marked as holding its phase's (and the stage's) peak."""
    seen_phase: set[str] = set()
    out = []
    for column in found:
        if column.phase_peak and column.phase in seen_phase:
            column = column._replace(phase_peak=False, stage_peak=False)
        if column.phase_peak:
            seen_phase.add(column.phase)
        out.append(column)
    return tuple(out)


def stage_view(plan, row) -> StageView:
    """A stage's row of the table (present.peak_rows) and its columns, or why it has none."""
    peak = plan.peak
    found = peak.stage_step(row.stage) if peak is not None else None
    common = dict(key=row.stage, label=row.label, chosen=row.chosen, state=row.state, host=row.host,
                  percent=row.percent, verdict=row.fit, judged_by=plan.judged_by(row.stage))
    if isinstance(found, StagePeak):
        return StageView(**common, peak=found.total, reserved=found.reserved, peak_phase=found.peak_phase,
                         peak_moment=found.held.moment,
                         phases={name: phase.peak for name, phase in found.phases.items()},
                         columns=columns(found), why=None)
    if isinstance(found, UnknownPeak):
        why = f"peak unknown: {found.why}"
    elif peak is not None and peak.missing:
        why = "peak not computable: missing " + "; ".join(peak.missing)
    else:
        why = NO_PEAK
    return StageView(**common, peak=None, reserved=peak.reserved or 0 if peak is not None else 0, peak_phase=None,
                     peak_moment=None, phases={}, columns=(), why=why)


def step_report(estimate) -> StepReport:
    """The estimate as a picture's data: each stage the engine has, its columns and its row; the inputs."""
    plan, inputs = estimate.plan, estimate.inputs
    peak = plan.peak
    stages = tuple(stage_view(plan, row) for row in peak_rows(plan))
    used = () if peak is None else tuple(InputRow(name, INPUT_LABELS.get(name, name), given)
                                         for name, given in peak.inputs.items())
    world = plan.origins.get("world_size")
    cheapest = estimate.cheapest_fitting if estimate.gpu_memory is not None else None
    return StepReport(
        family=plan.family, budget=estimate.gpu_memory, world_size=inputs.world_size, parameters=inputs.parameters,
        parameter_bytes=inputs.parameter_bytes, gradient_bytes=inputs.gradient_bytes,
        optimizer_bytes=inputs.optimizer_bytes, world_size_from=world.note if world is not None else None,
        stages=stages, inputs=used, missing=tuple(peak.missing) if peak is not None else (),
        cheapest=stage_label(cheapest, plan.family) if cheapest is not None else None,
        assumptions=tuple(inputs.assumptions), approximate=approximation_note(plan),
        approximations=tuple(approximation_lines(plan)))


def shown_value(value: object) -> str:
    """An input's value as the page shows it (switches on / off, counts with separators)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, int):
        return format_count(value)
    return str(value)


__all__ = ["Column", "InputRow", "NO_PEAK", "RESERVED", "StageView", "StepReport", "columns", "shown_value",
           "stage_view", "step_report"]
