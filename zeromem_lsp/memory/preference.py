"""Preference trainers in the whole-step peak (pure): TRL's DPO and KTO steps, the reference model beside them.

What TRL 1.16 runs (trl/trainer/dpo_trainer.py, kto_trainer.py, trl/trainer/utils.py `add_fused_lm_head`,
trl/kernels/chunked_logprob.py `ChunkedLogProbFunction`; measured on CPU by benchmarks/preference/measure.py):
- DPO stacks chosen and rejected into one batch of 2·b rows (the collator), one policy forward with gradients and,
  unless the reference log-probs are precomputed, one reference forward of the same rows under `no_grad` (the
  reference model, or the PEFT policy with its adapters disabled). KTO runs b completions, plus b mismatched KL
  completions through the policy and the reference under `no_grad`.
- The loss never makes the b·s·V logits: the fused LM head saves a copy of the final hidden states (b·(s-1)·h,
  shifted), the labels (int64) and an fp32 log-sum-exp (and entropy) per token, and projects through the head in
  tiles of at most 4096 tokens × 32768 vocabulary entries into one buffer (`mm_buf`, always 32768 columns). With
  Triton (CUDA / XPU) each tile is folded in place and only tokens with a label are scored; the torch fallback
  (other devices, and what the CPU measurement runs) makes fp32 temporaries of the tile (3 at once in forward, 7 in
  backward, plus a bool tile for `is_top1` / the target mask). Backward accumulates an fp32 gradient of the hidden
  states and, for a trainable head, of the head weight, and casts them to the parameters' dtype at the end.
- ORPO, CPO and SimPO (trl/experimental/orpo, trl/experimental/cpo) are reference-free and keep the full logits of
  2·b rows, the chosen rows' NLL and a per-row log-softmax (memory/reference_free_loss.py). LLaMA-Factory's own
  trainers: memory/llamafactory_loss.py. GRPO (its generation and reference log-probs before the loss):
  memory/grpo.py.

The reference model's own bytes (memory/loss_and_reference.py `reference_model_bytes`) are a part of every moment;
its forward (tiles, last hidden states, at ZeRO-3 its gathered weights) is a moment of the forward phase.
"""

from __future__ import annotations

from typing import NamedTuple

from zeromem_lsp.configs.settings_values import TRAINERS  # the `trainer` setting; sft: ForCausalLMLoss
from zeromem_lsp.memory.activations import DTYPE_BYTES, F32, I64, ActivationInputError, estimate_activations
from zeromem_lsp.memory.accumulation import LATER
from zeromem_lsp.memory.grpo import (MOMENTS as GRPO_MOMENTS, Generation, GrpoHead, GrpoLogitsHead, check as check_grpo,
                                     with_gathered)
from zeromem_lsp.memory.llamafactory_loss import TRAINERS as LLAMAFACTORY_TRAINERS, LlamaFactoryHead
from zeromem_lsp.memory.reference_free_loss import TRAINERS as REFERENCE_FREE, ReferenceFreeHead
from zeromem_lsp.memory.buffers import DEEPSPEED_DEFAULTS
from zeromem_lsp.memory.step import (Buckets, Moment, Part, Phase, StepInputError, StepPeak, Tensors, estimate_step,
                                     parameter_tensors)

#: Trainers that keep a reference model (unless PEFT or precomputed log-probs); the others are reference-free.
WITH_REFERENCE = ("dpo", "kto")
MODELLED = ("sft", "dpo", "kto", "orpo", "simpo", "cpo", "grpo")
#: The DPO loss's implementation: TRL's fused LM head (TRL 1.16), TRL 1.8's logits (axolotl's pin) or
#: LLaMA-Factory's own trainers (memory/llamafactory_loss.py; its DPO with orpo / simpo, and its KTO).
LOSSES = ("fused", "logits", "llamafactory")
TOKEN_TILE, VOCABULARY_TILE = 4096, 32768  # chunked_logprob.TOKEN_CHUNK_SIZE, utils._CHUNKED_LOGPROB_CHUNK_SIZE
#: per-token fields each trainer's fused head computes (DPOTrainer / KTOTrainer `__init__`, no WPO weighting)
OUTPUTS = {"dpo": ("log_probs", "entropy", "mean_logits", "is_top1"), "kto": ("log_probs", "entropy", "mean_logits"),
           "grpo": ("log_probs", "entropy")}  # GRPOTrainer `__init__`



