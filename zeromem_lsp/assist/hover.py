"""Hover text (Markdown) for a cursor in a training config.

On `zero_optimization` / `stage`: the per-stage table, the inputs P, G, O, R and where each came
from, and what offload moves. On offload keys: the GPU/host split. On batch keys: the implied world
size. On any DeepSpeed or `zeromem` key: its documentation, from the same models as the schema.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, cast
from dataclasses import dataclass

from zeromem_lsp.analysis import Analysis
from zeromem_lsp.assist.cursor import cursor_at, member_span
from zeromem_lsp.assist.key_docs import key_doc
from zeromem_lsp.configs.settings import ZeromemSettings
from zeromem_lsp.configs.training import TrainingSetup, implied_world_size
from zeromem_lsp.configs.workload import ZERO_ALIASES
from zeromem_lsp.gpu.reserved import RESERVE_PARTS
from zeromem_lsp.memory.plan import FSDP_CPU_OFFLOAD, MemoryPlan, Unplanned
from zeromem_lsp.memory.stages import Offload
from zeromem_lsp.present import (
    activation_lines, adapter_lines, buffer_sum, count_times_bytes, deepspeed_setting, describe_suggestion,
    human_and_exact, input_notes, peak_rows, peak_sum, per_gpu_summary, phase_peaks, settings_elsewhere, stage_label,
    stage_rows,
)
from zeromem_lsp.present import (DDP_ASSUMED, WORLD_ASSUMED, below_state_line, ignored_key, no_fit, summary_table,
                                 verdict_line)
from zeromem_lsp.provenance import Assumed
from zeromem_lsp.units import format_bytes, format_count, format_parameters

if TYPE_CHECKING:
    from zeromem_lsp.memory.adapter_plan import AdapterBreakdown

RECIPE_KINDS = ("axolotl", "llamafactory", "trl")
HOVER_KINDS = ("deepspeed", "accelerate", "fsdp", "hf-arguments", *RECIPE_KINDS)  # memory hover wherever a plan exists
#: A recipe's keys that show the whole memory table: the model, the engine it names, and what sizes the peak.
RECIPE_MEMORY_KEYS = {(key,) for key in (
    "base_model", "model_name_or_path", "deepspeed", "fsdp_config", "micro_batch_size", "per_device_train_batch_size",
    "sequence_len", "cutoff_len", "max_length", "max_seq_length", "gradient_checkpointing",
    "disable_gradient_checkpointing")}
MEMORY_PATHS = {("zero_optimization",), ("zero_optimization", "stage")}
OFFLOAD_KEYS = {"offload_optimizer", "offload_param", "cpu_offload", "cpu_offload_param"}
BUFFER_KEYS = ("reduce_bucket_size", "allgather_bucket_size", "overlap_comm", *ZERO_ALIASES)
#: What the ZeRO-3 settings that hold no buffer of their own cost (not part of the peak).
STAGE3_NOTES = {
    "stage3_param_persistence_threshold": "parameters with fewer elements stay whole on every GPU; not counted "
                                          "in the peak (docs/memory-model.md)",
    "stage3_max_reuse_distance": "parameters reused within this distance are kept instead of released; bounded "
                                 "by `stage3_max_live_parameters`, which the peak counts",
    "stage3_gather_16bit_weights_on_model_save": "saving gathers the whole model in 16 bits on one rank, a "
                                                 "transient at save time outside the training peak",
}
BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
#: Where an FSDP config (Accelerate YAML, TrainingArguments) sets its mixed precision.
PRECISION_PATHS = {("mixed_precision",), ("bf16",), ("fp16",)}
BAR_WIDTH = 16
RULE = "\n\n---\n\n"


@dataclass(frozen=True)
class HoverText:
    markdown: str
    start: int
    end: int


def hover_at(analysis: Analysis, offset: int, shown: str | None = None) -> HoverText | None:
    """What to show for the key or value under `offset`; None when there is nothing to say. `shown`: the file's
    path as the workspace names it (for the command that prints the whole breakdown)."""
    cursor = cursor_at(analysis, offset, HOVER_KINDS)
    if cursor is None or cursor.member_path is None or not cursor.member_path:
        return None
    location, path = cursor.location, cursor.member_path
    if not (location.in_key or location.in_value) or location.member is None:
        return None
    sections = []
    plan = analysis.plan
    on_stage = isinstance(plan, MemoryPlan) and plan.stage_path is not None and path == tuple(plan.stage_path)
    on_recipe = analysis.kind in RECIPE_KINDS and path in RECIPE_MEMORY_KEYS
    if path in MEMORY_PATHS or on_stage or on_recipe:
        memory = memory_section(analysis.plan, analysis.setup, shown)
        if path[-1] in SEQUENCE_KEYS and isinstance(plan, MemoryPlan) and longest_section(plan):
            memory += "\n\n" + longest_section(plan)
        return HoverText(memory, *member_span(location.member, location.in_key)) if memory else None
    elif path[0] == "zero_optimization" and len(path) >= 2 and path[1] in OFFLOAD_KEYS:
        sections.append(offload_section(analysis.plan, analysis.setup))
    elif len(path) >= 2 and path[-2] == "zero_optimization" and (
            path[-1] in BUFFER_KEYS or path[-1].startswith("stage3_")):
        sections.append(buffer_cost_section(analysis.plan, ZERO_ALIASES.get(path[-1], path[-1])))
    elif path in PRECISION_PATHS and isinstance(plan, MemoryPlan) and plan.family == "fsdp":
        sections.append(fsdp_dtype_line(plan))
    elif path in {(key,) for key in BATCH_KEYS} and analysis.setup is not None:
        sections.append(world_size_section(analysis.setup, analysis.settings, analysis.origins.get("world_size")))
    elif path[-1] == "sequence_length" and isinstance(plan, MemoryPlan):
        sections.append(longest_section(plan))
    sections.append(key_doc(path, analysis.settings, analysis.origins))
    text = RULE.join(section for section in sections if section)
    if not text:
        return None
    return HoverText(text, *member_span(location.member, location.in_key))


# ---------------------------------------------------------------- memory


#: The keys that set the tokens per sequence (recipes' and the zeromem setting's).
SEQUENCE_KEYS = ("sequence_len", "cutoff_len", "max_length", "max_seq_length", "sequence_length")


def _chosen(plan: MemoryPlan) -> str:
    """The configured stage: a config's plan names one (only the estimate calculator's has None, and no hover)."""
    assert plan.stage is not None, "a config's plan names its stage"
    return plan.stage


def longest_section(plan: MemoryPlan) -> str:
    """On a sequence-length key: the longest sequence whose peak fits the budget at the configured stage."""
    if plan.gpu_memory is None or not plan.peak_known or plan.stage is None:
        return ""
    assert plan.peak is not None  # peak_known
    longest = plan.peak.largest("sequence_length", plan.stage, plan.gpu_memory)
    label, budget = stage_label(plan.stage, plan.family), format_bytes(plan.gpu_memory)
    if longest is None:
        return f"**Longest sequence at {label}:** none fits {budget} per GPU, not even 1 token."
    return f"**Longest sequence whose peak fits {budget} at {label}: {format_count(longest)} tokens.**"


#: How the hover's first lines group the keys that make figures approximate (memory/plan.Ignored).
HOVER_GROUPS = (("not modelled", lambda item: not item.derived),
                ("derived from the code, without a measured step", lambda item: item.derived and item.step),
                ("left out of the model-state column (the peak models it)", lambda item: item.derived and not item.step))


def _missing(plan: Unplanned) -> str:
    items = [line for item in plan.missing for line in textwrap.wrap(
        f"- {item}", HOVER_COLUMNS, subsequent_indent="  ", break_on_hyphens=False, break_long_words=False)]
    return "**Memory per GPU: not computable yet.** Missing:\n\n" + "\n".join(items)


def memory_section(plan: MemoryPlan | Unplanned | None, setup: TrainingSetup | None = None,
                   shown: str | None = None) -> str:
    """The answer first, in at most 15 lines that read the same in every client: the verdict, what the figure
    leaves out, the stage table as a fixed-width block (no Markdown table: Neovim 0.7 shows those as raw pipes),
    one suggestion, and the command that prints the whole arithmetic (`shown`: the file as the workspace names it).
    `setup`: where the DeepSpeed settings are written, for the keys a suggestion names. What does not fit in 15
    lines goes first: why a peak is below its model state, then the blank lines."""
    if plan is None:
        return ""
    if isinstance(plan, Unplanned):
        return _missing(plan)
    verdict = _wrapped(f"**{verdict_line(plan)}**")
    approximate = []
    if plan.approximate:
        groups = [(verb, [ignored_key(item, code=True) for item in plan.ignored if state(item)])
                  for verb, state in HOVER_GROUPS]
        said = "; ".join(f"{', '.join(keys)} {'is' if len(keys) == 1 else 'are'} {verb}" for verb, keys in groups
                         if keys)
        approximate = ["", *_wrapped("**Approximate:** " + "; ".join(
            ([f"{said} (the breakdown says what each does)"] if said else [])
            + ([DDP_ASSUMED] if plan.engine_assumed else []) + ([WORLD_ASSUMED] if plan.world_assumed else [])) + ".")]
    table = ["```text", *summary_table(plan), "```"]
    below = below_state_line(plan)
    below_lines = _wrapped(below[0].upper() + below[1:] + ".") if below else []
    advice = []
    if plan.peak_exceeds:
        suggestion = plan.cheapest_fit()
        judged = "whose peak fits" if suggestion is not None and suggestion.peak is not None else "that fits"
        elsewhere = settings_elsewhere(setup, plan, suggestion)
        elsewhere = f" — {elsewhere}" if elsewhere else ""
        advice = _wrapped(f"Cheapest {judged}: {describe_suggestion(suggestion, plan.family)}{elsewhere}." if suggestion
                          else f"N{no_fit(plan.family, plan.peak_known)[1:]}." if plan.family == "torch"
                          else f"Nothing {'peaks within the budget' if plan.peak_known else 'fits'}, even ZeRO-3 "
                               "with full offload: add GPUs.")
    command = [f"Breakdown: `zeromem estimate --config {shown or 'FILE'} -v`"]
    lines = [*verdict, *approximate, *table, *below_lines, *advice, "", *command]
    if len(lines) > MAX_HOVER_LINES:
        lines = [*verdict, *approximate, *table, *advice, "", *command]
    if len(lines) > MAX_HOVER_LINES:
        lines = [line for line in lines if line]
    return "\n".join(lines)


MAX_HOVER_LINES = 15
#: Hover prose is wrapped here (a Markdown soft break renders as a space) so no line is wider than a float.
HOVER_COLUMNS = 78


def _wrapped(text: str) -> list[str]:
    return textwrap.wrap(text, HOVER_COLUMNS, break_on_hyphens=False, break_long_words=False) or [""]


def breakdown_markdown(plan: MemoryPlan | Unplanned | None, setup: TrainingSetup | None = None) -> str:
    """The whole breakdown behind the hover's verdict (the `zeromem.memoryReport` command): the stage table with the
    phase holding each peak, P, G, O, R and where each came from, offload, and the peak's arithmetic. `setup`: where
    the DeepSpeed settings are written, for the keys a hint names."""
    if plan is None:
        return ""
    if isinstance(plan, Unplanned):
        return _missing(plan)
    label = stage_label(_chosen(plan), plan.family)
    if plan.peak_known and plan.judged_by(_chosen(plan)) == "peak":
        peak = plan.verdict_bytes(_chosen(plan))
        head = (f"**{label} {per_gpu_summary(plan.gpu_bytes, plan.gpu_memory)}** persistent model state "
                f"(parameters, gradients, optimizer state); **peak {per_gpu_summary(peak, plan.gpu_memory)}** "
                "— the largest phase of the training step and the reserve; what fits is judged on the peak.")
    elif plan.peak_known and plan.peak is not None:  # (peak_known: the peak is there)
        head = (f"**{label} {per_gpu_summary(plan.gpu_bytes, plan.gpu_memory)}** — persistent model state "
                f"(parameters, gradients, optimizer state); {plan.peak.unknown(_chosen(plan))}, so what fits is "
                "judged on model state.")
    else:
        head = (f"**{label} {per_gpu_summary(plan.gpu_bytes, plan.gpu_memory)}** — persistent model state "
                "(parameters, gradients, optimizer state); the peak below is the largest phase of the training step + the reserve.")
    if plan.approximate:  # said first: the figures leave out what the config sets
        head += "\n\n**Approximate:** " + "; ".join(
            [f"{ignored_key(item, code=True)} is {'derived' if item.derived else 'not modelled'} ({item.why})"
             for item in plan.ignored]
            + ([plan.engine_assumed] if plan.engine_assumed else [])
            + ([plan.world_assumed] if plan.world_assumed else [])) + "."
    lines = [
        head,
        "",
        *(stage_peak_markdown(plan) if plan.peak_known else stage_markdown(plan)),
        "",
        *([fsdp_dtype_line(plan), ""] if plan.family == "fsdp" and plan.inputs.per_parameter else []),
        *input_lines(plan),
        "",
        offload_text(plan, setup),
    ]
    if plan.peak_exceeds:
        suggestion = plan.cheapest_fit()
        judged = "whose peak fits" if suggestion is not None and suggestion.peak is not None else "that fits"
        elsewhere = settings_elsewhere(setup, plan, suggestion)
        elsewhere = f" — {elsewhere}" if elsewhere else ""
        lines += ["", f"Cheapest {judged}: {describe_suggestion(suggestion, plan.family)}{elsewhere}." if suggestion
                  else f"N{no_fit(plan.family, plan.peak_known)[1:]}." if plan.family == "torch"
                  else f"Nothing {'peaks within the budget' if plan.peak_known else 'fits'}, even ZeRO-3 with full "
                       "offload: add GPUs."]
    if plan.peak is not None:
        lines += ["", *peak_markdown(plan)]
    return "\n".join(lines)


def fsdp_dtype_line(plan: MemoryPlan) -> str:
    """FSDP's parameter dtype, which the figures use: fp32 under mixed precision, not the compute dtype."""
    bpp, origin = plan.inputs.per_parameter, plan.origins.get("precision")
    if bpp is None:
        return ""
    head = (f"**FSDP parameter dtype: {bpp.precision}** ({bpp.parameter} B per parameter; gradients and optimizer "
            "state follow it)")
    if origin is not None and origin.path is not None:
        return f"{head} — zeromem.precision."
    return (f"{head} — with mixed precision (bf16/fp16) Accelerate, and HF Trainer through it, upcasts the "
            "trainable sharded parameters to fp32 and casts only the gathered copy for compute "
            "(accelerate `prepare_model`, `fsdp2_prepare_model`); without it they keep the dtype the model is "
            'loaded in. Declare `"precision": "bf16"` in the zeromem block only for a bf16 model trained without '
            "mixed precision.")


