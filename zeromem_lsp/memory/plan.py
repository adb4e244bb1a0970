"""The memory plan: P, G, O, R, the stage, offload and budget → bytes per rank at every stage.

Every figure comes from `core.model_state_bytes` over what stays on the GPU; what offload moves
is the host (or NVMe) figure beside it. Each input records where it came from, so hover and
messages can show the arithmetic. Pure data and arithmetic: builders live in resolved/planner.py, and this
module loads neither pydantic nor the config models (the `zeromem estimate` path).
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

from typing import NamedTuple, Protocol, TYPE_CHECKING

from zeromem_lsp.memory.model_state import STAGES, model_state_bytes
from zeromem_lsp.memory.precision import BytesPerParameter
from zeromem_lsp.memory.stages import FSDP_KEYS, FsdpOffload, Offload
from zeromem_lsp.provenance import Origin, Path  # noqa: F401  (Origin: the plan's origins)

if TYPE_CHECKING:
    from zeromem_lsp.memory.peak import Peak

DEFAULT_WARN_FRACTION = 0.9  # ZM102 above this share of the budget (zeromem.warn_fraction)


class AdapterTerms(Protocol):
    """What the plan reads of an adapter's breakdown (memory/adapter_plan.AdapterBreakdown)."""

    @property
    def trainable(self) -> int: ...

    @property
    def precision(self) -> str: ...

    @property
    def optimizer(self) -> str: ...

    def to_json(self) -> dict[str, object]: ...


class Inputs(NamedTuple):
    """P, G, O in bytes and R ranks, plus how they were obtained (for display)."""

    parameter_bytes: int
    gradient_bytes: int
    optimizer_bytes: int
    world_size: int
    parameters: int | None = None
    per_parameter: BytesPerParameter | None = None
    assumptions: tuple[str, ...] = ()
    adapter: AdapterTerms | None = None  # memory/adapter_plan.AdapterBreakdown: LoRA's frozen and trainable terms


def inputs_from_parameters(parameters: int, per_parameter: BytesPerParameter, world_size: int,
                           assumptions: tuple[str, ...] = ()) -> Inputs:
    """Scale bytes-per-parameter by a parameter count (exact)."""
    return Inputs(parameters * per_parameter.parameter, parameters * per_parameter.gradient,
                  parameters * per_parameter.optimizer, world_size, parameters, per_parameter,
                  (per_parameter.explanation, *assumptions))


FSDP_CPU_OFFLOAD = FsdpOffload(optimizer="cpu", param="cpu", cpu=True)


def offload_matters(offload: Offload, stage: str) -> bool:
    """An offload suggestion is only meaningful at a stage where every part of it takes effect."""
    moves_p, _, moves_o = offload.moves(stage)
    return (offload.optimizer is None or moves_o) and (offload.param is None or moves_p)


class Family(NamedTuple):
    """What differs between DeepSpeed and FSDP plans: the stages there are and what offload can do."""

    name: str  # "deepspeed" | "fsdp"
    stages: tuple[str, ...]
    candidates: Callable[[Offload], list[Offload]]  # offloads to try for a fit, cheapest first


#: Each family's offloads, from the configured one: DeepSpeed the optimizer's, then parameters too; FSDP
#: CPUOffload(offload_params=True); plain torch (one process or DDP) nothing (every rank holds everything).
DEEPSPEED = Family("deepspeed", STAGES, lambda now: [
    now, Offload(optimizer=now.optimizer or "cpu", param=now.param),
    Offload(optimizer=now.optimizer or "cpu", param=now.param or "cpu")])
FSDP = Family("fsdp", FSDP_KEYS, lambda now: [now, FSDP_CPU_OFFLOAD])
TORCH = Family("torch", ("ddp",), lambda now: [now])
FAMILIES = {family.name: family for family in (TORCH, DEEPSPEED, FSDP)}


class Placement(NamedTuple):
    """Per-stage bytes per rank on the GPU and on the offload target."""

    gpu: dict[str, int]
    host: dict[str, int]


class Suggestion(NamedTuple):
    stage: str
    offload: Offload
    gpu_bytes: int  # model state per GPU (the contract figure)
    peak: int | None = None  # the peak per GPU when it is known: what made the choice
    micro_batch: int | None = None  # a smaller micro-batch the suggestion needs (None: unchanged)
    checkpointing: bool = False  # the suggestion needs gradient checkpointing switched on


