"""TRL's GRPO step in the whole-step peak (pure): generation, the reference's log-probs, then the policy's loss.

What TRL 1.16 runs with use_vllm false (trl/trainer/grpo_trainer.py `_generate_and_score_completions`,
`_compute_loss`; measured on CPU by benchmarks/preference/grpo.py, tests/data/step/preference.json `grpo-` cases) and
what is assumed (every completion runs to max_completion_length; generation after `zero_grad`; the reference a copy
or the PEFT policy's adapters disabled), moment by moment: docs/adapters.md. Not modelled: vLLM and FSDP1.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

from zeromem_lsp.configs.settings_values import MAX_COMPLETION_LENGTH as TRL_MAX_COMPLETION_LENGTH
from zeromem_lsp.memory.activations import F32, I64
from zeromem_lsp.configs.model_config import ModelShape
from zeromem_lsp.memory.parts import P, M, Part, StepInputError, with_gathered
from zeromem_lsp.memory.fused_head import FusedHead
from zeromem_lsp.memory.step import PolicyLoss, Setup, mlp_width
from zeromem_lsp.provenance import Given

#: GRPOConfig's defaults (trl/trainer/grpo_config.py, TRL 1.16 and 1.8)
MAX_COMPLETION_LENGTH = TRL_MAX_COMPLETION_LENGTH
VLLM = ("GRPO with use_vllm: vLLM generates in its own engine (colocate: a share of the GPU set by "
        "vllm_gpu_memory_utilization; server: other GPUs), outside the step model")
SHARDED = ("GRPO under sharded FSDP1: generation runs inside the root's summon_full_params "
           "(trl/distributed.py); not measured, not modelled")


class Generation(NamedTuple):
    """What GRPO's generation and reference need beyond the step's rows (b completions of sequence_length tokens:
    prompt + completion)."""

    completion_length: int = MAX_COMPLETION_LENGTH  # max_completion_length: new tokens per completion
    steps_per_generation: int = 1  # generation batch = micro-batch × this (TRL: gradient_accumulation_steps)
    reference: bool = False  # beta != 0: the reference's log-probs are computed before the policy's forward
    use_vllm: bool = False
    moment: str | None = None  # report this forward moment (GrpoHead.all_moments' names) instead of the largest


def kv_elements(shape: ModelShape, tokens: int) -> int:
    """Elements of a DynamicCache holding `tokens` tokens: every layer's keys and values
    (transformers/cache_utils.py; a sliding layer's keeps a view of the whole states)."""
    return 2 * shape.layers * shape.kv_heads * shape.head_dim * tokens


def generation_moments(shape: ModelShape, generation: Generation, sequence_length: int, micro_batch: int,
                       c: int) -> dict[str, list[Part]]:
    """The generation's moments beside the persistent state: (name → parts)."""
    rows = micro_batch * generation.steps_per_generation
    prompt = sequence_length - generation.completion_length
    h, v = shape.hidden, shape.vocab
    last = sequence_length - 1  # the cache when the last token is sampled (that token is never fed)
    tokens = rows * prompt
    ids = Part(P.TOKEN_IDS_AND_MASK, 2 * I64 * rows * sequence_length)
    states = 4 if shape.layers > 1 else 3
    prefill = [Part(P.KV_CACHE_GENERATION, c * kv_elements(shape, tokens)),
               Part(P.PREFILL_LAYER_TRANSIENTS, 3 * c * tokens * mlp_width(shape) + states * c * tokens * h
                    + 2 * c * tokens * shape.head_dim),
               ids]
    update = [Part(P.KV_CACHE_GENERATION, c * kv_elements(shape, rows * last)),
              Part(P.CACHE_UPDATE_COPY, c * rows * shape.kv_heads * shape.head_dim * (last - 1)),
              ids]
    sampling = [Part(P.KV_CACHE_GENERATION, c * kv_elements(shape, rows * last)),
                Part(P.NEXT_TOKEN_LOGITS_AND_PROBABILITIES, c * rows * v + 3 * F32 * rows * v), ids]
    return {"the prompt's prefill": prefill, "a layer's cache update": update, "the last token's sampling": sampling}


@dataclass(frozen=True)
class GrpoLogitsHead(PolicyLoss):
    """TRL 1.8's GRPO loss (what axolotl pins; grpo_trainer.py 1.8.0 `_get_per_token_logps_and_entropies`,
    `selective_log_softmax`, `entropy_from_logits`, `logits_to_keep`): docs/adapters.md."""

    completion_length: int = 0

    def scored(self, tokens: int) -> int:
        """Completion positions scored: C per row."""
        return tokens // self.sequence_length * self.completion_length

    def _kept(self, tokens: int, vocab: int, c: int) -> int:
        return 0 if c == F32 else c * self.scored(tokens) * vocab

    def saved(self, saved: int, logits_bytes: int, tokens: int, hidden: int, c: int, vocab: int = 0) -> int:
        """The activations with the per-row log-softmaxes in place of the loss's, and the per-token log-probs."""
        scored = self.scored(tokens)
        return saved - logits_bytes + self._kept(tokens, vocab, c) + F32 * scored

    def logits(self, tokens: int, vocab: int, c: int) -> int:
        """The logits the model makes: the last C + 1 positions of every row."""
        return c * (tokens // self.sequence_length) * (self.completion_length + 1) * vocab

    def moments(self, setup: Setup, base: list[Part], saved: int) -> tuple[str, list[Part], list[Part]]:
        c, h, v, w = setup.c, setup.hidden, setup.vocab, setup.w
        tokens = setup.tokens
        scored, logits = self.scored(tokens), self.logits(tokens, v, c)
        total = saved if self.adjusted else self.saved(saved, setup.acts.logits_bytes, tokens, h, c, v)
        copy = Part(P.COMPLETION_LOGITS_COPY, c * scored * v)
        forward = [*base, Part(P.ACTIVATIONS, total), Part(P.LOGITS, logits), copy,
                   Part(P.ENTROPY_CHUNKS, 3 * c * min(128, scored) * v)]
        rest = total - self._kept(tokens, v, c)
        at_loss = [*base, Part(P.ACTIVATIONS, rest), copy, Part(P.LOG_PROB_GRADIENTS, c * scored * v),
                   Part(P.LOGITS_GRADIENTS, 2 * logits)]
        head = [*base, Part(P.ACTIVATIONS, rest), Part(P.LOGITS_GRADIENTS, logits),
                Part(P.GRADIENTS, w * v * h if self.head_trainable else 0),
                Part(P.HIDDEN_STATE_GRADIENT, c * tokens * h)]
        return M.POLICY_HEAD, forward, max(at_loss, head, key=lambda parts: sum(part.bytes for part in parts))

    def reference(self, setup: Setup) -> list[Part]:
        """The reference's log-probs under `no_grad`: its logits and two rows' log-softmaxes."""
        c, v = setup.c, setup.vocab
        return [Part(P.REFERENCE_LOGITS, self.logits(setup.tokens, v, c)),
                Part(P.REFERENCE_LOG_SOFTMAX, 2 * c * self.completion_length * v)]


class GrpoHead(NamedTuple):
    """The step's `loss` for GRPO: the policy's fused head (its saved tensors and backward), with the generation
    and the reference's log-probs as moments of the forward phase."""

    head: FusedHead | GrpoLogitsHead  # FusedHead for trainer "grpo" (TRL 1.16), or GrpoLogitsHead (TRL 1.8)
    generation: Generation
    shape: ModelShape
    reference_gathered: int = 0
    #: (each measured and sourced in docs/adapters.md) ZeRO-3: the policy gathered whole for generation
    #: (`unwrap_model_for_generation`), in place of what the step holds gathered at the loss
    generation_gathered: int | None = None
    #: ZeRO-3: gathered at the policy's loss and backward after a generation (`add_hooks` invalidates the trace)
    loss_gathered: int | None = None
    #: FSDP2 (sharded, more than one rank): the generation's first unshard, (the root's bytes, a layer's)
    unshard: tuple[int, int] | None = None

    @property
    def prefetch(self) -> bool:
        """False when the micro-step's ZeRO-3 trace was invalidated by the generation (no first coalesced fetch)."""
        return self.loss_gathered is None

    def scored(self, tokens: int) -> int:
        return self.head.scored(tokens)

    def saved(self, *arguments: int) -> int:
        return self.head.saved(*arguments)

    def all_moments(self, setup: Setup, base: list[Part], saved: int) -> dict[str, list[Part]]:
        """Every moment of the forward phase: the generation's, the reference's (beta != 0) and the policy's head."""
        _, forward, _ = self.head.moments(setup, with_gathered(base, self.loss_gathered), saved)
        c, micro = setup.c, setup.micro_batch
        sequence = setup.tokens // micro
        outside = with_gathered(base, self.generation_gathered)
        found = {name: [*outside, *parts] for name, parts in
                 generation_moments(self.shape, self.generation, sequence, micro, c).items()}
        ids = Part(P.TOKEN_IDS_AND_MASK, 2 * I64 * micro * self.generation.steps_per_generation * sequence)
        if self.unshard is not None:
            root, layer = self.unshard
            found["the first layer's unshard"] = [*with_gathered(base, root + layer),
                                                  Part(P.ALL_GATHER_OUTPUTS, root + layer), ids]
        # the reference runs after the generation released the policy's gathered weights (ZeRO-3)
        released = with_gathered(base, 0 if self.generation_gathered is not None else None)
        if not self.generation.reference:
            pass
        elif isinstance(self.head, GrpoLogitsHead):
            found["the reference's log-probs"] = [*released, *self.head.reference(setup), ids]
        else:
            tokens = setup.tokens
            scored = self.head.scored(tokens)
            rows_tile, columns, buffer = self.head._tile(scored, setup.vocab, c)
            weight_copy = c * columns * setup.hidden if c != setup.w else 0
            reference = replace(self.head, reference_gathered=self.reference_gathered)._reference(
                setup, scored, tokens, rows_tile, columns, buffer + weight_copy)
            found["the reference's log-probs"] = [*released, *reference, ids]
        found["the policy's LM head"] = forward
        return found

    def later(self, accumulation: int) -> "GrpoHead | None":
        """The loss of a later micro-batch under gradient accumulation: the policy's head alone, its ZeRO-3 trace
        intact, when TRL generates once per steps_per_generation micro-steps from the first of an optimizer step (a
        multiple of gradient_accumulation_steps); None when a generation can land there."""
        if self.generation.steps_per_generation % accumulation:
            return None
        return self._replace(generation=self.generation._replace(moment="the policy's LM head"), loss_gathered=None)

    def moments(self, setup: Setup, base: list[Part], saved: int) -> tuple[str, list[Part], list[Part]]:
        _, _, loss = self.head.moments(setup, with_gathered(base, self.loss_gathered), saved)
        found = self.all_moments(setup, base, saved)
        if self.generation.moment is not None:
            if self.generation.moment not in found:
                raise StepInputError(f"GRPO's forward has no moment {self.generation.moment!r} here: "
                                     f"{', '.join(found)}")
            key = self.generation.moment
        else:
            key = max(found, key=lambda name: sum(part.bytes for part in found[name]))
        return SHOWN[key], found[key], loss


def check(generation: Generation, sequence_length: int, engine: str, stage: object, sharded: bool, ranks: int,
          fsdp_version: int = 2) -> None:
    """Raise StepInputError for a GRPO step the model does not follow."""
    if generation.use_vllm:
        raise StepInputError(VLLM, "use_vllm")
    if ranks > 1 and engine == "fsdp" and sharded and fsdp_version == 1:
        raise StepInputError(SHARDED, "trainer")
    if generation.completion_length < 1 or generation.steps_per_generation < 1:
        raise StepInputError("GRPO's max_completion_length and steps_per_generation must be at least 1")
    if sequence_length <= generation.completion_length:
        raise StepInputError(f"GRPO's sequence length is prompt + completion: {sequence_length} leaves no prompt beside "
                             f"max_completion_length {generation.completion_length}", "max_completion_length")


def generation_of(inputs: dict[str, Given]) -> Generation:
    """The Generation the inputs name (generation_inputs' keys); StepInputError naming a value it cannot use."""
    counts = []
    for key in ("max_completion_length", "steps_per_generation"):
        value = inputs[key].value
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise StepInputError(f"GRPO's {key} must be an integer ≥ 1, got {value!r}", key)
        counts.append(value)
    beta, vllm = inputs["beta"].value, inputs["use_vllm"].value
    if isinstance(beta, bool) or not isinstance(beta, (int, float)):
        raise StepInputError(f"GRPO's beta must be a number, got {beta!r}", "beta")
    if not isinstance(vllm, bool):
        raise StepInputError(f"GRPO's use_vllm must be true or false, got {vllm!r}", "use_vllm")
    return Generation(counts[0], counts[1], beta != 0, vllm)


#: how the forward phase's moment is shown when one of GrpoHead.all_moments holds it
SHOWN = {"the first layer's unshard": M.GRPO_UNSHARD, "the prompt's prefill": M.GRPO_PREFILL,
         "a layer's cache update": M.GRPO_CACHE_UPDATE, "the last token's sampling": M.GRPO_SAMPLING,
         "the reference's log-probs": M.REFERENCE_FORWARD, "the policy's LM head": M.POLICY_HEAD}

__all__ = ["Generation", "GrpoHead", "GrpoLogitsHead", "MAX_COMPLETION_LENGTH", "SHOWN", "check",
           "generation_moments", "generation_of", "kv_elements"]
