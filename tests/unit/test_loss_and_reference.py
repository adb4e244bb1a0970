"""Loss kernels and the reference model (pure); axolotl's chunked loss against its CPU measurement
(tests/data/loss/measured.json, written by benchmarks/loss/measure.py)."""

import json
from pathlib import Path

import pytest

from zeromem_lsp.memory.activations import estimate_activations
from zeromem_lsp.configs.model_config import model_shape
from zeromem_lsp.memory.loss_and_reference import LossInputError, loss_bytes, reference_model_bytes

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
    assert reference_model_bytes(p, 8, "deepspeed", 3).bytes_per_rank == -(-p // 8)
    for stage in (0, 1, 2):
        assert reference_model_bytes(p, 8, "deepspeed", stage).bytes_per_rank == p
    assert reference_model_bytes(p, 8, "fsdp", "FULL_SHARD").bytes_per_rank == -(-p // 8)
    assert reference_model_bytes(p, 8, "fsdp", "NO_SHARD").bytes_per_rank == p
    assert reference_model_bytes(p, 8, "ddp", 0).bytes_per_rank == p
    assert reference_model_bytes(p, 8, "deepspeed", 3, peft_policy=True).bytes_per_rank == 0
    assert reference_model_bytes(p, 8, "deepspeed", 2, precompute_ref_log_probs=True).bytes_per_rank == 0
    # under FSDP the reference is loaded only for the precompute; DPOTrainer sets it to None before training
    assert reference_model_bytes(p, 8, "fsdp", "FULL_SHARD", precompute_ref_log_probs=True).bytes_per_rank == 0
    # ZeRO-3 keeps parameters under the persistence threshold whole; offload_param moves the rest to the host
    assert reference_model_bytes(p, 8, "deepspeed", 3, persistent_bytes=1000).bytes_per_rank == -(-p // 8) + 1000
    assert reference_model_bytes(p, 8, "deepspeed", 3, persistent_bytes=1000, offload_param=True).bytes_per_rank == 1000
    assert reference_model_bytes(p, 1, "deepspeed", 3, persistent_bytes=1000).bytes_per_rank == p


@pytest.mark.parametrize("call, message", [
    (lambda: loss_bytes("flash", 1, 8, 64, 100), "loss kernel must be one of"),
    (lambda: loss_bytes("hf", 0, 8, 64, 100), "micro_batch must be a positive integer"),
    (lambda: loss_bytes("chunked_ce", 1, 8, 64, 100, chunks=0), "chunks must be"),
    (lambda: reference_model_bytes(10, 0, "ddp", 0), "world_size"),
    (lambda: reference_model_bytes(10, 2, "deepspeed", 4), "stage must be 0-3"),
    (lambda: reference_model_bytes(10, 2, "fsdp", "HALF_SHARD"), "HALF_SHARD"),
    (lambda: reference_model_bytes(-1, 2, "ddp", 0), "non-negative"),
    (lambda: reference_model_bytes(10, 2, "megatron", 0), "engine must be"),
])
def test_bad_input_is_named(call, message):
    with pytest.raises(LossInputError, match=message):
        call()
