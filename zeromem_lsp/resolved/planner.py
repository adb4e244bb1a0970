"""A reader's plan source + the resolved settings → the finished memory plan, built once.

`plan(source, resolved, peak)` takes what a reader found (plain data: a DeepSpeed setup, or an FSDP
setup with its launcher's ranks, or why there is nothing to plan) and the settings resolved once
(configs/layers.py). `build` does what every family shares — explicit bytes, the parameter count,
what is missing, the budget, the peak — and constructs the `MemoryPlan` once; every origin comes from
the source or from `resolved`, never from a guess about where a setting was written.
"""

from __future__ import annotations

from dataclasses import replace
from collections.abc import Callable
from typing import NamedTuple, cast

from zeromem_lsp.configs.layers import Resolved
from zeromem_lsp.configs.model_config import UnsupportedModel
from zeromem_lsp.memory.adapter_plan import Adapter, AdapterInputError, adapter_inputs, lora_peak
from zeromem_lsp.configs.training import TrainingSetup, implied_world_size
from zeromem_lsp.memory.peak import estimate_peak
from zeromem_lsp.configs.parallelism import parallelism_of
from zeromem_lsp.configs.parallel_shape import LORA_UNAPPLIED, effects
from zeromem_lsp.resolved.step_inputs import stage_step
from zeromem_lsp.resolved.peak_inputs import ModelRead, PeakSource, peak_inputs, resolve_parallel
from zeromem_lsp.resolved.peak_inputs import _pick as pick
from zeromem_lsp.resolved.peak_inputs import fsdp_version as resolve_fsdp_version
from zeromem_lsp.memory.plan import (
    DEEPSPEED, DEFAULT_WARN_FRACTION, FAMILIES, FSDP, FSDP_CPU_OFFLOAD, TORCH, Family, Ignored, Inputs, MemoryPlan,
    Unplanned, declare, inputs_from_parameters, missing_model_size, place,
)
from zeromem_lsp.memory.stages import FsdpOffload, Offload
from zeromem_lsp.memory.precision import BytesPerParameter, bytes_per_parameter
from zeromem_lsp.memory.optimizer_step import EMBEDDING_STATE, parameter_tensors
from zeromem_lsp.memory.stages import FSDP_STRATEGY_STAGE
from zeromem_lsp.configs.accelerate import AccelerateSetup
from zeromem_lsp.configs.fsdp import FsdpSetup
from zeromem_lsp.configs.parallel_checks import smallest_world
from zeromem_lsp.configs.recipes import EAGER_EXPERTS
from zeromem_lsp.configs.workload import Workload
from zeromem_lsp.provenance import Assumed, Given, Origin, Path


#: What runs when nothing says: no config and no setting (`zeromem estimate` without --config) runs DeepSpeed in bf16
#: with AdamW, torch's foreach implementation; an FSDP or torch config's optimizer is AdamW (HF Trainer's default).
DEFAULT_ENGINE, DEFAULT_PRECISION, DEFAULT_OPTIMIZER = "deepspeed", "bf16", "adamw"
DEFAULT_OPTIMIZER_IMPL = Given("foreach", "default: foreach")


class DeepSpeedSource(NamedTuple):
    """A DeepSpeed setup to plan; `ranks`: what the launcher around it runs (Accelerate's num_processes)."""

    setup: TrainingSetup
    ranks: Given | None = None
    world_hint: str | None = None  # how to give the world size where the file cannot hold a zeromem block
    refuser: str | None = None  # the tool that refuses a zeromem block in this file (LLaMA-Factory, TRL), if any


class FsdpSource(NamedTuple):
    """An FSDP setup (fsdp.FsdpSetup) and the Accelerate setup around it, if any."""

    fsdp: FsdpSetup
    accelerate: AccelerateSetup | None = None
    machines_written: bool = False
    world_hint: str | None = None  # how to give the world size where the file cannot hold a zeromem block
    refuser: str | None = None  # the tool that refuses a zeromem block in this file (LLaMA-Factory, TRL), if any