def peak_markdown(plan: MemoryPlan) -> list[str]:
    """The peak's arithmetic at the chosen stage and where each input came from (its figures are in the table)."""
    peak = plan.peak
    assert peak is not None  # breakdown_markdown calls this when the plan has a peak
    inputs = [f"- {note}" for note in input_notes(peak)]
    if peak.missing:
        return ["**Peak per GPU: not computable yet.** Missing:", "", *[f"- {item}" for item in peak.missing],
                "", "Known:", "", *inputs]
    lines = ["**Peak per GPU** = the largest phase (forward, backward, optimizer) of one training step + " +
             (f"reserved {format_count(peak.reserved)} (bytes):" if peak.reserved is not None else
              f"reserved (per stage: {RESERVE_PARTS}; bytes):")]
    engine = peak.inputs.get("engine")
    if engine is not None and engine.value != plan.family:
        lines += ["", f"**Engine {engine.value}** — {engine.note}: the step the peak follows is {engine.value}'s; "
                  "the stages and model state stay the config's."]
    chosen = _chosen(plan)
    lines += ["", f"- {stage_label(chosen, plan.family)}: {peak_sum(peak, chosen)}",
              f"- phases: {phase_peaks(peak, chosen)}",
              *[f"- {line}" for line in activation_lines(peak)], *inputs]
    return lines


