"""The peak's inputs (memory/peak.PeakInputs: settings and config values, each a `Given`) read into the step model's
typed `Step` at a stage, and a trainer's settings into its `Preference`: `stage_step`, the `StepOf` every
memory/peak.Peak computes a stage's peak with. Settings resolution, not modelling: the engine (a setting, else the
config's family) with its stage or sharding strategy, dtypes, buckets as DeepSpeed receives them, offload, what the
phase model refuses of an engine, the trainer's loss, reference and GRPO inputs.
"""

from __future__ import annotations

from typing import Any, cast

from zeromem_lsp.configs.transformers_paths import transformers_path, version_of
from zeromem_lsp.memory.grpo import generation_of
from zeromem_lsp.memory.lora_activations import LoraActivations
from zeromem_lsp.memory.peak import PeakInputs, element_count, engine_and_dtypes, frozen_base, value_of
from zeromem_lsp.memory.precision import DTYPE_BYTES, normalize_precision
from zeromem_lsp.memory.preference import LOSSES, SFT_LOSSES, WITH_REFERENCE, Preference, reference_of
from zeromem_lsp.memory.stages import Offload, stage as stage_named
from zeromem_lsp.memory.step import Buckets, Step, StepInputError, make_step
from zeromem_lsp.resolved.peak_inputs import generation_inputs

#: zero_optimization field → the phase model's Buckets field (sizes in elements, switches as bools).
STEP_BUCKETS = {"reduce_bucket_size": "reduce_bucket_size", "stage3_prefetch_bucket_size": "prefetch_bucket_size",
                "stage3_max_live_parameters": "max_live_parameters",
                "stage3_max_reuse_distance": "max_reuse_distance",
                "stage3_param_persistence_threshold": "persistence_threshold"}
STEP_SWITCHES = ("overlap_comm", "contiguous_gradients")
#: The stage keys → FSDP's (sharded, reshard after forward): NO_SHARD, SHARD_GRAD_OP, FULL_SHARD.
FSDP_STAGES = {"ddp": (False, False), "zero2": (True, False), "zero3": (True, True)}
#: What the phase model refuses of an engine: (the stages it has, why not another, why no offload, whether a frozen
#: base's offload is taken all the same: its step places P, G, O itself); DeepSpeed: every stage and offload.
ENGINE_LIMITS = {"torch": (("ddp",), "engine torch runs DDP only, not {}", "engine torch offloads nothing", False),
                 "fsdp": (tuple(FSDP_STAGES), "FSDP has no {}", "the phase model has no FSDP CPU offload", True)}


def stage_step(inputs: PeakInputs, family: str, stage: str, offload: Offload | None,
               lora: LoraActivations | None = None) -> tuple[Step, Preference | None]:
    """The Step at `stage` (`step_of`) and the trainer's Preference (None for supervised fine-tuning through the
    model's own loss; TRL's fused SFT head and its chunked NLL are a trainer's)."""
    step = step_of(inputs, family, stage, offload, lora)
    trl_sft = inputs.sft_loss is not None and inputs.sft_loss.value in SFT_LOSSES
    if str(value_of(inputs.trainer) or "sft") == "sft" and not trl_sft:
        return step, None
    return step, preference(inputs, step)


def step_buckets(inputs: PeakInputs) -> Buckets:
    """The config's zero_optimization sizes as the phase model takes them (None: DeepSpeed's default)."""
    found: dict[str, Any] = {}
    for key, name in STEP_BUCKETS.items():
        found[name] = element_count(inputs.zero.get(key), key, inputs.shape, [])
    for key in STEP_SWITCHES:
        value = value_of(inputs.zero.get(key))
        if isinstance(value, bool):
            found[key] = value
    dtype = value_of(inputs.zero.get("grad_accum_dtype"))
    if isinstance(dtype, str):
        found["grad_accum_dtype"] = normalize_precision(dtype) or None
    return Buckets(**found)