class TorchSource(NamedTuple):
    """Neither DeepSpeed nor FSDP: plain torch (one process, or DDP over the ranks); `note` says why."""

    note: str
    refuser: str | None = None  # the tool that refuses a zeromem block in this file (LLaMA-Factory, TRL), if any


class NoSource(NamedTuple):
    """Nothing to plan: what would supply a setup."""

    missing: str


class SettingsSource(NamedTuple):
    """No training config: the settings alone say what runs (`zeromem estimate` from its options) — the engine they
    name (DEFAULT_ENGINE), each of its stages (none chosen), no offload. `model`: the config.json the settings name,
    read by the front end (a LoRA run's linear layers); `notes`: how it found the parameter count, in its words."""

    model: ModelRead = ModelRead()
    notes: tuple[str, ...] = ()


PlanSource = DeepSpeedSource | FsdpSource | TorchSource | SettingsSource | NoSource


def _setting(resolved: Resolved, name: str) -> Origin:
    return resolved.origin(name) or Origin(f"zeromem.{name}")


#: what a family's bytes-per-parameter reader gives: the bytes, their origins ("precision", "optimizer") and any
#: further assumption; None with what is missing appended to its argument
PerParameterRead = tuple[BytesPerParameter, dict[str, Origin], list[str]]
PerParameter = Callable[[list[str]], "PerParameterRead | None"]


def resolve_world_size(setup: TrainingSetup, resolved: Resolved,
                       launcher: Given | None = None) -> tuple[int | None, Origin | None]:
    """The settings' world size, else the launcher's, else what the three batch sizes imply."""
    if resolved.settings.world_size is not None:
        return resolved.settings.world_size, _setting(resolved, "world_size")
    if launcher is not None:
        return int(cast(int, launcher.value)), launcher.origin  # (a launcher's count, checked where it is read)
    implied = implied_world_size(setup)
    if implied is not None:
        return implied, Origin(
            f"train_batch_size / (micro × accumulation) = {setup.train_batch_size} / "
            f"({setup.micro_batch_size} × {setup.gradient_accumulation_steps})",
            ("train_batch_size",),
        )
    return None, None


def assume_world(resolved: Resolved, source: PlanSource, workload: Workload) -> Resolved:
    """`resolved` with the world size the parallel degrees need when no source gives one — no setting or flag, no
    launcher (an Accelerate config's num_processes, paired or around the config), no whole batch triple: the
    smallest world that runs them (parallel_checks.smallest_world), credited as `Assumed` so that the plan, the
    hover and -v show it with the advice to give it, and no rule is certain of anything from it (ZM109)."""
    if resolved.settings.world_size is not None:
        return resolved
    if isinstance(source, DeepSpeedSource) and (source.ranks is not None or implied_world_size(source.setup)):
        return resolved
    if isinstance(source, FsdpSource) and accelerate_ranks(source.accelerate, source.machines_written)[0]:
        return resolved
    found = smallest_world(resolve_parallel(workload.parallel, resolved, None), workload.data_parallel)
    if found is None:
        return resolved
    settings = resolved.settings.model_copy(update={"world_size": found.value})
    return Resolved(settings, {**resolved.origins, "world_size": Assumed(found.note)})


