"""Peak GPU bytes per stage: the largest phase of one whole training step (zeromem_lsp.memory.step) + reserved.

Beside the model-state plan (`state`, the seed formula, untouched). The peak is the phase model fed from what the plan
knows (engine, stage, ranks, dtypes, optimizer, buckets, offload); where it refuses an input the stage's peak is
unknown, with why. Buffers stay for the bucket settings' hover costs. docs/memory-model.md, "Peak".
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from fractions import Fraction
from collections.abc import Callable
from typing import Any, NamedTuple, cast

from zeromem_lsp.memory.activations import F32, ActivationInputError, Activations, estimate_activations
from zeromem_lsp.memory.buffers import DEEPSPEED_DEFAULTS, Buffers, hf_auto_sizes, zero_buffers
from zeromem_lsp.configs.families import weights
from zeromem_lsp.configs.model_config import ModelShape
from zeromem_lsp.configs.parallelism import Parallelism, parallelism_of
from zeromem_lsp.configs.parallel_shape import rank_shape, rank_tokens
from zeromem_lsp.configs.transformers_paths import transformers_path, version_of
from zeromem_lsp.memory.adapters import AdapterCount, Quantization
from zeromem_lsp.memory.model_state import ceil_div
from zeromem_lsp.memory.lora_activations import LoraActivations, estimate_lora_activations
from zeromem_lsp.memory.precision import DTYPE_BYTES
from zeromem_lsp.memory.stages import Offload, stage as stage_named
from zeromem_lsp.configs.settings_values import GRPO_KEYS
from zeromem_lsp.memory.preference import Preference, estimate_preference_step, rows
from zeromem_lsp.memory.step import FrozenBase, Phase, Step, StepInputError, kept_on_device, step_peak
from zeromem_lsp.gpu.reserved import RESERVE_PARTS, Reserve, reserve
from zeromem_lsp.provenance import Given

#: How far the peak may be off: the ±10% acceptance bound every measured case of the whole step is held to
#: (issue 19's goal: none worse than ±10%). A peak beyond the budget by more than this is an error (ZM106);
#: inside it, a warning. docs/memory-model.md, "Model uncertainty".
MODEL_UNCERTAINTY = Fraction(1, 10)
#: `reserved` left unset: each stage's reserve is modelled (zeromem_lsp.gpu.reserved.Reserve; docs/gpu.md).
MODELLED = "modelled"
NO_SHAPE = 'declare "parameters": {"from_config": "path/to/config.json"}'
AUTO_FILLED = ("reduce_bucket_size", "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold")
#: The zero_optimization sizes that make ZeRO's buffers, by field name (zero_buffers' keywords).
BUCKET_KEYS = ("reduce_bucket_size", "allgather_bucket_size", "stage3_prefetch_bucket_size", "stage3_max_live_parameters")


#: The peak's inputs by field name (the `zeromem` setting of the same name), with their display labels.
INPUT_LABELS = {"sequence_length": "sequence length", "micro_batch": "micro-batch",
                "gradient_accumulation_steps": "gradient accumulation steps",
                "gradient_checkpointing": "gradient checkpointing", "attention": "attention", "dtype": "dtype",
                "reserved": "reserved", "engine": "engine", "fsdp_version": "FSDP version",
                "param_dtype": "parameter dtype",
                "optimizer_impl": "optimizer implementation", "loss_kernel": "loss kernel", "trainer": "trainer",
                "precompute_ref_log_probs": "precomputed reference log-probs", "sft_loss": "SFT loss",
                "kbit_prepare": "k-bit preparation", "transformers_version": "Transformers version",
                # GRPO's (memory/grpo.py KEYS), shown for trainer grpo only
                "max_completion_length": "GRPO max completion length", "steps_per_generation": "GRPO steps per generation",
                "beta": "GRPO beta", "use_vllm": "GRPO use_vllm"}


class LoraPeak(NamedTuple):
    """A LoRA run's adapters, their dtype, the forward's, the plan's P, G, O, the base's quantization (gpu/wrap.py)."""

    adapters: AdapterCount
    adapter_dtype: str
    activation_dtype: str
    parameter_bytes: int = 0
    gradient_bytes: int = 0
    optimizer_bytes: int = 0
    engine: str = "peft"  # adapters.ENGINES: DeepSpeed steps an fp32 partition beside its master copy
    dropout: bool = False  # lora_dropout > 0: each adapter keeps its dropped-out input and a mask (lora_activations)
    quantization: Quantization = Quantization()  # the frozen linear weights' (bitsandbytes)
    frozen_width: int = 2  # bytes per frozen float parameter (experts, embeddings, norms): the model's dtype, fp32
    # after prepare_model_for_kbit_training's upcast


@dataclass(frozen=True)
class PeakInputs:
    shape: ModelShape | None = None
    shape_problem: str | None = None  # why there is no shape: no from_config, or what was wrong with it
    sequence_length: Given | None = None
    micro_batch: Given | None = None
    gradient_accumulation_steps: Given = Given(1, "default: 1 (one micro-batch per optimizer step)")  # accumulation.py
    gradient_checkpointing: Given = Given(False, "default: off")
    attention: Given = Given("sdpa", "default: sdpa")
    dtype: Given | None = None  # the compute dtype (activations)
    reserved: Given = Given(MODELLED, f"default: modelled per stage ({RESERVE_PARTS}; docs/gpu.md)")
    engine: Given | None = None  # torch | deepspeed | fsdp: the step the phase model follows
    fsdp_version: Given | None = None  # 1 | 2 when the engine is fsdp (resolved/peak_inputs.fsdp_version)
    param_dtype: Given | None = None  # the dtype weights are stored in (the phase model's param_dtype)
    optimizer_impl: Given | None = None  # foreach | for-loop | fused (the phase model's optimizer scratch)
    loss_kernel: Given = Given("hf", "default: Transformers' ForCausalLMLoss")  # settings_values.LOSS_KERNELS
    zero: dict[str, Given] = field(default_factory=dict)  # zero_optimization buffer keys as written
    parameters: int | None = None
    ranks: int = 1  # the world size (the shard group under a hybrid FSDP strategy)
    optimizer: str = "adamw"  # the plan's optimizer (precision.OPTIMIZERS)
    lora: LoraPeak | None = None  # a LoRA run: a frozen base, the adapter's state and activations
    trainer: Given = Given("sft", "default: sft (the model's own loss)")  # dpo | kto | ... (memory/preference.py)
    precompute_ref_log_probs: Given | None = None  # shown when given (it matters to dpo and kto only)
    preference_loss: Given | None = None  # the DPO loss a recipe's tool runs when not TRL's fused head ("logits")
    sft_loss: Given | None = None  # "fused": supervised fine-tuning through TRL's SFTTrainer (its fused LM head)
    reference_model: Given | None = None  # a recipe's reference named apart from the policy: "copy", else why not
    reference_dtype: Given | None = None  # the reference copy's dtype when not the policy's (a recipe's reading)
    generation: dict[str, Given] = field(default_factory=dict)  # GRPO's inputs (resolved/peak_inputs.generation_inputs)
    kbit_prepare: Given | None = None  # a quantized base: whether prepare_model_for_kbit_training ran (lora's dtypes)
    transformers_version: Given | None = None  # what it keeps (configs/transformers_paths.py); None: the newest
    parallel: dict[str, Given] = field(default_factory=dict)  # N-D degrees by Parallelism field, with their sources

    def parallelism(self) -> Parallelism:
        return parallelism_of(self.parallel)  # configs/parallelism.py: defaults for absent keys

    def used(self) -> dict[str, Given]:
        """The inputs given, by field name (INPUT_LABELS order); GRPO's with trainer grpo."""
        grpo = self.generation if str(value_of(self.trainer)) == "grpo" else {}
        found = {name: grpo.get(name) if name in GRPO_KEYS else getattr(self, name) for name in INPUT_LABELS}
        return {name: given for name, given in found.items() if given is not None}


