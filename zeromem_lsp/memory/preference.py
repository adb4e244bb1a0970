"""Preference trainers in the whole-step peak (pure): TRL's DPO and KTO steps, the reference model beside them.

What TRL 1.16 runs (measured on CPU by benchmarks/preference/measure.py), with its sources: docs/adapters.md and
docs/memory-model.md, "Preference trainers". Reference-free trainers: memory/reference_free_loss.py; LLaMA-Factory's:
memory/llamafactory_loss.py; GRPO: memory/grpo.py. The reference model's bytes are a part of every moment.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Callable, NamedTuple, Union

from zeromem_lsp.configs.settings_values import TRAINERS  # the `trainer` setting; sft: ForCausalLMLoss
from zeromem_lsp.memory.precision import DTYPE_BYTES
from zeromem_lsp.memory.activations import F32, I64, ActivationInputError, estimate_activations
from zeromem_lsp.memory.chunked_nll import UPCAST, ChunkedNll
from zeromem_lsp.memory.fused_head import FusedHead
from zeromem_lsp.memory.grpo import Generation, GrpoHead, GrpoLogitsHead, check as check_grpo, kv_elements
from zeromem_lsp.memory.parts import P, M, with_gathered
from zeromem_lsp.memory.llamafactory_loss import TRAINERS as LLAMAFACTORY_TRAINERS, LlamaFactoryHead
from zeromem_lsp.memory.reference_free_loss import TRAINERS as REFERENCE_FREE, ReferenceFreeHead
from zeromem_lsp.memory.step import (FrozenBase, Fsdp, Head, Part, PolicyLoss, Setup, Step, StepInputError, StepPeak,
                                     make_step, parameter_tensors, step_peak)

#: Trainers that keep a reference model (unless PEFT or precomputed log-probs); the others are reference-free.
WITH_REFERENCE = ("dpo", "kto")
#: The DPO loss's implementation: TRL's fused LM head (TRL 1.16), TRL 1.8's logits (axolotl's pin) or
#: LLaMA-Factory's own trainers (memory/llamafactory_loss.py; its DPO with orpo / simpo, and its KTO).
LOSSES = ("fused", "logits", "llamafactory")
#: TRL's SFTTrainer: its fused LM head (TRL 1.15 on) or its chunked NLL (1.4-1.14: memory/chunked_nll.py)
SFT_LOSSES = ("fused", *UPCAST)
TRAINER_LOSSES = {"sft": SFT_LOSSES}  # the losses a trainer takes when not LOSSES


@dataclass(frozen=True)
class LogitsHead(PolicyLoss):
    """TRL 1.8's DPO and KTO losses (what axolotl pins; dpo_trainer.py / kto_trainer.py 1.8.0 `_compute_loss`,
    `selective_log_softmax`, `entropy_from_logits`; KTO's KV caches `cache`, `policy_cache`): docs/adapters.md
    (`triton` has no effect)."""

    cache: int = 0  # KTO: elements of the reference outputs' KV cache (per element, the compute dtype's bytes)
    policy_cache: int = 0  # KTO: elements of the policy outputs' KV cache beyond what its attention keeps

    def _kept(self, tokens: int, vocab: int, c: int) -> int:
        """What the log-probs keep: each row's log-softmax (16-bit), or the logits for logsumexp (fp32)."""
        return c * tokens * vocab if c == F32 else c * self.scored(tokens) * vocab

    def saved(self, saved: int, logits_bytes: int, tokens: int, hidden: int, c: int, vocab: int = 0) -> int:
        """The activations with the log-probs' kept tensors, labels and per-token log-probs for the loss's."""
        scored = self.scored(tokens)
        return saved - logits_bytes + self._kept(tokens, vocab, c) + I64 * scored + F32 * scored

    def moments(self, setup: Setup, base: list[Part], saved: int) -> tuple[str, list[Part], list[Part]]:
        """(the entropy metric at the end of the loss's forward, the loss's backward at its largest)."""
        c, h, v, w = setup.c, setup.hidden, setup.vocab, setup.w
        tokens = setup.tokens
        scored, logits = self.scored(tokens), c * tokens * v
        base = with_gathered(base, self.loss_gathered)
        total = saved if self.adjusted else self.saved(saved, setup.acts.logits_bytes, tokens, h, c, v)
        forward = [*base, Part(P.ACTIVATIONS, total), Part(P.LOGITS, logits),
                   Part(P.REFERENCE_GATHERED_PARAMETERS, self.reference_gathered if self.reference_forward else 0),
                   Part(P.REFERENCE_LOGITS, logits if self.reference_forward else 0),
                   Part(P.ENTROPY_METRIC, c * scored * v + 3 * c * min(128, scored) * v)]
        if self.trainer == "kto":
            forward += [Part(P.LOGITS_SELECTED_FOR_THE_METRICS, logits),
                        Part(P.REFERENCE_KV_CACHE, c * self.cache if self.reference_forward else 0),
                        Part(P.POLICY_KV_CACHE, c * self.policy_cache)]
        rest = total - self._kept(tokens, v, c)  # the row log-softmaxes are freed once their backward ran
        stacked = [*base, Part(P.ACTIVATIONS, rest), Part(P.LOG_PROB_GRADIENTS, c * scored * v),
                   Part(P.LOGITS_GRADIENT, logits)]
        head = [*base, Part(P.ACTIVATIONS, rest), Part(P.LOGITS_GRADIENT, logits),
                Part(P.GRADIENTS, w * v * h if self.head_trainable else 0), Part(P.HIDDEN_STATE_GRADIENT, c * tokens * h)]
        return M.ENTROPY_METRIC, forward, max(stacked, head, key=lambda parts: sum(part.bytes for part in parts))