def build(
    family: Family,
    stage: str | None,
    stage_path: Path | None,
    offload: Offload,
    ranks: int | None,
    ranks_origin: Origin | None,
    per_parameter: PerParameter,
    resolved: Resolved,
    missing: list[str],
    peak: PeakSource | None = None,
    read_origins: dict[str, Origin] | None = None,
    adapter: Adapter | None = None,
    fsdp_version: Given | None = None,
    refuser: str | None = None,
) -> MemoryPlan | Unplanned:
    """The finished plan, once the family has read its stage, offload and ranks.

    `per_parameter(missing)` -> (BytesPerParameter, {"precision": Origin, "optimizer": Origin}, extra
    assumptions), or None with `missing` extended; called only when no explicit bytes are declared.
    `peak`: what the peak needs beyond the plan (None: no peak, as in the calculator). `adapter`: a LoRA run
    (memory/adapter_plan): P, G, O count frozen and trainable parameters apart, from the model's config.json.
    `fsdp_version`: the FSDP config's version and where it comes from (resolved with the settings, peak_inputs).
    `refuser`: the tool that refuses a zeromem block in the file, so that advice names what works instead."""
    settings = resolved.settings
    explicit = (settings.parameter_bytes, settings.gradient_bytes, settings.optimizer_bytes)
    origins: dict[str, Origin] = dict(read_origins or {})
    inputs = None
    p, g, o = explicit
    if p is not None and g is not None and o is not None:
        if ranks is not None:
            inputs = Inputs(p, g, o, world_size=ranks, assumptions=("P, G and O declared in bytes",))
        origins["bytes"] = _setting(resolved, "parameter_bytes")
    else:
        if settings.parameters is None:
            missing.append(missing_model_size(refuser))
        read = per_parameter(missing)
        if not missing and read is not None:
            bytes_each, bytes_origins, extra = read
            origins.update(bytes_origins)
            origins["parameters"] = _setting(resolved, "parameters")
            assumptions = [f"precision: {origins['precision'].note}", f"optimizer: {origins['optimizer'].note}", *extra]
            if peak is not None and peak.model.freeze_note:  # configs/freeze_keys.py
                assumptions.append(f"parts: {peak.model.freeze_note}")
            if peak is not None and peak.model.shape is not None and peak.model.shape.vision is not None:
                assumptions.append(f"images: {images_said(peak, resolved)}")  # configs/image_tokens.py
            assert ranks is not None  # (per_parameter reads nothing while the ranks are missing)
            if adapter is not None:
                version = resolve_fsdp_version(fsdp_version, resolved) if family.name == "fsdp" else None
                inputs = _adapter_inputs(adapter, peak, family, bytes_each, ranks,
                                         cast(int, version.value) if version else None, assumptions, missing)
            else:
                inputs = inputs_from_parameters(cast(int, settings.parameters), bytes_each, ranks, tuple(assumptions))
                inputs = _embedding_state(inputs, family, peak)
    if missing or inputs is None:
        return Unplanned(tuple(missing))
    origins["world_size"] = ranks_origin or Origin("world size")
    if settings.gpu_memory is not None:
        origins["gpu_memory"] = _setting(resolved, "gpu_memory")
    placement = place(inputs, offload)
    estimated = None
    if peak is not None:
        state = {key: placement.gpu[key] for key in family.stages}
        estimated = estimate_peak(state, family.name, peak_inputs(peak, resolved, inputs, origins.get("precision"),
                                                                       family.name, fsdp_version), stage_step, offload)
    warn = settings.warn_fraction if settings.warn_fraction is not None else DEFAULT_WARN_FRACTION
    return MemoryPlan(stage=stage, stage_path=stage_path, inputs=inputs, origins=origins, offload=offload,
                      placement=placement, gpu_memory=settings.gpu_memory, warn_fraction=warn, policy=family,
                      peak=estimated)


def _embedding_state(inputs: Inputs, family: Family, peak: PeakSource | None) -> Inputs:
    """O with the embeddings' optimizer state at HF Trainer's width under plain torch (optimizer_step.EMBEDDING_STATE:
    bitsandbytes' 8-bit optimizers at 32 bits for every nn.Embedding weight); DeepSpeed steps flat partitions the
    override does not reach, FSDP is left as it was (not measured)."""
    each, shape = inputs.per_parameter, peak.model.shape if peak is not None else None
    wide = EMBEDDING_STATE.get(each.optimizer_name, 0) if each is not None and family.name == "torch" else 0
    if not wide or each is None or shape is None:
        return inputs
    tensors = parameter_tensors(shape)
    embeddings = tensors.embedding + tensors.positions
    note = (f"{each.optimizer_name} state of the {embeddings:,} nn.Embedding parameters at {wide} B, not "
            f"{each.optimizer} B (HF Trainer's create_optimizer keeps them at 32 bits: fp32 m, v)")
    return inputs._replace(optimizer_bytes=inputs.optimizer_bytes + (wide - each.optimizer) * embeddings,
                           assumptions=(*inputs.assumptions, note))