def buffer_cost_section(plan: MemoryPlan | Unplanned | None, key: str) -> str:
    """What a ZeRO buffer setting costs per GPU at the chosen stage (and at the others)."""
    if not isinstance(plan, MemoryPlan) or plan.peak is None or plan.peak.buffers is None or plan.family != "deepspeed":
        return ""
    label = stage_label(_chosen(plan), plan.family)
    if key in STAGE3_NOTES:
        return f"**Cost:** {STAGE3_NOTES[key]}."
    if key == "overlap_comm":
        parts = plan.peak.buffers[_chosen(plan)].parts
        return f"**Buffers at {label}:** {buffer_sum(plan.peak.buffers[_chosen(plan)])}" if parts else ""
    costs = []
    for stage in plan.stages:
        part = next((part for part in plan.peak.buffers[stage].parts if part.name == key), None)
        if part is not None:
            costs.append((stage, part))
    chosen = next((part for stage, part in costs if stage == plan.stage), None)
    head = (f"**`{key}` costs {format_bytes(chosen.bytes)} per GPU at {label}:** {chosen.rule} = "
            f"{format_count(chosen.bytes)} B" if chosen else f"**`{key}` holds no buffer at {label}.**")
    others = ", ".join(f"{stage_label(stage, plan.family)} {format_bytes(part.bytes)}" for stage, part in costs
                       if stage != plan.stage)
    return head + (f"\n\nAt the other stages: {others}." if others else "")


