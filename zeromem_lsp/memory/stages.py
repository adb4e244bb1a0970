"""The one stage vocabulary: DDP and ZeRO 1-3, each with its number, label, formula and the FSDP
sharding strategy that keeps the same persistent state per rank (docs/fsdp-accelerate.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from zeromem_lsp.memory.model_state import STAGES


class Stage(NamedTuple):
    key: str  # the name in core.model_state_bytes: "ddp" | "zero1" | "zero2" | "zero3"
    number: int  # zero_optimization.stage
    label: str  # "ZeRO-2"
    formula: str  # core's formula over P, G, O, R
    fsdp: str | None  # the FSDP ShardingStrategy with the same per-rank state; None: no equivalent

    def label_in(self, family: str) -> str:
        """DDP / ZeRO-n for DeepSpeed; the FSDP strategy with its ZeRO equivalent for FSDP."""
        if family == "fsdp" and self.fsdp:
            return f"{self.fsdp} (≈ {self.label})"
        return self.label


ALL = (
    Stage("ddp", 0, "DDP", "P + G + O", "NO_SHARD"),
    Stage("zero1", 1, "ZeRO-1", "P + G + ceil(O / R)", None),
    Stage("zero2", 2, "ZeRO-2", "P + ceil((G + O) / R)", "SHARD_GRAD_OP"),
    Stage("zero3", 3, "ZeRO-3", "ceil((P + G + O) / R)", "FULL_SHARD"),
)
BY_KEY = {stage.key: stage for stage in ALL}
assert tuple(BY_KEY) == STAGES, "the vocabulary follows core's stages"
#: The stages FSDP has (no ZeRO-1 equivalent).
FSDP_KEYS = tuple(stage.key for stage in ALL if stage.fsdp)
#: Every FSDP sharding strategy -> the stage key with the same persistent per-rank state.
FSDP_STRATEGY_STAGE = {"NO_SHARD": "ddp", "SHARD_GRAD_OP": "zero2", "FULL_SHARD": "zero3",
                       "HYBRID_SHARD": "zero3", "HYBRID_SHARD_ZERO2": "zero2"}


def stage(key: str) -> Stage:
    return BY_KEY[key]


def by_number(number: int) -> Stage:
    return ALL[number]


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