class FusedHead(NamedTuple):
    """TRL's fused LM head in the step (the `loss` of estimate_step): its saved tensors and transients."""

    trainer: str  # dpo | kto
    sequence_length: int
    reference_forward: bool  # a reference forward runs in the step (not with precomputed log-probs)
    reference_gathered: int = 0  # ZeRO-3: the reference's weights gathered during its forward
    head_trainable: bool = True
    triton: bool = True  # False: the torch fallback's fp32 tile temporaries (CPU)
    adjusted: bool = False  # the `saved` it is given already holds the fused head's tensors (a frozen base's)
    loss_gathered: int | None = None  # KTO at ZeRO-3: the policy's weights gathered at its loss (`no_prefetch`)

    @property
    def prefetch(self) -> bool:
        return self.loss_gathered is None

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

    def scored(self, tokens: int) -> int:
        """Positions the head scores: every shifted position of every row (Triton scores only those with a
        label, at most this)."""
        return tokens - tokens // self.sequence_length

    def later(self, accumulation: int) -> None:
        return None

    def moments(self, setup: Setup, base: list[Part], saved: int) -> tuple[list[Part], list[Part]]:
        """(forward's peak, the loss's backward): the larger of the policy's head and the reference's forward;
        the head's backward in its tile loop or at its end (fp32 gradients cast to the parameters' dtype)."""
        c, h, v, w = setup.c, setup.hidden, setup.vocab, setup.w  # type: ignore[attr-defined]
        tokens = setup.tokens  # type: ignore[attr-defined]
        scored = self.scored(tokens)
        rows, columns, buffer = self._tile(scored, v, c)
        released = with_gathered(base, 0 if self.loss_gathered is not None else None)  # the policy's head, after use
        base = with_gathered(base, self.loss_gathered)
        kept = Part("activations", saved if self.adjusted else self.saved(saved, setup.acts.logits_bytes,  # type: ignore[attr-defined]
                                                                          tokens, h, c))
        top1 = "is_top1" in OUTPUTS[self.trainer]
        weight_copy = c * columns * h if c != w else 0  # the head's tile cast to the compute dtype
        fallback = 0 if self.triton else (max(3 * F32 + top1, 2 * F32 + 2 * top1)) * rows * columns
        head = [*base, kept, Part("last hidden states", c * tokens * h), Part("LM head tile", buffer + weight_copy),
                Part("fp32 tile temporaries", fallback)]
        forward = head
        if self.reference_forward:
            reference = self._reference(setup, scored, tokens, rows, columns, buffer + weight_copy)
            at_reference = [*released, kept, *reference]
            if sum(part.bytes for part in at_reference) > sum(part.bytes for part in head):
                forward = at_reference
        grads = F32 * scored * h + (F32 * v * h if self.head_trainable else 0)
        in_loop = [*base, kept, Part("LM head gradients (fp32)", grads), Part("LM head tile", buffer + weight_copy),
                   Part("fp32 tile temporaries", 0 if self.triton else (7 * F32 + 1) * rows * columns)]
        end = [*base, kept, Part("LM head gradients (fp32)", grads), Part("LM head tile", buffer),
               Part("LM head gradients", c * scored * h + (w * v * h if self.head_trainable else 0))]
        loss = max(in_loop, end, key=lambda parts: sum(part.bytes for part in parts))
        return forward, loss

    def _reference(self, setup: Setup, scored: int, tokens: int, rows: int, columns: int, tile: int) -> list[Part]:
        """The reference forward's transients: its gathered weights (ZeRO-3), last hidden states, the shifted copy,
        its tile (log_probs only: three fp32 temporaries in the fallback)."""
        c, h = setup.c, setup.hidden  # type: ignore[attr-defined]
        fallback = 0 if self.triton else 3 * F32 * rows * columns
        return [Part("reference gathered parameters", self.reference_gathered),
                Part("reference forward", c * tokens * h + c * scored * h + I64 * scored + 2 * F32 * scored),
                Part("reference LM head tile", tile), Part("fp32 tile temporaries", fallback)]