def stage_markdown(plan: MemoryPlan) -> list[str]:
    """A Markdown table: one row per stage, the chosen one marked, with a bar against the budget."""
    budget = plan.gpu_memory
    host = plan.placement.host
    offloaded = any(host.values())
    header = ["", "stage", "GPU"] + (["host"] if offloaded else []) + (["of budget", ""] if budget else []) + [""]
    align = [":-:", ":--", "--:"] + (["--:"] if offloaded else []) + (["--:", ":--"] if budget else []) + [":--"]
    lines = [_row(header), _row(align)]
    for row in stage_rows(plan.placement.gpu, stages=plan.stages, chosen=plan.stage, budget=budget, host=host,
                          family=plan.family, width=BAR_WIDTH):
        cells = ["▶" if row.chosen else "", f"**{row.label}**" if row.chosen else row.label, format_bytes(row.gpu)]
        if offloaded:
            cells.append(format_bytes(row.host))
        if budget:
            cells += [row.percent, row.fit]
        cells.append(f"`{row.bar.rstrip()}`")
        lines.append(_row(cells))
    return lines + _budget_line(plan, "the bars")


def stage_peak_markdown(plan: MemoryPlan) -> list[str]:
    """The one table once the peak is known: model state | peak | of budget | the phase holding the peak and
    its largest parts, one row per stage, with a bar of the peak against the budget."""
    budget = plan.gpu_memory
    offloaded = any(plan.placement.host.values())
    header = ["", "stage", "model state"] + (["host"] if offloaded else []) + ["peak"] + (
        ["of budget", ""] if budget else []) + ["peak phase: largest parts", ""]
    align = [":-:", ":--", "--:"] + (["--:"] if offloaded else []) + ["--:"] + (["--:", ":--"] if budget else []) + [
        ":--", ":--"]
    lines = [_row(header), _row(align)]
    for row in peak_rows(plan, BAR_WIDTH):
        cells = ["▶" if row.chosen else "", f"**{row.label}**" if row.chosen else row.label, format_bytes(row.state)]
        if offloaded:
            cells.append(format_bytes(row.host))
        cells.append(f"{format_count(row.peak)} ({format_bytes(row.peak)})" if row.peak is not None else "—")
        if budget:
            cells += [row.percent, row.fit]
        cells += [row.phase, f"`{row.bar.rstrip()}`"]
        lines.append(_row(cells))
    return lines + _budget_line(plan, "the bars of the peak")


