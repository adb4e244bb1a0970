"""Gradient accumulation in the step: what the later micro-batches hold (pure, exact ints).

From the second micro-batch on, the gradients accumulated so far are alive through its forward and backward, as the
engine holds them while it does not reduce (Accelerate's `Accelerator.accumulate` → `no_sync`); the first micro-batch
is the plain step's, the optimizer step unchanged. What each engine holds is its spec's `held` (memory/step.py), with
its sources (measured: tests/data/step/gradient_accumulation.json): docs/memory-model.md, "Gradient accumulation".
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


__all__ = ["Held", "LATER", "later_moments"]