#: How a model that cannot take the adapter is named among what is missing (the reason follows).
ADAPTER_REFUSED = "an adapter the model can take: "
NO_ADAPTER_MODEL = ('the model shape for the LoRA adapter (lora_rank): declare "parameters": {"from_config": '
                    '"path/to/config.json"} (its linear layers are what the adapter targets)')


def _adapter_inputs(adapter: Adapter, peak: PeakSource | None, family: Family, bytes_each: BytesPerParameter,
                    ranks: int, fsdp_version: int | None, assumptions: list[str], missing: list[str]) -> Inputs | None:
    """The LoRA plan's inputs, or None with what is missing (the model config; a problem it has with the
    adapter is reported by the analysis as ZM104 before the plan is built)."""
    config = peak.model.config if peak is not None else None
    if config is None:
        missing.append(NO_ADAPTER_MODEL)
        return None
    fp32_gradients = bytes_each.gradient == 4 and bytes_each.precision != "fp32"
    try:
        inputs, _ = adapter_inputs(config, adapter, family.name, bytes_each.precision, bytes_each.optimizer_name,
                                   ranks, fp32_gradients, fsdp_version, tuple(assumptions))
    except (AdapterInputError, UnsupportedModel) as error:
        missing.append(f"{ADAPTER_REFUSED}{error}")
        return None
    return inputs


def deepspeed_plan(source: DeepSpeedSource, resolved: Resolved, peak: PeakSource | None = None,
                   adapter: Adapter | None = None) -> MemoryPlan | Unplanned:
    """A DeepSpeed config's plan: its stage and offload, DeepSpeed's bytes per parameter."""
    setup, settings = source.setup, resolved.settings
    missing: list[str] = []
    if setup.stage is None:
        missing.append("a valid zero_optimization.stage (0-3)")
    world_size, world_origin = resolve_world_size(setup, resolved, source.ranks)
    if world_size is None:
        missing.append(f"the world size: {source.world_hint}" if source.world_hint else
                       f'the world size: {declare("world_size", "8")}, or give all three batch sizes')

    def per_parameter(missing: list[str]) -> PerParameterRead | None:
        precision = settings.precision or setup.precision
        optimizer = settings.optimizer or setup.optimizer
        if precision is None:
            missing.append(f'the precision ({setup.precision_note}): {declare("precision", chr(34) + "bf16" + chr(34), source.refuser)}')
        if optimizer is None:
            missing.append(f'the optimizer ({setup.optimizer_note}): {declare("optimizer", chr(34) + "adamw" + chr(34), source.refuser)}')
        if missing or precision is None or optimizer is None:
            return None
        origins = {
            "precision": _setting(resolved, "precision") if settings.precision
            else Origin(setup.precision_note, setup.precision_path),
            "optimizer": _setting(resolved, "optimizer") if settings.optimizer
            else Origin(setup.optimizer_note, setup.optimizer_path),
        }
        extra = ([f"gradients accumulate in {setup.gradient_dtype} (data_types.grad_accum_dtype)"]
                 if setup.gradient_dtype else [])
        return bytes_per_parameter(precision, optimizer, gradient_dtype=setup.gradient_dtype), origins, extra

    offload = Offload(optimizer=setup.offload_optimizer, param=setup.offload_param)
    return build(DEEPSPEED, setup.stage, setup.stage_path, offload, world_size, world_origin, per_parameter, resolved,
                 missing, peak, adapter=adapter, refuser=source.refuser)


HYBRID = ("HYBRID_SHARD", "HYBRID_SHARD_ZERO2")
TENSOR_STATE_OPTIMIZERS = ("adam", "adamw", "lamb", "sgd_momentum", "adagrad", "lion")