class LogitsHead(NamedTuple):
    """TRL 1.8's DPO loss (what axolotl pins; trl/trainer/dpo_trainer.py 1.8.0 `_compute_loss`): the model's own
    forward makes the logits (b·s·V in the compute dtype, kept until the loss returns, the reference's beside them);
    `selective_log_softmax` (trl/trainer/utils.py) runs a log-softmax per row, each kept for backward (an fp32
    model: `logsumexp` keeps the logits themselves; derived, not measured); the entropy metric
    (`entropy_from_logits` on the shifted logits) copies them contiguous and makes three 128-row chunks. Backward:
    the rows' gradients stacked, then the slice's gradient (b·s·V), then the head's weight gradient beside it.
    TRL 1.8's KTO (kto_trainer.py 1.8.0 `_compute_loss`) runs b completions the same way; its KL rows' forwards
    (`_compute_kl_logps`, under `no_grad`) end before the moment. Beside the DPO's tensors there: the chosen and
    rejected rows' logits `index_select`ed for the metrics (a b·s·V copy) and, as it passes no `use_cache=False`,
    with a model config's `use_cache` (not under axolotl) the reference outputs' KV cache (`cache`). The policy's
    cache holds the K/V its sdpa keeps for backward (grouped-query sdpa without a mask), none under checkpointing
    (the layers drop it); with eager attention on a grouped-query model, K/V beside the repeated ones attention
    keeps (`policy_cache`)."""

    trainer: str
    sequence_length: int
    reference_forward: bool
    reference_gathered: int = 0
    head_trainable: bool = True
    triton: bool = True  # (no effect: both heads take the same fields)
    adjusted: bool = False
    cache: int = 0  # KTO: elements of the reference outputs' KV cache (per element, the compute dtype's bytes)
    policy_cache: int = 0  # KTO: elements of the policy outputs' KV cache beyond what its attention keeps
    loss_gathered: int | None = None  # KTO at ZeRO-3: the policy's weights gathered at its loss (`no_prefetch`)

    @property
    def prefetch(self) -> bool:
        return self.loss_gathered is None

    def scored(self, tokens: int) -> int:
        return tokens - tokens // self.sequence_length

    def _kept(self, tokens: int, vocab: int, c: int) -> int:
        """What the log-probs keep: each row's log-softmax (16-bit), or the logits for logsumexp (fp32)."""
        return c * tokens * vocab if c == F32 else c * self.scored(tokens) * vocab

    def saved(self, saved: int, logits_bytes: int, tokens: int, hidden: int, c: int, vocab: int = 0) -> int:
        """The activations with the log-probs' kept tensors, labels and per-token log-probs for the loss's."""
        scored = self.scored(tokens)
        return saved - logits_bytes + self._kept(tokens, vocab, c) + I64 * scored + F32 * scored

    def later(self, accumulation: int) -> None:
        return None

    def moments(self, setup: Setup, base: list[Part], saved: int) -> tuple[list[Part], list[Part]]:
        """(the entropy metric at the end of the loss's forward, the loss's backward at its largest)."""
        c, h, v, w = setup.c, setup.hidden, setup.vocab, setup.w  # type: ignore[attr-defined]
        tokens = setup.tokens  # type: ignore[attr-defined]
        scored, logits = self.scored(tokens), c * tokens * v
        base = with_gathered(base, self.loss_gathered)
        total = saved if self.adjusted else self.saved(saved, setup.acts.logits_bytes, tokens, h, c, v)  # type: ignore[attr-defined]
        forward = [*base, Part("activations", total), Part("logits", logits),
                   Part("reference gathered parameters", self.reference_gathered if self.reference_forward else 0),
                   Part("reference logits", logits if self.reference_forward else 0),
                   Part("entropy metric", c * scored * v + 3 * c * min(128, scored) * v)]
        if self.trainer == "kto":
            forward += [Part("logits selected for the metrics", logits),
                        Part("reference KV cache", c * self.cache if self.reference_forward else 0),
                        Part("policy KV cache", c * self.policy_cache)]
        rest = total - self._kept(tokens, v, c)  # the row log-softmaxes are freed once their backward ran
        stacked = [*base, Part("activations", rest), Part("log-prob gradients", c * scored * v),
                   Part("logits gradient", logits)]
        head = [*base, Part("activations", rest), Part("logits gradient", logits),
                Part("gradients", w * v * h if self.head_trainable else 0), Part("hidden-state gradient", c * tokens * h)]
        return forward, max(stacked, head, key=lambda parts: sum(part.bytes for part in parts))


