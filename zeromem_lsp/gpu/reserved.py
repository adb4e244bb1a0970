"""The reserved peak of a training step: the step model's moments as an allocation stream, replayed through the
caching-allocator simulator, plus the fixed costs outside the allocator.

The step model (memory/step.py, `step_peak`) says what is alive at each moment of the step, part by part, in the
step's order. `allocation_stream` turns consecutive moments into allocations and frees: a part that grows allocates
its growth, one tensor per parameter for the parts shaped like the parameters (parameters, gradients, optimizer
states, fp32 master, optimizer scratch: the weights inventory's shapes, configs/families.py via
`parameter_shapes`) and one tensor per decoder layer for activations; a part that shrinks frees its newest tensors
first (the backward frees the last layer's activations first). `reserved_peak` replays the stream through
`gpu.allocator.Allocator` and reads its peaks. Assumptions (docs/gpu.md): see `ASSUMPTIONS`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from math import prod
import functools
from dataclasses import dataclass
from typing import Any, NamedTuple

from zeromem_lsp.configs.model_config import ModelShape
from zeromem_lsp.gpu.allocator import Allocator
from zeromem_lsp.gpu.fixed_costs import WORKSPACES_PER_STEP, FixedCosts, fixed_costs
from zeromem_lsp.memory.optimizer_step import parameter_shapes
from zeromem_lsp.memory.parts import PHASES
from zeromem_lsp.memory.step import StepPeak

#: Parts shaped like the model's parameters: one tensor per parameter, in `model.parameters()` order.
PARAMETER_SHAPED = ("parameters", "fp32 master", "optimizer scratch", "bf16 weight copies", "16-bit partition copies",
                    "fp32 gradients")
#: Gradients appear in reverse parameter order (autograd reaches the last layer first).
REVERSED = ("gradients",)
#: Parts with one tensor per decoder layer.
PER_LAYER = ("activations",)
#: Adam / AdamW keep exp_avg and exp_avg_sq per parameter (torch.optim.adamw `_init_group`).
STATES_PER_PARAMETER = 2

ASSUMPTIONS = (
    "the stream is the step model's moments, differenced: transients inside a moment that the step model does not "
    "name (a layer's intermediate tensors in the forward, kernels' scratch) are not allocated, so the simulated "
    "fragmentation is a lower bound",
    "parameter-shaped parts are one allocation per parameter tensor (configs/families.py weights via "
    "memory.optimizer_step.parameter_shapes), split pro rata when sharded; optimizer states two per parameter "
    "(Adam's exp_avg, exp_avg_sq); activations one allocation per decoder layer; every other part one allocation",
    "the state before the first moment (parameters, optimizer states, ...) is allocated in that order at start, "
    "and the step is replayed twice so the second step meets the first step's cache (max_memory_reserved over a run "
    "includes the first step)",
    f"{WORKSPACES_PER_STEP} cuBLAS workspaces (the forward's thread and the autograd engine's thread) are allocated "
    "at the first forward moment and kept",
    "one stream (the default one): side streams (DeepSpeed's overlap_comm, FSDP's all-gather stream) are not "
    "separated, although the allocator caches per stream",
)


class Op(NamedTuple):
    action: str  # "alloc" / "free"
    part: str
    size: int


def _apportion(total: int, weights: Sequence[int]) -> list[int]:
    """`total` split in proportion to `weights`, exactly (the rounding goes to the last share)."""
    whole = sum(weights)
    if total <= 0 or whole <= 0:
        return []
    shares = [total * w // whole for w in weights]
    shares[-1] += total - sum(shares)
    return [s for s in shares if s > 0]


def splits(shape: ModelShape | None) -> dict[str, list[int]]:
    """The relative tensor sizes each part is cut into."""
    if shape is None:
        return {}
    numels = [prod(s) for s in parameter_shapes(shape)]
    out = {name: list(numels) for name in PARAMETER_SHAPED}
    out.update({name: numels[::-1] for name in REVERSED})
    out["optimizer states"] = [n for n in numels for _ in range(STATES_PER_PARAMETER)]
    out.update({name: [1] * shape.layers for name in PER_LAYER})
    return out


def moments_in_order(peak: StepPeak) -> list[dict[str, int]]:
    """Every moment of the step, phase by phase, as part name → bytes."""
    out = []
    for phase in PHASES:
        if phase in peak.phases:
            for moment in peak.phases[phase].moments:
                parts: dict[str, int] = {}
                for part in moment.parts:
                    name = str(getattr(part.name, "value", part.name))  # a P member or an optimizer's state name
                    parts[name] = parts.get(name, 0) + part.bytes
                out.append(parts)
    return out


def allocation_stream(moments: Iterable[dict[str, int]], shares: dict[str, list[int]], steps: int = 2,
                      workspaces: Sequence[int] = ()) -> list[Op]:
    """The allocations and frees that take each moment's parts to the next's (see the module's docstring)."""
    moments = list(moments)
    ops: list[Op] = []
    live: dict[str, list[int]] = {}  # part → sizes of its live tensors, oldest first

    def grow(part: str, by: int) -> None:
        weights = shares.get(part, [1])
        for size in _apportion(by, weights):
            ops.append(Op("alloc", part, size))
            live.setdefault(part, []).append(size)

    def shrink(part: str, by: int) -> None:
        stack = live[part]
        while by > 0 and stack:
            top = stack.pop()
            ops.append(Op("free", part, top))
            if top > by:
                ops.append(Op("alloc", part, top - by))
                stack.append(top - by)
                by = 0
            else:
                by -= top

    if moments:  # the state before the step: whatever every moment holds, at its smallest
        first = moments[0]
        persistent = {p: min(m.get(p, 0) for m in moments) for p in first}
        for part, size in persistent.items():
            grow(part, size)
    for step in range(steps):
        for index, moment in enumerate(moments):
            for part in dict.fromkeys([*live, *moment]):  # (a fixed order: a set's would follow the hash seed)
                now = sum(live.get(part, []))
                want = moment.get(part, 0)
                if want < now:
                    shrink(part, now - want)
            for part, want in moment.items():
                now = sum(live.get(part, []))
                if want > now:
                    grow(part, want - now)
            if step == 0 and index == 0:
                for size in workspaces:
                    ops.append(Op("alloc", "cuBLAS workspace", size))
    return ops


class ReservedPeak(NamedTuple):
    live: int  # the step model's peak: bytes of live tensors
    allocated: int  # max_memory_allocated: the same tensors in the allocator's blocks (rounded, unsplit rests)
    reserved: int  # max_memory_reserved
    costs: FixedCosts  # CUDA context and NCCL (outside the allocator), the cuBLAS workspace (inside it)
    expandable: bool

    @property
    def budget_low(self) -> int:
        """What the GPU must hold at the least: reserved + context + NCCL (low ends of the ranges)."""
        return self.reserved + self.costs.outside_low

    @property
    def budget_high(self) -> int:
        return self.reserved + self.costs.outside_high


def replay_stream(ops: Iterable[Op], allocator: Allocator) -> Allocator:
    """Run the stream through the allocator (frees take the part's newest live tensor of that size)."""
    handles: dict[str, list[tuple[int, int]]] = {}
    for op in ops:
        if op.action == "alloc":
            handles.setdefault(op.part, []).append((allocator.malloc(op.size), op.size))
        else:
            stack = handles[op.part]
            for i in range(len(stack) - 1, -1, -1):
                if stack[i][1] == op.size:
                    allocator.free(stack.pop(i)[0])
                    break
            else:
                raise AssertionError(f"no live {op.part} tensor of {op.size} bytes")
    return allocator


def reserved_peak(peak: StepPeak, shape: ModelShape | None = None, *, expandable: bool = False,
                  device_name: str = "H100", ranks: int = 1, interconnect: str = "nvlink", communicators: int = 1,
                  cublas_config: str | None = None, steps: int = 2, **allocator_settings: Any) -> ReservedPeak:
    """The step's allocated and reserved peaks as the caching allocator would serve its tensors, and the fixed
    costs beside them (`ReservedPeak.budget_low` / `budget_high`: reserved + context + NCCL)."""
    costs = fixed_costs(device_name, ranks, interconnect, communicators, cublas_config)
    ops = allocation_stream(moments_in_order(peak), splits(shape), steps, [costs.workspace] * WORKSPACES_PER_STEP)
    allocator = replay_stream(ops, Allocator(expandable, **allocator_settings))
    return ReservedPeak(peak.peak, allocator.max_allocated, allocator.max_reserved, costs, expandable)


#: What the reserve counts per stage, as every figure names it (Reserve.bytes).
RESERVE_PARTS = "cuBLAS workspaces, CUDA context, NCCL"
#: The device whose fixed costs count when the config names none (fixed_costs.CONTEXT: Hopper's row, measured).
DEFAULT_DEVICE = "H100"


@dataclass(frozen=True)
class Reserve:
    """What a stage's verdict adds to the step's live bytes, and what is shown beside it.

    Counted (`bytes`): the cuBLAS workspaces (WORKSPACES_PER_STEP of them, allocated through the caching allocator:
    CUDA's max_memory_allocated exceeds the step's live tensors by exactly these, tests/unit/test_gpu_steps.py), the
    CUDA context and, with ranks > 1, one NCCL communicator (the low ends of their ranges: fixed_costs).
    Shown, not counted (`modelled`): the caching allocator's reserved peak from the step's moments replayed through
    `Allocator`. The allocator itself replays recorded traces exactly, but the step's moments are a coarse stream
    (one block per part and layer): against the H200 record its slack ranges from about right (gradient
    checkpointing) to 12 times too much (without), so a verdict on it would cry wolf (docs/gpu.md)."""

    peak: StepPeak
    shape: ModelShape | None
    ranks: int
    device_name: str = DEFAULT_DEVICE

    @functools.cached_property
    def costs(self) -> FixedCosts:
        return fixed_costs(self.device_name, self.ranks)

    @property
    def workspaces(self) -> int:
        return WORKSPACES_PER_STEP * self.costs.workspace

    @property
    def nccl(self) -> int:
        return self.costs.communicators * self.costs.nccl.low

    @property
    def bytes(self) -> int:
        return self.workspaces + self.costs.outside_low

    @functools.cached_property
    def modelled(self) -> ReservedPeak:
        return reserved_peak(self.peak, self.shape, device_name=self.device_name, ranks=self.ranks)

    def to_json(self) -> dict[str, Any]:
        modelled = self.modelled
        return {"cublas_workspaces_bytes": self.workspaces, "cuda_context_bytes": self.costs.context.low,
                "nccl_bytes": self.nccl, "communicators": self.costs.communicators, "device": self.device_name,
                "caching_allocator_modelled": {"allocated_peak_bytes": modelled.allocated,
                                               "reserved_peak_bytes": modelled.reserved,
                                               "expandable_segments": modelled.expandable}}


def reserve(peak: StepPeak, shape: ModelShape | None, ranks: int, fixed: int | None) -> tuple[int, Reserve | None]:
    """A stage's reserve: the user's fixed figure, else the modelled one (and its `Reserve`)."""
    if fixed is not None:
        return fixed, None
    modelled = Reserve(peak, shape, ranks)
    return modelled.bytes, modelled