class Ignored(NamedTuple):
    """A key the config sets that changes per-GPU memory but that the figures do not model (issue 26): the
    figures are approximate while it is set. `path` is its place in this document (None: another file)."""

    key: str  # as shown: the key path, dotted; prefixed with its file when it is in another one
    value: object
    why: str  # what it does to memory (configs/key_inventory.py)
    path: Path | None = None
    state: bool = True  # it may change the model state P, G, O (False: only the step's transient memory)
    step: bool = True  # it leaves the peak approximate (False: the peak models it; only the model state leaves it out)
    derived: bool = False  # modelled from the code without a measured step, or left out of the model-state column only

    def to_json(self) -> dict[str, object]:
        return {"key": self.key, "value": self.value, "why": self.why}


class MemoryPlan(NamedTuple):
    """Per-stage bytes per rank for these inputs and offload, the chosen stage and the budget."""

    stage: str | None  # the configured stage; None in the calculator (no config chose one)
    stage_path: Path | None
    inputs: Inputs
    origins: dict[str, Origin]
    offload: Offload
    placement: Placement
    gpu_memory: int | None
    warn_fraction: float = DEFAULT_WARN_FRACTION
    policy: Family = DEEPSPEED
    peak: "Peak | None" = None  # beside the model state: the whole step's peak per stage (peak.py)
    ignored: tuple[Ignored, ...] = ()  # keys set that change memory but are not modelled: the figures are approximate
    engine_assumed: str | None = None  # why the engine is an assumption (a recipe launched with no engine named)
    world_assumed: str | None = None  # why the world size is an assumption (no source gives it: the degrees' smallest)

    @property
    def approximate(self) -> bool:
        """The figures leave out something the config sets, or assume the engine or the world: no memory error."""
        return any(item.step for item in self.ignored) or self.engine_assumed is not None or bool(self.world_assumed)

    @property
    def state_approximate(self) -> bool:
        """The model-state figure (ZM101's) leaves something out: a key that may change P, G, O, the engine or R."""
        return any(item.state for item in self.ignored) or self.engine_assumed is not None or bool(self.world_assumed)

    @property
    def family(self) -> str:
        return self.policy.name

    @property
    def stages(self) -> tuple[str, ...]:
        """The stages this plan's family has (FSDP has no ZeRO-1 equivalent)."""
        return self.policy.stages

    @property
    def chosen(self) -> str:
        """The configured stage (a plan read from a config has one)."""
        assert self.stage is not None, "the calculator's plan has no configured stage"
        return self.stage

    @property
    def gpu_bytes(self) -> int:
        return self.placement.gpu[self.chosen]

    @property
    def host_bytes(self) -> int:
        return self.placement.host[self.chosen]

    def placement_with(self, offload: Offload) -> Placement:
        """The per-stage split this plan's inputs would have under another offload setting."""
        return place(self.inputs, offload)

    @property
    def exceeds(self) -> bool:
        """The chosen stage's model state exceeds the budget (ZM101, the contract figure)."""
        return self.gpu_memory is not None and self.gpu_bytes > self.gpu_memory

    @property
    def peak_exceeds(self) -> bool:
        """The chosen stage's verdict figure (the peak when known) exceeds the budget."""
        return self.gpu_memory is not None and self.verdict_bytes(self.chosen) > self.gpu_memory

    @property
    def near_budget(self) -> bool:
        if self.gpu_memory is None or self.exceeds:
            return False
        return self.gpu_bytes > Fraction(self.warn_fraction) * self.gpu_memory

    @property
    def peak_known(self) -> bool:
        return self.known_peak is not None

    @property
    def known_peak(self) -> Peak | None:
        """The peak when none of its inputs is missing."""
        return self.peak if self.peak is not None and not self.peak.missing else None

    def judged_by(self, stage: str) -> str:
        """"peak" when the stage's peak is a figure, else "model state" (an input missing, or the peak unknown)."""
        peak = self.known_peak
        return "peak" if peak is not None and peak.at(stage) is not None else "model state"

    def verdict_bytes(self, stage: str) -> int:
        """What "fits" is judged on: the peak when it is known, else model state (docs/memory-model.md)."""
        peak = self.known_peak
        found = peak.at(stage) if peak is not None else None
        return self.placement.gpu[stage] if found is None else found

    def lowest_fitting(self, offload: Offload, peak: "Peak | None" = None) -> Suggestion | None:
        """The lowest stage (least communication) whose figure under `offload` fits the budget: its peak when
        the peak is known (`peak`: another micro-batch's), else its model state."""
        if self.gpu_memory is None:
            return None
        peak = peak if peak is not None else (self.peak if self.peak_known else None)
        placement = self.placement if offload == self.offload else self.placement_with(offload)
        for stage in self.stages:
            state = placement.gpu[stage]
            total = peak.at(stage, offload) if peak is not None else None
            if (state if total is None else total) <= self.gpu_memory and offload_matters(offload, stage):
                return Suggestion(stage, offload, state, total)
        return None

    def cheapest_fit(self) -> Suggestion | None:
        """Cheapest way to fit: the configured offload at increasing stages, then the family's next offloads, each
        (with a known peak) at the micro-batch as configured, halved while even, then with gradient checkpointing
        at each: offloading costs more throughput than a smaller micro-batch or recomputing the layers."""
        peaks: list[tuple[int | None, Peak | None, bool]] = [(None, None, False)]  # None: as configured
        peak = self.known_peak
        if peak is not None:
            peaks += self._halved(peak, False)
            checkpointed = peak.with_checkpointing()
            if checkpointed is not None and not checkpointed.missing:
                peaks += [(None, checkpointed, True), *self._halved(checkpointed, True)]
        for offload in dict.fromkeys(self.policy.candidates(self.offload)):
            for size, peak, checkpointing in peaks:
                found = self.lowest_fitting(offload, peak)
                if found is not None:
                    return found._replace(micro_batch=size, checkpointing=checkpointing)
        return None

    @staticmethod
    def _halved(peak: "Peak", checkpointing: bool) -> list[tuple[int, "Peak", bool]]:
        """`peak` at half its micro-batch, and half again, while the micro-batch is even."""
        found = []
        micro = peak.inputs.get("micro_batch")
        size = micro.value if micro is not None else 1
        while isinstance(size, int) and not isinstance(size, bool) and size % 2 == 0:
            size //= 2
            smaller = peak.with_micro_batch(size)
            if smaller is None or smaller.missing:
                break
            found.append((size, smaller, checkpointing))
        return found