class Preference(NamedTuple):
    """A preference trainer's step: the trainer, the reference on this rank, and how its forward runs."""

    trainer: str
    reference_bytes: int = 0  # the frozen reference model on this rank (loss_and_reference.reference_model_bytes)
    reference_forward: bool = True  # False with precomputed reference log-probs
    reference_gathered: int = 0
    triton: bool = True
    loss: str = "fused"  # "fused": TRL's fused LM head (TRL 1.16); "logits": TRL 1.8's (axolotl's pin)
    #: the model config's use_cache, which TRL 1.8's KTO leaves on: axolotl's `check_model_config`
    #: (src/axolotl/loaders/utils.py) sets it False for the policy and the reference it loads
    kv_cache: bool = False
    generation: Generation = Generation()  # GRPO only (memory/grpo.py)


def reference_gathered(tensors: Tensors, width: int, engine: str, stage: object, ranks: int, loss: str = "fused",
                       fsdp_version: int = 1) -> int:
    """The reference's weights gathered at its forward's peak: under ZeRO-3 (more than one rank) its LM head,
    gathered for the fused head by `maybe_gather_lm_head_ctx` (trl/trainer/utils.py); as measured at two ranks,
    its layers are released by then. TRL 1.8's and LLaMA-Factory's losses score the reference's logits after its forward has
    returned, each module released by DeepSpeed's hooks (measured at two ranks: none held). Sharded FSDP (derived, not measured): the root unit (embeddings, final norm,
    head) gathered for the whole forward and one layer, as the policy's forward (`step._fsdp`). FSDP2: `prepare_fsdp`
    (trl/models/utils.py) calls `fully_shard` on the root alone, one unit: the whole reference unsharded and the
    all-gather output it was copied from, both alive through its forward (measured on gloo, GRPO at two ranks)."""
    if ranks > 1 and engine == "deepspeed" and stage == 3:
        return width * (tensors.head or tensors.embedding) if loss == "fused" else 0
    if ranks > 1 and engine == "fsdp" and stage in ("SHARD_GRAD_OP", "FULL_SHARD") and fsdp_version == 2:
        return 2 * width * tensors.total
    if ranks > 1 and engine == "fsdp" and stage in ("SHARD_GRAD_OP", "FULL_SHARD"):
        return width * (tensors.root + tensors.layer_total)
    return 0


def kv_cache(shape: object, tokens: int) -> int:
    """Elements of a DynamicCache filled by one forward of `tokens` tokens: every layer's keys and values
    (transformers/cache_utils.py; a sliding layer's keeps a view of the whole states)."""
    return 2 * shape.layers * shape.kv_heads * shape.head_dim * tokens  # type: ignore[attr-defined]


def rows(trainer: str, micro_batch: int) -> int:
    """Sequences through the policy per micro-batch: DPO-style trainers stack chosen and rejected."""
    return 2 * micro_batch if trainer in ("dpo", "orpo", "simpo", "cpo") else micro_batch


