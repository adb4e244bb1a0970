"""Two common memory terms beside model state: the loss kernel's logits and a frozen reference model (pure).

Loss: Transformers' own loss keeps an fp32 log-softmax (activations.py `logits_bytes`) and makes fp32 copies of
the logits and their gradients (per release: configs/transformers_paths.py). Fused or chunked kernels
replace them, in the step through `loss_moments` (sources in docs/adapters.md; axolotl's chunked loss measured on
CPU by benchmarks/loss/measure.py and, in whole steps, benchmarks/step/loss_kernels.py):
- "liger_flce" (liger_kernel/ops/fused_linear_cross_entropy.py, fused_linear_cross_entropy_forward): the head
  and the loss run together over token chunks in forward, which already computes the gradients; it keeps
  grad_input (T×h, model dtype) and, for a trainable head, grad_weight (V×h); one chunk of logits is alive at
  a time, chunk = min(next_power_of_2(ceil(T / ceil(V / h))), T) rows.
- "cut_cross_entropy" (cut_cross_entropy/cce.py, LinearCrossEntropyFunction.forward): keeps the input
  embeddings (the final norm's output, already counted), one fp32 log-sum-exp per token and, with its
  default filter_eps, an fp32 average logit per vocabulary entry; logits exist only blockwise in the kernel.
- "chunked_ce" (axolotl/monkeypatch/loss/chunked.py, CEWithChunkedOutputLoss with torch.compile): the head's
  logits are still made (T×V, model dtype) and kept by the compiled per-chunk loss, with int64 labels and two
  fp32 row statistics per token; the fp32 upcast lives one chunk at a time; backward's logits gradient is
  T×V in the model dtype.

Reference model (TRL 1.16, trl/trainer/dpo_trainer.py and kto_trainer.py `__init__`, trl/models/utils.py
prepare_deepspeed / prepare_fsdp): a second copy of the parameters, built like the policy (same dtype), used under
`torch.no_grad()`, so no gradients and no optimizer state. None when the policy is a PEFT model (its adapters are
disabled for the reference forward) and none during training with precompute_ref_log_probs — under FSDP too: the
reference is loaded only for the precompute and set to None before training starts. Under DeepSpeed ZeRO-3 it is
partitioned like the policy (parameters up to the persistence threshold whole on every rank, and with
`offload_param` on the host: prepare_deepspeed keeps the config's offload_param); at stages 0-2 prepare_deepspeed
runs it at stage 0, whole on every rank. FSDP shards it with the policy's strategy. A `ref_model` passed explicitly
is kept even with PEFT (not modelled: the trainers build none then). In the step: each engine spec's `reference` and
`reference_gathered` (memory/step.py), through memory/preference.reference_of.
"""

from __future__ import annotations

from zeromem_lsp.memory.parts import P

from typing import NamedTuple

from zeromem_lsp.configs.settings_values import LOSS_KERNELS

F32, I32, I64 = 4, 4, 8


class LossInputError(ValueError):
    """A loss or reference-model input this module cannot use (named in the message)."""


class LossBytes(NamedTuple):
    kernel: str
    saved: int  # kept from forward to backward by the loss (in place of Activations.logits_bytes)
    transient: int  # the largest extra tensor while the loss runs (in place of the step's fp32 T×V copies)
    explanation: str


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LossInputError(f"{name} must be a positive integer, got {value!r}")
    return value


def _next_power_of_2(value: int) -> int:
    return 1 << (value - 1).bit_length()