#: The Step of the inputs at a stage under an offload (with an adapter: over its frozen base) and a trainer's
#: Preference (None: the model's own loss): the settings read into the step model outside memory/
#: (resolved/step_inputs.stage_step).
StepOf = Callable[[PeakInputs, str, str, Offload | None, LoraActivations | None], tuple[Step, Preference | None]]


class StagePeak(NamedTuple):
    """One stage's peak: its phases, the phase holding the peak, the reserve beside it (`gpu`'s when modelled)."""

    phases: dict[str, Phase]
    peak_phase: str
    reserved: int
    gpu: Reserve | None = None

    @property
    def total(self) -> int:
        return self.phases[self.peak_phase].peak + self.reserved

    @property
    def held(self) -> Phase:
        return self.phases[self.peak_phase]

    def to_json(self) -> dict[str, Any]:
        return {"phases": {name: phase.peak for name, phase in self.phases.items()}, "peak_phase": self.peak_phase,
                "moment": self.held.moment, "parts": {part.name: part.bytes for part in self.held.parts},
                "reserved_bytes": self.reserved, **({} if self.gpu is None else {"gpu": self.gpu.to_json()})}


class UnknownPeak(NamedTuple):
    """A stage whose peak the phase model cannot give (an unsupported combination): why, never a guess."""

    why: str
    input: str | None = None  # the peak input (PeakInputs field) that the phase model refuses, when one is


