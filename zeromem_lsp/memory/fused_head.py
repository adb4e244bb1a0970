"""TRL's fused LM head (TRL 1.16, trl/trainer/utils.py `add_fused_lm_head`, trl/kernels/chunked_logprob.py
`ChunkedLogProbFunction`): the loss of DPO, KTO and GRPO policies in the step (memory/preference.py, grpo.py), pure.
What it keeps and makes: memory/preference.py's module text; measured on CPU by benchmarks/preference/measure.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from zeromem_lsp.memory.activations import F32, I64
from zeromem_lsp.memory.parts import P, M, Part, with_gathered
from zeromem_lsp.memory.step import PolicyLoss, Setup

TOKEN_TILE, VOCABULARY_TILE = 4096, 32768  # chunked_logprob.TOKEN_CHUNK_SIZE, utils._CHUNKED_LOGPROB_CHUNK_SIZE
#: per-token fields each trainer's fused head computes (DPOTrainer / KTOTrainer `__init__`, no WPO weighting)
OUTPUTS = {"dpo": ("log_probs", "entropy", "mean_logits", "is_top1"), "kto": ("log_probs", "entropy", "mean_logits"),
           "grpo": ("log_probs", "entropy"),  # GRPOTrainer `__init__`
           "sft": ("log_probs", "entropy", "is_top1")}  # SFTTrainer `__init__` (TRL 1.15 and later)


@dataclass(frozen=True)
class FusedHead(PolicyLoss):
    """TRL's fused LM head in the step (the `loss` of estimate_step): its saved tensors and transients (`triton`
    False: the torch fallback's fp32 tile temporaries, CPU)."""

    def _tile(self, tokens: int, vocab: int, c: int) -> tuple[int, int, int]:
        """(rows, columns of the widest tile, bytes of `mm_buf`) for `tokens` scored positions."""
        rows = min(tokens, TOKEN_TILE)
        return rows, min(vocab, VOCABULARY_TILE), c * rows * VOCABULARY_TILE

    def saved(self, saved: int, logits_bytes: int, tokens: int, hidden: int, c: int, vocab: int = 0) -> int:
        """What autograd keeps instead of ForCausalLMLoss's: the activations without the fp32 log-softmax and the
        LM head's input, plus the head's shifted hidden-state copy, int64 labels, fp32 log-sum-exp (and entropy),
        and the per-token outputs with their label mask."""
        scored = self.scored(tokens)
        outputs = OUTPUTS[self.trainer]
        floats = sum(name != "is_top1" for name in outputs)
        kept = c * scored * hidden + I64 * scored + F32 * scored * (1 + ("entropy" in outputs))
        kept += F32 * scored * floats + scored * (1 + ("is_top1" in outputs))
        return saved - logits_bytes - c * tokens * hidden + kept

    def moments(self, setup: Setup, base: list[Part], saved: int) -> tuple[str, list[Part], list[Part]]:
        """(forward's peak, the loss's backward): the larger of the policy's head and the reference's forward;
        the head's backward in its tile loop or at its end (fp32 gradients cast to the parameters' dtype)."""
        c, h, v, w = setup.c, setup.hidden, setup.vocab, setup.w
        tokens = setup.tokens
        scored = self.scored(tokens)
        rows, columns, buffer = self._tile(scored, v, c)
        released = with_gathered(base, 0 if self.loss_gathered is not None else None)  # the policy's head, after use
        base = with_gathered(base, self.loss_gathered)
        kept = Part(P.ACTIVATIONS, saved if self.adjusted else self.saved(saved, setup.acts.logits_bytes,
                                                                          tokens, h, c))
        top1 = "is_top1" in OUTPUTS[self.trainer]
        weight_copy = c * columns * h if c != w else 0  # the head's tile cast to the compute dtype
        fallback = 0 if self.triton else (max(3 * F32 + top1, 2 * F32 + 2 * top1)) * rows * columns
        head = [*base, kept, Part(P.LAST_HIDDEN_STATES, c * tokens * h), Part(P.LM_HEAD_TILE, buffer + weight_copy),
                Part(P.FP32_TILE_TEMPORARIES, fallback)]
        name, forward = M.POLICY_HEAD, head
        if self.reference_forward:
            reference = self._reference(setup, scored, tokens, rows, columns, buffer + weight_copy)
            at_reference = [*released, kept, *reference]
            if sum(part.bytes for part in at_reference) > sum(part.bytes for part in head):
                name, forward = M.REFERENCE_FORWARD, at_reference
        grads = F32 * scored * h + (F32 * v * h if self.head_trainable else 0)
        in_loop = [*base, kept, Part(P.LM_HEAD_GRADIENTS_FP32, grads), Part(P.LM_HEAD_TILE, buffer + weight_copy),
                   Part(P.FP32_TILE_TEMPORARIES, 0 if self.triton else (7 * F32 + 1) * rows * columns)]
        end = [*base, kept, Part(P.LM_HEAD_GRADIENTS_FP32, grads), Part(P.LM_HEAD_TILE, buffer),
               Part(P.LM_HEAD_GRADIENTS, c * scored * h + (w * v * h if self.head_trainable else 0))]
        loss = max(in_loop, end, key=lambda parts: sum(part.bytes for part in parts))
        return name, forward, loss

    def _reference(self, setup: Setup, scored: int, tokens: int, rows: int, columns: int, tile: int) -> list[Part]:
        """The reference forward's transients: its gathered weights (ZeRO-3), last hidden states, the shifted copy,
        its tile (log_probs only: three fp32 temporaries in the fallback)."""
        c, h = setup.c, setup.hidden
        fallback = 0 if self.triton else 3 * F32 * rows * columns
        return [Part(P.REFERENCE_GATHERED_PARAMETERS, self.reference_gathered),
                Part(P.REFERENCE_FORWARD, c * tokens * h + c * scored * h + I64 * scored + 2 * F32 * scored),
                Part(P.REFERENCE_LM_HEAD_TILE, tile), Part(P.FP32_TILE_TEMPORARIES, fallback)]


__all__ = ["FusedHead", "OUTPUTS", "TOKEN_TILE", "VOCABULARY_TILE"]