def loss_bytes(kernel: str, micro_batch: int, sequence_length: int, hidden: int, vocab: int, width: int = 2,
               head_trainable: bool = True, chunks: int = 8) -> LossBytes:
    """What the loss keeps and briefly allocates for one micro-batch; `width` is the model dtype's bytes."""
    for name, value in (("micro_batch", micro_batch), ("sequence_length", sequence_length), ("hidden", hidden),
                        ("vocab", vocab), ("width", width), ("chunks", chunks)):
        _positive(name, value)
    tokens = micro_batch * sequence_length
    labels = I64 * (sequence_length + 1 if micro_batch == 1 else tokens)  # as activations._logits counts them
    if kernel == "hf":
        return LossBytes(kernel, F32 * tokens * vocab + labels + F32, F32 * tokens * vocab,
                         "fp32 log-softmax of T×V kept; fp32 logits copy / gradient T×V")
    if kernel == "liger_flce":
        chunk = min(_next_power_of_2(-(-tokens // -(-vocab // hidden))), tokens)
        saved = width * tokens * hidden + (width * vocab * hidden if head_trainable else 0)
        return LossBytes(kernel, saved, width * chunk * vocab + F32 * tokens,
                         f"grad_input T×h{' + grad_weight V×h' if head_trainable else ''} kept; "
                         f"one {chunk}-row logits chunk at a time")
    if kernel == "cut_cross_entropy":
        return LossBytes(kernel, F32 * tokens + F32 * vocab, F32 * tokens,
                         "fp32 log-sum-exp per token and average logit per vocabulary entry; no T×V tensor")
    if kernel == "chunked_ce":
        per_chunk = -(-sequence_length // chunks) * micro_batch
        saved = width * tokens * vocab + labels + 2 * F32 * tokens + I64  # + the int64 count of labels
        return LossBytes(kernel, saved, max(width * tokens * vocab, F32 * per_chunk * vocab),
                         f"logits T×V in the model dtype kept; fp32 upcast one chunk of {per_chunk} rows at a time")
    raise LossInputError(f"loss kernel must be one of {', '.join(LOSS_KERNELS)}, got {kernel!r}")


class LossMoments(NamedTuple):
    """A fused or chunked kernel in the step (memory/step.py `_loss_moments`), parts as (name, bytes):
    `dropped` bytes of the activations it does not keep (Activations.logits_bytes; with Liger and a trainable
    head also the head's input), `kept` what it keeps instead from forward into the loss's backward, `forward`
    what is alive beside them while the loss runs, `backward` what the loss's backward adds, and `head` what the
    head's own backward adds when the head still runs as a linear layer (axolotl's chunked loss; None when the
    kernel computes the head's gradients itself)."""

    dropped: int
    kept: tuple[tuple[str, int], ...]
    forward: tuple[tuple[str, int], ...]
    backward: tuple[tuple[str, int], ...]
    head: tuple[tuple[str, int], ...] | None


def dropped_bytes(kernel: str, logits_bytes: int, compute: int, tokens: int, hidden: int,
                  head_trainable: bool = True) -> int:
    """What of the activations a kernel does not keep: Transformers' loss term, and with Liger and a trainable
    head the head's input (Liger's input gradient, made in forward, is kept instead)."""
    if kernel == "hf":
        return 0
    return logits_bytes + (compute * tokens * hidden if kernel == "liger_flce" and head_trainable else 0)


def loss_moments(kernel: str, micro_batch: int, sequence_length: int, hidden: int, vocab: int, compute: int,
                 weight: int, logits_bytes: int, head_trainable: bool = True, chunks: int = 8) -> LossMoments:
    """The parts of a non-"hf" kernel in the step: `compute` the activations' bytes per element, `weight` the head
    weight's (its gradient's), `logits_bytes` what Transformers' loss would keep (Activations.logits_bytes)."""
    if kernel == "hf" or kernel not in LOSS_KERNELS:
        raise LossInputError(f"loss kernel must be one of {', '.join(LOSS_KERNELS[1:])}, got {kernel!r}")
    found = loss_bytes(kernel, micro_batch, sequence_length, hidden, vocab, compute, head_trainable, chunks)
    tokens = micro_batch * sequence_length
    head_gradient = weight * vocab * hidden if head_trainable else 0
    if kernel == "liger_flce":  # the gradients are made in forward; the head's input is not kept
        chunk = found.transient - F32 * tokens
        return LossMoments(dropped_bytes(kernel, logits_bytes, compute, tokens, hidden, head_trainable),
                           ((P.FLCE_INPUT_GRADIENT, compute * tokens * hidden), (P.HEAD_GRADIENT, head_gradient)),
                           ((P.FLCE_LOGITS_CHUNK, chunk), ("FLCE loss per token", F32 * tokens)), (), None)
    if kernel == "cut_cross_entropy":  # backward: zeros_like(e), zeros_like(c) and the vocabulary order (int32)
        return LossMoments(logits_bytes, ((P.CCE_LOG_SUM_EXP_AND_LOGIT_AVERAGES, found.saved),
                                          ("CCE targets", 2 * I64 * tokens)), (),
                           ((P.CCE_INPUT_GRADIENT, compute * tokens * hidden), (P.HEAD_GRADIENT, head_gradient),
                            ("CCE vocabulary order", I32 * vocab)), None)
    # chunked_ce: the chunks' logits are kept, whatever their number (measured with 4, 8 and 16) (copies when b > 1: a chunk along the sequence of a batch is not
    # contiguous, and the head's output lives beside them until forward ends); backward makes the logits'
    # gradient T×V beside them, then the head's backward its weight and input gradients
    logits = compute * tokens * vocab
    return LossMoments(logits_bytes, ((P.CHUNKED_LOGITS, found.saved),),
                       ((P.LOGITS, logits if micro_batch > 1 else 0),), ((P.LOGITS_GRADIENT, logits),),
                       ((P.LOGITS_GRADIENT, logits), (P.HEAD_GRADIENT, head_gradient),
                        (P.HIDDEN_STATE_GRADIENT, compute * tokens * hidden)))
