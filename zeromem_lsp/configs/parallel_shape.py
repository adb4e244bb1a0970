"""What one rank of an N-D parallel step holds, as a transformed model and token count (issue 30; pure, no torch).

The step model (memory/step.py `step_peak`) runs unchanged over the rank's share: `rank_shape` is the ModelShape one
tensor-parallel rank computes (Transformers' Llama `base_model_tp_plan`: q/k/v/gate/up column-parallel, o/down
row-parallel, so heads, kv heads and the intermediate width are divided by t while norms, residuals, the embedding and
the hidden width stay whole; routed experts divided by e); `rank_tokens` the sequence each rank holds outside
attention (T / (c·u): torch context parallel and Ulysses shard the batch on the sequence before the model);
`shard_group` the ranks that shard model state (FSDP2 + CP: dp_shard·c; ZeRO + Ulysses: dp·u; under TP: world / t;
all three are world / t). Sources and measurements: docs/memory-model.md, "N-D parallelism and long context";
tests/data/step/nd.json.
"""

from __future__ import annotations

from zeromem_lsp.configs.families import ModelShape
from zeromem_lsp.configs.parallelism import Parallelism

#: what is measured whole on CPU (tests/data/step/nd.json) and what is derived from the code only
MEASURED = ("tensor", "ulysses", "activation_offload", "tiled_mlp_shards")
DERIVED = ("context", "expert", "hpz_partition", "mics_shard")


def rank_shape(shape: ModelShape, parallelism: Parallelism) -> ModelShape:
    """The model one rank computes: heads, kv heads (at least one: ranks beyond the kv heads hold a replica) and the
    MLP width ÷ t, an untied head's rows ÷ t (`colwise_gather_output`: the logits are gathered whole, a tied head
    stays replicated with the embedding); routed experts ÷ e."""
    t, e = parallelism.tensor, parallelism.expert
    if t == 1 and e == 1:
        return shape
    return shape._replace(heads=max(1, shape.heads // t), kv_heads=max(1, shape.kv_heads // t),
                          intermediate=max(1, shape.intermediate // t), experts=shape.experts // e if e > 1 else
                          shape.experts, shared_intermediate=shape.shared_intermediate // t,
                          head_shards=1 if shape.tied else t)


def rank_tokens(sequence_length: int, parallelism: Parallelism) -> int:
    """The sequence one rank holds outside attention: s / (c·u), at least one token."""
    return max(1, sequence_length // parallelism.sequence_divisor)


def shard_group(world: int, parallelism: Parallelism) -> int:
    """Ranks sharing the model state's shards: world / t (dp·c for FSDP2 + CP, dp·u for ZeRO + Ulysses); MiCS: its
    shard size."""
    group = max(1, world // parallelism.tensor)
    return min(group, parallelism.mics_shard) if parallelism.mics_shard > 0 else group


def derived(parallelism: Parallelism) -> tuple[str, ...]:
    """The mechanisms of `parallelism` the estimate derives from code without a measured twin (off ones excluded)."""
    off = {"context": 1, "expert": 1, "hpz_partition": 1, "mics_shard": 0}
    found = tuple(name for name in DERIVED if getattr(parallelism, name) != off[name])
    # checkpoint-input offload (axolotl legacy / hidden_states, DeepSpeed's ctx manager) is not measured: its T × h per
    # layer stays counted, an upper bound
    return found + (("activation_offload",) if parallelism.activation_offload == "cpu" else ())


#: What the figures do with each mechanism `derived` names or that the model-state column leaves out: (why, it may
#: change the model state P, G, O beside the pooled-byte contract, it leaves the peak short of a measurement). Tensor
#: parallelism is measured in the peak; the contract's model-state column does not divide weights by t.
EFFECTS: dict[str, tuple[str, bool, bool]] = {
    "tensor": ("measured in the peak (heads, MLP and an untied head / t); the model-state column is the pooled-byte "
               "contract over all ranks and does not divide by t", True, False),
    "context": ("derived, not measured (torch's context_parallel does not run on a CPU): the peak divides the tokens "
                "by c; ring attention's K/V exchange buffers and fp32 merger are not counted", False, True),
    "expert": ("derived, not measured: the peak divides the routed experts by e; the dispatch buffers are not "
               "counted and the model-state column does not divide by e", True, True),
    "hpz_partition": ("derived, not measured: ZeRO++ hpZ's secondary partition of the parameters", True, True),
    "mics_shard": ("derived, not measured: model state sharded over the MiCS group, not the world", True, True),
    "activation_offload": ("derived, not measured: the checkpointed layer inputs offloaded to the CPU stay counted on "
                           "the GPU, an upper bound", False, True),
}


#: Under LoRA the step keeps every activation (memory/step.py `step_peak`): offload and tiling are not applied.
LORA_UNAPPLIED = ("not applied to a LoRA step: its figure keeps every activation on the GPU, an upper bound", False,
                  True)


def effects(parallelism: Parallelism, lora: bool = False) -> tuple[tuple[str, str, bool, bool], ...]:
    """(field, why, changes model state, leaves the peak approximate) for each mechanism set whose figure is derived
    or that the model-state column leaves out; with `lora`, the offload and tiling the LoRA step does not apply."""
    named = (*(("tensor",) if parallelism.tensor > 1 else ()), *derived(parallelism))
    found = [(name, *EFFECTS[name]) for name in named]
    if lora:
        unapplied = [name for name, off in (("activation_offload", "none"), ("tiled_mlp_shards", 0))
                     if getattr(parallelism, name) != off]
        found = [item for item in found if item[0] not in unapplied] + [(name, *LORA_UNAPPLIED) for name in unapplied]
    return tuple(found)


__all__ = ["DERIVED", "EFFECTS", "LORA_UNAPPLIED", "MEASURED", "derived", "effects", "rank_shape", "rank_tokens", "shard_group"]