class Preference(NamedTuple):
    """A preference trainer's step: the trainer, the reference on this rank, and how its forward runs."""

    trainer: str
    reference_bytes: int = 0  # the frozen reference model on this rank (`reference_of`)
    reference_forward: bool = True  # False with precomputed reference log-probs
    reference_gathered: int = 0
    triton: bool = True
    loss: str = "fused"  # "fused": TRL's fused LM head (TRL 1.16); "logits": TRL 1.8's (axolotl's pin)
    #: the model config's use_cache, which TRL 1.8's KTO leaves on: axolotl's `check_model_config`
    #: (src/axolotl/loaders/utils.py) sets it False for the policy and the reference it loads
    kv_cache: bool = False
    generation: Generation = Generation()  # GRPO only (memory/grpo.py)


#: the policy's head in a preference step (GRPO's wraps one of them: grpo.GrpoHead)
PolicyHead = Union[FusedHead, "LogitsHead", LlamaFactoryHead, ReferenceFreeHead, GrpoLogitsHead, ChunkedNll]


def reference_of(step: Step, width: int, peft_policy: bool, precomputed: bool, loss: str) -> tuple[int, int]:
    """(the frozen reference model on this rank, its weights gathered at its forward's peak), stored in `width` bytes
    each and placed as the step's engine places it; none for a PEFT policy (its adapters disabled instead) or with
    precomputed log-probs (under FSDP the reference is loaded only for the precompute)."""
    if peft_policy or precomputed:
        return 0, 0
    tensors, engine = parameter_tensors(step.shape), step.engine
    persistent = width * sum(numel for numel in tensors.all() if numel <= engine.threshold)
    reference = engine.reference(width * tensors.total, persistent, step.ranks)
    gathered_width = DTYPE_BYTES["bf16"] if engine.mixed else width
    return reference, engine.reference_gathered(tensors, gathered_width, step.ranks, loss == "fused") if reference else 0


def rows(trainer: str, micro_batch: int) -> int:
    """Sequences through the policy per micro-batch: DPO-style trainers stack chosen and rejected."""
    return 2 * micro_batch if trainer in ("dpo", "orpo", "simpo", "cpo") else micro_batch


