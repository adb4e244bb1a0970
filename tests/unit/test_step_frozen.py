"""The step over a frozen base (memory/step.py `FrozenBase`, LoRA / QLoRA): the full step's moments with no gradient
for frozen weights. These tests hold it to the full step's own terms and to the adapter's P, G, O as the plan
places them (docs/adapters.md, "The step with a frozen base"); tests/unit/test_step_lora.py holds it to whole
LoRA steps measured with PEFT."""

import json
from pathlib import Path

import pytest

from tests.cli.conftest import run_zeromem
from zeromem_lsp.configs.model_config import model_shape
from zeromem_lsp.memory.step import Buckets, FrozenBase, estimate_step

ROOT = Path(__file__).resolve().parents[2]
LLAMA3 = ROOT / "tests/data/models/Meta-Llama-3-8B/config.json"
SHAPE = model_shape(json.loads(LLAMA3.read_text()))
T, V = 4096, SHAPE.vocab
# made-up per-rank bytes, distinct so that each part is traceable
FROZEN = FrozenBase(parameters=16_000_000_001, gradients=80_000_003, optimizer_states=480_000_005,
                    trainable=40_000_000, step_bytes=4, activations=20_000_000_007, recompute=0,
                    compute_dtype="bf16", all_bytes=16_000_000_001, all_parameters=8_000_000_000)


def parts(phase) -> dict[str, int]:
    return dict(phase.parts)


def test_the_loss_moments_are_the_full_steps_with_the_adapters_state_and_no_gradient():
    full = estimate_step(SHAPE, T, 1, engine="torch", param_dtype="bf16")
    step = estimate_step(SHAPE, T, 1, engine="torch", param_dtype="bf16", frozen=FROZEN)
    loss, forward = parts(step.phases["backward"]), parts(step.phases["forward"])
    assert step.phases["backward"].moment == "the loss's backward" and "gradients" not in loss
    assert loss["log-softmax gradients"] == parts(full.phases["backward"])["log-softmax gradients"] == 2 * 4 * T * V
    assert loss == {"parameters": FROZEN.parameters, "optimizer states": FROZEN.optimizer_states,
                    "activations": FROZEN.activations, "log-softmax gradients": 2 * 4 * T * V}
    assert forward["logits"] == 2 * T * V and forward["fp32 logits copy"] == 4 * T * V  # bf16 head, fp32 copy
    for phase in step.phases.values():
        assert phase.peak == sum(part.bytes for part in phase.parts)


def test_an_fp32_forward_has_no_logits_copy():
    step = estimate_step(SHAPE, T, 1, engine="torch", param_dtype="bf16", frozen=FROZEN._replace(compute_dtype="fp32"))
    forward = parts(step.phases["forward"])
    assert forward["logits"] == 4 * T * V and "fp32 logits copy" not in forward


@pytest.mark.parametrize("impl, scratch", [("foreach", 4 * FROZEN.trainable), ("for-loop", 2 * 4 * FROZEN.trainable),
                                           ("fused", 0)])
def test_the_optimizer_steps_over_the_trainable_tensors_only(impl, scratch):
    step = estimate_step(SHAPE, T, 1, engine="torch", optimizer_impl=impl, frozen=FROZEN)
    found = parts(step.phases["optimizer"])
    assert found.get("optimizer scratch", 0) == scratch
    assert found["gradients"] == FROZEN.gradients and "activations" not in found
    assert step.phases["optimizer"].peak == FROZEN.parameters + FROZEN.optimizer_states + FROZEN.gradients + scratch


def test_an_8bit_optimizer_updates_in_place_and_deepspeed_keeps_fp32_gradients():
    """bitsandbytes' Optimizer2State.update_step: one in-place kernel per parameter, no scratch; the plan's O
    holds its state, so the step takes it."""
    frozen = FROZEN._replace(fp32_gradients=True)
    step = estimate_step(SHAPE, T, 1, engine="deepspeed", stage=2, ranks=8, optimizer="adam8bit", frozen=frozen)
    found = parts(step.phases["optimizer"])
    assert "optimizer scratch" not in found and found["fp32 gradients"] == 4 * frozen.trainable
    offloaded = estimate_step(SHAPE, T, 1, engine="deepspeed", stage=2, ranks=8, offload_optimizer=True,
                              frozen=frozen)
    assert "fp32 gradients" not in parts(offloaded.phases["optimizer"])


