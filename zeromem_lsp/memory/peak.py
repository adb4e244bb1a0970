"""Peak GPU bytes per stage: model state + buffers + activations + the transient fp32 logits + reserved.

Beside the model-state plan, never instead of it: `state` is the plan's per-stage GPU figure (the seed
formula), untouched. Activations (zeromem_lsp.memory.activations) do not depend on the stage; buffers
(zeromem_lsp.memory.buffers) do. Pure arithmetic on exact ints; docs/memory-model.md, "Peak".
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import NamedTuple

from zeromem_lsp.memory.activations import DTYPE_BYTES, F32, ActivationInputError, Activations, estimate_activations
from zeromem_lsp.memory.buffers import DEEPSPEED_DEFAULTS, Buffers, fsdp_buffers, hf_auto_sizes, zero_buffers
from zeromem_lsp.configs.model_config import ModelShape
from zeromem_lsp.memory.lora_activations import LoraActivations, estimate_lora_activations
from zeromem_lsp.memory.stages import stage as stage_named
from zeromem_lsp.provenance import Given

#: How far the peak may be off: the ±10% acceptance bound every measured case of the whole step is held to
#: (issue 19's goal: none worse than ±10%). A peak beyond the budget by more than this is an error (ZM106);
#: inside it, a warning. docs/memory-model.md, "Model uncertainty".
MODEL_UNCERTAINTY = Fraction(1, 10)
#: CUDA context, library workspaces and allocator slack per GPU when `reserved` is not set (docs/memory-model.md).
DEFAULT_RESERVED = 2**30
NO_SHAPE = 'declare "parameters": {"from_config": "path/to/config.json"}'
AUTO_FILLED = {"reduce_bucket_size": "reduce_bucket_size", "stage3_prefetch_bucket_size": "stage3_prefetch_bucket_size"}
#: The zero_optimization sizes that make ZeRO's buffers, by field name (zero_buffers' keywords).
BUCKET_KEYS = ("reduce_bucket_size", "allgather_bucket_size", "stage3_prefetch_bucket_size", "stage3_max_live_parameters")


#: The peak's inputs by field name (the `zeromem` setting of the same name), with their display labels.
INPUT_LABELS = {"sequence_length": "sequence length", "micro_batch": "micro-batch",
                "gradient_checkpointing": "gradient checkpointing", "attention": "attention", "dtype": "dtype",
                "reserved": "reserved", "engine": "engine", "param_dtype": "parameter dtype",
                "optimizer_impl": "optimizer implementation"}


class LoraPeak(NamedTuple):
    """What LoRA changes in the activations (memory/lora_activations.py): the adapters, their dtype, and the
    dtype the forward runs in (fp32 after prepare_model_for_kbit_training's upcast of a quantized base)."""

    count: object  # memory/adapters.AdapterCount
    adapter_dtype: str
    activation_dtype: str


@dataclass(frozen=True)
class PeakInputs:
    shape: ModelShape | None = None
    shape_problem: str | None = None  # why there is no shape: no from_config, or what was wrong with it
    sequence_length: Given | None = None
    micro_batch: Given | None = None
    gradient_checkpointing: Given = Given(False, "default: off")
    attention: Given = Given("sdpa", "default: sdpa")
    dtype: Given | None = None
    reserved: Given = Given(DEFAULT_RESERVED, "default (CUDA context + allocator)")
    engine: Given | None = None  # torch | deepspeed | fsdp: the step the phase model follows
    param_dtype: Given | None = None  # the dtype weights are stored in (the phase model's param_dtype)
    optimizer_impl: Given | None = None  # foreach | for-loop | fused (the phase model's optimizer scratch)
    zero: dict[str, Given] = field(default_factory=dict)  # zero_optimization buffer keys as written
    fsdp_prefetch: Given = Given(True, "FSDP's default BACKWARD_PRE gathers the next layer ahead")
    parameters: int | None = None
    largest_layer: int | None = None  # parameters of the largest decoder layer (from_config)
    lora: LoraPeak | None = None  # a LoRA run: its activations replace full fine-tuning's

    def used(self) -> dict[str, Given]:
        """The inputs given, by field name (INPUT_LABELS order)."""
        found = {name: getattr(self, name) for name in INPUT_LABELS}
        return {name: given for name, given in found.items() if given is not None}


#: The phases of one training step, in order (the phase model's names).
PHASES = ("forward", "backward", "optimizer")
#: The phase today's single-moment sum describes: every saved activation and the fp32 logits gradient at the
#: loss's backward, beside the whole model state and the buffers (docs/memory-model.md, "Peak").
SUMMED_PHASE = "backward"
SUMMED_MOMENT = "the loss's backward, with every part counted at once"


class Part(NamedTuple):
    """A named share of a phase's peak (the phase model's Part)."""

    name: str
    bytes: int


class Phase(NamedTuple):
    """One phase's peak (the phase model's Phase): where in the phase it sits and its parts, largest first."""

    name: str
    peak: int
    moment: str
    parts: tuple[Part, ...]

    def largest(self, count: int = 3) -> tuple[Part, ...]:
        return self.parts[:count]


class StagePeak(NamedTuple):
    """The peak of one stage: the phases modelled (absent ones are not modelled, never zero), the phase
    holding the peak, and the reserve beside it. `total` = that phase's peak + reserved."""

    phases: dict[str, Phase]
    peak_phase: str
    reserved: int

    @property
    def total(self) -> int:
        return self.phases[self.peak_phase].peak + self.reserved

    @property
    def held(self) -> Phase:
        return self.phases[self.peak_phase]

    def to_json(self) -> dict:
        return {"phases": {name: phase.peak for name, phase in self.phases.items()}, "peak_phase": self.peak_phase,
                "moment": self.held.moment, "parts": {part.name: part.bytes for part in self.held.parts},
                "reserved_bytes": self.reserved}


@dataclass(frozen=True)
class Peak:
    state: dict[str, int]  # model state per stage (the plan's GPU figures)
    buffers: dict[str, Buffers] | None
    activations: Activations | None
    transient_logits: int  # the fp32 copy of the logits (forward) / their fp32 gradient (backward): 4·b·s·V
    reserved: int
    inputs: dict[str, Given]  # what was used by field name (INPUT_LABELS), with origins, for display
    missing: tuple[str, ...]  # each missing input, named
    zero_sizes: dict = field(default_factory=dict)  # zero_buffers' keyword arguments (DeepSpeed plans)
    family: str = "deepspeed"
    source: PeakInputs | None = None  # what it was computed from: `with_micro_batch` recomputes from it
    lora_activations: LoraActivations | None = None  # with an adapter: what is saved instead of `activations`

    @property
    def activation_bytes(self) -> int:
        """Activations live at the peak: everything saved, plus the recomputed layer with checkpointing."""
        acts = self.lora_activations if self.lora_activations is not None else self.activations
        if acts is None:
            return 0
        return acts.total + acts.recompute_bytes

    def buffer_bytes(self, stage: str) -> int:
        return self.buffers[stage].total if self.buffers is not None else 0

    def stage_peak(self, stage: str, state: int | None = None) -> StagePeak | None:
        """The peak at `stage` (with another model-state figure `state`, as another offload leaves), or None
        while an input is missing. The one place the peak is made: the phase model replaces this body with
        `step = estimate_step(...)` for the stage and the inputs' engine / param_dtype / optimizer_impl (and the
        offload `state` stands for), then `StagePeak(step.phases, step.peak_phase, self.reserved)` — its
        `Phase` / `Part` have the fields of the ones here."""
        if self.missing:
            return None
        return summed_peak(self, stage, self.state[stage] if state is None else state)

    def at(self, stage: str, state: int | None = None) -> int | None:
        """Peak bytes per GPU at `stage`, or None while an input is missing."""
        found = self.stage_peak(stage, state)
        return found.total if found is not None else None

    @property
    def peaks(self) -> dict[str, int] | None:
        if self.missing:
            return None
        return {stage: self.at(stage) for stage in self.state}  # type: ignore[misc]

    @property
    def stages(self) -> dict[str, StagePeak] | None:
        if self.missing:
            return None
        return {stage: self.stage_peak(stage) for stage in self.state}  # type: ignore[misc]

    def with_micro_batch(self, micro_batch: int) -> Peak | None:
        """The same peak with `micro_batch` sequences per GPU (None when it cannot be recomputed)."""
        if self.source is None or self.source.micro_batch is None:
            return None
        given = self.source.micro_batch
        inputs = replace(self.source, micro_batch=Given(micro_batch, given.note, given.path))
        return estimate_peak(self.state, self.family, inputs)

    def to_json(self) -> dict:
        """"activations", "buffers", "peak" (exact ints; null while an input is missing) and the inputs used."""
        acts = self.activations
        activations = None if acts is None else {
            "bytes": acts.total, "per_layer_bytes": acts.per_layer_bytes, "layers": acts.layers,
            "layer_bytes": acts.layer_bytes, "embedding_bytes": acts.embedding_bytes,
            "shared_bytes": acts.shared_bytes, "final_norm_bytes": acts.final_norm_bytes,
            "logits_bytes": acts.logits_bytes, "checkpointing": acts.checkpointing,
            "checkpoint_bytes": acts.checkpoint_bytes, "recompute_bytes": acts.recompute_bytes,
            "attention": acts.attention, "at_peak_bytes": self.activation_bytes,
            "transient_logits_bytes": self.transient_logits,
        }
        lora = self.lora_activations
        if activations is not None and lora is not None:
            activations["full_fine_tuning_bytes"] = acts.total
            activations["lora"] = {**lora._asdict(), "adapter_dtype": self.source.lora.adapter_dtype,
                                   "activation_dtype": self.source.lora.activation_dtype}
            activations["bytes"] = lora.total
        buffers = None if self.buffers is None else {
            stage: {"bytes": found.total, "parts": [{"name": part.name, "elements": part.elements, "bytes": part.bytes,
                                                     "rule": part.rule} for part in found.parts]}
            for stage, found in self.buffers.items()}
        stages = self.stages
        return {"activations": activations, "buffers": buffers, "reserved_bytes": self.reserved, "peak": self.peaks,
                "phases": None if stages is None else {key: found.to_json() for key, found in stages.items()},
                "peak_inputs": {name: {"value": item.value, "from": item.note} for name, item in self.inputs.items()},
                "peak_missing": list(self.missing)}

    def components(self, stage: str) -> list[tuple[str, int]]:
        """(name, bytes) of everything beside model state at `stage`, largest first."""
        parts = [("activations", self.activation_bytes), ("fp32 logits copy", self.transient_logits),
                 ("buffers", self.buffer_bytes(stage)), ("reserved", self.reserved)]
        return sorted(parts, key=lambda part: -part[1])


def summed_peak(peak: Peak, stage: str, state: int) -> StagePeak:
    """Today's peak: model state + buffers + activations + the fp32 logits copy summed as if alive at once,
    which is the loss's backward (SUMMED_PHASE); the forward and optimizer phases are not modelled, so they are
    absent rather than guessed. The reserve stays beside the phase (StagePeak.reserved)."""
    parts = [Part("model state", state), *(Part(name, size) for name, size in peak.components(stage)
                                          if name != "reserved")]
    parts = sorted((part for part in parts if part.bytes), key=lambda part: -part.bytes)
    phase = Phase(SUMMED_PHASE, sum(part.bytes for part in parts), SUMMED_MOMENT, tuple(parts))
    return StagePeak({SUMMED_PHASE: phase}, SUMMED_PHASE, peak.reserved)


def _element_count(entry: Given | None, key: str, shape: ModelShape | None, missing: list[str]) -> int | None:
    """A bucket size as DeepSpeed receives it: DeepSpeed's default when unset, HF's fill for "auto"."""
    if entry is None:
        return None
    value = entry.value
    if value == "auto":
        if key not in AUTO_FILLED:
            return None  # HF leaves it to DeepSpeed's default
        if shape is None:
            missing.append(f'the model\'s hidden size, to fill "auto" {key} as HF does (parameters.from_config)')
            return None
        return getattr(hf_auto_sizes(shape.hidden), AUTO_FILLED[key])
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None  # invalid: reported by the DeepSpeed rules; DeepSpeed's default is counted
    return value


def zero_sizes(inputs: PeakInputs, element_bytes: int, missing: list[str]) -> dict:
    """zero_buffers' keyword arguments for this config, keyed by zero_optimization field: sizes as
    DeepSpeed receives them."""
    sizes: dict = {key: _element_count(inputs.zero.get(key), key, inputs.shape, missing) for key in BUCKET_KEYS}
    overlap = inputs.zero.get("overlap_comm")
    sizes["overlap_comm"] = overlap.value if overlap is not None and isinstance(overlap.value, bool) else None
    return {**sizes, "parameters": inputs.parameters, "element_bytes": element_bytes}


def _fsdp_stage_buffers(inputs: PeakInputs, stages: tuple[str, ...], element_bytes: int,
                        missing: list[str]) -> dict[str, Buffers] | None:
    if inputs.largest_layer is None:
        missing.append("the largest layer's parameters, for FSDP's gathered layer (parameters.from_config)")
        return None
    prefetch = inputs.fsdp_prefetch.value is not False
    return {stage: Buffers(()) if stage == "ddp" else fsdp_buffers(inputs.largest_layer, element_bytes, prefetch)
            for stage in stages}


def estimate_peak(state: dict[str, int], family: str, inputs: PeakInputs) -> Peak:
    """The peak per stage of `state` (the plan's model state), or a Peak naming what is missing."""
    missing: list[str] = []
    if inputs.shape is None:
        missing.append(f"the model shape: {inputs.shape_problem or NO_SHAPE}")
    if inputs.sequence_length is None:
        missing.append('the sequence length: declare "sequence_length" in the zeromem block')
    if inputs.micro_batch is None:
        missing.append('the micro-batch per GPU: set train_micro_batch_size_per_gpu or declare "micro_batch"')
    if inputs.dtype is None or inputs.dtype.value not in DTYPE_BYTES:
        missing.append('the training precision: declare "precision" in the zeromem block')
    element_bytes = DTYPE_BYTES.get(inputs.dtype.value, 2) if inputs.dtype is not None else 2  # type: ignore[arg-type]
    stages, sizes = tuple(state), {}
    if family == "fsdp":
        buffers = _fsdp_stage_buffers(inputs, stages, element_bytes, missing)
    elif family == "torch":  # DDP's gradient buckets are not counted yet (docs/recipes.md, Limits)
        buffers = {stage: Buffers(()) for stage in stages}
    else:
        sizes = zero_sizes(inputs, element_bytes, missing)
        buffers = {stage: zero_buffers(stage_named(stage).number, **sizes) for stage in stages}
    activations, transient = None, 0
    if not missing:
        try:
            activations = estimate_activations(inputs.shape, inputs.sequence_length.value,  # type: ignore[union-attr,arg-type]
                                               inputs.micro_batch.value, inputs.dtype.value,  # type: ignore[union-attr,arg-type]
                                               bool(inputs.gradient_checkpointing.value), str(inputs.attention.value))
        except ActivationInputError as error:
            missing.append(str(error))
        else:
            tokens = inputs.micro_batch.value * inputs.sequence_length.value  # type: ignore[union-attr,operator]
            transient = F32 * tokens * inputs.shape.vocab  # type: ignore[union-attr]
    lora = _lora_activations(inputs, missing) if not missing and inputs.lora is not None else None
    return Peak(state=dict(state), buffers=buffers, activations=activations, transient_logits=transient,
                reserved=int(inputs.reserved.value), inputs=inputs.used(), missing=tuple(missing),  # type: ignore[arg-type]
                zero_sizes=sizes, family=family, source=inputs, lora_activations=lora)


def _lora_activations(inputs: PeakInputs, missing: list[str]) -> LoraActivations | None:
    """What one micro-batch keeps with LoRA on a frozen base, or None with the reason in `missing`."""
    lora = inputs.lora
    try:
        return estimate_lora_activations(
            inputs.shape, lora.count, inputs.sequence_length.value, inputs.micro_batch.value,  # type: ignore[union-attr,arg-type]
            lora.activation_dtype, lora.adapter_dtype, str(inputs.attention.value),  # type: ignore[union-attr]
            bool(inputs.gradient_checkpointing.value))
    except ActivationInputError as error:
        missing.append(f"LoRA activations: {error}")
        return None


__all__ = ["DEFAULT_RESERVED", "DEEPSPEED_DEFAULTS", "INPUT_LABELS", "MODEL_UNCERTAINTY", "PHASES", "Part", "Peak", "PeakInputs", "Phase",
           "StagePeak", "estimate_peak"]