def fsdp_bytes_per_parameter(dtype: str, optimizer: str) -> BytesPerParameter:
    """FSDP's convention: the sharded parameters keep the dtype the model was loaded in (mixed precision
    only casts the gathered copy for compute), gradients are kept in that dtype for the optimizer, and
    torch.optim allocates its state like the parameter. No separate master copy."""
    from zeromem_lsp.memory.precision import DTYPE_BYTES, optimizer_state_bytes

    size = DTYPE_BYTES[dtype]
    state = optimizer_state_bytes(optimizer)
    if optimizer in TENSOR_STATE_OPTIMIZERS:
        state = state * size // 4
    explanation = (f"{dtype} sharded params {size} B + {dtype} grads {size} B + {optimizer} state {state} B "
                   f"(FSDP: no separate master copy)")
    return BytesPerParameter(parameter=size, gradient=size, optimizer=state, precision=dtype,
                             optimizer_name=optimizer, explanation=explanation)


def fsdp_plan(source: FsdpSource, resolved: Resolved, peak: PeakSource | None = None,
              adapter: Adapter | None = None) -> MemoryPlan | Unplanned:
    """An FSDP setup → the plan at the ZeRO stage with the same persistent state per rank.

    For HYBRID strategies the ranks one copy is sharded over are the shard group (GPUs per node)."""
    fsdp, settings = source.fsdp, resolved.settings
    strategy, strategy_origin = fsdp.strategy, Origin(fsdp.strategy_note, fsdp.strategy_path)
    world_size, world_origin, shard_group, shard_origin = accelerate_ranks(source.accelerate, source.machines_written)
    missing: list[str] = []
    if strategy is None:
        missing.append("a valid sharding strategy")
    if settings.world_size is not None:
        world_size, world_origin = settings.world_size, _setting(resolved, "world_size")
    ranks, ranks_origin = world_size, world_origin
    if strategy in HYBRID:
        if shard_group is not None and settings.world_size is None:
            ranks, ranks_origin = shard_group, shard_origin
        elif world_size is not None and settings.world_size is not None:
            declared = _setting(resolved, "world_size")
            ranks, ranks_origin = world_size, Origin(
                f"{declared.note}, taken as the shard group (GPUs per node) of the hybrid strategy", declared.path)
        else:
            ranks = None
    if strategy == "NO_SHARD" and ranks is None:
        ranks, ranks_origin = 1, Origin("NO_SHARD keeps a full copy on every rank: the rank count does not matter")
    if ranks is None and strategy is not None:
        what = "the shard group (GPUs per node)" if strategy in HYBRID else "the world size"
        missing.append(f"{what}: {source.world_hint}" if source.world_hint
                       else f'{what}: {declare("world_size", "8")}')

    def per_parameter(missing: list[str]) -> PerParameterRead | None:
        if missing:
            return None
        if settings.precision:
            declared = _setting(resolved, "precision")
            precision = Origin(f"{declared.note}: the dtype the model is loaded in", declared.path)
        else:
            precision = Origin("FSDP keeps sharded parameters in the loaded dtype (assumed fp32; mixed_precision "
                               "casts only the gathered copy for compute)")
        optimizer = _setting(resolved, "optimizer") if settings.optimizer else Origin("AdamW (HF Trainer's default)")
        origins = {"precision": precision, "optimizer": optimizer}
        return fsdp_bytes_per_parameter(settings.precision or "fp32", settings.optimizer or DEFAULT_OPTIMIZER), origins, []

    return build(FSDP, FSDP_STRATEGY_STAGE.get(strategy) if strategy else None, strategy_origin.path,
                 FSDP_CPU_OFFLOAD if fsdp.offload else FsdpOffload(), ranks, ranks_origin, per_parameter, resolved,
                 missing, peak, {"strategy": strategy_origin}, adapter,
                 Given(fsdp.version, fsdp.version_note or f"fsdp_version {fsdp.version}", fsdp.version_path),
                 source.refuser)


