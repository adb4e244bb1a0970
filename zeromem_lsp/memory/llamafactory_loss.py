"""LLaMA-Factory's own DPO and KTO losses in the step (pure): what its CustomDPOTrainer / CustomKTOTrainer keep
and make.

LLaMA-Factory (src/llamafactory/train/dpo/trainer.py at the commit tests/data/recipes/SOURCES.md cites, measured on
CPU by benchmarks/preference/llamafactory.py) runs `stage: dpo` through its own trainer, not TRL's fused head:
- `concatenated_forward` casts the model's logits (b·s·V in the compute dtype) to fp32 and keeps them until the
  loss returns (its `chosen_logits` / `rejected_logits` metrics); `get_batch_logps` (train/trainer_utils.py) runs
  `log_softmax` over the vocabulary of the shifted positions (fp32, b·(s-1)·V, kept for backward) and gathers the
  labels' log-probs.
- The reference forward (`compute_reference_log_probs`, under `no_grad`: the reference copy, or the PEFT policy with
  its adapters disabled) makes the same fp32 logits and log-softmax beside the policy's; orpo and simpo use no
  reference (`use_ref_model`, hparams/finetuning_args.py).
- KTO (train/kto/trainer.py, b completions): `concatenated_forward` runs the completions, then the mismatched KL
  completions under `no_grad` (same rows), and copies the completions' fp32 logits into chosen and rejected rows
  (boolean indexing), which outlive it (its metrics) while the completions' own logits do not. The reference
  (always run: LLaMA-Factory never precomputes) does the same under `no_grad`: its forward's peak holds its
  completions' fp32 logits and its KL completions' fp32 logits and log-softmax, beside the policy's row copies.
- Backward: the gather's gradient (fp32, b·(s-1)·V) and the log-softmax's input gradient beside the kept output;
  then the shifted slice's gradient (fp32 b·s·V), its cast to the compute dtype, and the LM head's gradients.
"""

from __future__ import annotations

from dataclasses import dataclass

from zeromem_lsp.memory.activations import F32, I64
from zeromem_lsp.memory.parts import P, M, Part
from zeromem_lsp.memory.step import PolicyLoss, Setup

#: the `trainer` setting's values this loss runs: `stage: dpo` with its `pref_loss` (reference-free: orpo, simpo)
#: and `stage: kto`
TRAINERS = ("dpo", "orpo", "simpo", "kto")


@dataclass(frozen=True)
class LlamaFactoryHead(PolicyLoss):
    """LLaMA-Factory's DPO / ORPO / SimPO loss (the `loss` of estimate_step): fp32 logits and a log-softmax (`triton`
    has no effect)."""

    def saved(self, saved: int, logits_bytes: int, tokens: int, hidden: int, c: int, vocab: int = 0) -> int:
        """The activations with the loss's fp32 log-softmax of the shifted positions and the gathered labels
        (int64) in place of ForCausalLMLoss's."""
        scored = self.scored(tokens)
        return saved - logits_bytes + F32 * scored * vocab + I64 * scored

    def moments(self, setup: Setup, base: list[Part], saved: int) -> tuple[str, list[Part], list[Part]]:
        """(the forward's peak: the policy's fp32 logits beside the reference's logits and log-softmax, or the
        policy's own; the loss's backward at its largest)."""
        c, h, v, w = setup.c, setup.hidden, setup.vocab, setup.w
        tokens = setup.tokens
        scored = self.scored(tokens)
        total = saved if self.adjusted else self.saved(saved, setup.acts.logits_bytes, tokens, h, c, v)
        logits, log_softmax = F32 * tokens * v, F32 * scored * v
        kept = [*base, Part(P.ACTIVATIONS, total), Part(P.FP32_LOGITS, logits)]
        name, forward = (M.REFERENCE_FORWARD if self.trainer == "kto" or self.reference_forward else M.POLICY_HEAD), kept
        if self.trainer == "kto":  # the policy's row copies beside the reference's KL completions' forward
            forward = [*base, Part(P.ACTIVATIONS, total), Part(P.FP32_LOGITS_CHOSEN_REJECTED_ROWS, logits),
                       Part(P.REFERENCE_GATHERED_PARAMETERS, self.reference_gathered),
                       Part(P.REFERENCE_FP32_LOGITS, logits), Part(P.REFERENCE_KL_FP32_LOGITS, logits),
                       Part(P.REFERENCE_LOG_SOFTMAX, log_softmax)]
        elif self.reference_forward:
            forward = [*kept, Part(P.REFERENCE_GATHERED_PARAMETERS, self.reference_gathered),
                       Part(P.REFERENCE_FP32_LOGITS, logits), Part(P.REFERENCE_LOG_SOFTMAX, log_softmax)]
        rest = total - log_softmax  # the log-softmax is freed once its backward ran
        gradients = [
            [*base, Part(P.ACTIVATIONS, total), Part(P.LOG_SOFTMAX_GRADIENTS, 2 * log_softmax)],
            [*base, Part(P.ACTIVATIONS, rest), Part(P.LOG_SOFTMAX_INPUT_GRADIENT, log_softmax),
             Part(P.FP32_LOGITS_GRADIENT, logits)],
            [*base, Part(P.ACTIVATIONS, rest), Part(P.FP32_LOGITS_GRADIENT, logits),
             Part(P.LOGITS_GRADIENT, c * tokens * v if c != F32 else 0)],  # (an fp32 model's cast is no copy)
            [*base, Part(P.ACTIVATIONS, rest), Part(P.LOGITS_GRADIENT, c * tokens * v),
             Part(P.GRADIENTS, w * v * h if self.head_trainable else 0), Part(P.HIDDEN_STATE_GRADIENT, c * tokens * h)]]
        return name, forward, max(gradients, key=lambda parts: sum(part.bytes for part in parts))


__all__ = ["LlamaFactoryHead", "TRAINERS"]
