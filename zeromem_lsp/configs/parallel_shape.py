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

from collections.abc import Callable
from typing import NamedTuple

from zeromem_lsp.configs.families import ModelShape
from zeromem_lsp.configs.parallelism import Parallelism
from zeromem_lsp.memory.parts import P, Part

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


class Call(NamedTuple):
    """One attention call of one rank as the transient formulas read it: `w` bytes of the compute dtype, `tokens` the
    rank holds (T / c), its query and kv heads (÷ t), the head width, the context degree."""

    w: int
    tokens: int
    heads: int
    kv: int
    dh: int
    c: int


def _ring(bytes_of: Callable[[Call], int]) -> Callable[[Call], int]:
    return lambda call: bytes_of(call) if call.c > 1 else 0


#: The buffers one attention call holds beside what autograd saves, while it runs: (phase, part, bytes).
#: Torch context parallelism (ring attention; torch 2.13,
#: torch/distributed/tensor/experimental/_context_parallel/_attention.py; `_cp_options`: convert_to_f32 True,
#: rotate_method ALL_GATHER, :71-77). Forward: the all-gather rotater holds all c K/V chunks (:273-291, :289) beside
#: the `cat` of the local k‖v it sends (:438); `_SDPAMerger` merges in fp32 (out and lse, and each block's out
#: converted, :209-216). Backward: the fp32 dq/dk/dv accumulators (:512-515) and a block's gradients from the kernel
#: (:574); the K/V gathered again by a new rotater (:519, :533); the dK/dV ring, always all-to-all (:520) in fp32: the
#: `cat` sent (:625) and the buffer received (:265, :595). Derived, not measured (a CPU cannot run it:
#: docs/memory-model.md). Ulysses' all-to-all buffers (DeepSpeed ulysses_sp.py:192-197, :208-226, :310-312) are left
#: out: they sit below the loss in every measured case (tests/data/step/nd.json), so no measured peak supports them.
ATTENTION: tuple[tuple[str, str, Callable[[Call], int]], ...] = (
    ("forward", P.RING_KV_ALL_GATHER, _ring(lambda x: 2 * x.w * (x.c + 1) * x.tokens * x.kv * x.dh)),
    ("forward", P.RING_FP32_MERGER, _ring(lambda x: 4 * x.tokens * x.heads * (2 * x.dh + 1))),
    ("backward", P.RING_FP32_GRADIENTS, _ring(lambda x: (4 + x.w) * x.tokens * (x.heads + 2 * x.kv) * x.dh)),
    ("backward", P.RING_KV_ALL_GATHER, _ring(lambda x: 2 * x.w * (x.c + 1) * x.tokens * x.kv * x.dh)),
    ("backward", P.RING_DKV_ALL_TO_ALL, _ring(lambda x: 2 * 4 * 2 * x.tokens * x.kv * x.dh)),
)


def attention_transients(shape: ModelShape, tokens: int, w: int, parallelism: Parallelism
                         ) -> tuple[tuple[Part, ...], tuple[Part, ...]]:
    """(forward, backward): the parts `ATTENTION` gives one attention call of the rank's `shape` over the `tokens` it
    holds (none without context parallelism)."""
    call = Call(w, tokens, shape.heads, shape.kv_heads, shape.head_dim, parallelism.context)
    found = [(phase, Part(name, bytes_of(call))) for phase, name, bytes_of in ATTENTION]
    return tuple(part for phase, part in found if phase == "forward" and part.bytes), tuple(
        part for phase, part in found if phase == "backward" and part.bytes)


def kv_replicated(shape: ModelShape, tokens: int, w: int, parallelism: Parallelism) -> int:
    """Bytes per layer the attention kernel saves beyond k kv heads at T/u tokens: Ulysses replicates the kv heads to u
    when k < u (each rank then keeps one kv head over the whole sequence: DeepSpeed 0.19.8
    runtime/sequence_parallel/ulysses_sp.py:133-138, :181-186)."""
    u, kv = parallelism.ulysses, shape.kv_heads
    return 2 * w * tokens * (max(kv, u) - kv) * shape.head_dim if u > 1 else 0


#: DeepEP's NVLink buffer that dispatch and combine stage the routed tokens through: one per process, made at the first
#: MoE forward and kept (axolotl@067b021c8b87 src/axolotl/integrations/expert_parallel/args.py:28
#: `expert_parallel_num_nvl_bytes` = 256 << 20, buffer.py:24, :43-58). The tokens received (`recv_x`, routing-dependent)
#: are not counted.
DEEPEP_NVL_BYTES = 256 << 20


def resident(parallelism: Parallelism) -> tuple[Part, ...]:
    """What a mechanism keeps on the device at every moment of the step: expert parallelism's DeepEP buffer."""
    return (Part(P.DEEPEP_BUFFER, DEEPEP_NVL_BYTES),) if parallelism.expert > 1 else ()


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
                "by c and counts ring attention's K/V all-gather, fp32 merger and gradients from torch's code", False,
                True),
    "expert": ("derived, not measured: the peak divides the routed experts by e and counts DeepEP's 256 MiB buffer; "
               "the routed tokens received are not counted and the model-state column does not divide by e", True,
               True),
    "hpz_partition": ("derived, not measured: the step counts ZeRO++ hpZ's secondary partition of the parameters "
                      "(P16 / hpz per rank); the model-state column does not", True, True),
    "mics_shard": ("derived, not measured: model state sharded over the MiCS group, not the world", True, True),
    "activation_offload": ("derived, not measured: the checkpointed layer inputs go to host memory; at most three stay "
                           "on the GPU (DeepSpeed's keep_last_count + max_fwd_stash_count; axolotl's and unsloth's "
                           "keep fewer)", False, True),
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


__all__ = ["ATTENTION", "Call", "DEEPEP_NVL_BYTES", "DERIVED", "EFFECTS", "LORA_UNAPPLIED", "MEASURED",
           "attention_transients", "derived", "effects", "kv_replicated", "rank_shape", "rank_tokens", "resident",
           "shard_group"]