def estimate_preference_step(preference: Preference, **arguments: object) -> StepPeak:
    """estimate_step for a preference trainer: 2·b rows for DPO, TRL's fused head in place of ForCausalLMLoss,
    the reference model as a part of every moment. Raises StepInputError for a trainer not modelled."""
    trainer = preference.trainer
    if trainer not in TRAINERS:
        raise StepInputError(f"trainer must be one of {', '.join(TRAINERS)}, got {trainer!r}")
    if trainer == "sft":
        return estimate_step(**arguments)  # type: ignore[arg-type]
    frozen = arguments.get("frozen")
    sequence = arguments["sequence_length"]
    micro = rows(trainer, arguments["micro_batch"])  # type: ignore[arg-type]
    if preference.loss not in LOSSES:
        raise StepInputError(f"preference loss must be one of {', '.join(LOSSES)}, got {preference.loss!r}")
    if trainer == "grpo":
        check_grpo(preference.generation, sequence, str(arguments.get("engine", "torch")), arguments.get("stage"),  # type: ignore[arg-type]
                   bool(arguments.get("fsdp_sharded", True)), int(arguments.get("ranks", 1)),  # type: ignore[call-overload]
                   int(arguments.get("fsdp_version", 2)))  # type: ignore[call-overload]
    if preference.loss == "llamafactory" and trainer not in LLAMAFACTORY_TRAINERS:
        raise StepInputError(f"LLaMA-Factory has no {trainer.upper()} trainer (stage: dpo with pref_loss sigmoid, orpo "
                             "or simpo; stage: kto)", "trainer")
    kind = {"fused": FusedHead, "logits": LogitsHead, "llamafactory": LlamaFactoryHead}[preference.loss]
    triton = preference.triton
    if preference.loss in ("fused", "logits") and trainer in REFERENCE_FREE:  # TRL's ORPOTrainer / CPOTrainer
        kind, triton = ReferenceFreeHead, triton and preference.loss == "fused"  # TRL 1.8: no Triton kernel
    if trainer == "grpo" and preference.loss == "logits":  # TRL 1.8's GRPOTrainer (axolotl's pin)
        head = GrpoLogitsHead(sequence, preference.generation.completion_length, frozen is None)
    else:  # GRPO's reference runs before the policy's forward (its own moment, memory/grpo.py), never beside it
        head = kind(trainer, sequence, preference.reference_forward and trainer != "grpo",  # type: ignore[arg-type]
                    preference.reference_gathered, head_trainable=frozen is None, triton=triton)
    if kind is LogitsHead and trainer == "kto" and preference.kv_cache:
        shape, cache = arguments["shape"], kv_cache(arguments["shape"], micro * sequence)  # type: ignore[arg-type]
        repeated = arguments.get("attention") == "eager" and shape.kv_heads < shape.heads  # type: ignore[attr-defined]
        head = head._replace(cache=cache, policy_cache=cache if repeated and not arguments.get("checkpointing") else 0)
    if trainer == "kto" and kind in (FusedHead, LogitsHead):
        head = head._replace(loss_gathered=no_prefetch(arguments))
    if frozen is not None:  # its activations are read after the loss too: the fused head's, not the log-softmax
        head = head._replace(adjusted=True)
        arguments = {**arguments, "frozen": frozen._replace(activations=_frozen_saved(head, frozen, arguments, micro))}  # type: ignore[attr-defined]
    if trainer == "grpo":
        whole, at_loss = _generation_gathered(arguments, preference.generation.steps_per_generation)
        head = GrpoHead(head, preference.generation, arguments["shape"], preference.reference_gathered, whole, at_loss,
                        _fsdp2_unshard(arguments))
    # TRL computes its own loss from the head (a model-level fused or chunked loss never runs under it)
    arguments = {**arguments, "micro_batch": micro, "loss": head, "loss_kernel": "hf"}
    step = estimate_step(**arguments)  # type: ignore[arg-type]
    phases = {name: _with_reference(phase, preference.reference_bytes) for name, phase in step.phases.items()}
    return step._replace(phases=phases, peak=phases[step.peak_phase].peak)


