"""Gradient accumulation in the step: what the later micro-batches hold (pure, exact ints).

From the second micro-batch on, the gradients accumulated so far are alive through its forward and backward, as the
engine holds them while it does not reduce (Accelerate's `Accelerator.accumulate` → `no_sync`); the first micro-batch
is the plain step's, the optimizer step unchanged. What each engine holds, with its sources (measured:
tests/data/step/gradient_accumulation.json): docs/memory-model.md, "Gradient accumulation".
"""

from __future__ import annotations

from typing import NamedTuple

from zeromem_lsp.memory.parts import P, M, Moments, Part

#: the moment, in a later micro-batch (the plain names are the first micro-batch's)
LATER = ", a later micro-batch"


class Held(NamedTuple):
    accumulated: int  # bytes alive from the second micro-batch's forward to its end of backward
    fresh: int = 0  # at the end of backward, a new gradient made beside the accumulated one before it is added
    derived: str = ""  # why the held bytes are derived, not measured ("": measured)
    replaces: tuple[str, ...] = (P.GRADIENTS,)  # the step's parts the held gradients take the place of in backward
    at_end: int | None = None  # what is still held at the end of backward (None: all of it)
    bucket: int = 0  # a reduce bucket held from the first micro-batch on (it is the step's own "reduce bucket")


class Engine(NamedTuple):
    """The step's engine as the held gradients depend on it (bytes per element, elements)."""

    name: str  # torch | deepspeed | fsdp
    stage: int = 0
    w: int = 2  # a stored parameter's (and gradient's) bytes
    numel: int = 0  # the model's parameters
    embedding: int = 0  # the embedding's elements (its fresh gradient at the end of backward)
    touched: int = 0  # ZeRO-1/2: the most elements whose whole gradients one rank's partition touches
    bucket: int = 0  # ZeRO-1: the IPG reduce bucket's bytes (as the step has it)
    offload_optimizer: bool = False
    fsdp_version: int = 2
    fsdp_sharded: bool = True
    reduce_bytes: int = 4  # FSDP: bytes of the reduce dtype (fp32 under mixed precision)
    ranks: int = 1
    compute: int = 2  # bytes of the compute dtype (FSDP1 keeps unsharded gradients in it under mixed precision)
    root: int = 0  # FSDP's root unit's elements (embeddings, final norm, head)


def held(engine: Engine, frozen_gradients: int | None = None) -> Held:
    """What a later micro-batch holds beside the plain step's moments. `frozen_gradients`: a frozen base's adapter
    gradients as placed (their G)."""
    e = engine
    if frozen_gradients is not None:  # (the adapters are fp32 under PEFT, so their reduce dtype is theirs)
        how = "offload not measured" if e.offload_optimizer else ""
        if e.name == "fsdp" and e.fsdp_sharded:  # unsharded, as the full step's
            return Held(frozen_gradients * e.ranks, 0, how, (), 0)
        if e.name == "deepspeed" and e.stage == 3:  # reduced into the partitions, as the full step's
            return Held(0, 0, how)
        # ZeRO-1: whole under `no_sync`, beside the IPG bucket, as the full step's
        return Held(frozen_gradients, 0, how, bucket=e.bucket if e.name == "deepspeed" and e.stage == 1 else 0)
    if e.name == "torch":
        return Held(e.w * e.numel, e.w * e.embedding)
    if e.name == "deepspeed":
        if e.stage == 3:
            return Held(0, 0, "" if not e.offload_optimizer else "offload accumulates into the partitions")
        if e.offload_optimizer and e.stage == 2:  # stage_1_and_2.py `async_accumulate_grad_in_cpu_via_gpu`
            return Held(0, 0, "ZeRO-Offload accumulates in host memory")
        if e.stage == 2:
            return Held(e.w * e.touched, 0, "", replaces=())
        bucket = e.bucket if e.stage == 1 else 0  # (the step's own "reduce bucket" is this one)
        return Held(e.w * e.numel, e.w * e.embedding,
                    "" if not e.offload_optimizer else "offload not measured", bucket=bucket)
    if not e.fsdp_sharded and e.fsdp_version == 1:  # NO_SHARD: the root unit's new flat gradient is made whole
        return Held(e.w * e.numel, e.w * e.root)  # beside the accumulated one
    if e.fsdp_version == 2:  # the last micro-batch reduce-scatters each unit's as it goes, the root's at the end
        # (`FSDPParamGroup.post_backward` hands the accumulated gradient to the reduce-scatter and drops it): the end
        # of backward is the plain step's (never the peak in what was measured)
        return Held(e.reduce_bytes * e.numel, 0, "", (), 0)
    return Held(e.compute * e.numel, 0)


def later_moments(moments: Moments, found: Held, source: Moments | None = None) -> Moments:
    """The phases' moments with a later micro-batch's beside the first's: the accumulated gradients in its forward,
    in its backward in place of the parts `replaces` names, at its end what is still held and the fresh gradient.
    `source`: a later micro-batch's own moments when they differ from the first's (GRPO generates at the first)."""
    if not found.accumulated and not found.fresh and not found.bucket:
        return moments
    kept = Part(P.ACCUMULATED_GRADIENTS, found.accumulated)
    bucket = [Part(P.REDUCE_BUCKET, found.bucket)] if found.bucket else []
    replaced = found.replaces + ((P.REDUCE_BUCKET,) if found.bucket else ())
    later_name = f"{LATER}, accumulated gradients derived ({found.derived})" if found.derived else LATER
    out = {name: dict(phase) for name, phase in moments.items()}
    source = source or moments
    for name, moment in source["forward"].items():
        out["forward"][name + later_name] = [*[item for item in moment if item.name not in replaced], kept, *bucket]
    for name, moment in source["backward"].items():
        later = [item for item in moment if item.name not in replaced] + bucket
        if name == M.END_OF_BACKWARD:
            later += [Part(P.ACCUMULATED_GRADIENTS, found.accumulated if found.at_end is None else found.at_end),
                      Part(P.FRESH_GRADIENT, found.fresh)]
        else:
            later.append(kept)
        out["backward"][name + later_name] = later
    return out


__all__ = ["Engine", "Held", "LATER", "held", "later_moments"]