@dataclass(frozen=True)
class Peak:
    state: dict[str, int]  # model state per stage (the plan's GPU figures)
    buffers: dict[str, Buffers] | None  # the bucket settings' sizes per stage (their hover costs)
    activations: Activations | None
    reserved: int | None  # the reserve the user set (None: modelled per stage, StagePeak.gpu)
    inputs: dict[str, Given]  # what was used by field name (INPUT_LABELS), with origins, for display
    missing: tuple[str, ...]  # each missing input, named
    source: PeakInputs  # what it was computed from: `with_micro_batch` recomputes from it
    step_of: StepOf  # the typed Step of `source` at a stage (resolved/step_inputs.stage_step)
    family: str = "deepspeed"
    offload: Offload | None = None  # the plan's (its `moves(stage)`: which of P, G, O leave the GPU)
    lora_activations: LoraActivations | None = None  # with an adapter: what is saved instead of `activations`
    #: each stage's step (and each variant: another micro-batch, checkpointing) computed once per Peak
    _steps: dict[tuple[str, Offload | None], StagePeak | UnknownPeak] = field(default_factory=dict, compare=False,
                                                                              repr=False)
    _variants: dict[tuple[str, int], Peak | None] = field(default_factory=dict, compare=False, repr=False)

    def _variant(self, key: tuple[str, int], make: Callable[[], Peak | None]) -> Peak | None:
        if key not in self._variants:
            self._variants[key] = make()
        return self._variants[key]

    def stage_step(self, stage: str, offload: Offload | None = None) -> StagePeak | UnknownPeak | None:
        """The peak at `stage` under `offload` (default: the plan's): the phase model's phases, or why it
        cannot be known; None while an input is missing. The one place the peak is made (once per stage and
        offload: every reader of a plan — rules, hover, hints, text, JSON — shares it)."""
        if self.missing:
            return None
        key = (stage, offload or self.offload)
        if key not in self._steps:
            self._steps[key] = self._stage_step(stage, offload)
        return self._steps[key]

    def _stage_step(self, stage: str, offload: Offload | None = None) -> StagePeak | UnknownPeak:
        placed = offload or self.offload
        try:
            step, trainer = self.step_of(self.source, self.family, stage, placed, self.lora_activations)
            found = step_peak(step) if trainer is None else estimate_preference_step(trainer, step)
        except StepInputError as error:
            return UnknownPeak(str(error), error.input)
        reserved, gpu = reserve(found, self.source, stage, self.reserved, placed)
        return StagePeak(found.phases, found.peak_phase, reserved, gpu)

    def stage_peak(self, stage: str, offload: Offload | None = None) -> StagePeak | None:
        """The known peak at `stage` (None while missing or unknown: `unknown(stage)` says why)."""
        found = self.stage_step(stage, offload)
        return found if isinstance(found, StagePeak) else None

    def unknown(self, stage: str, offload: Offload | None = None) -> str | None:
        """`peak unknown: <why>` when the phase model refuses this stage's inputs."""
        found = self.stage_step(stage, offload)
        return f"peak unknown: {found.why}" if isinstance(found, UnknownPeak) else None

    def unknown_input(self, stage: str) -> Given | None:
        """The input the phase model refuses at `stage`, when it names one."""
        found = self.stage_step(stage)
        return self.inputs.get(found.input) if isinstance(found, UnknownPeak) and found.input else None

    def at(self, stage: str, offload: Offload | None = None) -> int | None:
        """Peak bytes per GPU at `stage`, or None while an input is missing or the peak is unknown."""
        found = self.stage_peak(stage, offload)
        return found.total if found is not None else None

    @property
    def peaks(self) -> dict[str, int | None] | None:
        if self.missing:
            return None
        return {stage: self.at(stage) for stage in self.state}

    @property
    def stages(self) -> dict[str, StagePeak | None] | None:
        if self.missing:
            return None
        return {stage: self.stage_peak(stage) for stage in self.state}

    def with_micro_batch(self, micro_batch: int) -> Peak | None:
        """The same peak with `micro_batch` sequences per GPU (None when it cannot be recomputed)."""
        if self.source.micro_batch is None:
            return None
        return self._variant(("micro_batch", micro_batch), lambda: self._with_micro_batch(micro_batch))

    def _with(self, **changes: Any) -> Peak:
        """The same peak from these inputs changed (PeakInputs fields)."""
        return estimate_peak(self.state, self.family, replace(self.source, **changes), self.step_of, self.offload)

    def _with_micro_batch(self, micro_batch: int) -> Peak:
        given = self.source.micro_batch
        assert given is not None
        changes = {"micro_batch": Given(micro_batch, given.note, given.path)}
        factor, rest = divmod(_count(given), micro_batch)
        if factor > 1 and not rest:  # the global batch kept, as the fix does (rules/memory.micro_batch_edits)
            before = _count(self.source.gradient_accumulation_steps)
            changes["gradient_accumulation_steps"] = Given(
                before * factor, f"{before} × {factor}, the micro-batch divided by {factor}")
        return self._with(**changes)

    def with_sequence_length(self, tokens: int) -> Peak | None:
        """The same peak at `tokens` tokens per sequence (None when it cannot be recomputed)."""
        given = self.source.sequence_length
        if given is None:
            return None
        return self._variant(("sequence_length", tokens),
                             lambda: self._with(sequence_length=Given(tokens, "searched", given.path)))

    def largest(self, name: str, stage: str, budget: int, limit: int = 1 << 24) -> int | None:
        """The largest whole value of `name` ("sequence_length" or "micro_batch") whose peak at `stage` fits `budget`,
        by search over the model (the peak grows with both); None when even 1 does not fit or the peak is unknown,
        `limit` when that fits too."""
        vary = {"sequence_length": self.with_sequence_length, "micro_batch": self.with_micro_batch}[name]

        def fits(value: int) -> bool | None:
            found = vary(value)
            total = found.at(stage) if found is not None and not found.missing else None
            return None if total is None else total <= budget

        if not fits(1):
            return None
        low, high = 1, 2
        while high < limit and fits(high):
            low, high = high, high * 2
        if high >= limit and fits(limit):
            return limit
        while high - low > 1:  # fits(low), not fits(high)
            middle = (low + high) // 2
            low, high = (middle, high) if fits(middle) else (low, middle)
        return low

    def with_checkpointing(self) -> Peak | None:
        """The same peak with gradient checkpointing on (None when it is on already or cannot be recomputed)."""
        if self.missing or value_of(self.source.gradient_checkpointing):
            return None
        given = self.source.gradient_checkpointing
        return self._variant(("checkpointing", 1),
                             lambda: self._with(gradient_checkpointing=Given(True, "on (suggested)", given.path)))

    def with_zero(self, sizes: dict[str, int]) -> Peak:
        """The same peak with these zero_optimization sizes (elements) in place of the config's."""
        return self._with(zero={**self.source.zero, **{key: Given(value, "a smaller bucket") for key, value in
                                                       sizes.items()}})

    def to_json(self) -> dict[str, Any]:
        """"activations", "buffers", "peak" (exact ints; null while an input is missing or unknown), the phases
        per stage and the inputs used."""
        acts = self.activations
        activations = None if acts is None else {
            "bytes": acts.total, **{name: value for name, value in acts._asdict().items() if name != "total"}}
        lora, adapter = self.lora_activations, self.source.lora
        if acts is not None and activations is not None and lora is not None and adapter is not None:
            activations["full_fine_tuning_bytes"] = acts.total
            activations["lora"] = {**lora._asdict(), "adapter_dtype": adapter.adapter_dtype,
                                   "adapter_compute_dtype": lora_compute_dtype(self.source, self.family),
                                   "activation_dtype": adapter.activation_dtype, "step": FROZEN_STEP}
            activations["bytes"] = lora.total
        buffers = None if self.buffers is None else {
            stage: {"bytes": found.total, "parts": [{"name": part.name, "elements": part.elements, "bytes": part.bytes,
                                                     "rule": part.rule} for part in found.parts]}
            for stage, found in self.buffers.items()}
        stages = None if self.missing else {stage: self.stage_step(stage) for stage in self.state}
        phases = None if stages is None else {
            key: found.to_json() if isinstance(found, StagePeak) else {"unknown": found.why if found else None}
            for key, found in stages.items()}
        return {"activations": activations, "buffers": buffers, "reserved_bytes": self.reserved, "peak": self.peaks,
                "phases": phases,
                "peak_inputs": {name: {"value": item.value, "from": item.note} for name, item in self.inputs.items()},
                "peak_missing": list(self.missing)}


