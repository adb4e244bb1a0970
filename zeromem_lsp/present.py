"""Wording and drawing shared by every front end (CLI tables, hover, inlay hints, messages).

Keeping it in one place is what makes the numbers agree everywhere.
"""

from __future__ import annotations

from typing import NamedTuple

from zeromem_lsp.configs.recipes import TRL_SFT_RELEASES, trl_followed
from zeromem_lsp.configs.versions import NEWEST, installed, release
from zeromem_lsp.memory.model_state import STAGES
from zeromem_lsp.memory.estimate import Estimate
from zeromem_lsp.memory.stages import stage as stage_named
from zeromem_lsp.units import format_bytes, format_bytes_with_count, format_count

EIGHTHS = " ▏▎▍▌▋▊▉"
FULL = "█"
BUDGET_MARK = "│"


def bar(value: int, scale: int, width: int) -> str:
    """A bar of `width` cells where `scale` bytes fill all cells, drawn in eighths (exact ints)."""
    if scale <= 0 or value <= 0:
        return " " * width
    eighths = min(value * width * 8 // scale, width * 8)
    if eighths == 0:
        eighths = 1  # a non-zero figure is always visible
    full, rest = divmod(eighths, 8)
    text = FULL * full + (EIGHTHS[rest] if rest else "")
    return text.ljust(width)


def bar_with_budget(value: int, budget: int | None, largest: int, width: int) -> str:
    """A bar scaled so the larger of budget and largest fills `width`; the budget is a `│` mark."""
    scale = max(largest, budget or 0)
    cells = bar(value, scale, width)
    if not budget:
        return cells
    mark = min(budget * width // scale, width)
    return cells[:mark] + BUDGET_MARK + cells[mark:]


def percent_of(value: int, budget: int) -> str:
    """value / budget as a whole percentage, rounded half up with integers."""
    return f"{(200 * value + budget) // (2 * budget)}%"


def human_and_exact(value: int) -> str:
    return format_bytes_with_count(value)


def fit_word(value: int, budget: int | None) -> str:
    if budget is None:
        return ""
    return "fits" if value <= budget else "exceeds"


class StageRow(NamedTuple):
    """One stage's figures as every table shows them (CLI text, hover Markdown)."""

    stage: str
    label: str
    chosen: bool
    gpu: int
    host: int
    percent: str  # of the budget; "" without one
    fit: str  # "fits" / "exceeds"; "" without a budget
    bar: str  # against the budget line


def stage_rows(
    gpu: dict[str, int],
    *,
    stages: tuple[str, ...] = STAGES,
    chosen: str | None = None,
    budget: int | None = None,
    host: dict[str, int] | None = None,
    family: str = "deepspeed",
    width: int = 32,
) -> list[StageRow]:
    largest = max(gpu[stage] for stage in stages)
    return [
        StageRow(
            stage=stage,
            label=stage_label(stage, family),
            chosen=stage == chosen,
            gpu=gpu[stage],
            host=host[stage] if host else 0,
            percent=percent_of(gpu[stage], budget) if budget else "",
            fit=fit_word(gpu[stage], budget),
            bar=bar_with_budget(gpu[stage], budget, largest, width),
        )
        for stage in stages
    ]


def stage_table(estimate: Estimate, *, chosen: str | None = None, width: int = 32) -> list[str]:
    """Text rows: stage, per-GPU bytes (human and exact), % of budget, fits, and a bar against the budget."""
    budget = estimate.gpu_memory
    rows = [("", "stage", "per GPU", "exact bytes", "of budget" if budget else "", "", "")]
    for stage in stage_rows(estimate.figures, stages=estimate.plan.stages, chosen=chosen, budget=budget,
                            family=estimate.plan.family, width=width):
        rows.append(("▶" if stage.chosen else "", stage.label, format_bytes(stage.gpu), format_count(stage.gpu),
                     stage.percent, stage.fit, stage.bar))
    widths = [max(len(row[i]) for row in rows) for i in range(6)]
    lines = []
    for row in rows:
        cells = [
            row[0].ljust(widths[0]),
            row[1].ljust(widths[1]),
            row[2].rjust(widths[2]),
            row[3].rjust(widths[3]),
            row[4].rjust(widths[4]),
            row[5].ljust(widths[5]),
            row[6],
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


def per_gpu_summary(gpu_bytes: int, budget: int | None) -> str:
    """`≈ 16.6 GiB/GPU · 69% of 24.0 GiB`: the inlay hint after the stage, and the hover headline."""
    text = f"≈ {format_bytes(gpu_bytes)}/GPU"
    if budget:
        text += f" · {percent_of(gpu_bytes, budget)} of {format_bytes(budget)}"
    return text


def count_times_bytes(count: int, per_item: int, note: str = "") -> str:
    """`7B × 2 B (bf16) = 13.0 GiB`: a per-parameter figure scaled by the parameter count."""
    from zeromem_lsp.units import format_parameters

    note = f" ({note})" if note else ""
    return f"{format_parameters(count)} × {per_item} B{note} = {format_bytes(count * per_item)}"


def stage_label(stage: str, family: str = "deepspeed") -> str:
    """DDP / ZeRO-n for DeepSpeed; the FSDP sharding strategy (with its ZeRO equivalent) for FSDP."""
    return stage_named(stage).label_in(family)


def describe_suggestion(suggestion, family: str) -> str:
    """"ZeRO-3 with optimizer → cpu (12.3 GiB/GPU)": the stage, offload and figure a plan.Suggestion gives;
    with a known peak, "ZeRO-3, micro-batch 1 (peak 70.2 GiB/GPU, model state 14.2 GiB)"."""
    offload = suggestion.offload
    text = stage_label(suggestion.stage, family)
    changes = [offload.describe()] if offload.optimizer or offload.param else []
    if suggestion.micro_batch is not None:
        changes.append(f"micro-batch {suggestion.micro_batch}")
    if getattr(suggestion, "checkpointing", False):
        changes.append("gradient checkpointing")
    if changes:
        text += " with " + " and ".join(changes)
    if suggestion.peak is not None:
        return f"{text} (peak {format_bytes(suggestion.peak)}/GPU, model state {format_bytes(suggestion.gpu_bytes)})"
    return f"{text} ({format_bytes(suggestion.gpu_bytes)}/GPU)"


#: DeepSpeed's settings as a ds_config spells them, and as an Accelerate YAML's deepspeed_config does
#: (accelerate/utils/dataclasses.py DeepSpeedPlugin: zero_stage, offload_optimizer_device, offload_param_device).
DEEPSPEED_SPELLINGS = {
    "ds_config": {"stage": '"stage": {}', "offload_optimizer": '"offload_optimizer": {{"device": "{}"}}',
                  "offload_param": '"offload_param": {{"device": "{}"}}'},
    "accelerate": {"stage": "zero_stage: {}", "offload_optimizer": "offload_optimizer_device: {}",
                   "offload_param": "offload_param_device: {}"},
}


def deepspeed_setting(setup, name: str, value: object) -> str:
    """`name` (stage, offload_optimizer, offload_param) set to `value` as the file holding the DeepSpeed settings
    (a configs.training.TrainingSetup; None: a ds_config) spells it, with that file when it is another one."""
    spelling = getattr(setup, "spelling", "ds_config")
    written_in = getattr(setup, "written_in", None)
    return f"`{DEEPSPEED_SPELLINGS[spelling][name].format(value)}`" + (f" in {written_in}" if written_in else "")


def settings_elsewhere(setup, plan, suggestion) -> str:
    """For a DeepSpeed suggestion whose settings live in another file (no quick fix here): what to set there."""
    if suggestion is None or plan.family != "deepspeed" or getattr(setup, "written_in", None) is None:
        return ""
    plain = setup._replace(written_in=None)
    changes = []
    if suggestion.stage != plan.stage:
        changes.append(deepspeed_setting(plain, "stage", stage_named(suggestion.stage).number))
    for name in ("optimizer", "param"):
        device = getattr(suggestion.offload, name)
        if device and not getattr(plan.offload, name):
            changes.append(deepspeed_setting(plain, f"offload_{name}", device))
    return f"set {' and '.join(changes)} in {setup.written_in}" if changes else ""


def no_fit(family: str, peak_known: bool) -> str:
    """Why nothing fits and what would: plain torch (DDP) can only be sharded by another engine, which is not an
    edit of this file; DeepSpeed and FSDP have tried every stage and offload."""
    verb = "peaks within the budget" if peak_known else "fits the budget"
    if family == "torch":
        return (f"nothing {verb} under DDP, which keeps the whole model state on every rank; DeepSpeed (a "
                "`deepspeed:` config with ZeRO-2/3) or FSDP (an `fsdp_config`) would shard it over the ranks")
    return f"nothing {verb} even with ZeRO-3 and full offload; add GPUs"


class PeakRow(NamedTuple):
    """One stage of the one table: model state | peak | the phase holding the peak and its largest parts."""

    stage: str
    label: str
    chosen: bool
    state: int
    host: int
    peak: int | None  # None while an input is missing
    percent: str  # of the budget, of the verdict figure (the peak when known)
    fit: str
    phase: str  # "backward: activations 53.0 GiB, model state 39.0 GiB, fp32 logits copy 4.6 GiB"
    bar: str


def phase_parts(found, count: int = 3) -> str:
    """`backward: activations 53.0 GiB, model state 39.0 GiB, ...`: the phase holding a stage's peak."""
    parts = ", ".join(f"{part.name} {format_bytes(part.bytes)}" for part in found.held.largest(count))
    return f"{found.peak_phase}: {parts}"


def peak_rows(plan, width: int = 24) -> list[PeakRow]:
    """The rows of the one table for a memory plan with a peak (known or not)."""
    peak, budget = plan.peak, plan.gpu_memory
    stages = peak.stages if peak is not None else None
    verdict = {stage: plan.verdict_bytes(stage) for stage in plan.stages}
    largest = max(verdict.values())
    rows = []
    for stage in plan.stages:
        found = stages[stage] if stages is not None else None
        rows.append(PeakRow(stage, stage_label(stage, plan.family), stage == plan.stage, plan.placement.gpu[stage],
                            plan.placement.host[stage], found.total if found is not None else None,
                            percent_of(verdict[stage], budget) if budget else "", fit_word(verdict[stage], budget),
                            phase_parts(found) if found is not None else (peak.unknown(stage) or "")
                            if stages is not None else "",
                            bar_with_budget(verdict[stage], budget, largest, width)))
    return rows


def peak_table(plan, width: int = 24) -> list[str]:
    """Text: stage | model state | peak | of budget | fits | the phase holding the peak, its largest parts."""
    budget = plan.gpu_memory
    rows = [("", "stage", "model state", "peak", "of budget" if budget else "", "", "peak phase: largest parts", "")]
    for stage in peak_rows(plan, width):
        rows.append(("▶" if stage.chosen else "", stage.label, format_bytes(stage.state),
                     format_bytes(stage.peak) if stage.peak is not None else "—", stage.percent, stage.fit,
                     stage.phase, stage.bar))
    widths = [max(len(row[i]) for row in rows) for i in range(7)]
    justify = ("l", "l", "r", "r", "r", "l", "l")
    lines = []
    for row in rows:
        cells = [cell.rjust(size) if how == "r" else cell.ljust(size)
                 for cell, size, how in zip(row, widths, justify)] + [row[7]]
        lines.append("  ".join(cells).rstrip())
    return lines


# ---------------------------------------------------------------- peak (docs/memory-model.md, "Peak")


def activation_sum(activations) -> str:
    """`embedding 1,024 + rotary 512 + 24 layers 9,000 (= 24 × 375) + final norm 96 + loss 8,004 = 18,636 B`."""
    if activations.checkpointing:
        middle = f"checkpointed layer inputs {format_count(activations.checkpoint_bytes)}"
        if activations.offloaded_bytes:
            middle += f" (beside {format_count(activations.offloaded_bytes)} B of them in host memory)"
    else:
        middle = f"{activations.layers} layers {format_count(activations.layer_bytes)}"
        if activations.layer_bytes == activations.layers * activations.per_layer_bytes:
            middle += f" (= {activations.layers} × {format_count(activations.per_layer_bytes)})"
    return (f"embedding {format_count(activations.embedding_bytes)} + rotary/mask {format_count(activations.shared_bytes)}"
            f" + {middle} + final norm {format_count(activations.final_norm_bytes)}"
            f" + loss {format_count(activations.logits_bytes)} = {format_count(activations.total)} B")


#: How the peak is made with an adapter (docs/adapters.md, "The step with a frozen base").
LORA_STEP = ("with an adapter the step runs over a frozen base: parameters, gradients, optimizer states are P, G, O "
             "each sharded as the stage shards it (ZeRO-1: O; ZeRO-2: G and O; ZeRO-3: all, ⌈·/R⌉); no gradient "
             "exists at the loss's backward; measured as a whole step with PEFT (torch, QLoRA NF4, DeepSpeed ZeRO-0/1/2/3, "
             "FSDP2 and FSDP1 sharded, without resharding or sharding, and under mixed precision: every phase within "
             "±5%); offload derived, not measured whole (docs/adapters.md)")


def lora_activation_line(peak) -> str:
    """`with LoRA (fp32 adapters, bf16 forward): layers A + outside B = C B (full fine-tuning: D B)`."""
    lora, inputs = peak.lora_activations, peak.source.lora
    layers = (f"checkpointed layer inputs and outside {format_count(lora.checkpoint_bytes)} + embedding, norm, loss "
              f"{format_count(lora.outside_bytes)}" if lora.checkpointing else
              f"layers {format_count(lora.layer_bytes)} (first adapted {format_count(lora.first_layer_bytes)}, each "
              f"later {format_count(lora.per_layer_bytes)}) + embedding, rotary, norm, loss {format_count(lora.outside_bytes)}")
    from zeromem_lsp.memory.peak import lora_compute_dtype

    computed = lora_compute_dtype(peak.source, peak.family)
    adapters = (f"{inputs.adapter_dtype} adapters" if computed == inputs.adapter_dtype
                else f"{inputs.adapter_dtype} adapters gathered in {computed} (FSDP mixed precision)")
    return (f"with LoRA ({adapters}, {inputs.activation_dtype} forward; frozen weights keep no "
            f"input, docs/adapters.md) = {layers} = {format_count(lora.total)} B, instead of the full fine-tuning "
            f"{format_count(peak.activations.total)} B")


def adapter_term(term) -> str:
    """`adapters (fp32) 6,815,744 × 4 B` or, for bytes from a rule, `label 1,234 weights → 5,678 B`."""
    if term.each is None:
        return f"{term.label}: {format_count(term.count)} weights → {format_count(term.bytes)}"
    return f"{term.label} {format_count(term.count)} × {term.each} B"


def adapter_lines(breakdown) -> list[str]:
    """Trainable of total, then P, G and O as the sums of their terms (memory/adapter_plan.AdapterBreakdown)."""
    count = breakdown.count
    lines = [f"{breakdown.adapter.describe()}: {format_count(count.trainable)} trainable (adapters "
             f"{format_count(count.adapters)} + modules_to_save copies {format_count(count.saved_copies)}) of "
             f"{format_count(count.all)} parameters, {format_count(count.frozen)} frozen; {breakdown.engine} bytes"
             + "".join(f"; {field} from {origin.note}" for field, origin in breakdown.adapter.origins)]
    for name, terms in (("P", breakdown.parameter_terms), ("G", breakdown.gradient_terms),
                        ("O", breakdown.optimizer_terms)):
        total = sum(term.bytes for term in terms)
        lines.append(f"{name} = {' + '.join(adapter_term(term) for term in terms) or '0'} = {format_count(total)} B")
    return lines


def activation_lines(peak) -> list[str]:
    """The activations saved by forward with their arithmetic (the phases' "activations" at the loss)."""
    acts = peak.activations
    lines = [f"activations saved for backward ({acts.attention}) = {activation_sum(acts)}"]
    if peak.lora_activations is not None:
        lines[0] = lines[0].replace("activations saved for backward", "full fine-tuning would save", 1)
        lines.append(lora_activation_line(peak))
        lines.append(LORA_STEP)
    acts = peak.lora_activations if peak.lora_activations is not None else acts
    source = peak.source
    from zeromem_lsp.memory.preference import SFT_LOSSES

    trainer = source.trainer.value if source is not None else "sft"
    loss = source.preference_loss.value if source is not None and source.preference_loss is not None else "fused"
    if trainer in ("dpo", "kto", "grpo") and loss in ("fused", "logits") \
            or trainer == "sft" and source is not None and source.sft_loss is not None \
            and source.sft_loss.value in SFT_LOSSES \
            or loss == "llamafactory" and trainer != "sft" \
            or loss in ("fused", "logits") and trainer in ("orpo", "cpo", "simpo"):
        from zeromem_lsp.memory.precision import DTYPE_BYTES
        from zeromem_lsp.memory.peak import activation_dtype, policy_rows

        c = DTYPE_BYTES[source.lora.activation_dtype if source.lora is not None else activation_dtype(source, peak.family)]
        tokens = source.sequence_length.value * policy_rows(source)
        completion = source.generation.get("max_completion_length")
        if trainer == "sft":  # TRL's SFTTrainer: its fused head or its chunked NLL
            loss = source.sft_loss.value
        lines.append(head_line(trainer, loss, acts.total, peak.activations.logits_bytes, source.sequence_length.value,
                               tokens, source.shape.hidden, c, source.shape.vocab,
                               completion.value if completion is not None and isinstance(completion.value, int) else 0))
        if trainer == "grpo":
            lines.extend(generation_line(source.shape, source.generation, source.sequence_length.value,
                                         source.micro_batch.value, c))
    else:
        lines.extend(loss_kernel_line(peak, acts.total))
    if acts.checkpointing:
        lines.append(f"one layer recomputed in backward (checkpointing, \"recomputed layer\") = "
                     f"{format_count(acts.per_layer_bytes)} B")
    return lines


def head_line(trainer: str, loss: str, saved: int, logits_bytes: int, sequence_length: int, tokens: int, hidden: int,
              c: int, vocab: int, completion_length: int = 0) -> str:
    """How the phases' "activations" follow from the activations shown: the loss's tensors (and, for the fused
    head, the LM head's input) swapped for what the preference loss keeps (memory/preference.policy_head's head)."""
    from zeromem_lsp.memory.chunked_nll import CHUNK, ChunkedNll
    from zeromem_lsp.memory.fused_head import FusedHead
    from zeromem_lsp.memory.grpo import GrpoLogitsHead
    from zeromem_lsp.memory.llamafactory_loss import LlamaFactoryHead
    from zeromem_lsp.memory.preference import policy_head, rows
    from zeromem_lsp.memory.reference_free_loss import ReferenceFreeHead

    stacked = "chosen and rejected stacked, " if rows(trainer, 1) == 2 else ""
    tool = {"fused": "TRL", "logits": "TRL 1.8", "llamafactory": "LLaMA-Factory", **TRL_SFT_RELEASES}[loss]
    lead = f"{trainer} ({tool}): {stacked}{tokens // sequence_length} rows; "
    head = policy_head(trainer, loss, sequence_length, completion_length)
    kept = head.saved(saved, logits_bytes, tokens, hidden, c, vocab) - saved + logits_bytes
    if isinstance(head, (FusedHead, ChunkedNll)):  # both keep their own tensors in place of the loss and head input
        head_input = c * tokens * hidden
        kept += head_input
        what, described, after = (
            ("its fused LM head", "a shifted copy of the last hidden states, labels, log-sum-exp per token", "")
            if isinstance(head, FusedHead) else
            ("its chunked NLL", "the shifted positions' hidden states packed, their order and labels",
             f"; one chunk of {min(CHUNK, tokens - tokens // sequence_length)} rows' fp32 logits at a time"))
        return (f"{lead}{what} keeps {kept:,} B ({described}) in place of the loss {logits_bytes:,} and the head's "
                f"input {head_input:,}: activations {saved:,} - {logits_bytes:,} - {head_input:,} + {kept:,} = "
                f"{saved - logits_bytes - head_input + kept:,} B{after}")
    detail = tail = ""
    if isinstance(head, ReferenceFreeHead):
        what = "the log-prob kernel's 2 fp32 values per token" if head.triton else "a log-softmax per row"
        keeps = f"its chosen rows' NLL and {what} keep"
    elif isinstance(head, LlamaFactoryHead):
        keeps = "its fp32 log-softmax of the shifted positions and labels keep"
    elif isinstance(head, GrpoLogitsHead):
        keeps, detail = "its log-probs keep", " (a log-softmax per completion row, per-token log-probs)"
        tail = f"; its logits: the last completion + 1 = {head.completion_length + 1:,} positions of each row"
    else:  # TRL 1.8's DPO / KTO
        keeps, detail = "its log-probs keep", " (a log-softmax per row, labels, per-token log-probs)"
    return (f"{lead}{keeps} {kept:,} B{detail} in place of the loss {logits_bytes:,}: activations {saved:,} - "
            f"{logits_bytes:,} + {kept:,} = {saved - logits_bytes + kept:,} B{tail}")


def generation_line(shape, inputs: dict, sequence_length: int, micro_batch: int, c: int) -> list[str]:
    """How GRPO's generation parts follow from the inputs shown (empty when they are not usable; memory/grpo.py)."""
    from zeromem_lsp.memory.activations import F32
    from zeromem_lsp.memory.grpo import generation_of, kv_elements
    from zeromem_lsp.memory.parts import StepInputError

    try:
        generation = generation_of(inputs)
    except StepInputError:
        return []
    rows = micro_batch * generation.steps_per_generation
    per_token = c * kv_elements(shape, 1)
    last = sequence_length - 1
    prompt = sequence_length - generation.completion_length
    logits = c * rows * shape.vocab + 3 * F32 * rows * shape.vocab
    return [f"GRPO generation: {rows} completions at once (micro-batch {micro_batch} × steps per generation "
            f"{generation.steps_per_generation}); \"KV cache (generation)\" = {per_token:,} B per token (2 × "
            f"{shape.layers} layers × {shape.kv_heads} KV heads × {shape.head_dim} × {c} B) × {rows} × "
            f"(the prompt {prompt:,} at its prefill, or prompt + completion − 1 = {last:,}: "
            f"{per_token * rows * last:,} B); \"next-token logits and probabilities\" = {rows} × {shape.vocab:,} × "
            f"({c} + 3 × 4) = {logits:,} B"]


def loss_kernel_line(peak, saved: int) -> list[str]:
    """With a fused or chunked loss: what of the saved activations it does not keep (the phases' "activations"
    are the difference; its own tensors are the phases' named parts)."""
    from zeromem_lsp.memory.precision import DTYPE_BYTES
    from zeromem_lsp.memory.loss_and_reference import dropped_bytes

    source = peak.source
    kernel = source.loss_kernel.value if source is not None else "hf"
    if kernel == "hf" or source.shape is None or source.dtype is None:
        return []
    tokens = source.sequence_length.value * source.micro_batch.value
    head = peak.lora_activations is None
    dropped = dropped_bytes(kernel, peak.activations.logits_bytes, DTYPE_BYTES[source.dtype.value], tokens,
                            source.shape.hidden, head)
    input_part = (f" and the head's input {format_count(dropped - peak.activations.logits_bytes)}"
                  if dropped != peak.activations.logits_bytes else "")
    return [f"loss kernel {kernel} ({source.loss_kernel.note}): Transformers' loss term "
            f"{format_count(peak.activations.logits_bytes)}{input_part} {'are' if input_part else 'is'} not kept: \"activations\" = "
            f"{format_count(saved)} − {format_count(dropped)} = {format_count(saved - dropped)} B; its own tensors "
            "are the named parts (docs/adapters.md)"]


def phase_peaks(peak, stage: str) -> str:
    """`forward 1,000 B, backward 2,000 B, optimizer 1,500 B`: every phase's peak (the largest holds it)."""
    found = peak.stage_peak(stage)
    if found is None:
        return peak.unknown(stage) or "peak unknown"
    return ", ".join(f"{name} {format_count(phase.peak)} B" for name, phase in found.phases.items())


def buffer_sum(buffers) -> str:
    """`reduce_bucket_size 2 B × 500,000,000 = 1,000,000,000 + ... = 2,000,000,000 B` (or `none`)."""
    if not buffers.parts:
        return "none = 0 B"
    parts = " + ".join(f"{part.name} ({part.rule}) {format_count(part.bytes)}" for part in buffers.parts)
    return f"{parts} = {format_count(buffers.total)} B"


def peak_sum(peak, stage: str) -> str:
    """`backward (the loss's backward): parameters A + activations C + ... + reserved E = X B (≈ 12.3 GiB)`: the
    phase holding the peak, its moment, its parts as summed, and the reserve (or why the peak is unknown)."""
    found = peak.stage_peak(stage)
    if found is None:
        return peak.unknown(stage) or "peak unknown"
    parts = " + ".join(f"{part.name} {format_count(part.bytes)}" for part in found.held.parts)
    return (f"{found.peak_phase} ({found.held.moment}): {parts} + reserved {format_count(found.reserved)}"
            f"{reserve_parts(found)} = {format_count(found.total)} B ({format_bytes(found.total)})")


def allocator_line(found) -> str | None:
    """`caching allocator (modelled, not counted): allocated peak A B, reserved peak R B (≈ X GiB)` beside a modelled
    reserve (computed on demand: it replays the step through gpu.allocator), else None."""
    if found is None or found.gpu is None:
        return None
    modelled = found.gpu.modelled
    wrapped = ("" if modelled.after_wrap is None else f", reserved after FSDP1 wrapped the model "
               f"{format_count(modelled.after_wrap)} B ({format_bytes(modelled.after_wrap)}, gpu/wrap.py)")
    return (f"caching allocator (modelled, not counted): allocated peak {format_count(modelled.allocated)} B, "
            f"reserved peak {format_count(modelled.reserved)} B ({format_bytes(modelled.reserved)}){wrapped}")


def reserve_parts(found) -> str:
    """` (cuBLAS workspaces W + CUDA context C + NCCL N)` when the reserve is modelled, else nothing (a fixed
    reserve the user set)."""
    if found.gpu is None:
        return ""
    gpu = found.gpu
    nccl = f" + NCCL {format_count(gpu.nccl)}" if gpu.costs.communicators else ""
    return (f" (cuBLAS workspaces {format_count(gpu.workspaces)} + CUDA context {format_count(gpu.costs.context.low)}"
            f"{nccl})")


def input_notes(peak) -> list[str]:
    """`sequence length 4096 — zeromem.sequence_length` per input of the peak."""
    from zeromem_lsp.memory.peak import INPUT_LABELS

    return [f"{INPUT_LABELS[name]} {_shown(item.value)} — {item.note}" for name, item in peak.inputs.items()]


#: How each Parallelism field is named in the output (configs/parallelism.py).
PARALLEL_LABELS = {"tensor": "tensor parallel", "context": "context parallel", "ulysses": "Ulysses",
                   "expert": "expert parallel", "activation_offload": "activation offload",
                   "tiled_mlp_shards": "TiledMLP shards", "hpz_partition": "ZeRO++ hpZ partition",
                   "mics_shard": "MiCS shard"}


def parallelism_lines(inputs) -> list[str]:
    """`tensor parallel 2 — tensor_parallel_size` per degree or mechanism the config or a setting gives (PeakInputs
    .parallel); none given: nothing (plain data parallelism)."""
    given = inputs.parallel
    return [f"{PARALLEL_LABELS[name]} {_shown(item.value)} — {item.note}" for name, item in given.items()]


def parallelism_json(inputs) -> dict:
    """The `parallelism` object: every Parallelism field resolved (defaults for what nothing gives) and, for those
    given, `sources`: the key or setting each came from and its path in the document."""
    from dataclasses import asdict

    sources = {name: {"source": item.note, **({"path": list(item.path)} if item.path else {})}
               for name, item in inputs.parallel.items()}
    return {**asdict(inputs.parallelism()), "sources": sources}


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, int):
        return format_count(value)
    return str(value)


def _written(value: object) -> str:
    """A config value as the user wrote it (YAML / JSON spelling for switches)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def ignored_key(item, code: bool = False) -> str:
    """`tiled_mlp: true`: a key the figures do not model, with its value as written (in backticks for Markdown)."""
    text = item.key if item.value is None else f"{item.key}: {_written(item.value)}"  # None: the key says its value
    return f"`{text}`" if code else text


def ignored_keys_text(plan) -> str:
    """`context_parallel_size: 8, tiled_mlp: true`: the keys set that the figures do not model."""
    return ", ".join(ignored_key(item) for item in plan.ignored)


#: The engine assumption in one clause (its full wording, with how to pair a launch file: planner.ENGINE_ASSUMED).
DDP_ASSUMED = "torch DDP is assumed (the recipe names no engine and no Accelerate config is paired with it)"
#: The world-size assumption in one clause (its full wording: planner.assume_world's origin).
WORLD_ASSUMED = ("the world size is assumed (the smallest that runs the parallel degrees; set it: --world-size, the "
                 "world_size setting or zeromem.worldSize in the editor)")


def approximation_note(plan) -> str:
    """Why a plan's figures are approximate, in one clause ("" when they are not): the keys set that are not
    modelled, and whether the engine is only assumed."""
    parts = []
    left_out = [item for item in plan.ignored if not item.derived]
    derived = [ignored_key(item) for item in plan.ignored if item.derived and item.step]
    column = [ignored_key(item) for item in plan.ignored if item.derived and not item.step]
    if left_out:
        parts.append(f"it does not model {', '.join(ignored_key(item) for item in left_out)}")
    if derived:
        parts.append(f"it derives {', '.join(derived)} from the code, without a measured step")
    if column:
        parts.append(f"the model-state column leaves out {', '.join(column)} (the peak models it)")
    if plan.engine_assumed is not None:
        parts.append(DDP_ASSUMED)
    if plan.world_assumed:
        parts.append(WORLD_ASSUMED)
    return f"approximate: {'; '.join(parts)}" if parts else ""


def approximation_lines(plan) -> list[str]:
    """Each key the figures do not model, its value and what it does to memory; the engine assumption."""
    lines = [f"{'derived' if item.derived else 'not modelled'}: {ignored_key(item)} — {item.why}"
             for item in plan.ignored]
    if plan.engine_assumed is not None:
        lines.append(f"assumed: {plan.engine_assumed}")
    if plan.world_assumed:
        lines.append(f"assumed: {plan.world_assumed}")
    return lines


# ---------------------------------------------------------------- the answer first (estimate text, hover)

#: What each engine is called in a verdict.
ENGINE_NAMES = {"deepspeed": "DeepSpeed", "fsdp": "FSDP", "torch": "torch DDP"}
#: The versions whose code the peak follows and was measured against (tests/data/step/*.json "versions").
LIBRARIES = (("torch", "torch"), ("transformers", "Transformers"), ("deepspeed", "DeepSpeed"), ("peft", "PEFT"),
             ("trl", "TRL"))
MODELLED_FOR = ", ".join(f"{label} {NEWEST[package]}" for package, label in LIBRARIES)


def versions_note(transformers: object = None, trl: str | None = None) -> str:
    """The versions the figures follow, and any installed beside zeromem at another release (its metadata, no import):
    those run other code than the peak follows (docs/memory-model.md, "Versions"). `transformers`: the Transformers
    release whose loss path the peak follows when one is given, set, pinned or installed (PeakInputs); `trl`: the
    installed or pinned TRL release whose SFT loss the peak follows (configs/recipes.trl_sft_loss)."""
    newest, followed = NEWEST["transformers"], MODELLED_FOR
    if transformers is not None:
        followed = followed.replace(f"Transformers {newest}",
                                    f"Transformers {transformers} (its loss and sdpa layers; the rest as {newest})", 1)
    if trl is not None and release(trl)[:2] != release(NEWEST["trl"])[:2]:
        followed = followed.replace(f"TRL {NEWEST['trl']}", f"TRL {trl} (its SFT loss; the rest as {NEWEST['trl']})", 1)
    other = [f"{label} {found}" for package, label in LIBRARIES
             if (found := installed(package)) is not None and release(found)[:2] != release(NEWEST[package])[:2]
             and (package != "transformers" or transformers is None) and (package != "trl" or trl is None)]
    return followed + (f" (installed here: {', '.join(other)})" if other else "")


def _lowest(plan) -> str:
    """The stage with the lowest verdict figure (the lowest stage among equals)."""
    return min(plan.stages, key=plan.verdict_bytes)


def verdict_line(plan) -> str:
    """The answer in one line: the configured stage (or, in the calculator, the cheapest that fits) against the
    budget — what it is judged on (peak or model state), by how much it fits or exceeds, the engine and ranks."""
    engine, ranks = ENGINE_NAMES.get(plan.family, plan.family), plan.inputs.world_size
    approximate = " (approximate)" if plan.approximate else ""
    budget, stage = plan.gpu_memory, plan.stage
    where = f"{engine}, {ranks} rank{'s' if ranks != 1 else ''}"
    if stage is None:
        found = plan.lowest_fitting(plan.offload) if budget is not None else None
        if found is not None:
            stage = found.stage
        else:
            best = _lowest(plan)
            figure, judged = plan.verdict_bytes(best), plan.judged_by(best)
            if budget is None:
                return (f"{stage_label(best, plan.family)} has the lowest {judged}: {format_bytes(figure)} per GPU "
                        f"({where}){approximate}; give --gpu-memory for a verdict")
            return (f"No stage fits {format_bytes(budget)} per GPU as configured{approximate}: the lowest is "
                    f"{stage_label(best, plan.family)}'s {judged} {format_bytes(figure)} "
                    f"({percent_of(figure, budget)}), {where}")
    label = stage_label(stage, plan.family)
    figure, judged = plan.verdict_bytes(stage), plan.judged_by(stage)
    cheapest = " — the cheapest stage that fits" if plan.stage is None else ""
    if budget is None:
        return f"{label}: {judged} {format_bytes(figure)} per GPU ({where}){approximate}"
    if figure <= budget:
        return (f"{label} fits{approximate}: {judged} {format_bytes(figure)} of {format_bytes(budget)} per GPU "
                f"({percent_of(figure, budget)}), {where}{cheapest}")
    return (f"{label} exceeds the budget{approximate}: {judged} {format_bytes(figure)} of {format_bytes(budget)} "
            f"per GPU ({percent_of(figure, budget)}, {format_bytes(figure - budget)} over), {where}")


def summary_table(plan) -> list[str]:
    """At most five columns, well within 80 characters: stage | model state | peak | of budget | verdict."""
    budget, with_peak = plan.gpu_memory, plan.peak_known
    head = ["stage", "model state", *(["peak"] if with_peak else []), *(["of budget", "verdict"] if budget else [])]
    rows = [head]
    for row in peak_rows(plan, 1):
        cells = [("▶ " if row.chosen else "  ") + row.label, format_bytes(row.state)]
        cells += [format_bytes(row.peak) if row.peak is not None else "—"] if with_peak else []
        rows.append(cells + ([row.percent, row.fit] if budget else []))
    rows[0][0] = "  " + rows[0][0]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    left = (0, len(head) - 1) if budget else (0,)
    return ["  ".join(cell.ljust(size) if i in left else cell.rjust(size)
                      for i, (cell, size) in enumerate(zip(row, widths))).rstrip() for row in rows]


def below_state_line(plan) -> str:
    """Why a stage's peak is below its model state (the contract counts P, G and O held together), or ""."""
    if not plan.peak_known:
        return ""
    below = [stage for stage in plan.stages
             if plan.peak.at(stage) is not None and plan.peak.at(stage) < plan.placement.gpu[stage]]
    if not below:
        return ""
    labels = ", ".join(stage_label(stage, plan.family) for stage in below)
    if plan.family == "deepspeed" and set(below) <= {"zero1", "zero2"}:
        return (f"{labels}: peak below model state — the model-state figure counts every 16-bit gradient at once, "
                "but DeepSpeed reduces them bucket by bucket into each rank's fp32 partition during backward "
                "(stage_1_and_2.py), so they are never all alive together")
    return (f"{labels}: peak below model state — that figure counts P, G and O held together, which the step never "
            "does at full size (-v shows what each phase holds)")


def coverage_line(plan) -> str:
    """What the figure leaves out, and the versions it is for."""
    if plan.approximate:
        head = f"{approximation_note(plan)} (-v says what each does)"
        if plan.peak is not None and not plan.peak_known:  # why there is no peak, said here too
            head += f"; model state only: the peak needs {'; '.join(plan.peak.missing)}"
        elif plan.peak is not None and (unknown := plan.peak.unknown(plan.stage or _lowest(plan))):
            head += f"; {unknown}"  # the stage's peak is unknown: why, without -v
    elif plan.peak is None:
        head = "model state only: no activations without the model's config.json and a sequence length"
    elif not plan.peak_known:
        head = f"model state only: the peak needs {'; '.join(plan.peak.missing)}"
    else:
        unknown = plan.peak.unknown(plan.stage or _lowest(plan))
        head = unknown or "every key the inputs set is modelled"
    source = getattr(plan.peak, "source", None)  # PeakInputs
    given, loss = getattr(source, "transformers_version", None), getattr(source, "sft_loss", None)
    return f"{head}; for {versions_note(given.value if given is not None else None, trl_followed(loss))}"


def suggestion_line(plan) -> str:
    """One suggestion: the cheapest change that fits when the configured stage does not, else where the details are."""
    if plan.stage is not None and plan.gpu_memory is not None and plan.verdict_bytes(plan.stage) > plan.gpu_memory:
        found = plan.cheapest_fit()
        if found is not None:
            return f"suggestion: {describe_suggestion(found, plan.family)}"
        return f"suggestion: {no_fit(plan.family, plan.peak_known)}"
    if plan.stage is None and plan.gpu_memory is not None and plan.lowest_fitting(plan.offload) is None:
        found = plan.cheapest_fit()
        if found is not None:
            return f"suggestion: {describe_suggestion(found, plan.family)}"
        return f"suggestion: {no_fit(plan.family, plan.peak_known)}"
    return "-v shows the arithmetic: P, G, O, the formulas, every phase and part, each input and where it came from"


def largest_line(plan, key: str, values: dict) -> str:
    """`longest sequence whose peak fits 80.0 GiB: ZeRO-3 8,221 tokens, ZeRO-1 7,090, ...; DDP none`."""
    what, unit = {"max_sequence_length": ("longest sequence", " tokens"),
                  "max_micro_batch": ("largest micro-batch", "")}[key]
    found = [f"{stage_label(stage, plan.family)} {format_count(value)}" for stage, value in values.items() if value]
    none = [stage_label(stage, plan.family) for stage, value in values.items() if not value]
    text = f"{what} whose peak fits {format_bytes(plan.gpu_memory)}: " + (", ".join(found) + unit if found else "none")
    return text + (f"; {', '.join(none)}: not even 1" if found and none else "")