def estimate_preference_step(preference: Preference, step: Step | None = None, **inputs: Any) -> StepPeak:
    """The step for a preference trainer (`step`, or make_step's keywords): its rows, its head in place of
    ForCausalLMLoss, the reference model in every moment; StepInputError for a trainer not modelled."""
    trainer = preference.trainer
    if trainer not in TRAINERS:
        raise StepInputError(f"trainer must be one of {', '.join(TRAINERS)}, got {trainer!r}")
    step = make_step(**inputs) if step is None else step
    if trainer == "sft" and preference.loss not in SFT_LOSSES:  # (TRL's SFTTrainer's heads; else the model's loss)
        return step_peak(step)
    frozen, sequence, engine = step.frozen, step.sequence_length, step.engine
    micro, grpo, kto = rows(trainer, step.micro_batch), trainer == "grpo", trainer == "kto"
    if preference.loss not in TRAINER_LOSSES.get(trainer, LOSSES):
        raise StepInputError(f"preference loss must be one of {', '.join(LOSSES)}, got {preference.loss!r}")
    if grpo:
        check_grpo(preference.generation, sequence, engine.name, step.stage, engine.sharded, step.ranks, engine.version)
    if preference.loss == "llamafactory" and trainer not in LLAMAFACTORY_TRAINERS:
        raise StepInputError(f"LLaMA-Factory has no {trainer.upper()} trainer (stage: dpo with pref_loss sigmoid, orpo "
                             "or simpo; stage: kto)", "trainer")
    head = policy_head(trainer, preference.loss, sequence, preference.generation.completion_length,
                       preference.reference_forward, preference.reference_gathered, frozen is None, preference.triton)
    if isinstance(head, LogitsHead) and kto and preference.kv_cache:
        cache = kv_elements(step.shape, micro * sequence)
        repeated = step.attention == "eager" and step.shape.kv_heads < step.shape.heads
        head = replace(head, cache=cache, policy_cache=cache if repeated and not step.checkpointing else 0)
    if kto and isinstance(head, (FusedHead, LogitsHead)):
        head = replace(head, loss_gathered=no_prefetch(step))
    if frozen is not None:  # its activations are read after the loss too: the fused head's, not the log-softmax
        head = replace(head, adjusted=True)
        saved = _frozen_saved(head, frozen, step, micro)  # the head's tensors change what is saved outside the layers
        frozen = frozen._replace(activations=saved, outside=frozen.outside + saved - frozen.activations)
    loss: Head = head
    if grpo:
        assert isinstance(head, (FusedHead, GrpoLogitsHead))  # (the llamafactory loss has no GRPO: refused above)
        whole, at_loss = _generation_gathered(step, preference.generation.steps_per_generation)
        loss = GrpoHead(head, preference.generation, step.shape, preference.reference_gathered, whole, at_loss,
                        _fsdp2_unshard(step))
    reference = (Part(P.REFERENCE_MODEL, preference.reference_bytes),) if preference.reference_bytes else ()
    return step_peak(replace(step, micro_batch=micro, head=loss, loss_kernel="hf", frozen=frozen, resident=reference))


def policy_head(trainer: str, loss: str, sequence_length: int, completion_length: int = 0,
                reference_forward: bool = True, reference_gathered: int = 0, head_trainable: bool = True,
                triton: bool = True) -> PolicyHead:
    """The policy's head for `trainer` under `loss` (LOSSES), in place of ForCausalLMLoss."""
    if loss in ("fused", "logits") and trainer in REFERENCE_FREE:  # TRL's ORPOTrainer / CPOTrainer
        return ReferenceFreeHead(trainer, sequence_length, reference_forward, reference_gathered,
                                 head_trainable=head_trainable, triton=triton and loss == "fused")  # TRL 1.8: no Triton
    if trainer == "grpo" and loss == "logits":  # TRL 1.8's GRPOTrainer (axolotl's pin)
        return GrpoLogitsHead(trainer, sequence_length, head_trainable=head_trainable,
                              completion_length=completion_length)
    # GRPO's reference runs before the policy's forward (its own moment, memory/grpo.py), never beside it
    kinds: dict[str, Callable[..., PolicyHead]] = {
        "fused": FusedHead, "logits": LogitsHead, "llamafactory": LlamaFactoryHead,
        **{name: partial(ChunkedNll, upcast=upcast) for name, upcast in UPCAST.items()}}
    return kinds[loss](trainer, sequence_length, reference_forward and trainer != "grpo", reference_gathered,
                head_trainable=head_trainable, triton=triton)


