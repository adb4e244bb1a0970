"""What a recipe's tool refuses about context parallelism before any GPU is used (issue 30), each at its key.

axolotl (src/axolotl/utils/schemas/validation.py `check_context_parallel_size`, `check_grpo_liger_sequence_parallel`;
enums.py `ATTN_IMPLS_USING_FLASH_LIB`, `LEGACY_ATTN_FLAG_TO_IMPL`): `context_parallel_size` (or the deprecated
`sequence_parallel_degree`) above 1 needs a flash-attention implementation (unless its GLM DSA kernels run), a micro-batch
of 1 with sample packing (ring-flash-attn), and no Liger loss under GRPO.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from zeromem_lsp.configs.families import ModelShape
from zeromem_lsp.configs.issue import ConfigIssue
from zeromem_lsp.provenance import Given
from zeromem_lsp.configs.workload import read_flag

FLASH_IMPLEMENTATIONS = ("flash_attention_2", "flash_attention_3", "kernels-community/flash-attn2",
                         "kernels-community/flash-attn3")


def _issue(path: tuple[str, ...], message: str) -> ConfigIssue:
    return ConfigIssue("invalid_value", path, "value", message, None, "recipe")


def axolotl_context_parallel(data: dict[str, Any]) -> list[ConfigIssue]:
    key = "context_parallel_size" if data.get("context_parallel_size") else "sequence_parallel_degree"
    degree = data.get(key)
    if isinstance(degree, bool) or not isinstance(degree, int) or degree <= 1:
        return []
    out = []
    implementation = data.get("attn_implementation")
    flash = implementation in FLASH_IMPLEMENTATIONS or (implementation is None and read_flag(data.get("flash_attention")))
    if not flash and not read_flag(data.get("use_glm_dsa_kernels")):
        out.append(_issue((key,), f"{key} {degree} needs flash attention (attn_implementation: flash_attention_2 or "
                          "flash_attention_3): axolotl's ring attention runs on the flash-attention library"))
    micro = data.get("micro_batch_size")
    if read_flag(data.get("sample_packing")) and isinstance(micro, int) and not isinstance(micro, bool) and micro > 1:
        out.append(_issue(("micro_batch_size",), f"with {key} {degree} and sample_packing, axolotl needs "
                          f"micro_batch_size 1 (ring-flash-attn's packed sequences), got {micro}"))
    trl = data.get("trl")
    if data.get("rl") == "grpo" and isinstance(trl, dict) and read_flag(trl.get("use_liger_loss")):
        out.append(_issue(("trl", "use_liger_loss"), f"axolotl refuses GRPO with Liger's loss under {key} {degree}"))
    return out




# ---------------------------------------------------------------- the degrees against the world and the model (ZM109)

class DegreeProblem(NamedTuple):
    """A degree the run cannot take: the input it is at (a `Given`, positioned by its path) and why."""

    at: Given
    message: str


def _value(given: Given | None, default: int = 1) -> int:
    value = given.value if given is not None else None
    return value if type(value) is int else default


def _degrees(parallel: dict[str, Given]) -> dict[str, Given]:
    """The degrees above 1 that each take their own ranks: tensor, context, Ulysses, expert."""
    return {name: parallel[name] for name in ("tensor", "context", "ulysses", "expert")
            if _value(parallel.get(name)) > 1}


def _product(degrees) -> int:
    product = 1
    for given in degrees:
        product *= _value(given)
    return product


def smallest_world(parallel: dict[str, Given], data_parallel: dict[str, Given]) -> Given | None:
    """The smallest world that runs these degrees, where nothing gives the world size: the product `degree_problems`
    requires to divide the world (t·c·u·e), times axolotl's dp_shard_size and dp_replicate_size as written (each
    takes its own ranks once the world has room for it, distributed.py:350-369); None when every degree is 1."""
    written = [*_degrees(parallel).values(), *(given for given in data_parallel.values() if _value(given) > 1)]
    if not written:
        return None
    named = " × ".join(f"{given.note} {_value(given)}" for given in written)
    return Given(_product(written), f"the smallest world that runs {named}; give --world-size or the world_size "
                 "setting")


def degree_problems(parallel: dict[str, Given], data_parallel: dict[str, Given], world: int | None,
                    sequence: Given | None, shape: ModelShape | None) -> list[DegreeProblem]:
    """What the tools refuse of resolved degrees, once the world size, the sequence length and the model are known:

    - the world is not a multiple of t·c·u·e: axolotl raises when `expert_parallel_size` does not divide it
      (axolotl@067b021c8b87:src/axolotl/utils/distributed.py:334-340) and Accelerate when dp_replicate × dp_shard ×
      tp × cp is not num_processes (accelerate@16cb6eb80dd9:src/accelerate/parallelism_config.py:372-377); with
      axolotl's dp_shard_size and dp_replicate_size both written their product must fill what is left
      (distributed.py:350-369);
    - torch context parallelism (Accelerate's cp_size) splits each sequence into 2·cp load-balanced chunks: TRL
      documents `pad_to_multiple_of` 2·cp (trl@f2cd57710ae3:docs/source/distributing_training.md:136);
    - Ulysses needs the attention heads divisible by u, and the kv heads a multiple or a divisor of u (deepspeed@
      edaa72212672:deepspeed/runtime/sequence_parallel/ulysses_sp.py:145-151).
    """
    out: list[DegreeProblem] = []
    degrees = _degrees(parallel)
    product = _product(degrees.values())
    if world is not None and degrees and world % product:
        named = " × ".join(f"{given.note} {_value(given)}" for given in degrees.values())
        out.append(DegreeProblem(next(iter(degrees.values())), f"{named} = {product} does not divide the world size "
                                 f"{world}: each degree takes its own ranks (axolotl and Accelerate refuse it)"))
    elif world is not None and len(data_parallel) == 2:
        shard, replicate = data_parallel["dp_shard_size"], data_parallel["dp_replicate_size"]
        if _value(shard) * _value(replicate) * product != world:
            out.append(DegreeProblem(shard, f"dp_shard_size {_value(shard)} × dp_replicate_size {_value(replicate)} × "
                                     f"the other degrees {product} is not the world size {world}: Accelerate requires "
                                     "them equal"))
    context = parallel.get("context")
    length = _value(sequence, 0)
    if context is not None and "parallelism_config" in context.note and length and _value(context) > 1 \
            and length % (2 * _value(context)):
        out.append(DegreeProblem(sequence or context, f"torch context parallelism ({context.note} {_value(context)}) "
                                 f"splits each sequence into 2 × {_value(context)} chunks: the sequence length "
                                 f"{length:,} is not a multiple of {2 * _value(context)} (pad to a multiple of it)"))
    ulysses = parallel.get("ulysses")
    degree = _value(ulysses)
    if ulysses is not None and shape is not None and degree > 1:
        if shape.heads % degree:
            out.append(DegreeProblem(ulysses, f"Ulysses ({ulysses.note} {degree}) splits the attention heads: the "
                                     f"model's {shape.heads} heads are not a multiple of {degree}"))
        elif shape.kv_heads % degree and degree % shape.kv_heads:
            out.append(DegreeProblem(ulysses, f"Ulysses ({ulysses.note} {degree}) needs the kv heads a multiple or a "
                                     f"divisor of {degree}: the model has {shape.kv_heads}"))
    return out


__all__ = ["DegreeProblem", "axolotl_context_parallel", "degree_problems", "smallest_world"]