def place(inputs: Inputs, offload: Offload) -> Placement:
    """Bytes per rank at every stage: what stays on the GPU, and what offload moves to the host."""
    gpu, host = {}, {}
    p, g, o, r = inputs.parameter_bytes, inputs.gradient_bytes, inputs.optimizer_bytes, inputs.world_size
    figures: dict[tuple[int, int, int], dict[str, int]] = {}  # the same P, G, O at several stages: once

    def per_stage(pgo: tuple[int, int, int]) -> dict[str, int]:
        if pgo not in figures:
            figures[pgo] = model_state_bytes(*pgo, r)
        return figures[pgo]

    for stage in STAGES:
        moves_p, moves_g, moves_o = offload.moves(stage)
        stays = (0 if moves_p else p, 0 if moves_g else g, 0 if moves_o else o)
        gpu[stage] = per_stage(stays)[stage]
        host[stage] = per_stage((p - stays[0], g - stays[1], o - stays[2]))[stage]
    return Placement(gpu=gpu, host=host)


def declare(name: str, example: str, refuser: str | None = None) -> str:
    """Where to give the setting `name`: the file's zeromem block, or — for a file whose tool refuses unknown keys
    (`refuser`: LLaMA-Factory, TRL) — the command-line flag, pyproject.toml or the editor setting, each as written."""
    if refuser is None:
        return f'declare "{name}" (e.g. {example}) in the zeromem block'
    from zeromem_lsp.configs.layers import camel_case

    bare = example.strip('"')
    return (f"{refuser} refuses a zeromem block in its file: give --{name.replace('_', '-')} {bare} on the command line, "
            f"or {name} = {example} under [tool.zeromem] in pyproject.toml, or the editor setting "
            f"zeromem.{camel_case(name)}")


#: What the model size is called where it is missing (the rest says where to give it: `missing_model_size`).
MODEL_SIZE = "the model size"


def missing_model_size(refuser: str | None = None) -> str:
    """The missing input named when neither `parameters` nor a model config gives the model's size."""
    return f"{MODEL_SIZE}: {declare('parameters', chr(34) + '7B' + chr(34), refuser)}"


class Unplanned(NamedTuple):
    """Why no figure can be computed: each missing input with what would supply it."""

    missing: tuple[str, ...]