def torch_plan(source: TorchSource, resolved: Resolved, peak: PeakSource | None = None,
               adapter: Adapter | None = None) -> MemoryPlan | Unplanned:
    """Plain torch: DDP only (each rank holds P + G + O), no offload; weights, gradients and optimizer state in
    the dtype the model is loaded in, as under FSDP (torch.optim allocates its state like the parameter)."""
    settings = resolved.settings
    ranks, ranks_origin = 1, Origin("DDP keeps a full copy on every rank: the rank count does not matter")
    if settings.world_size is not None:
        ranks, ranks_origin = settings.world_size, _setting(resolved, "world_size")

    def per_parameter(missing: list[str]) -> PerParameterRead | None:
        if settings.precision:
            declared = _setting(resolved, "precision")
            precision = Origin(f"{declared.note}: the dtype the model is loaded in", declared.path)
        else:
            precision = Origin("torch keeps parameters in the dtype the model is loaded in (assumed fp32)")
        optimizer = _setting(resolved, "optimizer") if settings.optimizer else Origin("AdamW (HF Trainer's default)")
        found = fsdp_bytes_per_parameter(settings.precision or "fp32", settings.optimizer or DEFAULT_OPTIMIZER)
        explanation = (f"{found.precision} params {found.parameter} B + {found.precision} grads {found.gradient} B + "
                       f"{found.optimizer_name} state {found.optimizer} B (torch: no separate master copy)")
        return found._replace(explanation=explanation), {"precision": precision, "optimizer": optimizer}, []

    return build(TORCH, "ddp", None, Offload(), ranks, ranks_origin, per_parameter, resolved, [], peak,
                 {"engine": Origin(source.note)}, adapter, refuser=source.refuser)


def stored_dtype(engine: str, precision: str, param_dtype: str | None) -> str:
    """The dtype weights are stored in: the param_dtype setting, else per engine — DeepSpeed and torch the
    precision, FSDP fp32 shards (Accelerate upcasts them under mixed precision)."""
    return param_dtype or ("fp32" if engine == "fsdp" else precision)


def settings_plan(source: SettingsSource, resolved: Resolved, peak: PeakSource | None = None,
                  adapter: Adapter | None = None) -> MemoryPlan | Unplanned:
    """The plan of the settings alone: every stage of the engine they name, nothing chosen nor offloaded; P, G, O
    declared in bytes, else from the parameter count (or a LoRA run's model) at the engine's bytes per parameter —
    DeepSpeed's mixed precision, or torch and FSDP with no master copy in the stored dtype. `peak`: the step to
    estimate beside it (None: model state alone). The precision is the compute dtype; origins are the settings'."""
    settings = resolved.settings
    engine = settings.engine or DEFAULT_ENGINE
    family = FAMILIES[engine]
    precision = settings.precision or DEFAULT_PRECISION
    optimizer = settings.optimizer or DEFAULT_OPTIMIZER
    stored = stored_dtype(engine, precision, settings.param_dtype)
    version = resolve_fsdp_version(None, resolved) if engine == "fsdp" else None
    ranks = settings.world_size
    if ranks is None:
        return Unplanned((f'the world size: {declare("world_size", "8")}',))
    explicit = (settings.parameter_bytes, settings.gradient_bytes, settings.optimizer_bytes)
    bytes_each = (bytes_per_parameter(precision, optimizer) if engine == "deepspeed"
                  else fsdp_bytes_per_parameter(stored, optimizer))
    missing: list[str] = []
    inputs: Inputs | None
    p, g, o = explicit
    if p is not None and g is not None and o is not None:
        inputs = Inputs(p, g, o, world_size=ranks)
    elif adapter is not None:
        inputs = _adapter_inputs(adapter, PeakSource(model=source.model), family, bytes_each, ranks,
                                 cast(int, version.value) if version else None, list(source.notes), missing)
    elif settings.parameters is None:
        missing.append(missing_model_size())
        inputs = None
    else:
        inputs = inputs_from_parameters(cast(int, settings.parameters), bytes_each, ranks, source.notes)
    if inputs is None:
        return Unplanned(tuple(missing))
    offload = Offload()
    placement = place(inputs, offload)
    estimated = None
    if peak is not None:
        step = peak_inputs(peak, resolved, inputs, None, engine, version)
        engine_given = step.engine if settings.engine is not None else Given(engine, f"default: {engine}")
        # the precision is the compute dtype here (the stored one is param_dtype's), credited to the option that sets
        # it even at its default, as `zeromem estimate` always has
        dtype = Given(precision, (resolved.origin("precision") or Origin("--precision")).note)
        if settings.param_dtype is None:
            step = replace(step, param_dtype=Given(stored, f"default: the stored precision under {engine}"))
        breakdown = inputs.adapter
        step = replace(step, engine=engine_given, dtype=dtype, lora=lora_peak(breakdown, precision),
                       optimizer_impl=step.optimizer_impl if settings.optimizer_impl else DEFAULT_OPTIMIZER_IMPL,
                       optimizer=breakdown.optimizer if breakdown is not None else optimizer)
        estimated = estimate_peak({key: placement.gpu[key] for key in family.stages}, engine, step, stage_step, offload)
    return MemoryPlan(stage=None, stage_path=None, inputs=inputs, origins={}, offload=offload, placement=placement,
                      gpu_memory=settings.gpu_memory, policy=family, peak=estimated)


