"""The step model's vocabulary: a part (what is alive, its bytes), a moment (what is alive together), a phase
(forward, backward, optimizer: its largest moment) — and the error every stage of it raises (pure)."""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple

PHASES = ("forward", "backward", "optimizer")


class Name(str, Enum):
    """A name of the closed vocabulary: compared, hashed, shown and written to JSON as its text."""

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(str.__str__(self), spec)


class P(Name):
    """Every part of a moment the step model names (an optimizer's states are named by
    memory/optimizer_step.py)."""

    PARTITION_COPIES_16_BIT = "16-bit partition copies"
    ACCUMULATED_GRADIENTS = "accumulated gradients"
    ACTIVATIONS = "activations"
    ALL_GATHER_OUTPUTS = "all-gather outputs"
    BF16_WEIGHT_COPIES = "bf16 weight copies"
    BUCKET_COPY = "bucket copy"
    CACHE_UPDATE_COPY = "cache update copy"
    CCE_INPUT_GRADIENT = "CCE input gradient"
    CCE_LOG_SUM_EXP_AND_LOGIT_AVERAGES = "CCE log-sum-exp and logit averages"
    CHUNKED_LOGITS = "chunked logits"
    COMPLETION_LOGITS_COPY = "completion logits copy"
    DDP_BUCKETS = "DDP buckets"
    DEEPEP_BUFFER = "DeepEP dispatch / combine buffer"
    EMBEDDING_GRADIENT = "embedding gradient"
    ENTROPY_CHUNKS = "entropy chunks"
    ENTROPY_METRIC = "entropy metric"
    FLCE_INPUT_GRADIENT = "FLCE input gradient"
    FLCE_LOGITS_CHUNK = "FLCE logits chunk"
    FP32_GRADIENT_BUFFER_BF16_OPTIMIZER = "fp32 gradient buffer (BF16_Optimizer)"
    FP32_GRADIENTS = "fp32 gradients"
    FP32_LOGITS = "fp32 logits"
    FP32_LOGITS_CHOSEN_REJECTED_ROWS = "fp32 logits (chosen / rejected rows)"
    FP32_LOGITS_COPY = "fp32 logits copy"
    FP32_LOGITS_GRADIENT = "fp32 logits gradient"
    FP32_MASTER = "fp32 master"
    FP32_TILE_TEMPORARIES = "fp32 tile temporaries"
    FP64_GRADIENT_COPY = "fp64 gradient copy"
    FRESH_GRADIENT = "fresh gradient"
    GATHERED_PARAMETERS = "gathered parameters"
    GRADIENT_PARTITIONS = "gradient partitions"
    GRADIENTS = "gradients"
    HPZ_SECONDARY_PARTITION = "hpZ secondary partition"
    HEAD_GRADIENT = "head gradient"
    HIDDEN_STATE_GRADIENT = "hidden-state gradient"
    KV_CACHE_GENERATION = "KV cache (generation)"
    LARGEST_GRADIENT = "largest gradient"
    LABEL_MASK = "label mask"
    LAST_HIDDEN_STATES = "last hidden states"
    LAYER_BACKWARD = "layer backward"
    LM_HEAD_GRADIENTS = "LM head gradients"
    LM_HEAD_GRADIENTS_FP32 = "LM head gradients (fp32)"
    LM_HEAD_TILE = "LM head tile"
    LOG_PROB_GRADIENTS = "log-prob gradients"
    LOG_PROB_KERNEL_GRADIENTS = "log-prob kernel gradients"
    LOG_SOFTMAX_GRADIENTS = "log-softmax gradients"
    LOG_SOFTMAX_INPUT_GRADIENT = "log-softmax input gradient"
    LOGITS = "logits"
    LOGITS_GRADIENT = "logits gradient"
    LOGITS_GRADIENTS = "logits gradients"
    LOGITS_GRADIENTS_NLL_LOG_PROBS_THEIR_SUM = "logits gradients (NLL, log-probs, their sum)"
    LOGITS_SELECTED_FOR_THE_METRICS = "logits selected for the metrics"
    NEXT_TOKEN_LOGITS_AND_PROBABILITIES = "next-token logits and probabilities"
    NLL_CHUNK = "NLL chunk (fp32 logits, log-softmax, exp, entropy term)"
    OPTIMIZER_SCRATCH = "optimizer scratch"
    OPTIMIZER_STATES = "optimizer states"
    PARAMETERS = "parameters"
    POLICY_KV_CACHE = "policy KV cache"
    PREFILL_LAYER_TRANSIENTS = "prefill layer transients"
    RECOMPUTED_LAYER = "recomputed layer"
    REDUCE_BUCKET = "reduce bucket"
    REDUCE_SCATTER = "reduce-scatter"
    REFERENCE_FORWARD = "reference forward"
    REFERENCE_FP32_LOGITS = "reference fp32 logits"
    REFERENCE_GATHERED_PARAMETERS = "reference gathered parameters"
    REFERENCE_KL_FP32_LOGITS = "reference KL fp32 logits"
    REFERENCE_KV_CACHE = "reference KV cache"
    REFERENCE_LM_HEAD_TILE = "reference LM head tile"
    REFERENCE_LOG_SOFTMAX = "reference log-softmax"
    REFERENCE_LOGITS = "reference logits"
    REFERENCE_MODEL = "reference model"
    RING_DKV_ALL_TO_ALL = "ring attention fp32 dK/dV all-to-all"
    RING_FP32_GRADIENTS = "ring attention q/k/v gradients (fp32 accumulators, a block's)"
    RING_FP32_MERGER = "ring attention fp32 merger (out, log-sum-exp, a block's out)"
    RING_KV_ALL_GATHER = "ring attention K/V all-gather (all chunks, the local copy sent)"
    SHIFTED_LOGITS_COPY = "shifted fp32 logits copy"
    TOKEN_IDS_AND_MASK = "token ids and mask"
    UNSHARDED_GRADIENTS = "unsharded gradients"


