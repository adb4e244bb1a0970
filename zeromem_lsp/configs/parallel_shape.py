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


__all__ = ["DERIVED", "MEASURED", "derived", "rank_shape", "rank_tokens", "shard_group"]