def head_line(trainer: str, loss: str, saved: int, logits_bytes: int, sequence_length: int, tokens: int, hidden: int,
              c: int, vocab: int, completion_length: int = 0) -> str:
    """How the phases' "activations" follow from the activations shown: the loss's tensors (and, for the fused
    head, the LM head's input) swapped for what the preference loss keeps."""
    stacked = "chosen and rejected stacked, " if rows(trainer, 1) == 2 else ""
    tool = {"fused": "TRL", "logits": "TRL 1.8", "llamafactory": "LLaMA-Factory"}[loss]
    lead = f"{trainer} ({tool}): {stacked}{tokens // sequence_length} rows; "
    if loss in ("fused", "logits") and trainer in REFERENCE_FREE:  # TRL 1.16 with Triton, or TRL 1.8
        head = ReferenceFreeHead(trainer, sequence_length, triton=loss == "fused")
        return lead + head.line(saved, logits_bytes, tokens, hidden, c, vocab)
    if loss == "llamafactory":
        return lead + LlamaFactoryHead(trainer, sequence_length, True).line(saved, logits_bytes, tokens, hidden, c,
                                                                             vocab)
    if loss == "logits" and trainer == "grpo":
        return lead + GrpoLogitsHead(sequence_length, completion_length).line(saved, logits_bytes, tokens, hidden, c,
                                                                                vocab)
    if loss == "logits":
        head = LogitsHead(trainer, sequence_length, True)
        kept = head.saved(saved, logits_bytes, tokens, hidden, c, vocab) - saved + logits_bytes
        return (f"{lead}its log-probs keep {kept:,} B (a log-softmax per row, labels, per-token log-probs) in place "
                f"of the loss {logits_bytes:,}: activations {saved:,} - {logits_bytes:,} + {kept:,} = "
                f"{saved - logits_bytes + kept:,} B")
    head_input = c * tokens * hidden
    kept = FusedHead(trainer, sequence_length, True).saved(saved, logits_bytes, tokens, hidden, c) - saved \
        + logits_bytes + head_input
    return (f"{lead}its fused LM head keeps {kept:,} B (a shifted copy of the last hidden states, labels, log-sum-exp "
            f"per token) in place of the loss {logits_bytes:,} and the head's input {head_input:,}: activations "
            f"{saved:,} - {logits_bytes:,} - {head_input:,} + {kept:,} = {saved - logits_bytes - head_input + kept:,} B")


