"""The peak of one whole training step, phase by phase, per rank (pure, exact ints, no torch).

Beside the model-state contract (memory/model_state.py), never instead of it. A step of steady-state training
(step 2 and later: the optimizer state exists, gradients were freed by `zero_grad(set_to_none=True)`) has
three phases; each phase's peak is the largest live total over the moments that can hold it:

- forward: persistent state + everything autograd saved + the loss's transients (the lm_head output and its
  fp32 copy, alive while the fp32 log-softmax is made);
- backward: at the loss (two fp32 T×V gradients beside the saved log-softmax, no parameter gradient yet), at
  the top and bottom decoder layer (gradients appear as activations are freed), at the end (all gradients,
  tied embeddings' accumulation);
- optimizer: gradients + the optimizer's scratch (torch AdamW foreach ≈ a copy of every tensor it updates,
  for-loop ≈ twice the largest, fused none; other optimizers: memory/optimizer_step.py) + what the engine adds
  (DeepSpeed's fp32 gradient partition).

`loss_kernel` (Liger's fused linear cross-entropy, cut-cross-entropy, axolotl's chunked loss) replaces the loss's
T×V terms by what that kernel keeps and makes (`_loss_moments`, `_head_moment`).

Engines: `torch` (one process or DDP), `deepspeed` (ZeRO 0-3), `fsdp` (FSDP2 / FSDP1 sharded units).
Every term, with the torch / DeepSpeed / Transformers function it comes from: docs/memory-model.md,
"The whole training step". Activations come from zeromem_lsp.memory.activations (exact against the model code).
"""

from __future__ import annotations

import functools

from typing import NamedTuple

from zeromem_lsp.memory.accumulation import Engine, held, later_moments
from zeromem_lsp.memory.activations import DTYPE_BYTES, F32, ActivationInputError, Activations, estimate_activations
from zeromem_lsp.memory.buffers import DEEPSPEED_DEFAULTS
from zeromem_lsp.memory.loss_and_reference import LOSS_KERNELS, LossInputError, loss_moments
from zeromem_lsp.memory.optimizer_step import (ADAGRAD_FIRST_SUMS, OptimizerNotModelled, Stepped, Tensors,
                                               optimizer_step, parameter_shapes, parameter_tensors)
from zeromem_lsp.memory.precision import OPTIMIZERS as ALL_OPTIMIZERS
from zeromem_lsp.configs.model_config import ModelShape

ENGINES = ("torch", "deepspeed", "fsdp")
OPTIMIZER_IMPLS = ("foreach", "for-loop", "fused")
#: Adam and AdamW keep the same tensors (exp_avg, exp_avg_sq); Adam's weight decay, when set, adds one more
#: gradient-sized tensor in the foreach path (not modelled: the default is 0). The other optimizers' steps:
#: memory/optimizer_step.py (weight decay 0, HF Trainer's default)
OPTIMIZERS = ("adamw", "adam")
TORCH_OPTIMIZERS = (*OPTIMIZERS, "sgd", "sgd_momentum", "adagrad")  # torch.optim's, with their scratch
PHASES = ("forward", "backward", "optimizer")
#: DeepSpeed defaults beyond buffers.DEEPSPEED_DEFAULTS (deepspeed/runtime/zero/config.py)
MAX_REUSE_DISTANCE = 1_000_000_000


class StepInputError(ValueError):
    """An input the step model cannot use (named, with the allowed values); `input`: the peak input to blame."""

    def __init__(self, message: str, input: str | None = None) -> None:
        super().__init__(message)
        self.input = input


class Part(NamedTuple):
    name: str
    bytes: int


class Moment(NamedTuple):
    """One moment of a phase: what is alive together then (`total` bytes), its parts merged by name."""

    name: str  # "the loss's backward", "the top layer's backward", ...
    total: int
    parts: tuple[Part, ...]  # summing to total, largest first, zeros dropped


class Phase(NamedTuple):
    name: str  # forward, backward, optimizer
    peak: int
    moment: str  # where in the phase the peak sits ("the loss's backward", ...)
    parts: tuple[Part, ...]  # summing to peak, largest first
    moments: tuple[Moment, ...] = ()  # every moment of the phase in the step's order; the largest is `moment`

    def largest(self, count: int = 3) -> tuple[Part, ...]:
        return self.parts[:count]


#: phase → moment → its parts (what the engine functions return; `_phases` keeps each phase's largest moment)
Moments = dict[str, dict[str, list[Part]]]


class StepPeak(NamedTuple):
    phases: dict[str, Phase]
    peak_phase: str
    peak: int
    activations: Activations
    parameters: int  # model parameters (all ranks together)


class Buckets(NamedTuple):
    """DeepSpeed zero_optimization sizes as DeepSpeed receives them (elements); None: DeepSpeed's default."""

    reduce_bucket_size: int | None = None
    overlap_comm: bool | None = None  # default: True at stage 3 only
    contiguous_gradients: bool = True
    prefetch_bucket_size: int | None = None
    max_live_parameters: int | None = None
    max_reuse_distance: int | None = None
    persistence_threshold: int | None = None
    grad_accum_dtype: str | None = None  # data_types.grad_accum_dtype, normalized (fp32, bf16, fp16)


