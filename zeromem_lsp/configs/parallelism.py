"""Degrees beyond data parallelism and the activation-memory mechanisms of long context (issue 30): one typed value.

The readers (axolotl, Accelerate's `parallelism_config_*`, TRL, LLaMA-Factory, DeepSpeed's `tensor_parallel` /
`sequence_parallel_size` / ZeRO++ / MiCS keys) and the command line (`--tensor-parallel N`, `--context-parallel N`,
`--ulysses N`, `--expert-parallel N`, `--activation-offload none|cpu|cpu_all`, `--tiled-mlp`) resolve to one
`Parallelism`; the step model reads it. Every field's default is "off", so `Parallelism()` is plain data parallelism.
Facts and sources: ../shared/notes/long-context.md and docs/memory-model.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, cast

from zeromem_lsp.provenance import Given

#: what `activation_offload` may be: nothing moved; the checkpointed layer inputs moved to host memory (axolotl
#: `legacy` / `hidden_states`, DeepSpeed's checkpoint offload, unsloth's checkpointer, LLaMA-Factory
#: `use_unsloth_gc`); every saved tensor moved (TRL's `OffloadActivations`: TRL `activation_offloading`, axolotl
#: `activation_offloading: true` / `disk`)
ACTIVATION_OFFLOADS = ("none", "cpu", "cpu_all")


@dataclass(frozen=True)
class Parallelism:
    """Per-world degrees (1 = off) and long-context mechanisms; `Parallelism()` is plain data parallelism."""

    tensor: int = 1  # tensor parallel degree t (Transformers tp_plan, DeepSpeed AutoTP)
    context: int = 1  # ring-attention context parallel degree c (torch CP, axolotl ring-flash-attn)
    ulysses: int = 1  # Ulysses sequence parallel degree u (DeepSpeed ALST, Accelerate sp_backend deepspeed)
    expert: int = 1  # expert parallel degree e: routed experts divided by e
    activation_offload: str = "none"  # one of ACTIVATION_OFFLOADS
    tiled_mlp_shards: int = 0  # TiledMLP's shard count n (0 = not tiled); the reader resolves the tool's default
    hpz_partition: int = 1  # ZeRO++ zero_hpz_partition_size (secondary partition of the parameters)
    mics_shard: int = 0  # MiCS mics_shard_size (0 = off): model state divided by it instead of the world

    @property
    def sequence_divisor(self) -> int:
        """What divides the tokens each rank holds outside attention: c · u."""
        return self.context * self.ulysses

    @property
    def model_parallel(self) -> int:
        """Ranks that hold different pieces of one replica's layers (t); data-parallel ranks are world / (t·c·u)."""
        return self.tensor

    def data_parallel(self, world_size: int) -> int:
        """Ranks that see different data: the world divided by t · c · u (at least 1)."""
        return max(1, world_size // (self.tensor * self.context * self.ulysses))


NONE = Parallelism()

#: Each field of Parallelism -> the zeromem setting (and `zeromem estimate` flag) that gives it; None: a config key only.
SETTINGS: dict[str, str | None] = {"tensor": "tensor_parallel", "context": "context_parallel", "ulysses": "ulysses",
                                   "expert": "expert_parallel", "activation_offload": "activation_offload",
                                   "tiled_mlp_shards": "tiled_mlp", "hpz_partition": None, "mics_shard": None}
#: axolotl's TiledMLP shard count when `tiled_mlp_num_shards` is not set: ceil(sequence / 32768)
#: (axolotl@067b021c8b87:src/axolotl/monkeypatch/tiled_mlp/patch.py:56-68; the schema's "seqlen/hidden_size" is stale).
AXOLOTL_TILE_TOKENS = 32768


def axolotl_shards(sequence_length: int) -> int:
    """axolotl's default TiledMLP shard count for a sequence of this many tokens (at least 1)."""
    return max(1, -(-sequence_length // AXOLOTL_TILE_TOKENS))


def parallelism_of(given: Mapping[str, Given]) -> Parallelism:
    """The typed value of resolved inputs keyed by field name (each a `Given`); an absent field keeps its default,
    and so does a value of the wrong type (the reader that made it reported it)."""
    values: dict[str, object] = {}
    for name, default in ((item.name, item.default) for item in fields(Parallelism)):
        found = given.get(name)
        value = found.value if found is not None else None
        if value is not None and type(value) is type(default) and (name != "activation_offload"
                                                                   or value in ACTIVATION_OFFLOADS):
            values[name] = value
    return Parallelism(**cast(dict[str, Any], values))


__all__ = ["ACTIVATION_OFFLOADS", "AXOLOTL_TILE_TOKENS", "NONE", "Parallelism", "SETTINGS", "axolotl_shards",
           "parallelism_of"]
