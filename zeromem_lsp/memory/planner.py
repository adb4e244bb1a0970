"""A config's training setup + zeromem settings → its memory plan, through one builder.

`build` takes the family policy (DeepSpeed or FSDP) and the parts each family reads differently:
the stage, the ranks, the bytes per parameter and their origins. Everything else — explicit
bytes, the parameter count, what is missing, the budget and warn fraction — is done once.
"""

from __future__ import annotations

from zeromem_lsp.provenance import Path

from zeromem_lsp.configs.settings import ZeromemSettings
from zeromem_lsp.configs.training import TrainingSetup, implied_world_size
from zeromem_lsp.memory.plan import (
    DEEPSPEED, DEFAULT_WARN_FRACTION, FSDP, FSDP_CPU_OFFLOAD, Family, FsdpOffload, Inputs, MemoryPlan, Offload, Origin, Unplanned,
    inputs_from_parameters, place,
)
from zeromem_lsp.memory.precision import BytesPerParameter, bytes_per_parameter
from zeromem_lsp.memory.stages import FSDP_STRATEGY_STAGE, by_number

def resolve_world_size(setup: TrainingSetup, settings: ZeromemSettings) -> tuple[int | None, Origin | None]:
    if settings.world_size is not None:
        return settings.world_size, Origin("zeromem.world_size", ("zeromem", "world_size"))
    implied = implied_world_size(setup)
    if implied is not None:
        return implied, Origin(
            f"train_batch_size / (micro × accumulation) = {setup.train_batch_size} / "
            f"({setup.micro_batch_size} × {setup.gradient_accumulation_steps})",
            ("train_batch_size",),
        )
    return None, None


def build(
    family: Family,
    stage: str | None,
    stage_path: Path | None,
    offload: Offload,
    ranks: int | None,
    ranks_origin: Origin | None,
    per_parameter,
    settings: ZeromemSettings,
    missing: list[str],
    block_path: Path = ("zeromem",),
) -> MemoryPlan | Unplanned:
    """The plan, once the family has read its stage, offload and ranks.

    `per_parameter()` -> (BytesPerParameter, {"precision": Origin, "optimizer": Origin}, extra
    assumptions), or None with `missing` extended; called only when no explicit bytes are declared."""
    explicit = (settings.parameter_bytes, settings.gradient_bytes, settings.optimizer_bytes)
    origins: dict[str, Origin] = {}
    inputs = None
    if all(value is not None for value in explicit):
        if ranks is not None:
            inputs = Inputs(*explicit, world_size=ranks, assumptions=("P, G and O declared in bytes",))
        origins["bytes"] = Origin("zeromem.parameter_bytes / gradient_bytes / optimizer_bytes", block_path)
    else:
        if settings.parameters is None:
            missing.append('the model size: declare "parameters" (e.g. "7B") in the zeromem block')
        read = per_parameter(missing)
        if not missing and read is not None:
            bytes_each, read_origins, extra = read
            origins.update(read_origins)
            origins["parameters"] = Origin("zeromem.parameters", (*block_path, "parameters"))
            assumptions = [f"precision: {origins['precision'].note}", f"optimizer: {origins['optimizer'].note}", *extra]
            inputs = inputs_from_parameters(settings.parameters, bytes_each, ranks, tuple(assumptions))
    if missing or inputs is None:
        return Unplanned(tuple(missing))
    origins["world_size"] = ranks_origin or Origin("world size")
    warn = settings.warn_fraction if settings.warn_fraction is not None else DEFAULT_WARN_FRACTION
    return MemoryPlan(stage=stage, stage_path=stage_path, inputs=inputs, origins=origins, offload=offload,
                      placement=place(inputs, offload), gpu_memory=settings.gpu_memory, warn_fraction=warn,
                      policy=family)


def build_plan(setup: TrainingSetup, settings: ZeromemSettings) -> MemoryPlan | Unplanned:
    """A DeepSpeed config's plan: its stage and offload, DeepSpeed's bytes per parameter."""
    missing: list[str] = []
    if setup.stage is None:
        missing.append("a valid zero_optimization.stage (0-3)")
    world_size, world_origin = resolve_world_size(setup, settings)
    if world_size is None:
        missing.append('the world size: declare "world_size" in the zeromem block, or give all three batch sizes')

    def per_parameter(missing: list[str]):
        precision = settings.precision or setup.precision
        optimizer = settings.optimizer or setup.optimizer
        if precision is None:
            missing.append(f'the precision ({setup.precision_note}): declare "precision" in the zeromem block')
        if optimizer is None:
            missing.append(f'the optimizer ({setup.optimizer_note}): declare "optimizer" in the zeromem block')
        if missing:
            return None
        origins = {
            "precision": Origin("zeromem.precision", ("zeromem", "precision")) if settings.precision
            else Origin(setup.precision_note, setup.precision_path),
            "optimizer": Origin("zeromem.optimizer", ("zeromem", "optimizer")) if settings.optimizer
            else Origin(setup.optimizer_note, setup.optimizer_path),
        }
        extra = ([f"gradients accumulate in {setup.gradient_dtype} (data_types.grad_accum_dtype)"]
                 if setup.gradient_dtype else [])
        return bytes_per_parameter(precision, optimizer, gradient_dtype=setup.gradient_dtype), origins, extra

    stage = by_number(setup.stage).key if setup.stage is not None else None
    offload = Offload(optimizer=setup.offload_optimizer, param=setup.offload_param)
    return build(DEEPSPEED, stage, setup.stage_path, offload, world_size, world_origin, per_parameter, settings,
                 missing)


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