def _generation_gathered(arguments: dict, steps_per_generation: int) -> tuple[int | None, int | None]:
    """ZeRO-3 at more than one rank: (the policy's parameters gathered whole for GRPO's generation — all but those
    kept whole on every rank, at most stage3_param_persistence_threshold elements, memory/step.py `_deepspeed` —, the
    LM head alone gathered at the loss when every micro-step follows a generation); (None, None) otherwise. A frozen
    base's bytes are pro rata of its whole P (a quantized base gathers its packed bytes), as step.py's."""
    buckets = arguments.get("buckets", Buckets())
    if arguments.get("engine") != "deepspeed" or arguments.get("stage") != 3 or int(arguments.get("ranks", 1)) < 2:  # type: ignore[call-overload]
        return None, None
    threshold = (DEEPSPEED_DEFAULTS["stage3_param_persistence_threshold"] if buckets.persistence_threshold is None
                 else buckets.persistence_threshold)  # type: ignore[union-attr]
    tensors = parameter_tensors(arguments["shape"])  # type: ignore[arg-type]
    whole = sum(numel for numel in tensors.all() if numel > threshold)
    frozen = arguments.get("frozen")
    width = DTYPE_BYTES[str(arguments.get("param_dtype", "bf16"))]

    def gathered(elements: int) -> int:
        if frozen is None or not frozen.all_parameters:  # type: ignore[attr-defined]
            return width * elements
        return -(-elements * frozen.all_bytes // frozen.all_parameters)  # type: ignore[attr-defined]
    head = gathered(tensors.head or tensors.embedding) if steps_per_generation == 1 else None
    return gathered(whole), head


def no_prefetch(arguments: dict) -> int | None:
    """KTO under ZeRO-3 at more than one rank: the policy's weights gathered at its loss and backward — its LM head
    alone (None otherwise). `_compute_kl_logps` runs the policy's forward before the one with gradients, so the
    parameter coordinator's trace (deepspeed/runtime/zero/partitioned_param_coordinator.py, `record_module`,
    `_invalidate_trace`) no longer matches the modules' order: no prefetch, each module released after its use, as
    GRPO's micro-step after a generation. So TRL 1.16's reference forward runs with none of the policy's gathered
    (measured at two ranks, TRL 1.16 and 1.8)."""
    return _generation_gathered(arguments, 1)[1]


def _fsdp2_unshard(arguments: dict) -> tuple[int, int] | None:
    """FSDP2 sharded at more than one rank: (the root's, a decoder layer's) bytes as gathered (the compute dtype
    under mixed precision; a frozen base's pro rata of its P), as step.py `_fsdp` / `_gathered_frozen`."""
    if arguments.get("engine") != "fsdp" or not arguments.get("fsdp_sharded", True) or \
            int(arguments.get("ranks", 1)) < 2 or int(arguments.get("fsdp_version", 2)) != 2:  # type: ignore[call-overload]
        return None
    tensors = parameter_tensors(arguments["shape"])  # type: ignore[arg-type]
    frozen = arguments.get("frozen")
    if arguments.get("fsdp_mixed"):
        return DTYPE_BYTES["bf16"] * tensors.root, DTYPE_BYTES["bf16"] * tensors.layer_total
    if frozen is not None and frozen.all_parameters:  # type: ignore[attr-defined]
        def share(elements: int) -> int:
            return -(-elements * frozen.all_bytes // frozen.all_parameters)  # type: ignore[attr-defined]
        return share(tensors.root), share(tensors.layer_total)
    width = DTYPE_BYTES[str(arguments.get("param_dtype", "bf16"))]
    return width * tensors.root, width * tensors.layer_total


def _frozen_saved(head: FusedHead | LogitsHead | LlamaFactoryHead | ReferenceFreeHead, frozen: object, arguments: dict, micro: int) -> int:
    """A frozen base's saved activations (for `micro` rows) with the fused head's tensors for the loss's."""
    try:
        acts = estimate_activations(arguments["shape"], arguments["sequence_length"], micro, frozen.compute_dtype,  # type: ignore[attr-defined]
                                    bool(arguments.get("checkpointing")), str(arguments.get("attention", "sdpa")))
    except ActivationInputError as error:
        raise StepInputError(str(error)) from None
    c = DTYPE_BYTES[frozen.compute_dtype]  # type: ignore[attr-defined]
    tokens = micro * arguments["sequence_length"]
    return head.saved(frozen.activations, acts.logits_bytes, tokens, arguments["shape"].hidden, c,  # type: ignore[attr-defined]
                      arguments["shape"].vocab)  # type: ignore[attr-defined]


def _with_reference(phase: Phase, reference: int) -> Phase:
    """The phase with the reference model's bytes beside everything (the same in every moment, so the moment
    holding the peak does not change); each moment named for the reference forward when that holds it."""
    moments = tuple(_moment_with_reference(phase.name, moment, reference) for moment in phase.moments)
    held = _moment_with_reference(phase.name, Moment(phase.moment, phase.peak, phase.parts), reference)
    return Phase(phase.name, held.total, held.name, held.parts, moments)


def _moment_with_reference(phase: str, found: Moment, reference: int) -> Moment:
    """One moment of `phase` with the reference model beside it, named for what holds it."""
    parts = found.parts + ((Part("reference model", reference),) if reference else ())
    moment = found.name
    later = moment[moment.index(LATER):] if LATER in moment else ""  # kept on the renamed moment
    grpo = [GRPO_MOMENTS[part.name] for part in parts if part.name in GRPO_MOMENTS]
    if grpo:
        moment = grpo[0]
    elif any(part.name in ("reference forward", "reference log-softmax") for part in parts):
        moment = "the reference model's forward"
    elif any(part.name == "entropy metric" for part in parts):
        moment = "the loss's entropy metric (both models' logits alive)"
    elif moment.startswith("the loss") and phase == "forward":
        moment = "the policy's LM head"
    if later and not moment.endswith(later):
        moment += later
    ordered = tuple(sorted(parts, key=lambda part: -part.bytes))
    return Moment(moment, found.total + reference, ordered)


__all__ = ["FusedHead", "LOSSES", "LogitsHead", "MODELLED", "head_line", "Preference", "TRAINERS", "WITH_REFERENCE", "estimate_preference_step", "reference_gathered",
           "rows"]