def value_of(entry: Given | None) -> object:
    return entry.value if entry is not None else None


def engine_and_dtypes(inputs: PeakInputs, family: str) -> tuple[str, str, str]:
    """(the engine: a setting, else the config's family; the compute dtype; the dtype weights are stored in: the
    param_dtype setting, else the compute dtype), read once for every reader of the inputs."""
    compute = str(value_of(inputs.dtype))
    return str(value_of(inputs.engine) or family), compute, str(value_of(inputs.param_dtype) or compute)


def _count(entry: Given) -> int:
    """A count the settings layer checked (an int, or a float with an integral value)."""
    value = entry.value
    assert isinstance(value, (int, float)), value
    return int(value)


#: How the peak with an adapter is made (JSON `activations.lora.step`; docs/adapters.md).
FROZEN_STEP = ("the step over a frozen base: measured as whole steps with PEFT on CPU (LoRA and QLoRA NF4, "
               "docs/adapters.md: torch AdamW foreach, for-loop, fused; DeepSpeed ZeRO-0 at 1 and 2 ranks, ZeRO-1, "
               "ZeRO-2 and ZeRO-3 at 2 ranks; FSDP2 with and without resharding or sharding, bf16 shards or fp32 "
               "ones under bf16 mixed precision, and FSDP1 FULL_SHARD, SHARD_GRAD_OP, NO_SHARD and mixed precision, "
               "at 2 ranks; every phase within ±5%, worst +4.6%, FSDP within ±1%); derived from the measured terms, "
               "not measured whole, under offload")