def _gathered_width(step: Step) -> Callable[[int], int]:
    """Bytes of `elements` gathered: in the weights' dtype, or pro rata of a frozen base's whole P (a quantized base
    gathers its packed bytes), as step.py's."""
    frozen, width = step.frozen, DTYPE_BYTES[step.param_dtype]
    return (lambda elements: width * elements) if frozen is None or not frozen.all_parameters else frozen.gathered


def _generation_gathered(step: Step, steps_per_generation: int) -> tuple[int | None, int | None]:
    """ZeRO-3 at more than one rank: (the policy's non-persistent parameters gathered whole for GRPO's generation,
    the LM head alone gathered at the loss when every micro-step follows a generation); (None, None) otherwise."""
    if step.engine.stage != 3 or step.ranks < 2:  # (ZeRO-3 is DeepSpeed's)
        return None, None
    threshold = step.engine.threshold
    tensors = parameter_tensors(step.shape)
    gathered = _gathered_width(step)
    whole = sum(numel for numel in tensors.all() if numel > threshold)
    head = gathered(tensors.head or tensors.embedding) if steps_per_generation == 1 else None
    return gathered(whole), head


def no_prefetch(step: Step) -> int | None:
    """KTO under ZeRO-3 at more than one rank: its LM head alone gathered at the policy's loss and backward (None
    otherwise): `_compute_kl_logps` invalidates the parameter coordinator's trace (`_invalidate_trace`): no
    prefetch, as GRPO's micro-step after a generation (docs/adapters.md; measured, TRL 1.16 and 1.8)."""
    return _generation_gathered(step, 1)[1]


def _fsdp2_unshard(step: Step) -> tuple[int, int] | None:
    """FSDP2 sharded at more than one rank: (the root's, a decoder layer's) bytes as gathered (the compute dtype
    under mixed precision; a frozen base's pro rata of its P), as step.py `Fsdp.moments` / `Fsdp.gathered`."""
    engine = step.engine
    if not isinstance(engine, Fsdp) or not engine.sharded or step.ranks < 2 or engine.version != 2:
        return None
    tensors = parameter_tensors(step.shape)
    gathered = (lambda elements: DTYPE_BYTES["bf16"] * elements) if engine.mixed else _gathered_width(step)
    return gathered(tensors.root), gathered(tensors.layer_total)


def _frozen_saved(head: PolicyHead, frozen: FrozenBase, step: Step, micro: int) -> int:
    """A frozen base's saved activations (for `micro` rows) with the fused head's tensors for the loss's."""
    try:
        acts = estimate_activations(step.shape, step.sequence_length, micro, frozen.compute_dtype,
                                    step.checkpointing, step.attention, step.transformers_path._replace(output_copy=False))
    except ActivationInputError as error:
        raise StepInputError(str(error)) from None
    tokens = micro * step.sequence_length
    return head.saved(frozen.activations, acts.logits_bytes, tokens, step.shape.hidden,
                      DTYPE_BYTES[frozen.compute_dtype], step.shape.vocab)


__all__ = ["FusedHead", "LOSSES", "LogitsHead", "Preference", "SFT_LOSSES", "TRAINERS", "WITH_REFERENCE",
           "estimate_preference_step", "rows"]