@pytest.mark.parametrize("optimizer, impl, scratch", [("adagrad", "foreach", 2), ("adagrad", "for-loop", 1),
                                                      ("sgd_momentum", "foreach", 0), ("lion", "foreach", 0)])
def test_torch_optimizers_make_their_own_scratch_over_the_adapters(optimizer, impl, scratch):
    """torch Adagrad over the adapters: foreach `_foreach_sqrt` + `_foreach_mul` (two copies of what it steps),
    for-loop one of the largest tensor; SGD nothing; bitsandbytes' Lion in place."""
    frozen = FROZEN._replace(stepped=4 * FROZEN.trainable, largest=4 * 1000)
    step = estimate_step(SHAPE, T, 1, engine="torch", optimizer=optimizer, optimizer_impl=impl, frozen=frozen)
    expected = scratch * (frozen.stepped if impl == "foreach" else frozen.largest)
    assert parts(step.phases["optimizer"]).get("optimizer scratch", 0) == expected


@pytest.mark.parametrize("buckets", [Buckets(max_reuse_distance=0, prefetch_bucket_size=50_000_000,
                                             max_live_parameters=10**9), Buckets()])
def test_zero3_gathers_frozen_weights_by_the_full_steps_rule_pro_rata_of_p(buckets):
    """Frozen parameters are partitioned and gathered like trainable ones: the full step's gathered elements (at
    the loss, and the head fetched again for the loss's backward), at P's bytes per parameter (a 4-bit base
    gathers its packed bytes)."""
    full = estimate_step(SHAPE, T, 1, engine="deepspeed", stage=3, ranks=8, param_dtype="bf16", buckets=buckets)
    packed = FROZEN._replace(all_bytes=4_000_000_000)  # half a byte per parameter
    step = estimate_step(SHAPE, T, 1, engine="deepspeed", stage=3, ranks=8, buckets=buckets, frozen=packed)
    for phase in ("forward", "backward"):
        assert full.phases[phase].moment == step.phases[phase].moment
        elements = parts(full.phases[phase])["gathered parameters"] // 2  # bf16
        assert parts(step.phases[phase])["gathered parameters"] == -(-elements * 4_000_000_000 // 8_000_000_000)


def test_estimate_json_places_the_adapters_p_g_o_per_stage():
    """`zeromem estimate` with an adapter at 8 ranks: each stage's phases show P, G, O as the stage shards them
    (ZeRO-1: O; ZeRO-2: G and O; ZeRO-3: all three, ⌈·/8⌉), the gradients only from the end of backward."""
    done = run_zeromem("estimate", "--format", "json", "--model-config", str(LLAMA3), "--lora-rank", "16",
                       "-R", "8", "--sequence-length", "1024", "--micro-batch", "1")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    p, g, o = (data["inputs"][key] for key in ("parameter_bytes", "gradient_bytes", "optimizer_bytes"))
    shard = lambda size: -(-size // 8)  # noqa: E731
    wanted = {"ddp": (p, g, o), "zero1": (p, g, shard(o)), "zero2": (p, shard(g), shard(o)),
              "zero3": (shard(p), shard(g), shard(o))}
    for stage, (params, grads, states) in wanted.items():
        phase = data["phases"][stage]
        held = phase["parts"]
        assert held["parameters"] == params and held["optimizer states"] == states
        assert "gradients" not in held  # the peak is at the loss or its backward: no adapter gradient yet
        assert data["peak"][stage] == sum(held.values()) + phase["reserved_bytes"]
        assert 0 <= params + grads + states - data[stage] <= 2  # one ceiling each vs the pooled formula's
