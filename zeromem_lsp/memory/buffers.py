"""Transient communication and gathering buffers of ZeRO and FSDP, per GPU (pure, exact ints).

ZeRO 1-2: the reduce and all-gather buckets (4.5x with `overlap_comm`); ZeRO-3: the reduce bucket, the prefetch
bucket and up to `stage3_max_live_parameters` gathered parameters. Unset sizes take DeepSpeed's defaults
(deepspeed/runtime/zero/config.py), `"auto"` Transformers' fill. Rules and sources: docs/memory-model.md, "Buffers".
"""

from __future__ import annotations

from typing import NamedTuple

#: DeepSpeedZeroConfig defaults (elements); overlap_comm defaults to True only at stage 3.
DEEPSPEED_DEFAULTS = {"reduce_bucket_size": 500_000_000, "allgather_bucket_size": 500_000_000,
                      "stage3_prefetch_bucket_size": 50_000_000, "stage3_max_live_parameters": 1_000_000_000,
                      "stage3_param_persistence_threshold": 100_000}


class BufferPart(NamedTuple):
    name: str  # the setting (or FSDP unit) it comes from
    elements: int
    bytes: int
    rule: str  # how bytes follow from elements, e.g. "4.5 × 2 B × 500,000,000"


class Buffers(NamedTuple):
    parts: tuple[BufferPart, ...]

    @property
    def total(self) -> int:
        return sum(part.bytes for part in self.parts)


class AutoSizes(NamedTuple):
    """What Transformers writes for `"auto"` (transformers/integrations/deepspeed.py)."""

    reduce_bucket_size: int  # hidden²
    stage3_prefetch_bucket_size: int  # int(0.9 · hidden²)
    stage3_param_persistence_threshold: int  # 10 · hidden


def given(value: int | None, key: str) -> int:
    """A zero_optimization size as DeepSpeed takes it: DeepSpeed's default when unset."""
    return DEEPSPEED_DEFAULTS[key] if value is None else value


def hf_auto_sizes(hidden_size: int) -> AutoSizes:
    # Transformers computes int(0.9 * hidden_size * hidden_size) in floating point; mirrored as written so
    # the integer DeepSpeed receives is reproduced exactly, including its truncation.
    return AutoSizes(hidden_size * hidden_size, int(0.9 * hidden_size * hidden_size), 10 * hidden_size)


def _bucket(name: str, elements: int, element_bytes: int, overlap: bool) -> BufferPart:
    if overlap:  # 4.5 × elements × bytes, rounded up (exact for even element sizes)
        return BufferPart(name, elements, -(-9 * elements * element_bytes // 2),
                          f"4.5 × {element_bytes} B × {elements:,} (overlap_comm)")
    return BufferPart(name, elements, elements * element_bytes, f"{element_bytes} B × {elements:,}")


def zero_buffers(stage: int, *, reduce_bucket_size: int | None = None, allgather_bucket_size: int | None = None,
                 overlap_comm: bool | None = None, stage3_prefetch_bucket_size: int | None = None,
                 stage3_max_live_parameters: int | None = None, parameters: int | None = None,
                 element_bytes: int = 2) -> Buffers:
    """Buffers of a ZeRO stage (0-3) per GPU; None takes DeepSpeed's default. Stage 0 (plain DDP under
    DeepSpeed) is counted like stages 1-2. Sizes are named by their zero_optimization field."""
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"ZeRO stage must be 0-3, got {stage!r}")
    reduce = given(reduce_bucket_size, "reduce_bucket_size")
    overlap = (stage == 3) if overlap_comm is None else overlap_comm
    if stage < 3:
        return Buffers((_bucket("reduce_bucket_size", reduce, element_bytes, overlap),
                        _bucket("allgather_bucket_size", given(allgather_bucket_size, "allgather_bucket_size"),
                                element_bytes, overlap)))
    prefetch = given(stage3_prefetch_bucket_size, "stage3_prefetch_bucket_size")
    live = given(stage3_max_live_parameters, "stage3_max_live_parameters")
    live_rule = f"{element_bytes} B × {live:,}"
    if parameters is not None and parameters < live:
        live, live_rule = parameters, f"{element_bytes} B × {parameters:,} (the whole model)"
    return Buffers((_bucket("reduce_bucket_size", reduce, element_bytes, False),
                    _bucket("stage3_prefetch_bucket_size", prefetch, element_bytes, False),
                    BufferPart("stage3_max_live_parameters", live, live * element_bytes, live_rule)))
