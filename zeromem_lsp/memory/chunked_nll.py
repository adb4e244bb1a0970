"""TRL's `chunked_nll` SFT loss (TRL 1.4 to 1.14, SFTConfig's default from 1.7: trl/trainer/sft_trainer.py
`_patch_chunked_ce_lm_head`, `_chunked_cross_entropy_loss`, `_chunk`), pure. The patched forward runs the base
model without its LM head, packs the b·(s−1) shifted positions into one copy of their hidden states (`hidden[order]`,
kept: every chunk's checkpoint holds a view of it, with the packed int64 labels and the int64 order the gather's
backward keeps) and scores them in chunks of `CHUNK` rows, each under non-reentrant checkpointing: a chunk's fp32
logits, log-softmax, its exp and the entropy product live only while the chunk runs, in forward and again in its
recompute. 1.13 and 1.14 project in the compute dtype (`(h @ w.to(h.dtype).t()).float()`); 1.4 to 1.12 upcast the
chunk and the whole head weight (`h.float() @ w.float().t()`), and the recompute keeps both for the matmul's
backward. Measured on CPU by benchmarks/preference/trl_sft_chunked.py (tests/data/step/sft_chunked.json).
"""

from __future__ import annotations

from dataclasses import dataclass

from zeromem_lsp.memory.activations import F32, I64
from zeromem_lsp.memory.parts import P, M, Part
from zeromem_lsp.memory.step import PolicyLoss, Setup

CHUNK = 256  # sft_trainer._CHUNKED_LM_HEAD_CHUNK_SIZE (every release with chunked_nll)
#: the `sft_loss` values of the chunked loss → whether its matmul runs in fp32 (TRL 1.4-1.12) or in the compute dtype
UPCAST = {"chunked_nll": False, "chunked_nll_fp32": True}
#: fp32 c×V tensors of one chunk alive together: forward and recompute (logits, log-softmax, exp, exp × log-softmax)
FORWARD_CHUNK = 4


@dataclass(frozen=True)
class ChunkedNll(PolicyLoss):
    """TRL's chunked NLL in the step (the `loss` of estimate_step, through memory/preference.policy_head)."""

    upcast: bool = False  # TRL 1.4-1.12: the chunk and the head weight in fp32 for the matmul

    def saved(self, saved: int, logits_bytes: int, tokens: int, hidden: int, c: int, vocab: int = 0) -> int:
        """What autograd keeps instead of ForCausalLMLoss's: no log-softmax, no LM head input; the packed hidden states,
        their int64 order and the packed int64 labels."""
        scored = self.scored(tokens)
        return saved - logits_bytes - c * tokens * hidden + c * scored * hidden + 2 * I64 * scored

    def _matmul(self, setup: Setup, rows: int) -> int:
        """The fp32 copies the upcast matmul makes (none when the compute dtype is fp32: `.float()` returns itself)."""
        return F32 * (setup.vocab + rows) * setup.hidden if self.upcast and setup.c != F32 else 0

    def _chunk_backward(self, setup: Setup, rows: int) -> int:
        """A chunk's recompute (its four fp32 c×V tensors), or with the upcast its fp32 matmul's backward: the copies
        it keeps, the logits' fp32 gradient and the head weight's fp32 gradient."""
        copies, v = self._matmul(setup, rows), setup.vocab
        matmul = copies + F32 * rows * v + (F32 * v * setup.hidden if self.head_trainable else 0) if copies else 0
        return max(copies + FORWARD_CHUNK * F32 * rows * v, matmul)

    def moments(self, setup: Setup, base: list[Part], saved: int) -> tuple[str, list[Part], list[Part]]:
        """(the chunk loop in forward, the loss's backward). Backward takes the chunks last first: the first one's
        recompute holds no gradient yet; a later one's recompute holds the head's and the packed hidden states'
        gradients summed so far, and the second chunk's sum is made out of place (the sum beside both addends)."""
        c, h, v, w = setup.c, setup.hidden, setup.vocab, setup.w
        scored = self.scored(setup.tokens)
        rows, last = min(CHUNK, scored), (scored - 1) % CHUNK + 1
        kept = Part(P.ACTIVATIONS, saved if self.adjusted else self.saved(saved, setup.acts.logits_bytes,
                                                                          setup.tokens, h, c))
        chunk = max(FORWARD_CHUNK * F32 * rows * v, self._matmul(setup, rows) + F32 * rows * v)
        forward = [*base, kept, Part(P.LAST_HIDDEN_STATES, c * setup.tokens * h), Part(P.LABEL_MASK, scored),
                   Part(P.NLL_CHUNK, chunk)]
        head = w * v * h if self.head_trainable else 0
        first = [*base, kept, Part(P.NLL_CHUNK, self._chunk_backward(setup, last))]
        if scored <= CHUNK:
            return M.POLICY_HEAD, forward, first
        later = [*base, kept, Part(P.HEAD_GRADIENT, head), Part(P.HIDDEN_STATE_GRADIENT, c * scored * h),
                 Part(P.NLL_CHUNK, self._chunk_backward(setup, rows))]
        summed = [*base, kept, Part(P.HEAD_GRADIENT, 3 * head), Part(P.HIDDEN_STATE_GRADIENT, c * scored * h)]
        return M.POLICY_HEAD, forward, max(first, later, summed, key=lambda parts: sum(part.bytes for part in parts))


__all__ = ["CHUNK", "ChunkedNll", "UPCAST"]