#: Which of P, G, O a stage shards (the contract's placement, docs/memory-model.md): ZeRO-1 O, ZeRO-2 G and O,
#: ZeRO-3 all three (FSDP's SHARD_GRAD_OP and FULL_SHARD use the zero2 / zero3 keys).
SHARDED = {"ddp": (False, False, False), "zero1": (False, False, True), "zero2": (False, True, True),
           "zero3": (True, True, True)}


def adapter_placement(lora: LoraPeak, stage: str, ranks: int, offload: Offload | None) -> tuple[int, int, int]:
    """(P, G, O) bytes on one GPU at `stage`: each sharded as the stage formula shards it (one ceiling each, so
    their sum is at most 2 B above the pooled formula's), 0 when the offload moves it."""
    moves = offload.moves(stage) if offload is not None else (False, False, False)
    own = (lora.parameter_bytes, lora.gradient_bytes, lora.optimizer_bytes)
    p, g, o = (0 if moved else (ceil_div(size, ranks) if sharded else size)
               for size, sharded, moved in zip(own, SHARDED[stage], moves))
    return p, g, o


def expert_share(lora: LoraPeak, shape: ModelShape, e: int) -> tuple[LoraPeak, int]:
    """A LoRA run's P and parameter count on one rank of expert parallelism: the frozen routed experts (stacked, in
    the frozen weights' float width) ÷ e, as the full fine-tuning EP step divides them (configs/parallel_shape.py
    `rank_shape`). Adapters on routed experts (target_parameters) are refused here: how the EP plugin places them
    (each rank's experts' adapters, or all of them, and their gradients' reduction) is not read."""
    count = lora.adapters
    if e == 1:
        return lora, count.all
    if any(target.weight.experts for target in count.targets):
        raise StepInputError("LoRA on routed experts (target_parameters) under expert parallelism is not modelled: "
                             "how the expert-parallel plugin places their adapters and reduces their gradients is not "
                             "read", "target_parameters")
    routed = sum(weight.parameters * weight.instances for weight in weights(shape) if weight.experts)
    moved = routed - ceil_div(routed, e)
    return lora._replace(parameter_bytes=lora.parameter_bytes - moved * lora.frozen_width), count.all - moved