class FrozenBase(NamedTuple):
    """A frozen base with trainable adapters (LoRA / QLoRA), per rank: persistent bytes as the plan places the
    adapter's P, G, O at the stage (memory/adapter_plan.py), and what the step needs beside them. With it the
    moments are the full step's (`_frozen`), over trainable tensors only. Measured whole with PEFT (torch,
    DeepSpeed ZeRO-0/1/2/3, FSDP2 with and without resharding or sharding and under mixed precision, FSDP1
    FULL_SHARD, SHARD_GRAD_OP, NO_SHARD and under mixed precision: tests/data/step/measured_lora.json); derived
    under offload."""

    parameters: int  # frozen base + adapters on this rank (P as placed)
    gradients: int  # the adapters' gradients on this rank (G as placed): only from the end of backward
    optimizer_states: int  # optimizer state (and DeepSpeed's fp32 master) on this rank (O as placed)
    trainable: int  # trainable elements this rank's optimizer steps on
    step_bytes: int  # bytes per element the optimizer steps in (DeepSpeed: its fp32 partition)
    activations: int  # what autograd saves at the end of forward (memory/lora_activations.py)
    recompute: int  # with checkpointing: the layer re-run in backward
    compute_dtype: str  # the forward's dtype (fp32 after prepare_model_for_kbit_training)
    all_bytes: int  # the whole P (frozen and trainable, before sharding): a gathered weight's bytes are pro rata
    all_parameters: int
    fp32_gradients: bool = False  # DeepSpeed: an fp32 gradient partition made for the step
    stepped: int = 0  # bytes of the tensors the optimizer steps on here, each in its dtype (0: step_bytes × trainable)
    largest: int = 0  # bytes of the largest of them (0: all of them, one flat partition)
    head_gradient: int = 0  # a trained head's (modules_to_save) gradient on this rank: from the head's backward
    outside: int = 0  # of `activations`, what is saved outside the decoder layers (embedding, final norm, loss)
    accumulated: int | None = None  # the adapters' gradients a later micro-batch holds (None: `gradients`)


def _choice(name: str, value: object, allowed: tuple) -> None:
    if value not in allowed:
        raise StepInputError(f"{name} must be one of {', '.join(map(str, allowed))}, got {value!r}")