class M(Name):
    """Every moment of a step (a phase's moments are a subset, in the step's order; a later micro-batch's are these
    with accumulation.LATER after them)."""

    LOSS = "the loss"
    FIRST_ALL_GATHER = "the first all-gather"
    FIRST_FETCH = "the first fetch, held through the layers"
    POLICY_HEAD = "the policy's LM head"
    REFERENCE_FORWARD = "the reference model's forward"
    ENTROPY_METRIC = "the loss's entropy metric (both models' logits alive)"
    GRPO_PREFILL = "GRPO's generation: the prompt's prefill"
    GRPO_CACHE_UPDATE = "GRPO's generation: a layer's KV-cache update"
    GRPO_SAMPLING = "GRPO's generation: the last token's sampling"
    GRPO_UNSHARD = "GRPO's generation: the first layer's unshard (FSDP2)"
    ATTENTION_FORWARD = "the top attention's forward (its exchange buffers)"
    LOSS_BACKWARD = "the loss's backward"
    ATTENTION_RECOMPUTE = "an attention's recompute (its exchange buffers)"
    ATTENTION_BACKWARD = "an attention's backward (its exchange buffers)"
    HEAD_BACKWARD = "the head's backward"
    TOP_LAYER = "the top layer's backward"
    BOTTOM_LAYER = "the bottom layer's backward"
    END_OF_BACKWARD = "the end of backward"
    LARGEST_GRADIENT = "the largest gradient's reduction"
    TIED_GRADIENTS = "the tied weight's gradients"
    OPTIMIZER_STEP = "the optimizer step"
    PARTITION_COPY = "the 16-bit copy of the updated partition"
    GRADIENT_NORM = "the gradient norm"
    FP32_CONVERSION = "the fp32 conversion"
    FP32_PARTITION_COPY = "the fp32 copy of the gradient partition"


class StepInputError(ValueError):
    """An input the step model cannot use (named, with the allowed values); `input`: the peak input to blame."""

    def __init__(self, message: str, input: str | None = None) -> None:
        super().__init__(message)
        self.input = input


class Part(NamedTuple):
    name: str
    bytes: int


class Moment(NamedTuple):
    """One moment of a phase: what is alive together then (`total` bytes), its parts merged by name."""

    name: str  # "the loss's backward", "the top layer's backward", ...
    total: int
    parts: tuple[Part, ...]  # summing to total, largest first, zeros dropped


class Phase(NamedTuple):
    name: str  # forward, backward, optimizer
    peak: int
    moment: str  # where in the phase the peak sits ("the loss's backward", ...)
    parts: tuple[Part, ...]  # summing to peak, largest first
    moments: tuple[Moment, ...] = ()  # every moment of the phase in the step's order; the largest is `moment`

    def largest(self, count: int = 3) -> tuple[Part, ...]:
        return self.parts[:count]


#: phase → moment → its parts (what the engine functions return; `_phases` keeps each phase's largest moment)
Moments = dict[str, dict[str, list[Part]]]


def moment_of(name: str, parts: list[Part] | tuple[Part, ...]) -> Moment:
    """A moment as shown: its parts merged by name, largest first, zeros dropped, and their total."""
    merged: dict[str, int] = {}
    for part in parts:
        merged[part.name] = merged.get(part.name, 0) + part.bytes
    kept = tuple(sorted((Part(key, value) for key, value in merged.items() if value), key=lambda p: -p.bytes))
    return Moment(name, sum(part.bytes for part in kept), kept)


def phase_of(name: str, moments: dict[str, list[Part]]) -> Phase:
    """The moment with the largest live total (the first of equal ones) holds the phase's peak; every moment is
    kept, in the step's order, for a picture of the whole step (report/)."""
    every = tuple(moment_of(key, parts) for key, parts in moments.items())
    held = max(every, key=lambda moment: moment.total)
    return Phase(name, held.total, held.name, held.parts, every)


def phases_of(name_moments: Moments) -> dict[str, Phase]:
    return {name: phase_of(name, moments) for name, moments in name_moments.items()}


def with_gathered(base: list[Part], gathered: int | None) -> list[Part]:
    """`base` with its gathered parameters replaced by `gathered` (None: as it is)."""
    if gathered is None:
        return base
    return [*(part for part in base if part.name != P.GATHERED_PARAMETERS), Part(P.GATHERED_PARAMETERS, gathered)]


__all__ = ["M", "Moment", "Name", "P", "Moments", "PHASES", "Part", "Phase", "StepInputError", "moment_of", "phase_of", "phases_of",
           "with_gathered"]