def build_fsdp_plan(
    strategy: str | None,
    strategy_origin: Origin,
    offload: bool,
    settings: ZeromemSettings,
    world_size: int | None,
    world_origin: Origin | None,
    shard_group: int | None = None,
    shard_origin: Origin | None = None,
    block_path: Path = ("zeromem",),
) -> MemoryPlan | Unplanned:
    """An FSDP setup → the plan at the ZeRO stage with the same persistent state per rank.

    `shard_group`: the ranks one copy is sharded over for HYBRID strategies (GPUs per node).
    `block_path`: where the zeromem block sits in this document (for origins)."""
    missing: list[str] = []
    if strategy is None:
        missing.append("a valid sharding strategy")
    if settings.world_size is not None:
        world_size, world_origin = settings.world_size, Origin("zeromem.world_size", (*block_path, "world_size"))
    ranks, ranks_origin = world_size, world_origin
    if strategy in HYBRID:
        if shard_group is not None and settings.world_size is None:
            ranks, ranks_origin = shard_group, shard_origin
        elif world_size is not None and settings.world_size is not None:
            ranks, ranks_origin = world_size, Origin(
                "zeromem.world_size, taken as the shard group (GPUs per node) of the hybrid strategy",
                (*block_path, "world_size"))
        else:
            ranks = None
    if strategy == "NO_SHARD" and ranks is None:
        ranks, ranks_origin = 1, Origin("NO_SHARD keeps a full copy on every rank: the rank count does not matter")
    if ranks is None and strategy is not None:
        what = "the shard group (GPUs per node)" if strategy in HYBRID else "the world size"
        missing.append(f'{what}: declare "world_size" in the zeromem block')

    def per_parameter(missing: list[str]):
        if missing:
            return None
        origins = {
            "precision": Origin("zeromem.precision: the dtype the model is loaded in", (*block_path, "precision"))
            if settings.precision else
            Origin("FSDP keeps sharded parameters in the loaded dtype (assumed fp32; mixed_precision casts "
                   "only the gathered copy for compute)"),
            "optimizer": Origin("zeromem.optimizer", (*block_path, "optimizer")) if settings.optimizer
            else Origin("AdamW (HF Trainer's default)"),
        }
        return fsdp_bytes_per_parameter(settings.precision or "fp32", settings.optimizer or "adamw"), origins, []

    plan = build(FSDP, FSDP_STRATEGY_STAGE.get(strategy), strategy_origin.path,
                 FSDP_CPU_OFFLOAD if offload else FsdpOffload(), ranks, ranks_origin, per_parameter, settings,
                 missing, block_path)
    if isinstance(plan, MemoryPlan):
        plan = plan._replace(origins={**plan.origins, "strategy": strategy_origin})
    return plan


def accelerate_ranks(accelerate, machines_written: bool):
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


def plan_fsdp_family(fsdp_setup, accelerate, deepspeed_setup: TrainingSetup | None, settings: ZeromemSettings,
                     block_path: Path, machines_written: bool, missing: str) -> MemoryPlan | Unplanned:
    """The plan of an Accelerate / --fsdp_config / TrainingArguments document: FSDP when it shards with
    FSDP, else DeepSpeed (with Accelerate's num_processes as the world size unless declared)."""
    if fsdp_setup is not None:
        world, world_origin, group, group_origin = accelerate_ranks(accelerate, machines_written)
        strategy_origin = Origin(fsdp_setup.strategy_note, fsdp_setup.strategy_path)
        return build_fsdp_plan(fsdp_setup.strategy, strategy_origin, fsdp_setup.offload, settings, world,
                               world_origin, group, group_origin, block_path)
    if deepspeed_setup is None:
        return Unplanned((missing,))
    if settings.world_size is None and accelerate is not None and accelerate.world_size:
        plan = build_plan(deepspeed_setup, settings.model_copy(update={"world_size": accelerate.world_size}))
        if isinstance(plan, MemoryPlan):
            plan = plan._replace(origins={**plan.origins, "world_size": Origin("num_processes", ("num_processes",))})
        return plan
    return build_plan(deepspeed_setup, settings)
