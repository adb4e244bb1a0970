"""Loss kernels and the reference model (pure); axolotl's chunked loss against its CPU measurement
(tests/data/loss/measured.json, written by benchmarks/loss/measure.py)."""

import json
from pathlib import Path

import pytest

from zeromem_lsp.memory.activations import estimate_activations
from zeromem_lsp.configs.model_config import model_shape
from zeromem_lsp.memory.loss_and_reference import LossInputError, loss_bytes
from zeromem_lsp.memory.preference import reference_of
from zeromem_lsp.memory.step import DeepSpeed, Fsdp, Torch, make_step

RECORD = json.loads((Path(__file__).resolve().parents[1] / "data" / "loss" / "measured.json").read_text())


@pytest.mark.parametrize("case", RECORD["cases"], ids=[case["id"] for case in RECORD["cases"]])
def test_the_default_and_the_chunked_loss_are_what_the_measurement_keeps(case):
    shape = model_shape({**case["config"], "num_hidden_layers": 1})
    b, s = case["micro_batch"], case["sequence_length"]
    full = estimate_activations(shape, s, b, "bf16")
    hf = loss_bytes("hf", b, s, shape.hidden, shape.vocab, 2)
    assert hf.saved == full.logits_bytes and full.total == case["saved_bytes"]["hf"]
    chunked = loss_bytes("chunked_ce", b, s, shape.hidden, shape.vocab, 2, chunks=case["chunks"])
    assert full.total - hf.saved + chunked.saved == case["saved_bytes"]["chunked_ce"]


def test_fused_kernels_drop_every_vocabulary_sized_fp32_tensor():
    b, s, h, v = 4, 4096, 4096, 128256  # Llama-3-8B, 16,384 tokens
    tokens = b * s
    assert loss_bytes("hf", b, s, h, v).transient == 4 * tokens * v
    liger = loss_bytes("liger_flce", b, s, h, v, head_trainable=False)
    # ceil(V / h) = 32 → chunk = next_pow2(ceil(16384 / 32)) = 512 rows of logits in bf16
    assert liger.transient == 2 * 512 * v + 4 * tokens
    assert liger.saved == 2 * tokens * h
    assert loss_bytes("liger_flce", b, s, h, v).saved == 2 * tokens * h + 2 * v * h
    cce = loss_bytes("cut_cross_entropy", b, s, h, v)
    assert (cce.saved, cce.transient) == (4 * tokens + 4 * v, 4 * tokens)
    assert loss_bytes("liger_flce", 1, 8, 4096, 1000).transient == 2 * 8 * 1000 + 4 * 8  # never more rows than T


def test_reference_model_follows_the_trainer_and_the_engine():
    p = 16_060_522_496
    assert DeepSpeed(3).reference(p, 0, 8) == -(-p // 8)
    for stage in (0, 1, 2):
        assert DeepSpeed(stage).reference(p, 0, 8) == p
    assert Fsdp().reference(p, 0, 8) == -(-p // 8)  # FULL_SHARD
    assert Fsdp(sharded=False).reference(p, 0, 8) == p  # NO_SHARD
    assert Torch().reference(p, 0, 8) == p
    # ZeRO-3 keeps parameters under the persistence threshold whole; offload_param moves the rest to the host
    assert DeepSpeed(3).reference(p, 1000, 8) == -(-p // 8) + 1000
    assert DeepSpeed(3, offload_param=True).reference(p, 1000, 8) == 1000
    assert DeepSpeed(3).reference(p, 1000, 1) == p


def test_no_reference_beside_a_peft_policy_or_precomputed_log_probs():
    shape = model_shape({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
                         "intermediate_size": 128, "vocab_size": 100})
    for engine in ({"engine": "deepspeed", "stage": 3}, {"engine": "fsdp"}, {}):
        step = make_step(shape, 8, 1, ranks=8, **engine)
        assert reference_of(step, 2, peft_policy=False, precomputed=False, loss="fused")[0] > 0
        assert reference_of(step, 2, peft_policy=True, precomputed=False, loss="fused") == (0, 0)
        # under FSDP the reference is loaded only for the precompute; DPOTrainer sets it to None before training
        assert reference_of(step, 2, peft_policy=False, precomputed=True, loss="fused") == (0, 0)


@pytest.mark.parametrize("call, message", [
    (lambda: loss_bytes("flash", 1, 8, 64, 100), "loss kernel must be one of"),
    (lambda: loss_bytes("hf", 0, 8, 64, 100), "micro_batch must be a positive integer"),
    (lambda: loss_bytes("chunked_ce", 1, 8, 64, 100, chunks=0), "chunks must be"),
])
def test_bad_input_is_named(call, message):
    with pytest.raises(LossInputError, match=message):
        call()
