"""TRL's reference-free preference losses in the step (pure): ORPO, CPO and SimPO (TRL 1.16 trl/experimental/orpo
orpo_trainer.py, trl/experimental/cpo/cpo_trainer.py; SimPO is CPOTrainer with loss_type "simpo"; measured on CPU by
benchmarks/preference/trl_reference_free.py).

`concatenated_forward` runs chosen and rejected stacked (2·b rows) through the model, whose logits (b·s·V in the
compute dtype) stay alive until the loss returns (its logits metrics). The chosen rows' NLL (`nn.CrossEntropyLoss`
on a contiguous copy of their shifted logits; CPO with its default cpo_alpha 1.0) keeps a log-softmax of the chosen
rows' shifted positions; `get_batch_logps` runs `selective_log_softmax` (trl/trainer/utils.py), a log-softmax per
row, each kept for backward (an fp32 model: `logsumexp` keeps the logits themselves; derived, not measured) — the
torch path, which the CPU measurement runs and TRL 1.8 (axolotl's pin) always runs. On CUDA / XPU TRL 1.16's
`selective_log_softmax` runs its Triton kernel instead (trl/kernels/logprob_entropy.py `_LogProbEntropyFunction`):
it keeps the logits (a view of the model's, so they stay alive into backward) and an fp32 log-normalizer and
expected logit per token, and its backward makes the shifted logits' gradient at once (derived, not measured). No
reference model. Backward: the two paths' logits gradients (each slice's gradient is made at the logits' full
shape) and their sum, then the LM head's gradients.
"""

from __future__ import annotations

from dataclasses import dataclass

from zeromem_lsp.memory.activations import F32, I64
from zeromem_lsp.memory.parts import P, M, Part
from zeromem_lsp.memory.step import PolicyLoss, Setup

TRAINERS = ("orpo", "cpo", "simpo")


@dataclass(frozen=True)
class ReferenceFreeHead(PolicyLoss):
    """TRL's ORPO / CPO / SimPO loss (the `loss` of estimate_step): the logits, the chosen rows' NLL, a
    log-softmax per row; no reference runs. `triton`: TRL 1.16's Triton log-prob kernel on CUDA / XPU (False: the
    torch path, CPU and TRL 1.8)."""

    def _kept(self, tokens: int, vocab: int, c: int) -> int:
        """The NLL's log-softmax of the chosen rows' shifted positions and the rows' log-softmaxes (an fp32 model's
        `logsumexp` keeps the logits instead); with Triton the kernel's two fp32 values per token (the logits it
        keeps are a part of their own until backward)."""
        scored = self.scored(tokens)
        if self.triton:
            return c * (scored // 2) * vocab + 2 * F32 * scored
        rows = c * tokens * vocab if c == F32 else c * scored * vocab
        return c * (scored // 2) * vocab + rows

    def saved(self, saved: int, logits_bytes: int, tokens: int, hidden: int, c: int, vocab: int = 0) -> int:
        """The activations with the loss's log-softmaxes and labels in place of ForCausalLMLoss's."""
        return saved - logits_bytes + self._kept(tokens, vocab, c) + I64 * tokens

    def moments(self, setup: Setup, base: list[Part], saved: int) -> tuple[str, list[Part], list[Part]]:
        """(the end of the loss's forward: the logits beside what it keeps; the loss's backward at its largest)."""
        c, h, v, w = setup.c, setup.hidden, setup.vocab, setup.w
        tokens = setup.tokens
        total = saved if self.adjusted else self.saved(saved, setup.acts.logits_bytes, tokens, h, c, v)
        logits = c * tokens * v
        forward = [*base, Part(P.ACTIVATIONS, total), Part(P.LOGITS, logits)]
        rest = total - self._kept(tokens, v, c)  # the log-softmaxes are freed once their backward ran
        paths = [*base, Part(P.ACTIVATIONS, rest), Part(P.LOGITS_GRADIENTS_NLL_LOG_PROBS_THEIR_SUM, 3 * logits)]
        head = [*base, Part(P.ACTIVATIONS, rest), Part(P.LOGITS_GRADIENT, logits),
                Part(P.GRADIENTS, w * v * h if self.head_trainable else 0), Part(P.HIDDEN_STATE_GRADIENT, c * tokens * h)]
        moments = [paths, head]
        if self.triton:  # the kernel's backward: the logits it kept beside their shifted gradient and its full shape
            moments.append([*base, Part(P.ACTIVATIONS, total), Part(P.LOGITS, logits),
                            Part(P.LOG_PROB_KERNEL_GRADIENTS, c * self.scored(tokens) * v + logits)])
        return M.POLICY_HEAD, forward, max(moments, key=lambda parts: sum(part.bytes for part in parts))


__all__ = ["ReferenceFreeHead", "TRAINERS"]