def _count(name: str, value: object, least: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise StepInputError(f"{name} must be an integer ≥ {least}, got {value!r}")
    return value


def moment_of(name: str, parts: list[Part] | tuple[Part, ...]) -> Moment:
    """A moment as shown: its parts merged by name, largest first, zeros dropped, and their total."""
    merged: dict[str, int] = {}
    for part in parts:
        merged[part.name] = merged.get(part.name, 0) + part.bytes
    kept = tuple(sorted((Part(key, value) for key, value in merged.items() if value), key=lambda p: -p.bytes))
    return Moment(name, sum(part.bytes for part in kept), kept)


def _phase(name: str, moments: dict[str, list[Part]]) -> Phase:
    """The moment with the largest live total (the first of equal ones) holds the phase's peak; every moment is
    kept, in the step's order, for a picture of the whole step (report/)."""
    every = tuple(moment_of(key, parts) for key, parts in moments.items())
    held = max(every, key=lambda moment: moment.total)
    return Phase(name, held.total, held.name, held.parts, every)


def _ceil(numerator: int, ranks: int) -> int:
    return -(-numerator // ranks)


class _Setup(NamedTuple):
    """The resolved inputs every engine's moments read (bytes per element, sizes in elements)."""

    tensors: Tensors
    acts: Activations
    tokens: int
    vocab: int
    hidden: int
    w: int  # bytes of a stored parameter (and of its gradient)
    c: int  # bytes of the compute dtype: activations, the lm_head output
    ranks: int
    impl: str
    checkpointing: bool
    loss_kernel: str = "hf"  # loss_and_reference.LOSS_KERNELS: what replaces Transformers' T×V loss terms
    head_trainable: bool = True  # False on a frozen base: no head gradient
    micro_batch: int = 1
    loss: object = None  # a loss that replaces ForCausalLMLoss's moments (memory/preference.FusedHead)
    optimizer: str = "adamw"  # precision.OPTIMIZERS: its states and scratch (memory/optimizer_step.py)


def _stepped(setup: _Setup, width: int, tensors: list[tuple[int, ...]], engine: str,
             largest: int | None = None) -> Stepped:
    """The optimizer's states and scratch over `tensors` (`largest`: the for-loop's largest, when not theirs)."""
    try:
        return optimizer_step(setup.optimizer, setup.impl, width, tensors, engine, largest)
    except OptimizerNotModelled as error:
        raise StepInputError(str(error)) from None


def _scratch(impl: str, element: int, every: int, largest: int) -> int:
    """torch AdamW's temporaries over `every` elements, `largest` the largest tensor (optimizer_step.py)."""
    return optimizer_step("adamw", impl, element, [(every,)], largest=largest).scratch


def _kernel(setup: _Setup):
    return loss_moments(setup.loss_kernel, setup.micro_batch, setup.tokens // setup.micro_batch, setup.hidden,
                        setup.vocab, setup.c, setup.w, setup.acts.logits_bytes, setup.head_trainable)


def _loss_moments(setup: _Setup, base: list[Part], saved: int | None = None) -> tuple[list[Part], list[Part]]:
    """(forward's peak, the loss's backward). ForCausalLMLoss (transformers/loss/loss_utils.py) makes
    `logits.float()` and cross_entropy's log-softmax from it while the lm_head output is alive; the backward
    of nll_loss and of log_softmax (`_log_softmax_backward_data`) make two fp32 T×V gradients while the
    saved log-softmax is still held. Another `loss_kernel` keeps, and briefly makes, what
    loss_and_reference.loss_moments lists instead."""
    t, v = setup.tokens, setup.vocab
    saved = setup.acts.total if saved is None else saved  # `saved`: what a frozen base keeps (LoRA activations)
    if setup.loss is not None:
        return setup.loss.moments(setup, base, saved)  # type: ignore[attr-defined]
    if setup.loss_kernel != "hf":
        found = _kernel(setup)
        kept = [Part("activations", saved - found.dropped), *(Part(*part) for part in found.kept)]
        return ([*base, *kept, *(Part(*part) for part in found.forward)],
                [*base, *kept, *(Part(*part) for part in found.backward)])
    forward = [*base, Part("activations", saved), Part("logits", setup.c * t * v),
               Part("fp32 logits copy", F32 * t * v if setup.c != F32 else 0)]
    loss = [*base, Part("activations", saved), Part("log-softmax gradients", 2 * F32 * t * v)]
    return forward, loss


def _head_moment(setup: _Setup, base: list[Part], saved: int | None = None) -> dict[str, list[Part]]:
    """The head's backward after a loss that leaves it to autograd (axolotl's chunked loss): the logits'
    gradient, the head's weight and input gradients, the loss's kept tensors freed. Transformers' loss keeps
    this below its loss's backward (the two fp32 T×V gradients); fused kernels make the head's gradients
    themselves."""
    if setup.loss_kernel == "hf" or _kernel(setup).head is None:
        return {}
    saved = setup.acts.total if saved is None else saved
    found = _kernel(setup)
    return {"the head's backward": [*base, Part("activations", saved - found.dropped),
                                    *(Part(*part) for part in found.head)]}


def _logits_gradient(setup: _Setup) -> int:
    """The T×V gradient the head's backward reads: none when a fused kernel made the head's gradients."""
    return 0 if setup.loss_kernel in ("liger_flce", "cut_cross_entropy") else setup.c * setup.tokens * setup.vocab


def _layer_moments(setup: _Setup, shape: ModelShape, base: list[Part], head_grads: int, layer_grads: int,
                   ) -> dict[str, list[Part]]:
    """The top and the bottom decoder layer's backward. Moving down one layer frees its saved tensors (with
    checkpointing: its saved input) and keeps its gradient, the same amount per layer, so an end holds the
    largest. Inside a layer: its saved tensors (recomputed with checkpointing) + `_layer_transient`."""
    acts, t = setup.acts, setup.tensors
    transient = Part("layer backward", _layer_transient(shape, t, setup.tokens, setup.c))
    outer = acts.embedding_bytes + acts.shared_bytes
    if setup.checkpointing:
        one_input = setup.c * setup.tokens * setup.hidden
        kept_top = acts.checkpoint_bytes
        kept_bottom = acts.checkpoint_bytes - (t.layers - 1) * one_input
        layer = [Part("recomputed layer", acts.per_layer_bytes)]
    else:
        kept_top = acts.layer_bytes
        kept_bottom = acts.per_layer_bytes
        layer = []
    top = [*base, Part("activations", outer + kept_top), *layer, Part("gradients", head_grads), transient]
    bottom = [*base, Part("activations", outer + kept_bottom), *layer,
              Part("gradients", head_grads + (t.layers - 1) * layer_grads), transient]
    return {"the top layer's backward": top, "the bottom layer's backward": bottom}


def _layer_transient(shape: ModelShape, tensors: Tensors, tokens: int, c: int, weight_gradient: bool = True) -> int:
    """A decoder layer's backward at its largest, the MLP's (autograd's MulBackward / MmBackward nodes): the
    incoming hidden-state gradient (c·T·h), down_proj's weight gradient, and two T×I gradients (of the
    product down_proj read and the first of the product's two input gradients)."""
    width = shape.intermediate
    if shape.experts and shape.sparse_layers:
        width = shape.expert_intermediate * shape.experts_per_token
    return c * tokens * shape.hidden + c * max(tensors.layer) * weight_gradient + 2 * c * tokens * width


def _tied_sum(tensors: Tensors, w: int) -> int:
    """A tied weight has one AccumulateGrad node fed by two edges: the engine's InputBuffer holds the head's
    gradient (counted with the gradients) until the embedding's arrives, then adds them out of place
    (torch/csrc/autograd/input_buffer.cpp, `InputBuffer::add`): the embedding's gradient and the sum beside it."""
    return 2 * w * tensors.embedding if not tensors.head else 0


def _phases(name_moments: Moments) -> dict[str, Phase]:
    return {name: _phase(name, moments) for name, moments in name_moments.items()}


def _torch(setup: _Setup, shape: ModelShape, autocast: bool, ddp_bucket_view: bool) -> Moments:
    """Plain torch or DDP: parameters, AdamW's exp_avg and exp_avg_sq in the parameters' dtype
    (`torch.zeros_like(p)` in `Adam._init_group`), gradients from backward until `zero_grad`."""
    t, w, n = setup.tensors, setup.w, setup.tensors.total
    stepped = _stepped(setup, w, parameter_shapes(shape), "torch")
    base = [Part("parameters", w * n), Part(stepped.state_name, stepped.states)]
    if setup.ranks > 1:  # torch/csrc/distributed/c10d/reducer.cpp: one flat bucket tensor per bucket
        base.append(Part("DDP buckets", w * n))
    if autocast:  # autocast's weight cache (a bf16 copy per matmul weight) and fp32 norm outputs, held to backward
        matmul = t.layers * (t.layer_total - t.layer_norms) + shape.vocab * shape.hidden
        # + one more bf16 T×I tensor per layer in the MLP (measured: 2·T·I·L at h256 and at 8B)
        saving = 1 if setup.checkpointing else t.layers  # layers whose activations are kept
        cast = [Part("bf16 weight copies", 2 * matmul),
                Part("activations", 2 * (2 * saving + 1) * setup.tokens * shape.hidden
                     + 2 * saving * setup.tokens * shape.intermediate)]
    else:
        cast = []
    grads = 0 if (setup.ranks > 1 and ddp_bucket_view) else w  # gradient_as_bucket_view: grads are the buckets
    forward, loss = _loss_moments(setup, base + cast)
    head = w * (t.head or t.embedding) * (grads > 0) + w * t.final_norm * (grads > 0)
    layers = _layer_moments(setup, shape, base + cast, head, grads * t.layer_total)
    tied = _tied_sum(t, w)
    end = [*base, Part("gradients", grads * n), Part("embedding gradient", setup.c * setup.tokens * setup.hidden
                                                      + tied)]
    step = [*base, Part("gradients", grads * n), Part("optimizer scratch", stepped.scratch)]
    return {"forward": {"the loss": forward},
            "backward": {"the loss's backward": loss, **_head_moment(setup, base + cast), **layers,
                         "the end of backward": end},
            "optimizer": {"the optimizer step": step}}


def _persistent_numel(tensors: Tensors, threshold: int) -> int:
    """ZeRO-3 keeps parameters of at most `threshold` elements whole on every rank
    (`DeepSpeedZeRoOffload.mark_persistent_parameters`, deepspeed/runtime/zero/parameter_offload.py)."""
    return sum(numel for numel in tensors.all() if numel <= threshold)


@functools.lru_cache(maxsize=256)  # pure, and the same model and ranks recur across stages, variants and edits
def _touched(tensors: Tensors, ranks: int) -> tuple[tuple[int, int], ...]:
    """Per rank: (elements of the whole parameters its ⌈N/R⌉ slice of the flat parameter order overlaps, the
    largest overlap). ZeRO-1/2 keeps those parameters' gradients (`averaged_gradients`) until the step."""
    shard, found = _ceil(tensors.total, ranks), []
    sizes = tensors.all()
    for rank in range(ranks):
        low, high, start, touched, piece = rank * shard, (rank + 1) * shard, 0, 0, 0
        for numel in sizes:
            if start < high and start + numel > low:
                touched += numel
                piece = max(piece, min(high, start + numel) - max(low, start))
            start += numel
        found.append((touched, piece))
    return tuple(found)


def _ipg(w: int, stage: int, buckets: Buckets) -> int:
    """ZeRO-1/2's IPG reduce bucket (two with overlap_comm) when gradients are contiguous."""
    reduce = DEEPSPEED_DEFAULTS["reduce_bucket_size"] if buckets.reduce_bucket_size is None \
        else buckets.reduce_bucket_size
    overlap = (stage == 3) if buckets.overlap_comm is None else buckets.overlap_comm
    return w * reduce * (2 if overlap else 1) if stage in (1, 2) and buckets.contiguous_gradients else 0


def _deepspeed(setup: _Setup, shape: ModelShape, stage: int, buckets: Buckets, offload_optimizer: bool,
               offload_param: bool, bf16_optimizer: bool = False) -> Moments:
    """DeepSpeed ZeRO 0-3 (16-bit or fp32 model) with a torch AdamW client optimizer (foreach, for-loop) or
    DeepSpeed's FusedAdam from the config's optimizer section (`fused`)."""
    t, w, n, r = setup.tensors, setup.w, setup.tensors.total, setup.ranks
    bf16_opt = bf16_optimizer and stage == 1 and not offload_optimizer
    reduce = DEEPSPEED_DEFAULTS["reduce_bucket_size"] if buckets.reduce_bucket_size is None \
        else buckets.reduce_bucket_size
    overlap = (stage == 3) if buckets.overlap_comm is None else buckets.overlap_comm
    shard = _ceil(n, r) if stage else n
    plain = stage == 0 and w == F32  # engine.py `_do_optimizer_sanity_check`: fp32 without ZeRO wraps nothing
    # the inner optimizer steps fp32 copies of each parameter (stage 0) or one flat fp32 partition
    stepped = _stepped(setup, F32, parameter_shapes(shape) if stage == 0 else [(shard,)], "deepspeed")
    master = [] if offload_optimizer else [Part("fp32 master", 0 if plain else F32 * shard),
                                           Part(stepped.state_name, stepped.states)]
    if bf16_opt:  # BF16_Optimizer (bf16_optimizer.py): one fp32 gradient buffer as large as the whole flat model
        master.append(Part("fp32 gradient buffer (BF16_Optimizer)", F32 * shard * r))  # (padded to the ranks), never partitioned
    if setup.optimizer == "adagrad" and not (plain or offload_optimizer) and stage < 3:
        # torch Adagrad makes its sums in __init__ (`full_like(p)`) for the model it is built on; DeepSpeed then
        # swaps its param groups for its fp32 ones and those sums stay in `state` (measured: opt-ds-z*-adagrad*,
        # a model built in fp32 and cast by deepspeed.initialize: 4 B each; 2 B for a model loaded in bf16, so 4 B
        # is the bound); under ZeRO-3 HF Trainer builds the model partitioned (zero.Init): those sums are empty
        master.append(Part(ADAGRAD_FIRST_SUMS, F32 * n))
    gathered, ipg, threshold = 0, 0, 0
    if stage == 3:
        threshold = (DEEPSPEED_DEFAULTS["stage3_param_persistence_threshold"] if buckets.persistence_threshold
                     is None else buckets.persistence_threshold)
        persistent = _persistent_numel(t, threshold)
        own = 0 if offload_param else w * shard
        whole = w * persistent if r > 1 else 0
        base = [Part("parameters", own + whole), *master, Part("gradient partitions", w * shard)]
        if buckets.contiguous_gradients:  # stage3.py: the IPG buffer is made with the optimizer
            base.append(Part("reduce bucket", w * reduce))
        reuse = MAX_REUSE_DISTANCE if buckets.max_reuse_distance is None else buckets.max_reuse_distance
        prefetch = (DEEPSPEED_DEFAULTS["stage3_prefetch_bucket_size"] if buckets.prefetch_bucket_size is None
                    else buckets.prefetch_bucket_size)
        live = (DEEPSPEED_DEFAULTS["stage3_max_live_parameters"] if buckets.max_live_parameters is None
                else buckets.max_live_parameters)
        if r > 1:  # `__params_to_release` keeps what is reused within the reuse distance, and what the
            # prefetcher (at most max_live_parameters ahead) already fetched for a later use
            gathered = w * min(n - persistent, max(reuse, min(prefetch, live)))
    else:
        base = [Part("parameters", w * n), *master]
        ipg = 0 if bf16_opt else _ipg(w, stage, buckets)
    gather = [Part("gathered parameters", gathered)]
    forward, _ = _loss_moments(setup, base + gather)
    # the loss's backward: the head is gathered again (fetched for its backward) if it was released
    head_numel = t.head or t.embedding
    again = max(gathered, w * head_numel) if stage == 3 and r > 1 and head_numel > threshold else gathered
    _, loss = _loss_moments(setup, base + [Part("gathered parameters", again)])
    # a tied weight's gradient waits whole in autograd's InputBuffer until the embedding's arrives (no hook
    # fires before), then the two are summed out of place
    held = w * t.embedding if not t.head else 0
    ends = {}
    if stage in (1, 2) and not bf16_opt:  # stage_1_and_2.py: grads leave their bucket for the rank's partition
        kept_layer, head = _ceil(w * t.layer_total, r), held or _ceil(w * t.head, r)
        # the rank keeps the gradients of whole parameters its partition touches, once a first bucket was
        # reduced; reducing a bucket flattens its gradients once more; a gradient larger than the bucket is
        # reduced on its own, alive as it is; a tied weight's two gradients and their sum, last
        partition = w * max(touched for touched, _ in _touched(t, r)) if n > reduce else 0
        kept = [*base, Part("reduce bucket", ipg), Part("gradients", partition)]
        ends["the end of backward"] = [*kept, Part("bucket copy", w * min(reduce, n))]
        if t.largest > reduce:
            ends["the largest gradient's reduction"] = [*kept, Part("largest gradient", w * t.largest)]
        if not t.head:
            ends["the tied weight's gradients"] = [*kept, Part("embedding gradient", held + _tied_sum(t, w))]
        grads_layers = [Part("reduce bucket", ipg)]
    elif stage == 3:
        kept_layer, head = 0, held  # reduced into the persistent gradient partitions
        # the bucket's gradients flattened and split for the reduce-scatter (two copies); the embedding, used
        # last, still gathered
        last = w * t.embedding if (r > 1 and t.embedding > threshold) else 0
        ends["the end of backward"] = [*base, Part("gathered parameters", last),
                                       Part("bucket copy", 2 * w * min(reduce, n))]
        if not t.head:
            ends["the tied weight's gradients"] = [*base, Part("gathered parameters", last),
                                                   Part("embedding gradient", held + _tied_sum(t, w))]
        grads_layers = list(gather)
    else:
        kept_layer, head = w * t.layer_total, w * ((t.head or t.embedding) + t.final_norm)
        ends["the end of backward"] = [*base, Part("gradients", w * n), Part(
            "embedding gradient", setup.c * setup.tokens * setup.hidden + _tied_sum(t, w))]
        grads_layers = []
    layers = _layer_moments(setup, shape, base + grads_layers, head, kept_layer)
    fp32_grads = 0 if offload_optimizer else F32 * shard
    if stage == 3:  # step() starts with `_partition_all_parameters()`: persistent parameters are freed too
        base = [Part("parameters", own), *base[1:]]
    if stage == 0:  # FP16_UnfusedOptimizer: per-parameter fp32 masters; the 16-bit gradients are still alive
        scratch = stepped.scratch
        if setup.impl == "fused" and not plain:  # DeepSpeed's FusedAdam → FP16_Optimizer (fp16/fused_optimizer.py):
            fp32_grads *= 2  # every gradient cast to fp32, then flattened into one fp32 tensor beside them
        step = [*base, Part("gradients", w * n), Part("fp32 gradients", 0 if plain else fp32_grads),
                Part("optimizer scratch", scratch)]
        steps = {"the optimizer step": step}
    elif bf16_opt:  # the partition's fp32 gradient is a view of the buffer; the bf16 gradients live until zero_grad
        steps = {"the optimizer step": [*base, Part("gradients", w * n), Part("optimizer scratch", stepped.scratch)]}
    else:  # one flat fp32 partition per group: for-loop's "largest tensor" is the partition itself
        scratch = 0 if offload_optimizer else stepped.scratch
        steps = {"the optimizer step": [*base, Part("fp32 gradients", fp32_grads),
                                        Part("optimizer scratch", scratch)],
                 "the 16-bit copy of the updated partition": [*base, Part("fp32 gradients", fp32_grads), Part(
                     "16-bit partition copies", (1 if stage == 3 else 2) * w * shard)]}  # ZeRO-3: one flat copy
                     # of the gradient partition beside its fp32 conversion (measured: opt-ds-z3-r2-sgdm)
        if stage in (1, 2):  # the 16-bit gradients of the touched parameters live until the fp32 copy is made
            ranks_touched = _touched(t, r)
            most = max(touched for touched, _ in ranks_touched)
            # `get_grad_norm_direct`: each gradient piece `.to(get_norm_dtype())`, fp64 (the rank where the
            # kept gradients and the largest piece in fp64 weigh most)
            touched, piece = max(ranks_touched, key=lambda found: w * found[0] + 8 * found[1])
            steps["the gradient norm"] = [*base, Part("gradients", w * touched), Part("fp64 gradient copy", 8 * piece)]
            steps["the fp32 conversion"] = [*base, Part("gradients", w * most),
                                            Part("16-bit partition copies", w * shard),
                                            Part("fp32 gradients", fp32_grads)]
    forwards = {"the loss": forward}
    # the first fetch: one flat all-gather output, then copied out per parameter (none without a prefetch: GRPO's
    # first micro-step after generation, memory/grpo.py)
    if stage == 3 and r > 1 and getattr(setup.loss, "prefetch", True):
        fetch = min(n - persistent, max(min(prefetch, live), t.embedding))
        forwards["the first all-gather"] = [*base, Part("gathered parameters", 2 * w * fetch)]
    if stage == 3 and r > 1 and setup.loss is None:  # (a fused head's backward is the loss's backward)
        # the head's backward: what the prefetcher fetched for the backward order is gathered beside the
        # head's unsharded weight gradient and the logits' gradient
        ends["the head's backward"] = [
            *base, Part("gathered parameters", max(again, w * fetch)),
            Part("activations", setup.acts.total - setup.acts.logits_bytes),
            Part("gradients", w * head_numel), Part("logits gradient", _logits_gradient(setup))]
    head = _head_moment(setup, base + [Part("gathered parameters", again)])
    return {"forward": forwards, "backward": {"the loss's backward": loss, **head, **layers, **ends},
            "optimizer": steps}


def _fsdp(setup: _Setup, shape: ModelShape, version: int, reshard: bool, mixed: bool,
          sharded: bool) -> Moments:
    """FSDP2 (`fully_shard` per decoder layer and on the root) or FSDP1 (a FlatParameter per unit): shards of
    parameters, gradients and AdamW states; the root unit (embeddings, final norm, head) is gathered for the
    whole forward and backward; a layer is gathered for its forward (and kept when not resharding) and again
    for its backward, with the next one prefetched; a unit's unsharded gradients are copied into one
    reduce-scatter input in the reduce dtype (fp32 under mixed precision) beside the collective's output."""
    t, w, n, r, c = setup.tensors, setup.w, setup.tensors.total, setup.ranks, setup.c
    if version == 2 and not sharded:  # a replicate R × shard 1 mesh: FSDP2 over a group of one, still gathering
        # copies and resharding after forward (fully_shard's default), its gradients all-reduced over the replicate
        # dim (measured: fsdp2-r2-fp32-replicate-ga2, lora-fsdp2-*-replicate)
        sharded, r, reshard = True, 1, True
    g = c if mixed else w  # gathered parameters and unsharded gradients are in the compute dtype
    collective = sharded and r > 1  # at one rank FSDP2 still copies the root in and out, but reduces nothing
    r = r if sharded else 1  # NO_SHARD: every rank holds everything
    shard = _ceil(n, r)
    if version == 1:  # one flat parameter per unit: for-loop's largest tensor is the largest unit's shard
        largest = _ceil(max(t.root, t.layer_total), r)
    else:  # one DTensor shard per parameter (dim 0)
        largest = _ceil(t.largest, r)
    stepped = _stepped(setup, w, [(shard,)], "fsdp", largest)
    base = [Part("parameters", w * shard), Part(stepped.state_name, stepped.states)]
    root = g * t.root if sharded else 0
    layer = g * t.layer_total if sharded else 0
    kept = layer * t.layers if not reshard else 0
    ahead = layer if version == 2 and collective else 0  # FSDP2: one layer's all-gather output alive at the loss
    forward, _ = _loss_moments(setup, base + [Part("gathered parameters", root + kept + ahead)])
    _, loss = _loss_moments(setup, base + [Part("gathered parameters", root + kept + _backward_ahead(
        version, reshard, r if collective else 1, layer))])
    grads_layer = _ceil(w * t.layer_total, r)
    head = _ceil(w * (t.head + t.final_norm), r) if t.head else 0
    scatter = 2 * w * t.layer_total if collective else 0  # reduce-scatter input + full-size output (gloo)
    gathered_bwd = [Part("gathered parameters", root + max(kept, 2 * layer)),
                    Part("reduce-scatter", scatter + (g * t.layer_total if sharded else 0))]
    layers = _layer_moments(setup, shape, base + gathered_bwd, head, grads_layer)
    # the root's reduce-scatter at the end: its input and output, and the unsharded head gradient not yet freed
    # (FSDP1: the embedding's too, cast to the fp32 reduce dtype under mixed precision); layers' shards are kept
    if version == 1:
        unsharded = (F32 if mixed else w) * ((t.head or t.embedding) + (t.embedding if t.head else 0))
    else:
        unsharded = g * (t.head or t.embedding)
    kept_grads = w * shard if (version == 2 or not sharded) else t.layers * grads_layer
    end = [*base, Part("gradients", kept_grads), Part("reduce-scatter", 2 * w * t.root if collective else 0),
           Part("unsharded gradients", unsharded)]
    step = [*base, Part("gradients", w * shard), Part("optimizer scratch", stepped.scratch)]
    head_moment = _head_moment(setup, base + [Part("gathered parameters", root + kept + ahead)])
    return {"forward": {"the loss": forward},
            "backward": {"the loss's backward": loss, **head_moment, **layers, "the end of backward": end},
            "optimizer": {"the optimizer step": step}}


def _backward_ahead(version: int, reshard: bool, ranks: int, layer: int) -> int:
    """A layer gathered ahead at the loss's backward, when layers are resharded after forward (unresharded ones are
    all gathered already: measured, lora-fsdp2-*-noreshard). FSDP2: the one its forward prefetch left alive (as at
    the loss). FSDP1: the root's pre-backward hook, on the model's outputs (the loss among them), unshards the root
    and, with BACKWARD_PRE (torch's default backward_prefetch), prefetches the next handle in reverse post-forward
    order, the last decoder layer (torch/distributed/fsdp/_runtime_utils.py `_pre_backward_hook` →
    `_prefetch_handle(..., _PrefetchMode.BACKWARD)`; measured: lora-fsdp1-*)."""
    return layer if ranks > 1 and reshard else 0


class _Gathered(NamedTuple):
    """What a frozen base's engine holds beside P, G, O (bytes): gathered parameters at the loss, at the loss's
    backward and in a layer's backward; ZeRO-3's first coalesced fetch and its reduce bucket."""

    at_loss: int = 0
    again: int = 0
    in_layer: int = 0
    fetch: int = 0
    bucket: int = 0


def _gathered_frozen(setup: _Setup, frozen: FrozenBase, engine: str, stage: int, buckets: Buckets,
                     fsdp: tuple[int, bool, bool, bool]) -> _Gathered:
    """The full step's rules for gathered parameters (`_deepspeed` ZeRO-3, `_fsdp`), frozen weights at
    `bytes_each` — frozen parameters are partitioned and gathered like trainable ones; bytes pro rata of the whole
    P (a quantized base gathers its packed bytes). ZeRO-3 also makes its IPG reduce bucket with the optimizer
    (stage3.py, contiguous_gradients), and its first fetch (up to the prefetch bucket) is one flat all-gather
    output copied out per parameter (partition_parameters.py, `AllGatherCoalescedHandle.wait`). FSDP under mixed
    precision gathers every parameter, frozen or not, in the compute dtype (FSDP2 `MixedPrecisionPolicy.param_dtype`:
    `_fsdp_param.py` casts each shard before the all-gather; measured: lora-fsdp2-*-mixed)."""
    t, r = setup.tensors, setup.ranks
    version, reshard, sharded, mixed = fsdp
    if engine == "fsdp" and version == 2 and not sharded:  # FSDP2 over a group of one, as `_fsdp`
        sharded, r, reshard = True, 1, True

    def g(elements: int) -> int:
        if engine == "fsdp" and mixed:
            return setup.c * elements
        return -(-elements * frozen.all_bytes // frozen.all_parameters) if frozen.all_parameters else 0

    if engine == "deepspeed" and stage == 3 and r > 1:
        threshold = (DEEPSPEED_DEFAULTS["stage3_param_persistence_threshold"] if buckets.persistence_threshold
                     is None else buckets.persistence_threshold)
        reuse = MAX_REUSE_DISTANCE if buckets.max_reuse_distance is None else buckets.max_reuse_distance
        prefetch = (DEEPSPEED_DEFAULTS["stage3_prefetch_bucket_size"] if buckets.prefetch_bucket_size is None
                    else buckets.prefetch_bucket_size)
        live = (DEEPSPEED_DEFAULTS["stage3_max_live_parameters"] if buckets.max_live_parameters is None
                else buckets.max_live_parameters)
        persistent = sum(numel for numel in t.all() if numel <= threshold)
        elements = min(t.total - persistent, max(reuse, min(prefetch, live)))
        head = t.head or t.embedding  # fetched again for the loss's backward if it was released (as `_deepspeed`)
        again = max(elements, head) if head > threshold else elements
        fetch = min(t.total - persistent, max(min(prefetch, live), t.embedding))
        reduce = DEEPSPEED_DEFAULTS["reduce_bucket_size"] if buckets.reduce_bucket_size is None \
            else buckets.reduce_bucket_size
        bucket = setup.w * reduce if buckets.contiguous_gradients else 0
        return _Gathered(g(elements), g(again), g(elements), g(fetch), bucket)
    if engine == "fsdp" and sharded:
        layer, kept = g(t.layer_total), 0 if reshard else g(t.layer_total * t.layers)
        ahead = layer if version == 2 and r > 1 else 0
        return _Gathered(g(t.root) + kept + ahead, g(t.root) + kept + _backward_ahead(version, reshard, r, layer),
                         g(t.root) + max(kept, 2 * layer))
    return _Gathered()


def _frozen(setup: _Setup, shape: ModelShape, frozen: FrozenBase, gathered: _Gathered,
            offload_optimizer: bool, in_place: bool, converted: bool = False) -> Moments:
    """The step with a frozen base: the full step's moments (`_loss_moments`, `_layer_transient`) with no
    gradient for a frozen weight. Forward at the loss; the loss's backward (no gradient yet); the top layer's
    backward (input gradients only: frozen weights make none); the end of backward with the adapters'
    gradients; the optimizer step over the trainable tensors only. `in_place`: the optimizer is not one of torch's
    (AdamW, Adam, SGD, Adagrad) and is taken to make no scratch (bitsandbytes' optimizers update each parameter in
    place; Adafactor's per-tensor copies are not modelled with an adapter). `converted`: the 16-bit gradient
    partition is dropped once copied to fp32, before the inner step (ZeRO-1/2: stage_1_and_2.py `step`,
    `averaged_gradients[i] = None`; measured: lora-ds-z1-*, lora-ds-z2-*)."""
    base = [Part("parameters", frozen.parameters), Part("optimizer states", frozen.optimizer_states),
            Part("reduce bucket", gathered.bucket)]
    at_loss, again, in_layer = gathered.at_loss, gathered.again, gathered.in_layer
    forward, _ = _loss_moments(setup, base + [Part("gathered parameters", at_loss)], frozen.activations)
    forwards = {"the loss": forward}
    if gathered.fetch:  # the flat output stays alive with its copies: every parameter of the fetch is registered
        # with its handle (partitioned_param_coordinator.py, `__inflight_param_registry`) until fetched for its
        # module, the last at the end of the forward (measured: lora-ds-z3-*)
        forwards["the first fetch, held through the layers"] = [
            *base, Part("gathered parameters", 2 * gathered.fetch),
            Part("activations", frozen.activations - frozen.outside)]
    _, loss = _loss_moments(setup, base + [Part("gathered parameters", again)], frozen.activations)
    transient = _layer_transient(shape, setup.tensors, setup.tokens, setup.c, weight_gradient=False)
    top = [*base, Part("gathered parameters", in_layer), Part("activations", frozen.activations),
           Part("gradients", frozen.head_gradient), Part("recomputed layer", frozen.recompute),
           Part("layer backward", transient)]
    end = [*base, Part("gradients", frozen.gradients)]
    fp32 = F32 * frozen.trainable if frozen.fp32_gradients and not offload_optimizer else 0
    stepped = frozen.stepped or frozen.step_bytes * frozen.trainable
    largest = frozen.largest or stepped  # for-loop: one tensor at a time (tests/data/step/measured_lora.json)
    scratch = 0 if offload_optimizer or in_place else optimizer_step(  # torch's: by the bytes they step
        setup.optimizer, setup.impl, 1, [(stepped,)], largest=largest).scratch
    converted = converted and fp32 > 0
    step = [*base, Part("gradients", 0 if converted else frozen.gradients), Part("fp32 gradients", fp32),
            Part("optimizer scratch", scratch)]
    steps = {"the optimizer step": step}
    if converted:
        steps["the fp32 copy of the gradient partition"] = [*base, Part("gradients", frozen.gradients),
                                                            Part("fp32 gradients", fp32)]
    return {"forward": forwards,
            "backward": {"the loss's backward": loss, "the top layer's backward": top,
                         **_head_moment(setup, base + [Part("gathered parameters", again)], frozen.activations),
                         "the end of backward": end},
            "optimizer": steps}


def estimate_step(shape: ModelShape, sequence_length: int, micro_batch: int, *, checkpointing: bool = False,
                  attention: str = "sdpa", engine: str = "torch", stage: int = 0, ranks: int = 1,
                  param_dtype: str = "bf16", autocast: bool = False, optimizer: str = "adamw",
                  optimizer_impl: str = "foreach",
                  buckets: Buckets = Buckets(), fsdp_version: int = 2, fsdp_reshard: bool = True,
                  fsdp_mixed: bool = False, fsdp_sharded: bool = True, ddp_bucket_view: bool = False,
                  offload_optimizer: bool = False, offload_param: bool = False,
                  frozen: FrozenBase | None = None, loss_kernel: str = "hf", loss: object = None,
                  gradient_accumulation_steps: int = 1) -> StepPeak:
    """Per-phase peak bytes of one rank in a steady-state step (AdamW, or any precision.OPTIMIZERS one whose step
    memory/optimizer_step.py models); raises StepInputError naming a bad input or what is not modelled.

    param_dtype is the dtype the weights are stored in (DeepSpeed: its 16-bit dtype; FSDP: the shards').
    autocast (engine torch): fp32 weights, bf16 compute, as HF Trainer's `bf16=True` on an fp32 model.
    fsdp_mixed: bf16 gathered parameters and compute over `param_dtype` shards; fsdp_reshard: layers are
    freed after their forward (FULL_SHARD, FSDP2's default); fsdp_sharded False: NO_SHARD. frozen: a frozen
    base with adapters (its per-rank state replaces the full model's; `_frozen`). loss_kernel: Transformers'
    loss (`hf`) or a fused / chunked kernel (`liger_flce`, `cut_cross_entropy`, `chunked_ce`) in its place
    (`_loss_moments`, loss_and_reference.loss_moments). loss: an object whose
    `moments(setup, base, saved)` replaces ForCausalLMLoss's (forward, loss's backward) moments
    (memory/preference.py: TRL's fused LM head); it takes precedence over loss_kernel.
    gradient_accumulation_steps > 1: the later micro-batches' moments hold the accumulated gradients too
    (memory/accumulation.py)."""
    _choice("engine", engine, ENGINES)
    if frozen is None:  # with a frozen base the plan's O holds any optimizer's state (adapter_plan)
        _choice("optimizer", optimizer, ALL_OPTIMIZERS)
    _choice("optimizer_impl", optimizer_impl, OPTIMIZER_IMPLS)
    _choice("param_dtype", param_dtype, tuple(DTYPE_BYTES))
    _choice("attention", attention, ("sdpa", "eager"))
    _choice("loss_kernel", loss_kernel, LOSS_KERNELS)
    _count("ranks", ranks, 1)
    _count("gradient_accumulation_steps", gradient_accumulation_steps, 1)
    if engine == "deepspeed":
        _choice("stage", stage, (0, 1, 2, 3))
    if engine == "fsdp":
        _choice("fsdp_version", fsdp_version, (1, 2))
    if autocast and engine != "torch":
        raise StepInputError("autocast applies to engine torch (DeepSpeed and FSDP bring their own precision)")
    compute = "bf16" if (autocast or fsdp_mixed) else param_dtype
    if frozen is not None:
        _choice("compute dtype", frozen.compute_dtype, tuple(DTYPE_BYTES))
        compute = frozen.compute_dtype
    try:
        acts = estimate_activations(shape, sequence_length, micro_batch, compute, checkpointing, attention)
    except ActivationInputError as error:
        raise StepInputError(str(error)) from None
    tensors = parameter_tensors(shape)
    setup = _Setup(tensors, acts, sequence_length * micro_batch, shape.vocab, shape.hidden,
                   F32 if autocast else DTYPE_BYTES[param_dtype], DTYPE_BYTES[compute], ranks, optimizer_impl,
                   checkpointing, loss_kernel, frozen is None, micro_batch, loss, optimizer)

    def engine_moments(setup: _Setup) -> Moments:
        if frozen is not None:
            gathered = _gathered_frozen(setup, frozen, engine, stage, buckets,
                                        (fsdp_version, fsdp_reshard, fsdp_sharded, fsdp_mixed))
            return _frozen(setup, shape, frozen, gathered, offload_optimizer, optimizer not in TORCH_OPTIMIZERS,
                           engine == "deepspeed" and stage in (1, 2))
        if engine == "torch":
            return _torch(setup, shape, autocast, ddp_bucket_view)
        if engine == "deepspeed":
            return _deepspeed(setup, shape, stage, buckets, offload_optimizer, offload_param,
                              param_dtype == "bf16" and buckets.grad_accum_dtype == "fp32")
        return _fsdp(setup, shape, fsdp_version, fsdp_reshard, fsdp_mixed, fsdp_sharded)

    moments = engine_moments(setup)
    if gradient_accumulation_steps > 1:
        found = held(Engine(engine, stage, setup.w, tensors.total, tensors.embedding,
                            max(touched for touched, _ in _touched(tensors, ranks)) if engine == "deepspeed" else 0,
                            _ipg(setup.w, stage, buckets),
                            offload_optimizer, fsdp_version, fsdp_sharded, F32 if fsdp_mixed else setup.w, ranks,
                            setup.c, tensors.root),
                     None if frozen is None else frozen.gradients if frozen.accumulated is None else frozen.accumulated)
        later_loss = loss.later(gradient_accumulation_steps) if hasattr(loss, "later") else None
        source = engine_moments(setup._replace(loss=later_loss)) if later_loss is not None else None
        moments = later_moments(moments, found, Part, source)
    phases = _phases(moments)
    peak_phase = max(PHASES, key=lambda name: phases[name].peak)
    return StepPeak(phases, peak_phase, phases[peak_phase].peak, acts, tensors.total)


__all__ = ["Buckets", "ENGINES", "FrozenBase", "Moment", "OPTIMIZERS", "OPTIMIZER_IMPLS", "PHASES", "Part", "Phase", "StepInputError", "StepPeak",
           "Tensors", "estimate_step", "moment_of", "parameter_tensors"]