def step_of(inputs: PeakInputs, family: str, stage: str, offload: Offload | None,
            lora: LoraActivations | None = None) -> Step:
    """The Step at `stage`: the engine (a setting, else the config's family) with its stage or sharding strategy,
    dtypes (autocast, FSDP mixed precision), optimizer, buckets and offload, and with an adapter the frozen base."""
    engine, compute, param_dtype = engine_and_dtypes(inputs, family)
    moves_p, _, moves_o = offload.moves(stage) if offload is not None else (False, False, False)
    assert inputs.shape is not None and inputs.sequence_length is not None and inputs.micro_batch is not None
    common: dict[str, Any] = dict(
        checkpointing=bool(inputs.gradient_checkpointing.value), attention=str(inputs.attention.value), engine=engine,
        ranks=inputs.ranks, param_dtype=param_dtype, optimizer=inputs.optimizer,
        optimizer_impl=str(value_of(inputs.optimizer_impl) or "foreach"), loss_kernel=str(inputs.loss_kernel.value),
        transformers_path=transformers_path(version_of(inputs.transformers_version)),
        parallelism=inputs.parallelism(),
        gradient_accumulation_steps=int(cast(int, inputs.gradient_accumulation_steps.value)))
    frozen = None if lora is None else frozen_base(inputs, lora, stage, offload, engine)
    stages, other, no_offload, frozen_offloads = ENGINE_LIMITS.get(engine, ((stage,), "", "", True))
    if stage not in stages:
        raise StepInputError(other.format(stage_named(stage).label))
    if (moves_p or moves_o) and no_offload and not (frozen_offloads and inputs.lora is not None):
        raise StepInputError(no_offload)
    sharded, reshard = FSDP_STAGES.get(stage, (True, True))
    version = value_of(inputs.fsdp_version)
    by_engine: dict[str, dict[str, Any]] = {  # what make_step takes of each engine
        "torch": dict(autocast=param_dtype == "fp32" and compute != "fp32"),
        "deepspeed": dict(stage=stage_named(stage).number, buckets=step_buckets(inputs), offload_optimizer=moves_o,
                          offload_param=moves_p),
        "fsdp": dict(fsdp_sharded=sharded, fsdp_reshard=reshard, fsdp_mixed=compute != param_dtype,
                     offload_optimizer=moves_o, fsdp_version=2 if version is None else version)}
    # (as given: make_step and the activations name a value they cannot use)
    return make_step(inputs.shape, cast(int, inputs.sequence_length.value), cast(int, inputs.micro_batch.value),
                     frozen=frozen, **common, **by_engine.get(engine, {}))


def preference(inputs: PeakInputs, step: Step) -> Preference:
    """The preference trainer's step inputs: its loss, its GRPO inputs, its frozen reference model on this rank (none
    for a PEFT policy or with precomputed log-probs), stored like the policy's weights unless loaded otherwise."""
    trainer = str(value_of(inputs.trainer))
    loss = inputs.sft_loss if trainer == "sft" else inputs.preference_loss
    kind = "fused" if loss is None else str(loss.value)
    if trainer in ("dpo", "kto") and kind not in LOSSES:
        raise StepInputError(loss.note if loss is not None else kind, "preference_loss")
    generation = None
    if trainer == "grpo":  # beta != 0: a reference (a copy, or the PEFT policy's adapters disabled)
        generation = generation_of(inputs.generation or generation_inputs({}, cast(int, value_of(inputs.sequence_length))))
        if not generation.reference:
            return Preference(trainer, 0, False, 0, loss=kind if kind in LOSSES else "fused", generation=generation)
    elif trainer not in WITH_REFERENCE:  # reference-free (LLaMA-Factory's orpo / simpo; the others are refused)
        return Preference(trainer, 0, False, 0, loss=kind if kind in (SFT_LOSSES if trainer == "sft" else LOSSES)
                          else "fused")
    precomputed = trainer != "grpo" and bool(value_of(inputs.precompute_ref_log_probs))
    named = inputs.reference_model  # LLaMA-Factory's ref_model: a copy even beside a PEFT policy
    if named is not None and named.value != "copy" and not precomputed:
        raise StepInputError(named.note, "reference_model")
    loaded = inputs.reference_dtype  # LLaMA-Factory: the policy upcast to fp32, the reference loaded as it is
    width = DTYPE_BYTES[str(loaded.value) if loaded is not None else step.param_dtype]
    reference, gathered = reference_of(step, width, inputs.lora is not None and named is None, precomputed, kind)
    found = Preference(trainer, reference, not precomputed, gathered, loss=kind)
    return found if generation is None else found._replace(generation=generation, reference_forward=True)