def frozen_base(inputs: PeakInputs, acts: LoraActivations, stage: str, offload: Offload | None,
                engine: str = "") -> FrozenBase:
    """The step model's frozen base for a LoRA run at `stage`: the adapter's P, G, O as placed, the trainable
    tensors this rank steps on (DeepSpeed: an fp32 partition beside its fp32 gradients), LoRA's activations.
    Under FSDP without resharding (the zero2 key) the persistent parameters are still shards: the gathered
    layers kept from forward to backward are the step's own part (the engine spec's `gathered`), not P."""
    lora = inputs.lora
    assert lora is not None and inputs.shape is not None
    lora, all_parameters = expert_share(lora, inputs.shape, inputs.parallelism().expert)
    deepspeed, ranks, count = lora.engine == "deepspeed", inputs.ranks, lora.adapters
    adapter = DTYPE_BYTES[lora.adapter_dtype]

    def shard(size: int, at: str = stage, part: int = 2) -> int:  # as `stage` (or `at`) shards P, G or O (`part`)
        return ceil_div(size, ranks) if SHARDED[at][part] else size

    # DeepSpeed's ZeRO-1 holds the rank's gradient partition in the step as ZeRO-2 does: its epilogue flattens the
    # partition whether gradients are partitioned or not (stage_1_and_2.py `independent_gradient_partition_epilogue`
    # → `get_flat_partition`; measured: lora-ds-z1-*); under `no_sync` (accumulation) `param.grad` stays whole
    held_at = "zero2" if deepspeed and stage == "zero1" else stage
    params = adapter_placement(lora, "zero3" if engine == "fsdp" and stage == "zero2" else stage, ranks, offload)[0]
    _, grads, states = adapter_placement(lora, held_at, ranks, offload)
    # modules_to_save copies are in the model's dtype (DeepSpeed: its recast; PEFT: the forward's, fp32 after
    # prepare_model_for_kbit_training), the adapters in theirs; a trained head's gradient exists from its backward
    copy = adapter if deepspeed else DTYPE_BYTES[lora.activation_dtype]
    head = shard(copy * sum(t.weight.elements for t in count.saved if t.weight.kind == "head"), held_at, 1)
    # torch AdamW's scratch follows each stepped tensor's dtype and, for-loop, the largest one: DeepSpeed steps one
    # flat fp32 partition (`trainable` × 4 B), torch and FSDP each adapter tensor (FSDP: its dim-0 shard); the
    # largest (elements): an A (r × in) or B (out × r), E times for stacked experts, or a modules_to_save copy
    largest_adapter = max((max(t.weight.experts, 1) * t.rank * max(t.weight.in_features, t.weight.out_features)
                           for t in count.targets), default=0)
    largest_copy = max((t.weight.elements for t in count.saved), default=0)
    stepped = 0 if deepspeed else adapter * count.adapters + copy * count.saved_copies
    largest = 0 if deepspeed else max(adapter * largest_adapter, copy * largest_copy)
    if deepspeed and stage == "ddp":  # ZeRO-0 keeps an fp32 master per parameter: for-loop steps one at a time
        largest = F32 * max(largest_adapter, largest_copy)  # (measured: lora-ds-z0-*)
    return FrozenBase(params, grads, states, shard(count.trainable), F32 if deepspeed else adapter, acts.total,
                      acts.recompute_bytes, lora.activation_dtype, lora.parameter_bytes, all_parameters,
                      fp32_gradients=deepspeed and adapter < F32, stepped=shard(stepped), largest=shard(largest),
                      head_gradient=0 if grads == 0 else head, outside=acts.outside_bytes,
                      accumulated=adapter_placement(lora, stage, ranks, offload)[1])