def accelerate_ranks(accelerate: AccelerateSetup | None, machines_written: bool
                     ) -> tuple[int | None, Origin | None, int | None, Origin | None]:
    """World size and HYBRID shard group an Accelerate config implies, each with its origin.

    `parallelism_config` (dp_shard × cp × tp) takes precedence over `num_processes` for how many
    ranks share one copy; the shard group is GPUs per node (num_processes / num_machines)."""
    if accelerate is None or not accelerate.world_size:
        return None, None, None, None
    world, world_origin = accelerate.world_size, Origin("num_processes", ("num_processes",))
    if accelerate.parallel_divisor:
        world, world_origin = accelerate.parallel_divisor, Origin(
            "parallelism_config: dp_shard × cp × tp ranks share one copy", ("parallelism_config",))
    group_origin = Origin(f"GPUs per node: num_processes / num_machines = {accelerate.world_size} / "
                          f"{accelerate.machines}", ("num_machines",) if machines_written else ("num_processes",))
    return world, world_origin, accelerate.shard_group, group_origin


#: Why a recipe's engine is an assumption when neither it nor a launch file names one (issue 26).
ENGINE_ASSUMED = ("the engine is assumed: the recipe names no deepspeed: or fsdp_config: and no Accelerate config is "
                  "paired with it (--accelerate-config, or accelerate_config in [tool.zeromem]), so torch DDP is "
                  "assumed")


#: Why a k-bit base with MoE experts is not modelled (issue 29: which expert weights are quantized, upcast or kept
#: differs per tool, engine and version).
QUANTIZED_EXPERTS = ("k-bit quantization of a mixture-of-experts model: whether the fused expert weights are "
                     "quantized, upcast or kept in 16 bits depends on the tool, engine and version; the figures "
                     "assume every linear weight quantized")


def _for_the_model(ignored: tuple[Ignored, ...], peak: PeakSource | None) -> tuple[Ignored, ...]:
    """The keys set that change this model's memory: an eager-experts pin (configs/recipes.kernels_pin_eager) only
    where the model has routed experts (kept when the model is unknown: nothing says it has none)."""
    shape = peak.model.shape if peak is not None else None
    dense = shape is not None and not shape.experts
    return tuple(item for item in ignored if not (dense and item.why == EAGER_EXPERTS))


def _quantized_experts(resolved: Resolved, peak: PeakSource | None) -> tuple[Ignored, ...]:
    """The quantization setting, named as not modelled, when the model it quantizes has MoE experts."""
    quantization = resolved.settings.quantization
    shape = peak.model.shape if peak is not None else None
    if not quantization or quantization == "none" or shape is None or not shape.experts:
        return ()
    origin = resolved.origin("quantization")
    path = tuple(origin.path) if origin is not None and origin.path else None
    return (Ignored(str(path[-1]) if path else "quantization", quantization, QUANTIZED_EXPERTS, path),)


def images_said(peak: PeakSource, resolved: Resolved) -> str:
    """A composite's image settings, and how the sequence length bounds an image (configs/image_tokens.py)."""
    vision = peak.model.shape.vision if peak.model.shape is not None else None
    assert vision is not None
    sequence = pick(peak.workload.sequence_length, "sequence_length", resolved)
    return vision.said(sequence.value if sequence is not None and isinstance(sequence.value, int) else None)