def _budget_line(plan: MemoryPlan, bars: str) -> list[str]:
    """Below a stage table: the budget and the layer it came from."""
    if not plan.gpu_memory:
        return []
    origin = plan.origins.get("gpu_memory")
    source = f" — {origin.note}" if origin else ""
    return ["", f"Budget {human_and_exact(plan.gpu_memory)} per GPU{source} (`│` on {bars})."]


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def input_lines(plan: MemoryPlan) -> list[str]:
    inputs, origins = plan.inputs, plan.origins
    bpp = inputs.per_parameter
    world = origins.get("world_size")
    world_note = f" — {world.note}" if world else ""
    if inputs.adapter is not None:
        source = origins["parameters"].note if "parameters" in origins else "the model config"
        adapter = cast("AdapterBreakdown", inputs.adapter)  # what plan.Inputs.adapter holds (typed object there)
        lines = [f"- {line}" for line in adapter_lines(adapter)]
        lines[0] += f" — parameters from {source}"
        lines += [f"- R = {inputs.world_size} ranks{world_note}", *(f"- {note}" for note in adapter.notes)]
    elif inputs.parameters is not None and bpp is not None:
        count = inputs.parameters
        gradient_dtype = bpp.gradient_dtype_name
        lines = [
            f"- P = {count_times_bytes(count, bpp.parameter, bpp.precision)} — {format_parameters(count)} from "
            f"{origins['parameters'].note}; precision: {origins['precision'].note}",
            f"- G = {count_times_bytes(count, bpp.gradient, gradient_dtype)}",
            f"- O = {count_times_bytes(count, bpp.optimizer, bpp.optimizer_name)} — optimizer: {origins['optimizer'].note}",
            f"- R = {inputs.world_size} ranks{world_note}",
            f"- per parameter: {bpp.explanation}",
        ]
    else:
        source = origins["bytes"].note if "bytes" in origins else "declared"
        lines = [
            f"- P = {human_and_exact(inputs.parameter_bytes)} — {source}",
            f"- G = {human_and_exact(inputs.gradient_bytes)}",
            f"- O = {human_and_exact(inputs.optimizer_bytes)}",
            f"- R = {inputs.world_size} ranks{world_note}",
        ]
    return lines


