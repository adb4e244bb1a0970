"""The transient terms of N-D parallelism the step adds from code (issue 30), each at a small shape against its
formula written out here: torch ring attention's exchange buffers (torch 2.13 `_context_parallel/_attention.py`),
Ulysses' replicated kv heads (DeepSpeed ulysses_sp.py), axolotl's DeepEP buffer (expert_parallel/args.py) and ZeRO++
hpZ's secondary partition (DeepSpeed partition_parameters.py). Sources: configs/parallel_shape.py, docs/memory-model.md.
With every mechanism off none of them appears (the golden files pin the figures themselves)."""

import pytest

from zeromem_lsp.configs.model_config import model_shape
from zeromem_lsp.configs.parallelism import NONE, Parallelism
from zeromem_lsp.memory.parts import M, P
from zeromem_lsp.memory.step import estimate_step

H, HEADS, KV, DH, I, L, V = 256, 4, 2, 64, 688, 2, 1024
LLAMA = {"model_type": "llama", "hidden_size": H, "num_attention_heads": HEADS, "num_key_value_heads": KV,
         "intermediate_size": I, "num_hidden_layers": L, "vocab_size": V, "tie_word_embeddings": False}
MIXTRAL = {"model_type": "mixtral", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
           "intermediate_size": 512, "num_hidden_layers": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
           "vocab_size": 1024, "tie_word_embeddings": False}
W = 2  # bf16
NEW = {P.RING_KV_ALL_GATHER, P.RING_FP32_MERGER, P.RING_FP32_GRADIENTS, P.RING_DKV_ALL_TO_ALL, P.DEEPEP_BUFFER,
       P.HPZ_SECONDARY_PARTITION}
NEW_MOMENTS = {M.ATTENTION_FORWARD, M.ATTENTION_RECOMPUTE, M.ATTENTION_BACKWARD}


def step(parallelism, config=LLAMA, sequence=2048, ranks=2, **inputs):
    return estimate_step(model_shape(config), sequence, 1, ranks=ranks, parallelism=parallelism, **inputs)


def moment(peak, phase, name):
    return next(found for found in peak.phases[phase].moments if found.name == name)


def parts(found):
    return {part.name: part.bytes for part in found.parts}


def ring(tokens, heads, kv, c):
    """torch 2.13 ring attention per call, written out: (forward parts, backward parts)."""
    gathered = W * tokens * 2 * kv * DH * c + W * tokens * 2 * kv * DH  # all c K/V chunks + the local k‖v cat
    forward = {P.RING_KV_ALL_GATHER: gathered,
               P.RING_FP32_MERGER: 4 * tokens * heads * DH + 4 * tokens * heads + 4 * tokens * heads * DH}
    backward = {P.RING_FP32_GRADIENTS: 4 * tokens * (heads + 2 * kv) * DH + W * tokens * (heads + 2 * kv) * DH,
                P.RING_KV_ALL_GATHER: gathered,
                P.RING_DKV_ALL_TO_ALL: 4 * tokens * 2 * kv * DH + 4 * tokens * 2 * kv * DH}  # cat sent + received
    return forward, backward


@pytest.mark.parametrize("tensor", [1, 2])
def test_ring_attention_holds_its_exchange_buffers_in_an_attention_forward_and_backward(tensor):
    peak = step(Parallelism(tensor=tensor, context=2), ranks=2 * tensor)
    forward, backward = ring(2048 // 2, HEADS // tensor, KV // tensor, 2)
    found_forward = parts(moment(peak, "forward", M.ATTENTION_FORWARD))
    found_backward = parts(moment(peak, "backward", M.ATTENTION_BACKWARD))
    assert {name: found_forward[name] for name in forward} == forward
    assert {name: found_backward[name] for name in backward} == backward
    # in place of the MLP's backward transient, over the larger of the layers' two ends
    ends = [parts(moment(peak, "backward", name)) for name in (M.TOP_LAYER, M.BOTTOM_LAYER)]
    without = max(sum(found.values()) - found[P.LAYER_BACKWARD] for found in ends)
    assert moment(peak, "backward", M.ATTENTION_BACKWARD).total == without + sum(backward.values())
    assert peak.derived == ("context",)


def test_a_checkpointed_layer_recomputes_its_ring_forward_in_backward():
    plain = step(Parallelism(context=2))
    checkpointed = step(Parallelism(context=2), checkpointing=True)
    forward, _ = ring(1024, HEADS, KV, 2)
    assert M.ATTENTION_RECOMPUTE not in {found.name for found in plain.phases["backward"].moments}
    recompute = parts(moment(checkpointed, "backward", M.ATTENTION_RECOMPUTE))
    assert {name: recompute[name] for name in forward} == forward


def test_the_top_attention_forward_holds_what_is_saved_before_the_head():
    peak = step(Parallelism(context=2))
    found = parts(moment(peak, "forward", M.ATTENTION_FORWARD))
    acts = peak.activations
    assert found[P.ACTIVATIONS] == acts.total - acts.logits_bytes


def test_ulysses_keeps_the_kv_heads_it_replicates():
    """k = 2 kv heads over u = 4 ranks: each rank keeps one kv head over the whole sequence, K and V, per layer."""
    tokens = 2048 // 4
    extra = L * 2 * W * tokens * (4 - KV) * DH
    split = step(Parallelism(ulysses=4), ranks=4).activations.total
    assert split - step(NONE, sequence=tokens, ranks=4).activations.total == extra
    # k = u: nothing replicated
    assert step(Parallelism(ulysses=2)).activations == step(NONE, sequence=1024).activations


def test_expert_parallelism_keeps_deepep_s_buffer_at_every_moment():
    peak = step(Parallelism(expert=2), config=MIXTRAL, sequence=512)
    for phase in peak.phases.values():
        assert all(parts(found)[P.DEEPEP_BUFFER] == 256 * 2**20 for found in phase.moments)


def test_hpz_adds_a_secondary_partition_of_the_parameters_under_zero3():
    numel = (V * H + L * (H * HEADS * DH + 2 * H * KV * DH + HEADS * DH * H + 3 * H * I + 2 * H) + H + V * H)
    zero3 = {"engine": "deepspeed", "stage": 3, "ranks": 8}
    peak = step(Parallelism(hpz_partition=4), **zero3)
    for phase in ("forward", "backward"):
        assert all(parts(found)[P.HPZ_SECONDARY_PARTITION] == W * -(-numel // 4)
                   for found in peak.phases[phase].moments)
    assert peak.derived == ("hpz_partition",)
    assert peak.peak > step(NONE, **zero3).peak
    offloaded = step(Parallelism(hpz_partition=4), offload_param=True, **zero3)  # the partition lives on the host
    assert all(P.HPZ_SECONDARY_PARTITION not in parts(found) for phase in offloaded.phases.values()
               for found in phase.moments)


@pytest.mark.parametrize("inputs", [{}, {"checkpointing": True}, {"engine": "deepspeed", "stage": 3},
                                    {"engine": "fsdp"}], ids=["ddp", "ckpt", "zero3", "fsdp2"])
def test_without_the_mechanisms_no_new_term_or_moment_appears(inputs):
    peak = step(NONE, **inputs)
    names = {part.name for phase in peak.phases.values() for found in phase.moments for part in found.parts}
    moments = {found.name for phase in peak.phases.values() for found in phase.moments}
    assert not names & NEW and not moments & NEW_MOMENTS
    assert step(Parallelism(hpz_partition=4), **inputs).phases == peak.phases or inputs.get("stage") == 3