def element_count(entry: Given | None, key: str, shape: ModelShape | None, missing: list[str]) -> int | None:
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
        return int(getattr(hf_auto_sizes(shape.hidden), key))
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None  # invalid: reported by the DeepSpeed rules; DeepSpeed's default is counted
    return value


def zero_sizes(inputs: PeakInputs, element_bytes: int, missing: list[str]) -> dict[str, Any]:
    """zero_buffers' keyword arguments for this config, keyed by zero_optimization field: sizes as
    DeepSpeed receives them."""
    sizes: dict[str, Any] = {key: element_count(inputs.zero.get(key), key, inputs.shape, missing) for key in BUCKET_KEYS}
    overlap = inputs.zero.get("overlap_comm")
    sizes["overlap_comm"] = overlap.value if overlap is not None and isinstance(overlap.value, bool) else None
    return {**sizes, "parameters": inputs.parameters, "element_bytes": element_bytes}


def activation_dtype(inputs: PeakInputs, family: str) -> str:
    """The dtype the step computes in (as estimate_step takes it): the weights' under DeepSpeed and without
    autocast or mixed precision, else the 16-bit compute dtype over fp32 weights."""
    engine, compute, param_dtype = engine_and_dtypes(inputs, family)
    return param_dtype if engine == "deepspeed" or compute == "fp32" else compute