def _moved(offload: Offload, stage: str) -> str:
    names = ("P (parameters)", "G (gradients)", "O (optimizer state)")
    return ", ".join(name for name, moves in zip(names, offload.moves(stage)) if moves)


def offload_text(plan: MemoryPlan, setup: TrainingSetup | None = None) -> str:
    label = stage_label(_chosen(plan), plan.family)
    alternative: Offload
    if plan.offload.optimizer or plan.offload.param:
        moved = _moved(plan.offload, _chosen(plan))
        if not moved:
            return f"Offload ({plan.offload.describe()}) has no effect at {label}."
        return (f"Offload ({plan.offload.describe()}) moves {moved} off the GPU at {label}: "
                f"{format_bytes(plan.gpu_bytes)} stays on each GPU, {format_bytes(plan.host_bytes)} per rank goes to the host.")
    if plan.family == "fsdp":
        alternative, setting = FSDP_CPU_OFFLOAD, "`fsdp_offload_params: true` (CPU offload)"
    elif plan.family == "torch":
        return "Offload: none (plain DDP has no offload; DeepSpeed ZeRO and FSDP do)."
    elif plan.stage == "ddp":
        return "Offload: none (DeepSpeed offloads only with ZeRO stages 1-3)."
    else:
        alternative, setting = Offload(optimizer="cpu"), deepspeed_setting(setup, "offload_optimizer", "cpu")
    placement = plan.placement_with(alternative)
    return (f"Offload: none. {setting} would move {_moved(alternative, _chosen(plan))} "
            f"to the host at {label}: {format_bytes(placement.gpu[_chosen(plan)])}/GPU + "
            f"{format_bytes(placement.host[_chosen(plan)])} host per rank.")


def offload_section(plan: MemoryPlan | Unplanned | None, setup: TrainingSetup | None = None) -> str:
    if plan is None:
        return ""
    if isinstance(plan, Unplanned):
        return _missing(plan)
    gpu, host = plan.placement.gpu, plan.placement.host
    rows = [_row(["", "stage", "GPU", "host"]), _row([":-:", ":--", "--:", "--:"])]
    for stage in plan.stages:
        chosen = stage == plan.stage
        label = stage_label(stage, plan.family)
        rows.append(_row(["▶" if chosen else "", f"**{label}**" if chosen else label,
                          format_bytes(gpu[stage]), format_bytes(host[stage])]))
    head = (f"**Offload at {stage_label(_chosen(plan), plan.family)}** ({plan.offload.describe()}): "
            f"GPU {format_bytes(plan.gpu_bytes)} · host {format_bytes(plan.host_bytes)} per rank")
    return "\n".join([head, "", offload_text(plan, setup), "", *rows])


# ---------------------------------------------------------------- batch sizes


def world_size_section(setup: TrainingSetup, settings: ZeromemSettings, origin: object = None) -> str:
    train, micro, steps = setup.train_batch_size, setup.micro_batch_size, setup.gradient_accumulation_steps
    implied = implied_world_size(setup)
    if implied is not None:
        text = (f"**Implied world size: {implied} ranks** = train_batch_size / (micro batch × accumulation) "
                f"= {train} / ({micro} × {steps})")
    elif train is not None and micro is not None and steps is not None:
        text = (f"**No whole world size:** train_batch_size {train} is not a multiple of "
                f"micro batch × accumulation = {micro} × {steps} = {micro * steps}")
    else:
        missing = [name for name, value in zip(BATCH_KEYS, (train, micro, steps)) if value is None]
        text = "**World size:** implied once all three batch sizes are set (missing: " + ", ".join(f"`{m}`" for m in missing) + ")"
    if settings.world_size is not None:
        assumed = f" ({origin.note})" if isinstance(origin, Assumed) else ""
        text += f"\n\nzeromem world size in effect: {settings.world_size}{assumed}"
    return text