def _unread_processor(peak: PeakSource | None) -> tuple[Ignored, ...]:
    """A composite's image processor config looked for and not found: its class's defaults bound the image tokens,
    the peak approximate (configs/processor_config.py)."""
    vision = peak.model.shape.vision if peak is not None and peak.model.shape is not None else None
    if vision is None or not vision.approximate:
        return ()
    return (Ignored("preprocessor_config.json (not found)", None, vision.approximate, state=False),)


def _parallel_effects(parallel: dict[str, Given], lora: bool) -> tuple[Ignored, ...]:
    """The N-D mechanisms set whose figures are derived, not measured, or that the model-state column leaves out
    (configs/parallel_shape.EFFECTS), each at the key it came from."""
    out = []
    for name, why, state, step in effects(parallelism_of(parallel), lora):
        given = parallel.get(name)
        if given is None:
            continue
        written = ": " in given.note  # "activation_offloading: legacy (...)": the note says the value as written
        out.append(Ignored(given.note, None if written else given.value, why, given.path, state, step,
                           derived=why != LORA_UNAPPLIED[0]))  # not applied to a LoRA step: not modelled there
    return tuple(out)


def _parallel(built: MemoryPlan, resolved: Resolved, peak: PeakSource | None) -> dict[str, Given]:
    """The plan's resolved N-D degrees: its peak's, else the workload's over the settings."""
    if built.peak is not None:
        return built.peak.source.parallel
    return resolve_parallel(peak.workload.parallel if peak is not None else {}, resolved, None)


def plan(source: PlanSource, resolved: Resolved, peak: PeakSource | None = None,
         adapter: Adapter | None = None, ignored: tuple[Ignored, ...] = (),
         engine_named: bool = True) -> MemoryPlan | Unplanned:
    """The plan of whatever a reader found: FSDP when it shards with FSDP, DeepSpeed, or plain torch (DDP).
    `adapter`: a LoRA run (from the settings, `adapter_settings.adapter_from_settings`, or a recipe's adapter fields).
    `ignored`: the keys the config sets that change memory but are not modelled; `engine_named`: False for a
    recipe whose engine nothing names (DDP is then an assumption). Either makes the plan approximate."""
    if isinstance(source, FsdpSource):
        built = fsdp_plan(source, resolved, peak, adapter)
    elif isinstance(source, DeepSpeedSource):
        built = deepspeed_plan(source, resolved, peak, adapter)
    elif isinstance(source, TorchSource):
        built = torch_plan(source, resolved, peak, adapter)
    elif isinstance(source, SettingsSource):
        built = settings_plan(source, resolved, peak, adapter)
        if not isinstance(built, MemoryPlan):
            return built
        # the options' N-D degrees are derived as a config's are (--expert-parallel: `estimate --config` said so, the
        # options alone said "every key the inputs set is modelled")
        found = (*_unread_processor(peak), *_parallel_effects(_parallel(built, resolved, peak), adapter is not None))
        return built._replace(ignored=found) if found else built
    else:
        return Unplanned((source.missing,))
    one_process = resolved.settings.world_size == 1  # one GPU and no engine named: plain torch, nothing to assume
    assumed = None if engine_named or one_process or resolved.settings.engine is not None else ENGINE_ASSUMED
    ignored = (*_for_the_model(ignored, peak), *_quantized_experts(resolved, peak), *_unread_processor(peak))
    if isinstance(built, MemoryPlan):  # with or without a peak: the model-state column leaves out t and e either way
        ignored = (*ignored, *_parallel_effects(_parallel(built, resolved, peak), adapter is not None))
    world = built.origins.get("world_size") if isinstance(built, MemoryPlan) else None
    world_assumed = f"the world size {built.inputs.world_size} is assumed: {world.note}" if isinstance(
        built, MemoryPlan) and isinstance(world, Assumed) else None
    if isinstance(built, MemoryPlan) and (ignored or assumed or world_assumed):
        return built._replace(ignored=tuple(ignored), engine_assumed=assumed, world_assumed=world_assumed)
    return built
