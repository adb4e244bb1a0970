"""A config's training setup + zeromem settings → the memory plan: P, G, O, R, stage, offload, budget.

Every figure comes from `core.model_state_bytes` over what stays on the GPU; what offload moves
is the host (or NVMe) figure beside it. Each input records where it came from, so hover and
messages can show the arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from zeromem_lsp.configs.settings import DEFAULT_WARN_FRACTION, ZeromemSettings
from zeromem_lsp.configs.training import Path, TrainingSetup, implied_world_size
from zeromem_lsp.core import STAGES, model_state_bytes
from zeromem_lsp.estimate import Inputs, inputs_from_parameters
from zeromem_lsp.precision import BytesPerParameter, bytes_per_parameter

STAGE_BY_NUMBER = dict(enumerate(STAGES))


@dataclass(frozen=True)
class Origin:
    """Where an input came from: a human note and, when it is in the document, its key path."""

    note: str
    path: Path | None = None


@dataclass(frozen=True)
class Offload:
    optimizer: str | None = None  # "cpu" | "nvme"
    param: str | None = None

    def moves(self, stage: str) -> tuple[bool, bool, bool]:
        """Which of P, G, O leave the GPU at `stage` (DeepSpeed's rules)."""
        number = STAGES.index(stage)
        optimizer = self.optimizer is not None and number >= 1
        return (self.param is not None and number == 3, optimizer and number >= 2, optimizer)

    def describe(self) -> str:
        parts = []
        if self.optimizer:
            parts.append(f"optimizer → {self.optimizer}")
        if self.param:
            parts.append(f"parameters → {self.param}")
        return ", ".join(parts) or "none"


@dataclass(frozen=True)
class FsdpOffload(Offload):
    """FSDP's CPUOffload(offload_params=True): parameters and gradients live on the host and the
    optimizer steps there, so its state is on the host too — at every sharding strategy."""

    cpu: bool = False

    def moves(self, stage: str) -> tuple[bool, bool, bool]:
        return (self.cpu, self.cpu, self.cpu)

    def describe(self) -> str:
        return "parameters, gradients and optimizer state → cpu" if self.cpu else "none"


FSDP_CPU_OFFLOAD = FsdpOffload(optimizer="cpu", param="cpu", cpu=True)
FSDP_STAGES = ("ddp", "zero2", "zero3")  # NO_SHARD, SHARD_GRAD_OP, FULL_SHARD (no ZeRO-1 equivalent)


@dataclass(frozen=True)
class Placement:
    """Per-stage bytes per rank on the GPU and on the offload target."""

    gpu: dict[str, int]
    host: dict[str, int]


@dataclass(frozen=True)
class Suggestion:
    stage: str
    offload: Offload
    gpu_bytes: int


@dataclass(frozen=True)
class MemoryPlan:
    stage: str
    stage_path: Path | None
    inputs: Inputs
    origins: dict[str, Origin]
    offload: Offload
    placement: Placement
    gpu_memory: int | None
    warn_fraction: float
    family: str = "deepspeed"  # "deepspeed" | "fsdp": which stages and offload rules apply

    @property
    def stages(self) -> tuple[str, ...]:
        """The stages this plan's family has (FSDP has no ZeRO-1 equivalent)."""
        return FSDP_STAGES if self.family == "fsdp" else STAGES

    @property
    def gpu_bytes(self) -> int:
        return self.placement.gpu[self.stage]

    @property
    def host_bytes(self) -> int:
        return self.placement.host[self.stage]

    def placement_with(self, offload: Offload) -> Placement:
        """The per-stage split this plan's inputs would have under another offload setting."""
        return place(self.inputs, offload)

    @property
    def exceeds(self) -> bool:
        return self.gpu_memory is not None and self.gpu_bytes > self.gpu_memory

    @property
    def near_budget(self) -> bool:
        if self.gpu_memory is None or self.exceeds:
            return False
        return self.gpu_bytes > Fraction(self.warn_fraction) * self.gpu_memory

    def cheapest_fit(self) -> Suggestion | None:
        """Cheapest way to fit: the configured offload at increasing stages, then optimizer, then full offload."""
        if self.gpu_memory is None:
            return None
        if self.family == "fsdp":
            for offload in dict.fromkeys([self.offload, FSDP_CPU_OFFLOAD]):
                placement = self.placement_with(offload)
                for stage in FSDP_STAGES:
                    if placement.gpu[stage] <= self.gpu_memory:
                        return Suggestion(stage, offload, placement.gpu[stage])
            return None
        candidates = [self.offload, Offload(optimizer=self.offload.optimizer or "cpu", param=self.offload.param),
                      Offload(optimizer=self.offload.optimizer or "cpu", param=self.offload.param or "cpu")]
        for offload in dict.fromkeys(candidates):
            placement = self.placement_with(offload)
            for stage in STAGES:
                if placement.gpu[stage] <= self.gpu_memory and offload_matters(offload, stage):
                    return Suggestion(stage, offload, placement.gpu[stage])
        return None


def offload_matters(offload: Offload, stage: str) -> bool:
    """An offload suggestion is only meaningful at a stage where every part of it takes effect."""
    moves_p, _, moves_o = offload.moves(stage)
    return (offload.optimizer is None or moves_o) and (offload.param is None or moves_p)


def place(inputs: Inputs, offload: Offload) -> Placement:
    gpu, host = {}, {}
    p, g, o, r = inputs.parameter_bytes, inputs.gradient_bytes, inputs.optimizer_bytes, inputs.world_size
    for stage in STAGES:
        moves_p, moves_g, moves_o = offload.moves(stage)
        stays = (0 if moves_p else p, 0 if moves_g else g, 0 if moves_o else o)
        gpu[stage] = model_state_bytes(*stays, r)[stage]
        host[stage] = model_state_bytes(p - stays[0], g - stays[1], o - stays[2], r)[stage]
    return Placement(gpu=gpu, host=host)


@dataclass(frozen=True)
class Unplanned:
    """Why no figure can be computed: each missing input with what would supply it."""

    missing: tuple[str, ...]


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


def build_plan(setup: TrainingSetup, settings: ZeromemSettings) -> MemoryPlan | Unplanned:
    missing: list[str] = []
    if setup.stage is None:
        missing.append("a valid zero_optimization.stage (0-3)")
    world_size, world_origin = resolve_world_size(setup, settings)
    if world_size is None:
        missing.append('the world size: declare "world_size" in the zeromem block, or give all three batch sizes')
    origins: dict[str, Origin] = {}
    explicit = (settings.parameter_bytes, settings.gradient_bytes, settings.optimizer_bytes)
    inputs = None
    if all(value is not None for value in explicit):
        if world_size is not None:
            inputs = Inputs(*explicit, world_size=world_size, assumptions=("P, G and O declared in bytes",))
        origins["bytes"] = Origin("zeromem.parameter_bytes / gradient_bytes / optimizer_bytes", ("zeromem",))
    else:
        precision = settings.precision or setup.precision
        optimizer = settings.optimizer or setup.optimizer
        if settings.parameters is None:
            missing.append('the model size: declare "parameters" (e.g. "7B") in the zeromem block')
        if precision is None:
            missing.append(f'the precision ({setup.precision_note}): declare "precision" in the zeromem block')
        if optimizer is None:
            missing.append(f'the optimizer ({setup.optimizer_note}): declare "optimizer" in the zeromem block')
        if not missing:
            origins["precision"] = (
                Origin("zeromem.precision", ("zeromem", "precision")) if settings.precision
                else Origin(setup.precision_note, setup.precision_path)
            )
            origins["optimizer"] = (
                Origin("zeromem.optimizer", ("zeromem", "optimizer")) if settings.optimizer
                else Origin(setup.optimizer_note, setup.optimizer_path)
            )
            origins["parameters"] = Origin("zeromem.parameters", ("zeromem", "parameters"))
            per_parameter = bytes_per_parameter(precision, optimizer, gradient_dtype=setup.gradient_dtype)
            assumptions = [f"precision: {origins['precision'].note}", f"optimizer: {origins['optimizer'].note}"]
            if setup.gradient_dtype:
                assumptions.append(f"gradients accumulate in {setup.gradient_dtype} (data_types.grad_accum_dtype)")
            inputs = inputs_from_parameters(settings.parameters, per_parameter, world_size, tuple(assumptions))
    if missing or inputs is None:
        return Unplanned(tuple(missing))
    origins["world_size"] = world_origin
    offload = Offload(optimizer=setup.offload_optimizer, param=setup.offload_param)
    warn = settings.warn_fraction if settings.warn_fraction is not None else DEFAULT_WARN_FRACTION
    return MemoryPlan(
        stage=STAGE_BY_NUMBER[setup.stage],
        stage_path=setup.stage_path,
        inputs=inputs,
        origins=origins,
        offload=offload,
        placement=place(inputs, offload),
        gpu_memory=settings.gpu_memory,
        warn_fraction=warn,
    )


#: FSDP sharding strategy -> the ZeRO stage with the same persistent per-rank state (docs/fsdp-accelerate.md).
FSDP_STAGE = {"NO_SHARD": "ddp", "SHARD_GRAD_OP": "zero2", "FULL_SHARD": "zero3",
              "HYBRID_SHARD": "zero3", "HYBRID_SHARD_ZERO2": "zero2"}
HYBRID = ("HYBRID_SHARD", "HYBRID_SHARD_ZERO2")
TENSOR_STATE_OPTIMIZERS = ("adam", "adamw", "lamb", "sgd_momentum", "adagrad", "lion")


def fsdp_bytes_per_parameter(dtype: str, optimizer: str) -> BytesPerParameter:
    """FSDP's convention: the sharded parameters keep the dtype the model was loaded in (mixed precision
    only casts the gathered copy for compute), gradients are kept in that dtype for the optimizer, and
    torch.optim allocates its state like the parameter. No separate master copy."""
    from zeromem_lsp.precision import DTYPE_BYTES, optimizer_state_bytes

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
    optimizer = settings.optimizer or "adamw"
    dtype = settings.precision or "fp32"
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
        if not missing:
            origins["precision"] = (
                Origin("zeromem.precision: the dtype the model is loaded in", (*block_path, "precision"))
                if settings.precision else
                Origin("FSDP keeps sharded parameters in the loaded dtype (assumed fp32; mixed_precision casts "
                       "only the gathered copy for compute)"))
            origins["optimizer"] = (Origin("zeromem.optimizer", (*block_path, "optimizer")) if settings.optimizer
                                    else Origin("AdamW (HF Trainer's default)"))
            origins["parameters"] = Origin("zeromem.parameters", (*block_path, "parameters"))
            per_parameter = fsdp_bytes_per_parameter(dtype, optimizer)
            assumptions = [f"precision: {origins['precision'].note}", f"optimizer: {origins['optimizer'].note}"]
            inputs = inputs_from_parameters(settings.parameters, per_parameter, ranks, tuple(assumptions))
    if missing or inputs is None:
        return Unplanned(tuple(missing))
    origins["world_size"] = ranks_origin or Origin("world size")
    origins["strategy"] = strategy_origin
    chosen = FSDP_CPU_OFFLOAD if offload else FsdpOffload()
    warn = settings.warn_fraction if settings.warn_fraction is not None else DEFAULT_WARN_FRACTION
    return MemoryPlan(
        stage=FSDP_STAGE[strategy], stage_path=strategy_origin.path, inputs=inputs, origins=origins,
        offload=chosen, placement=place(inputs, chosen), gpu_memory=settings.gpu_memory, warn_fraction=warn,
        family="fsdp",
    )


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
            plan = replace(plan, origins={**plan.origins, "world_size": Origin("num_processes", ("num_processes",))})
        return plan
    return build_plan(deepspeed_setup, settings)


__all__ = ["MemoryPlan", "Unplanned", "Offload", "Origin", "Suggestion", "build_plan", "build_fsdp_plan", "plan_fsdp_family", "place",
           "FsdpOffload", "FSDP_STAGE"]