def estimate_peak(state: dict[str, int], family: str, inputs: PeakInputs, step_of: StepOf,
                  offload: Offload | None = None) -> Peak:
    """The peak per stage of `state` (the plan's model state under `offload`), each stage's Step made by `step_of`,
    or a Peak naming what is missing."""
    missing = [why for absent, why in (
        (inputs.shape is None, f"the model shape: {inputs.shape_problem or NO_SHAPE}"),
        (inputs.sequence_length is None, 'the sequence length: declare "sequence_length" in the zeromem block'),
        (inputs.micro_batch is None,
         'the micro-batch per GPU: set train_micro_batch_size_per_gpu or declare "micro_batch"'),
        (inputs.dtype is None or inputs.dtype.value not in DTYPE_BYTES,
         'the training precision: declare "precision" in the zeromem block')) if absent]
    element_bytes = DTYPE_BYTES.get(str(inputs.dtype.value), 2) if inputs.dtype is not None else 2
    buffers = None
    if family == "deepspeed":
        sizes = zero_sizes(inputs, element_bytes, missing)
        buffers = {stage: zero_buffers(stage_named(stage).number, **sizes) for stage in state}
    activations = None
    if not missing and inputs.shape is not None and inputs.sequence_length is not None:
        try:
            nd = inputs.parallelism()  # one rank's share (configs/parallel_shape.py), as step_peak runs it
            shape, tokens = rank_shape(inputs.shape, nd), rank_tokens(cast(int, inputs.sequence_length.value), nd)
            dtype, rows = activation_dtype(inputs, family), policy_rows(inputs)
            activations = kept_on_device(estimate_activations(
                shape, tokens, rows, dtype, bool(inputs.gradient_checkpointing.value), str(inputs.attention.value),
                transformers_path(version_of(inputs.transformers_version))), nd, shape, DTYPE_BYTES[dtype],
                tokens * rows)
        except ActivationInputError as error:
            missing.append(str(error))
    lora = _lora_activations(inputs, missing, family) if not missing and inputs.lora is not None else None
    reserved = None if inputs.reserved.value == MODELLED else _count(inputs.reserved)
    return Peak(state=dict(state), buffers=buffers, activations=activations, reserved=reserved, inputs=inputs.used(),
                missing=tuple(missing), family=family, source=inputs, step_of=step_of, offload=offload,
                lora_activations=lora)


def policy_rows(inputs: PeakInputs) -> int:
    """Sequences through the policy per micro-batch: DPO-style trainers stack chosen and rejected."""
    assert inputs.micro_batch is not None
    return rows(str(value_of(inputs.trainer) or "sft"), cast(int, inputs.micro_batch.value))


def lora_compute_dtype(inputs: PeakInputs, family: str) -> str:
    """The dtype the adapters compute in: their own (PEFT's fp32; PEFT casts the input to lora_A's dtype,
    peft/tuners/lora/layer.py `_cast_input_dtype`), but under FSDP mixed precision the gathered adapters are in
    the compute dtype like every parameter (MixedPrecisionPolicy.param_dtype), so no fp32 input copy is kept."""
    lora = inputs.lora
    assert lora is not None
    return str(value_of(inputs.dtype)) if _fsdp_mixed(inputs, family) else lora.adapter_dtype


def _fsdp_mixed(inputs: PeakInputs, family: str) -> bool:
    """FSDP under mixed precision: shards stored in another dtype than the compute dtype."""
    engine, compute, stored = engine_and_dtypes(inputs, family)
    return engine == "fsdp" and stored != compute


def _lora_activations(inputs: PeakInputs, missing: list[str], family: str = "") -> LoraActivations | None:
    """What one micro-batch keeps with LoRA on a frozen base, or None with the reason in `missing`."""
    lora, shape, tokens, nd = inputs.lora, inputs.shape, inputs.sequence_length, inputs.parallelism()
    assert lora is not None and shape is not None and tokens is not None
    shape = rank_shape(shape, nd)  # one rank's share, as full fine-tuning's (expert parallelism: routed experts ÷ e)
    cast_each = _fsdp_mixed(inputs, family) and value_of(inputs.fsdp_version) == 1  # FSDP1 mixed: a copy per adapter
    try:
        return estimate_lora_activations(
            shape, lora.adapters, cast(int, tokens.value), policy_rows(inputs),
            lora.activation_dtype, lora_compute_dtype(inputs, family), str(inputs.attention.value),
            bool(inputs.gradient_checkpointing.value), cast_each, dropout=lora.dropout,
            transformers=transformers_path(version_of(inputs.transformers_version))._replace(output_copy=False))
    except ActivationInputError as error:
        missing.append(f"LoRA activations: {error}")
        return None


__all__ = ["MODELLED", "DEEPSPEED_DEFAULTS", "INPUT_LABELS", "LoraPeak", "MODEL_UNCERTAINTY", "Peak", "PeakInputs",
           "StagePeak", "UnknownPeak", "estimate_peak"]
