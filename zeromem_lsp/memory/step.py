"""The peak of one whole training step, phase by phase, per rank (pure, exact ints, no torch).

Beside the model-state contract (memory/model_state.py), never instead of it: a steady-state step in three phases,
each peaking at the largest live total over its moments, for engines `torch` (one process or DDP), `deepspeed` (ZeRO
0-3) and `fsdp` (FSDP2 / FSDP1). Every term, with the function it comes from: docs/memory-model.md, "The whole
training step"; optimizers other than AdamW: memory/optimizer_step.py.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple, Protocol, Union

from zeromem_lsp.memory.accumulation import Held, later_moments
from zeromem_lsp.memory.parts import P, PHASES, M, Moment, Moments, Part, Phase, StepInputError, moment_of, phases_of
from zeromem_lsp.memory.activations import F32, ActivationInputError, Activations, estimate_activations
from zeromem_lsp.memory.buffers import DEEPSPEED_DEFAULTS, given
from zeromem_lsp.configs.settings_values import ENGINES, LOSS_KERNELS, OPTIMIZER_IMPLS
from zeromem_lsp.memory.precision import DTYPE_BYTES, OPTIMIZERS as ALL_OPTIMIZERS
from zeromem_lsp.memory.loss_and_reference import LossMoments, loss_moments
from zeromem_lsp.memory.model_state import ceil_div
from zeromem_lsp.memory.optimizer_step import (ADAGRAD_FIRST_SUMS, PER_TENSOR, OptimizerNotModelled, Stepped,
                                               Tensors, optimizer_step, parameter_shapes, parameter_tensors)
from zeromem_lsp.configs.families import of
from zeromem_lsp.configs.model_config import ModelShape
from zeromem_lsp.configs.parallel_shape import (attention_transients, derived, kv_replicated, rank_shape, rank_tokens,
                                                resident, shard_group)
from zeromem_lsp.configs.parallelism import NONE, Parallelism
from zeromem_lsp.configs.transformers_paths import NEWEST_PATH, TransformersPath

#: Adam and AdamW keep the same tensors (exp_avg, exp_avg_sq); Adam's weight decay, when set, adds one more
#: gradient-sized tensor in the foreach path (not modelled: the default is 0). The other optimizers' steps:
#: memory/optimizer_step.py (weight decay 0, HF Trainer's default)
OPTIMIZERS = ("adamw", "adam")
TORCH_OPTIMIZERS = (*OPTIMIZERS, "sgd", "sgd_momentum", "adagrad")  # torch.optim's, with their scratch
#: DeepSpeed defaults beyond buffers.DEEPSPEED_DEFAULTS (deepspeed/runtime/zero/config.py)
MAX_REUSE_DISTANCE = 1_000_000_000


class StepPeak(NamedTuple):
    phases: dict[str, Phase]
    peak_phase: str
    peak: int
    activations: Activations
    parameters: int  # model parameters (all ranks together)
    derived: tuple[str, ...] = ()  # Parallelism's mechanisms in this figure that no measured step supports


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

    def resolved(self, stage: int) -> Zero:
        """The sizes with DeepSpeed's defaults filled in, once (deepspeed/runtime/zero/config.py)."""
        return Zero(given(self.reduce_bucket_size, "reduce_bucket_size"),
                    (stage == 3) if self.overlap_comm is None else self.overlap_comm, self.contiguous_gradients,
                    given(self.prefetch_bucket_size, "stage3_prefetch_bucket_size"),
                    given(self.max_live_parameters, "stage3_max_live_parameters"),
                    MAX_REUSE_DISTANCE if self.max_reuse_distance is None else self.max_reuse_distance,
                    given(self.persistence_threshold, "stage3_param_persistence_threshold"), self.grad_accum_dtype)


class Zero(NamedTuple):
    """zero_optimization as DeepSpeed runs it at a stage (elements; `Buckets.resolved`)."""

    reduce: int
    overlap: bool
    contiguous: bool
    prefetch: int
    live: int
    reuse: int
    threshold: int  # stage3_param_persistence_threshold
    grad_accum_dtype: str | None = None


class FrozenBase(NamedTuple):
    """A frozen base with trainable adapters (LoRA / QLoRA), per rank: the adapter's P, G, O as the plan places them
    (memory/adapter_plan.py) and what the step (`_frozen`) needs beside them. Measured whole with PEFT
    (tests/data/step/measured_lora.json; docs/adapters.md); derived under offload."""

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

    def gathered(self, elements: int) -> int:
        """Bytes of `elements` gathered: pro rata of the whole P (a quantized base gathers its packed bytes)."""
        return ceil_div(elements * self.all_bytes, self.all_parameters) if self.all_parameters else 0


#: Every engine spec answers the same questions, each with its own value (a field where the engine has the
#: setting, a constant where it has not): what the step reads of an engine is data, not a test of which it is.
THRESHOLD = DEEPSPEED_DEFAULTS["stage3_param_persistence_threshold"]


@dataclass(frozen=True)
class Torch:
    """One process or DDP. `autocast`: fp32 weights, bf16 compute (HF Trainer's `bf16=True` on an fp32 model);
    `ddp_bucket_view`: DDP's gradient_as_bucket_view (gradients are views of its buckets)."""

    name: ClassVar[str] = "torch"
    stage: ClassVar[int] = 0
    offload_optimizer: ClassVar[bool] = False
    offload_param: ClassVar[bool] = False
    mixed: ClassVar[bool] = False
    sharded: ClassVar[bool] = False
    version: ClassVar[int] = 2
    threshold: ClassVar[int] = THRESHOLD
    autocast: bool = False
    ddp_bucket_view: bool = False

    def moments(self, setup: Setup, step: Step) -> Moments:
        """Plain torch or DDP: parameters, AdamW's exp_avg and exp_avg_sq in the parameters' dtype
        (`torch.zeros_like(p)` in `Adam._init_group`), gradients from backward until `zero_grad`."""
        shape = step.shape
        t, w, n = setup.tensors, setup.w, setup.tensors.total
        stepped = _stepped(setup, w, parameter_shapes(shape), "torch", embeddings=t.embeddings)
        base = [Part(P.PARAMETERS, w * n), Part(stepped.state_name, stepped.states)]
        if setup.ranks > 1:  # torch/csrc/distributed/c10d/reducer.cpp: one flat bucket tensor per bucket
            base.append(Part(P.DDP_BUCKETS, w * n))
        cast = []
        if self.autocast:  # autocast's weight cache (a bf16 copy per matmul weight), fp32 norm outputs: to backward
            matmul = t.layers * (t.layer_total - t.layer_norms) + shape.vocab * shape.hidden
            # + one more bf16 T×I tensor per layer in the MLP (measured: 2·T·I·L at h256 and at 8B)
            saving = 1 if setup.checkpointing else t.layers  # layers whose activations are kept
            cast = [Part(P.BF16_WEIGHT_COPIES, 2 * matmul),
                    Part(P.ACTIVATIONS, 2 * (2 * saving + 1) * setup.tokens * shape.hidden
                         + 2 * saving * setup.tokens * shape.intermediate)]
        grads = 0 if (setup.ranks > 1 and self.ddp_bucket_view) else w  # gradient_as_bucket_view: grads are the buckets
        head = w * (t.head or t.embedding) * (grads > 0) + w * t.final_norm * (grads > 0)
        layers = _layer_moments(setup, shape, base + cast, head, grads * t.layer_total)
        embedding = setup.c * setup.tokens * setup.hidden + _tied_sum(t, w)
        end = [*base, Part(P.GRADIENTS, grads * n), Part(P.EMBEDDING_GRADIENT, embedding)]
        update = [*base, Part(P.GRADIENTS, grads * n), Part(P.OPTIMIZER_SCRATCH, stepped.scratch)]
        return _composed(setup, base + cast, _Gathered(), {**layers, M.END_OF_BACKWARD: end},
                         {M.OPTIMIZER_STEP: update})

    def held(self, setup: Setup, frozen: int | None) -> Held:
        """A later micro-batch (memory/accumulation.py): every gradient whole under `no_sync`, a new embedding gradient
        beside them at the end of backward; a frozen base's adapter gradients (`frozen`) whole."""
        t = setup.tensors
        return Held(frozen) if frozen is not None else Held(setup.w * t.total, setup.w * t.embedding)

    def gathered(self, setup: Setup, g: Callable[[int], int]) -> _Gathered:
        """Nothing gathered: every parameter is whole on every rank."""
        return _Gathered()

    def reference(self, whole: int, persistent: int, ranks: int) -> int:
        """A preference trainer's frozen reference model on this rank (`whole`: all of it as loaded): all of it."""
        return whole

    def reference_gathered(self, tensors: Tensors, width: int, ranks: int, fused: bool) -> int:
        """The reference's weights gathered at its forward's peak (`fused`: TRL's fused LM head scores it): none."""
        return 0


@dataclass(frozen=True)
class DeepSpeed:
    """DeepSpeed ZeRO `stage` (0-3) with its zero_optimization sizes resolved and its offload."""

    name: ClassVar[str] = "deepspeed"
    autocast: ClassVar[bool] = False
    mixed: ClassVar[bool] = False
    sharded: ClassVar[bool] = False
    version: ClassVar[int] = 2
    stage: int = 0
    buckets: Buckets = Buckets()
    offload_optimizer: bool = False
    offload_param: bool = False

    @property
    def zero(self) -> Zero:
        return self.buckets.resolved(self.stage)

    @property
    def threshold(self) -> int:
        return self.zero.threshold

    def moments(self, setup: Setup, step: Step) -> Moments:
        """DeepSpeed ZeRO 0-3 (16-bit or fp32 model) with a torch AdamW client optimizer (foreach, for-loop) or
        DeepSpeed's FusedAdam from the config's optimizer section (`fused`)."""
        shape, bf16_optimizer = step.shape, step.param_dtype == "bf16" and self.buckets.grad_accum_dtype == "fp32"
        t, w, n, r = setup.tensors, setup.w, setup.tensors.total, setup.ranks
        stage, zero, offload_optimizer = self.stage, self.zero, self.offload_optimizer
        bf16_opt = bf16_optimizer and stage == 1 and not offload_optimizer
        reduce = zero.reduce
        shard = ceil_div(n, r) if stage else n
        plain = stage == 0 and w == F32  # engine.py `_do_optimizer_sanity_check`: fp32 without ZeRO wraps nothing
        # the inner optimizer steps fp32 copies of each parameter (stage 0) or one flat fp32 partition
        stepped = _stepped(setup, F32, parameter_shapes(shape) if stage == 0 else [(shard,)], "deepspeed")
        master = [] if offload_optimizer else [Part(P.FP32_MASTER, 0 if plain else F32 * shard),
                                               Part(stepped.state_name, stepped.states)]
        if bf16_opt:  # BF16_Optimizer (bf16_optimizer.py): one fp32 gradient buffer as large as the whole flat
            # model (padded to the ranks), never partitioned
            master.append(Part(P.FP32_GRADIENT_BUFFER_BF16_OPTIMIZER, F32 * shard * r))
        if setup.optimizer == "adagrad" and not (plain or offload_optimizer) and stage < 3:
            # torch Adagrad makes its sums in __init__ (`full_like(p)`) for the model it is built on; DeepSpeed then
            # swaps its param groups for its fp32 ones and those sums stay in `state` (measured: opt-ds-z*-adagrad*,
            # a model built in fp32 and cast by deepspeed.initialize: 4 B each; 2 B for a model loaded in bf16, so 4 B
            # is the bound); under ZeRO-3 HF Trainer builds the model partitioned (zero.Init): those sums are empty
            master.append(Part(ADAGRAD_FIRST_SUMS, F32 * n))
        # at the loss, at its backward (the head fetched again if it was released), the first fetch (ZeRO-3)
        gathered = self.gathered(setup, lambda elements: w * elements)
        ipg = 0 if bf16_opt else _ipg(w, stage, zero)
        if stage == 3:
            persistent = _persistent_numel(t, zero.threshold)
            own = 0 if self.offload_param else w * shard
            whole = w * persistent if r > 1 else 0
            hpz = step.parallelism.hpz_partition  # ZeRO++ hpZ's secondary copy (partition_parameters.py:1909-1916)
            base = [Part(P.PARAMETERS, own + whole), *master, Part(P.GRADIENT_PARTITIONS, w * shard),
                    Part(P.HPZ_SECONDARY_PARTITION, 0 if hpz == 1 or self.offload_param else w * ceil_div(n, hpz))]
            if zero.contiguous:  # stage3.py: the IPG buffer is made with the optimizer, in the communication dtype:
                # under Ulysses `seq_parallel_communication_data_type`, fp32 by default (engine.py, stage3.py)
                base.append(Part(P.REDUCE_BUCKET, (F32 if step.parallelism.ulysses > 1 else w) * reduce))
        else:
            base = [Part(P.PARAMETERS, w * n), *master]
        loss_base = base
        # a tied weight's gradient waits whole in autograd's InputBuffer until the embedding's arrives (no hook
        # fires before), then the two are summed out of place
        held = w * t.embedding if not t.head else 0
        ends: dict[str, list[Part]] = {}
        if stage in (1, 2) and not bf16_opt:  # stage_1_and_2.py: grads leave their bucket for the rank's partition
            kept_layer, head = ceil_div(w * t.layer_total, r), held or ceil_div(w * t.head, r)
            # kept: the gradients of whole parameters the partition touches; a bucket flattened; a gradient larger than
            # the bucket reduced alone (docs/memory-model.md, "DeepSpeed ZeRO-1/2")
            partition = w * max(touched for touched, _ in _touched(t, r)) if n > reduce else 0
            kept = [*base, Part(P.REDUCE_BUCKET, ipg), Part(P.GRADIENTS, partition)]
            ends[M.END_OF_BACKWARD] = [*kept, Part(P.BUCKET_COPY, w * min(reduce, n))]
            if t.largest > reduce:
                ends[M.LARGEST_GRADIENT] = [*kept, Part(P.LARGEST_GRADIENT, w * t.largest)]
            grads_layers = [Part(P.REDUCE_BUCKET, ipg)]
            tied = kept
        elif stage == 3:
            kept_layer, head = 0, held  # reduced into the persistent gradient partitions
            # the bucket's gradients flattened and split for the reduce-scatter (two copies); the embedding, used
            # last, still gathered
            last = w * t.embedding if (r > 1 and t.embedding > zero.threshold) else 0
            tied = [*base, Part(P.GATHERED_PARAMETERS, last)]
            ends[M.END_OF_BACKWARD] = [*tied, Part(P.BUCKET_COPY, 2 * w * min(reduce, n))]
            grads_layers = [Part(P.GATHERED_PARAMETERS, gathered.at_loss)]
        else:
            kept_layer, head = w * t.layer_total, w * ((t.head or t.embedding) + t.final_norm)
            ends[M.END_OF_BACKWARD] = [*base, Part(P.GRADIENTS, w * n), Part(
                "embedding gradient", setup.c * setup.tokens * setup.hidden + _tied_sum(t, w))]
            grads_layers = tied = []
        if tied and not t.head:  # ZeRO-1/2 beside the kept gradients, ZeRO-3 beside the still-gathered embedding
            ends[M.TIED_GRADIENTS] = [*tied, Part(P.EMBEDDING_GRADIENT, held + _tied_sum(t, w))]
        layers = _layer_moments(setup, shape, base + grads_layers, head, kept_layer)
        fp32_grads = 0 if offload_optimizer else F32 * shard
        if stage == 3:  # step() starts with `_partition_all_parameters()`: persistent parameters are freed too
            base = [Part(P.PARAMETERS, own), *base[1:]]
        if stage == 0:  # FP16_UnfusedOptimizer: per-parameter fp32 masters; the 16-bit gradients are still alive
            scratch = stepped.scratch
            # DeepSpeed's FusedAdam → FP16_Optimizer (fp16/fused_optimizer.py): every gradient cast to fp32, then
            # flattened into one fp32 tensor beside them
            if setup.impl == "fused" and not plain:
                fp32_grads *= 2
            update = [*base, Part(P.GRADIENTS, w * n), Part(P.FP32_GRADIENTS, 0 if plain else fp32_grads),
                      Part(P.OPTIMIZER_SCRATCH, scratch)]
            steps: dict[str, list[Part]] = {M.OPTIMIZER_STEP: update}
        elif bf16_opt:  # the partition's fp32 gradient is a view of the buffer; the bf16 gradients live until zero_grad
            steps = {M.OPTIMIZER_STEP: [*base, Part(P.GRADIENTS, w * n), Part(P.OPTIMIZER_SCRATCH, stepped.scratch)]}
        else:  # one flat fp32 partition per group: for-loop's "largest tensor" is the partition itself
            scratch = 0 if offload_optimizer else stepped.scratch
            steps = {M.OPTIMIZER_STEP: [*base, Part(P.FP32_GRADIENTS, fp32_grads), Part(P.OPTIMIZER_SCRATCH, scratch)],
                     M.PARTITION_COPY: [*base, Part(P.FP32_GRADIENTS, fp32_grads), Part(
                         "16-bit partition copies", (1 if stage == 3 else 2) * w * shard)]}  # ZeRO-3: one flat copy
                         # of the gradient partition beside its fp32 conversion (measured: opt-ds-z3-r2-sgdm)
            if stage in (1, 2):  # the 16-bit gradients of the touched parameters live until the fp32 copy is made
                ranks_touched = _touched(t, r)
                most = max(touched for touched, _ in ranks_touched)
                # `get_grad_norm_direct`: each gradient piece `.to(get_norm_dtype())`, fp64 (the rank where the
                # kept gradients and the largest piece in fp64 weigh most)
                touched, piece = max(ranks_touched, key=lambda found: w * found[0] + 8 * found[1])
                steps[M.GRADIENT_NORM] = [*base, Part(P.GRADIENTS, w * touched), Part(P.FP64_GRADIENT_COPY, 8 * piece)]
                steps[M.FP32_CONVERSION] = [*base, Part(P.GRADIENTS, w * most),
                                            Part(P.PARTITION_COPIES_16_BIT, w * shard),
                                            Part(P.FP32_GRADIENTS, fp32_grads)]
        forwards: dict[str, list[Part]] = {}
        # the first fetch: one flat all-gather output, then copied out per parameter (none without a prefetch: GRPO's
        # first micro-step after generation, memory/grpo.py)
        if stage == 3 and r > 1 and (setup.loss is None or setup.loss.prefetch):
            forwards[M.FIRST_ALL_GATHER] = [*base, Part(P.GATHERED_PARAMETERS, 2 * gathered.fetch)]
        if stage == 3 and r > 1 and setup.loss is None:  # (a fused head's backward is the loss's backward)
            # the head's backward: what the prefetcher fetched for the backward order is gathered beside the
            # head's unsharded weight gradient and the logits' T×V gradient (none when a fused kernel made the
            # head's gradients)
            fused = setup.loss_kernel in ("liger_flce", "cut_cross_entropy")
            ends[M.HEAD_BACKWARD] = [
                *base, Part(P.GATHERED_PARAMETERS, max(gathered.again, gathered.fetch)),
                Part(P.ACTIVATIONS, setup.acts.total - setup.acts.logits_bytes),
                Part(P.GRADIENTS, w * (t.head or t.embedding)),
                Part(P.LOGITS_GRADIENT, 0 if fused else setup.c * setup.tokens * setup.vocab)]
        return _composed(setup, loss_base, gathered, {**layers, **ends}, steps, forwards,
                         head=[*base, Part(P.GATHERED_PARAMETERS, gathered.again)])

    def held(self, setup: Setup, frozen: int | None) -> Held:
        """A later micro-batch (memory/accumulation.py): ZeRO-3 reduces into the partitions; ZeRO-2 keeps the touched
        parameters' gradients; ZeRO-0/1 every gradient whole (ZeRO-1 beside its IPG bucket, the step's own "reduce
        bucket"), as do a frozen base's adapters (`frozen`) below ZeRO-3."""
        t, w, stage, offload = setup.tensors, setup.w, self.stage, self.offload_optimizer
        bucket = _ipg(w, stage, self.zero) if stage == 1 else 0
        if frozen is not None:
            how = "offload not measured" if offload else ""
            return Held(0, 0, how) if stage == 3 else Held(frozen, 0, how, bucket=bucket)
        if stage == 3:
            return Held(0, 0, "offload accumulates into the partitions" if offload else "")
        if stage == 2 and offload:  # stage_1_and_2.py `async_accumulate_grad_in_cpu_via_gpu`
            return Held(0, 0, "ZeRO-Offload accumulates in host memory")
        if stage == 2:
            return Held(w * max(touched for touched, _ in _touched(t, setup.ranks)), 0, "", replaces=())
        return Held(w * t.total, w * t.embedding, "offload not measured" if offload else "", bucket=bucket)

    def gathered(self, setup: Setup, g: Callable[[int], int]) -> _Gathered:
        """ZeRO-3 at more than one rank (`g`: bytes of so many elements; docs/memory-model.md, "DeepSpeed ZeRO-3"): at
        the loss (`__params_to_release`), at its backward (the head again if released), in a layer's backward, the first
        fetch; its IPG reduce bucket (stage3.py); docs/adapters.md, "Gathered frozen weights", "ZeRO-3's buffers"."""
        if self.stage != 3 or setup.ranks < 2:
            return _Gathered()
        zero, t = self.zero, setup.tensors
        rest = t.total - _persistent_numel(t, zero.threshold)
        at_loss = min(rest, max(zero.reuse, min(zero.prefetch, zero.live)))
        head = t.head or t.embedding
        again = max(at_loss, head) if head > zero.threshold else at_loss
        fetch = min(rest, max(min(zero.prefetch, zero.live), t.embedding))
        return _Gathered(g(at_loss), g(again), g(at_loss), g(fetch), setup.w * zero.reduce if zero.contiguous else 0)

    def reference(self, whole: int, persistent: int, ranks: int) -> int:
        """The reference: whole below ZeRO-3 (prepare_deepspeed runs it at stage 0); ZeRO-3 partitions it as the policy,
        its `persistent` bytes whole on every rank, the rest on the host under offload_param."""
        if self.stage != 3:
            return whole
        kept = persistent if ranks > 1 else 0
        return kept if self.offload_param else ceil_div(whole, ranks) + kept

    def reference_gathered(self, tensors: Tensors, width: int, ranks: int, fused: bool) -> int:
        """ZeRO-3: the reference's LM head gathered for the fused head (`maybe_gather_lm_head_ctx`), none for a loss
        that scores its logits after its forward (docs/adapters.md)."""
        return width * (tensors.head or tensors.embedding) if fused and self.stage == 3 and ranks > 1 else 0


@dataclass(frozen=True)
class Fsdp:
    """FSDP `version` 1 or 2: `reshard` after forward (FULL_SHARD), `mixed`: bf16 gathered parameters and compute
    over the shards' dtype, `sharded` False: NO_SHARD."""

    name: ClassVar[str] = "fsdp"
    autocast: ClassVar[bool] = False
    stage: ClassVar[int] = 0
    offload_param: ClassVar[bool] = False
    threshold: ClassVar[int] = THRESHOLD
    version: int = 2
    reshard: bool = True
    mixed: bool = False
    sharded: bool = True
    offload_optimizer: bool = False

    def moments(self, setup: Setup, step: Step) -> Moments:
        """FSDP2 (`fully_shard` per decoder layer and on the root) or FSDP1 (a FlatParameter per unit): shards of P, G
        and O, the units gathered (`gathered`), a unit's unsharded gradients copied into one reduce-scatter input
        in the reduce dtype (fp32 under mixed precision) beside the collective's output."""
        shape = step.shape
        t, w, n, c = setup.tensors, setup.w, setup.tensors.total, setup.c
        version, mixed = self.version, self.mixed
        sharded, r, _ = _fsdp_group(self, setup.ranks)
        g = c if mixed else w  # gathered parameters and unsharded gradients are in the compute dtype
        collective = sharded and r > 1  # at one rank FSDP2 still copies the root in and out, but reduces nothing
        shard = ceil_div(n, r)
        # FSDP1: one flat parameter per unit (for-loop's largest tensor: the largest unit's shard); FSDP2: one DTensor
        # shard per parameter (dim 0)
        largest = ceil_div(max(t.root, t.layer_total) if version == 1 else t.largest, r)
        # an optimizer whose state follows each tensor's size steps FSDP2's local shards (dim 0, rank 0's the largest)
        local: list[tuple[int, ...]] = [(ceil_div(s[0], r), *s[1:]) for s in parameter_shapes(shape)]
        if version == 1 and setup.optimizer in PER_TENSOR:  # its 8-bit rule is per tensor: flat units unmeasured
            raise StepInputError(f"the optimizer step of {setup.optimizer} under FSDP1 is not modelled (it steps "
                                 "one flat parameter per wrapped unit; measured under FSDP2's shards only)")
        stepped = _stepped(setup, w, local if version == 2 and setup.optimizer in PER_TENSOR else [(shard,)], "fsdp",
                           largest)
        base = [Part(P.PARAMETERS, w * shard), Part(stepped.state_name, stepped.states)]
        gathered = self.gathered(setup, lambda elements: g * elements)
        grads_layer = ceil_div(w * t.layer_total, r)
        head = ceil_div(w * (t.head + t.final_norm), r) if t.head else 0
        scatter = 2 * w * t.layer_total if collective else 0  # reduce-scatter input + full-size output (gloo)
        gathered_bwd = [Part(P.GATHERED_PARAMETERS, gathered.in_layer),
                        Part(P.REDUCE_SCATTER, scatter + (g * t.layer_total if sharded else 0))]
        layers = _layer_moments(setup, shape, base + gathered_bwd, head, grads_layer)
        # the root's reduce-scatter at the end: its input and output, and the unsharded head gradient not yet freed
        # (FSDP1: the embedding's too, cast to the fp32 reduce dtype under mixed precision); layers' shards are kept
        if version == 1:
            unsharded = (F32 if mixed else w) * ((t.head or t.embedding) + (t.embedding if t.head else 0))
        else:
            unsharded = g * (t.head or t.embedding)
        kept_grads = w * shard if (version == 2 or not sharded) else t.layers * grads_layer
        end = [*base, Part(P.GRADIENTS, kept_grads), Part(P.REDUCE_SCATTER, 2 * w * t.root if collective else 0),
               Part(P.UNSHARDED_GRADIENTS, unsharded)]
        update = [*base, Part(P.GRADIENTS, w * shard), Part(P.OPTIMIZER_SCRATCH, stepped.scratch)]
        return _composed(setup, base, gathered, {**layers, M.END_OF_BACKWARD: end}, {M.OPTIMIZER_STEP: update},
                         head=[*base, Part(P.GATHERED_PARAMETERS, gathered.at_loss)])

    def held(self, setup: Setup, frozen: int | None) -> Held:
        """A later micro-batch (memory/accumulation.py); a frozen base's adapter gradients (`frozen`, fp32 under PEFT,
        so their reduce dtype is theirs) unsharded when sharded, as the full step's."""
        n, w = setup.tensors.total, setup.w
        if frozen is not None:
            how = "offload not measured" if self.offload_optimizer else ""
            return Held(frozen * setup.ranks, 0, how, (), 0) if self.sharded else Held(frozen, 0, how)
        if not self.sharded and self.version == 1:  # NO_SHARD: the root unit's new flat gradient is made whole
            return Held(w * n, w * setup.tensors.root)  # beside the accumulated one
        if self.version == 2:  # the last micro-batch reduce-scatters each unit's as it goes, the root's at the end
            # (`FSDPParamGroup.post_backward` hands the accumulated gradient to the reduce-scatter and drops it): the
            # end of backward is the plain step's (never the peak in what was measured)
            return Held((F32 if self.mixed else w) * n, 0, "", (), 0)
        return Held(setup.c * n, 0)  # FSDP1 keeps unsharded gradients in the compute dtype

    def gathered(self, setup: Setup, g: Callable[[int], int]) -> _Gathered:
        """FSDP's gathered bytes (`g`: of so many elements; the compute dtype's under mixed precision, `_fsdp_param`):
        the root unit, every layer when not resharding, one layer ahead at the loss (FSDP2) and at its backward (FSDP1:
        `_pre_backward_hook` → `_prefetch_handle`; docs/adapters.md), two in a layer's backward."""
        sharded, r, reshard = _fsdp_group(self, setup.ranks)
        if not sharded:
            return _Gathered()
        t = setup.tensors
        root, layer = g(t.root), g(t.layer_total)
        kept = 0 if reshard else g(t.layer_total * t.layers)
        ahead = layer if r > 1 else 0
        return _Gathered(root + kept + (ahead if self.version == 2 else 0), root + kept + (ahead if reshard else 0),
                         root + max(kept, 2 * layer))

    def reference(self, whole: int, persistent: int, ranks: int) -> int:
        """The reference: sharded as the policy is, whole under NO_SHARD."""
        return ceil_div(whole, ranks) if self.sharded else whole

    def reference_gathered(self, tensors: Tensors, width: int, ranks: int, fused: bool) -> int:
        """Sharded FSDP1: the root unit and one layer (derived); FSDP2 (`prepare_fsdp`: one unit) the whole reference
        and its all-gather output (docs/adapters.md)."""
        if ranks < 2 or not self.sharded:
            return 0
        return 2 * width * tensors.total if self.version == 2 else width * (tensors.root + tensors.layer_total)


EngineSpec = Union[Torch, DeepSpeed, Fsdp]


class Head(Protocol):
    """A loss that replaces ForCausalLMLoss's moments (memory/preference.py, grpo.py, reference_free_loss.py,
    llamafactory_loss.py): its (forward, loss's backward) moments, whether ZeRO-3 prefetches before it, and the
    head of a later micro-batch under accumulation (None: the same)."""

    @property
    def prefetch(self) -> bool: ...

    def moments(self, setup: Setup, base: list[Part], saved: int) -> tuple[str, list[Part], list[Part]]: ...

    def later(self, accumulation: int) -> Head | None: ...


@dataclass(frozen=True)
class PolicyLoss:
    """What every preference policy's loss takes (memory/preference.policy_head): a Head scoring each row's shifted
    positions, the same at every micro-batch; subclasses give its `saved` and `moments`."""

    trainer: str
    sequence_length: int
    reference_forward: bool = False  # a reference forward runs in the step (not with precomputed log-probs)
    reference_gathered: int = 0  # ZeRO-3: the reference's weights gathered during its forward
    head_trainable: bool = True
    triton: bool = True  # False: the torch path (CPU; TRL 1.8 for the reference-free losses)
    adjusted: bool = False  # the `saved` it is given already holds the loss's tensors (a frozen base's)
    loss_gathered: int | None = None  # KTO at ZeRO-3: the policy's weights gathered at its loss (`no_prefetch`)

    @property
    def prefetch(self) -> bool:
        return self.loss_gathered is None

    def later(self, accumulation: int) -> None:
        return None

    def scored(self, tokens: int) -> int:
        """Positions scored: every shifted position of every row."""
        return tokens - tokens // self.sequence_length


@dataclass(frozen=True)
class Step:
    """One training step as the phase model takes it, validated and with its defaults resolved (`make_step`)."""

    shape: ModelShape
    sequence_length: int
    micro_batch: int
    engine: EngineSpec = field(default_factory=Torch)
    ranks: int = 1
    checkpointing: bool = False
    attention: str = "sdpa"
    param_dtype: str = "bf16"
    optimizer: str = "adamw"
    optimizer_impl: str = "foreach"
    frozen: FrozenBase | None = None
    loss_kernel: str = "hf"
    head: Head | None = None
    gradient_accumulation_steps: int = 1
    resident: tuple[Part, ...] = ()  # alive at every moment beside the engine's (a preference trainer's reference)
    transformers_path: TransformersPath = NEWEST_PATH  # what the running Transformers keeps (Setup.transformers)
    parallelism: Parallelism = NONE  # degrees beyond data parallelism, long-context mechanisms (step_peak: one rank's)

    @property
    def stage(self) -> int:
        return self.engine.stage

    @property
    def offload_optimizer(self) -> bool:
        return self.engine.offload_optimizer

    @property
    def compute_dtype(self) -> str:
        """The forward's dtype: a frozen base's, bf16 under autocast or FSDP mixed precision, else the weights'."""
        if self.frozen is not None:
            return self.frozen.compute_dtype
        return "bf16" if self.engine.autocast or self.engine.mixed else self.param_dtype

    @property
    def stored_bytes(self) -> int:
        """Bytes of a stored parameter (and of its gradient)."""
        return F32 if self.engine.autocast else DTYPE_BYTES[self.param_dtype]


def _choice(name: str, value: object, allowed: tuple[object, ...]) -> None:
    if value not in allowed:
        raise StepInputError(f"{name} must be one of {', '.join(map(str, allowed))}, got {value!r}")


def _count(name: str, value: object, least: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise StepInputError(f"{name} must be an integer ≥ {least}, got {value!r}")
    return value


class Setup(NamedTuple):
    """What every engine's moments read, derived once from the Step (bytes per element, sizes in elements)."""

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
    loss: Head | None = None  # a loss that replaces ForCausalLMLoss's moments (memory/preference.FusedHead)
    optimizer: str = "adamw"  # precision.OPTIMIZERS: its states and scratch (memory/optimizer_step.py)
    transformers: TransformersPath = NEWEST_PATH  # what the running Transformers keeps (configs/transformers_paths)
    attention: tuple[tuple[Part, ...], tuple[Part, ...]] = ((), ())  # an attention call's exchange buffers (forward,
    # backward) under context parallelism (configs/parallel_shape.attention_transients)


def _stepped(setup: Setup, width: int, tensors: list[tuple[int, ...]], engine: str,
             largest: int | None = None, embeddings: int = 0) -> Stepped:
    """The optimizer's states and scratch over `tensors` (`largest`: the for-loop's largest, when not theirs; the first
    `embeddings` are nn.Embedding weights)."""
    try:
        return optimizer_step(setup.optimizer, setup.impl, width, tensors, engine, largest, embeddings)
    except OptimizerNotModelled as error:
        raise StepInputError(str(error)) from None


def _kernel(setup: Setup) -> LossMoments:
    return loss_moments(setup.loss_kernel, setup.micro_batch, setup.tokens // setup.micro_batch, setup.hidden,
                        setup.vocab, setup.c, setup.w, setup.acts.logits_bytes, setup.head_trainable)


def _loss_moments(setup: Setup, base: list[Part], saved: int | None = None) -> tuple[str, list[Part], list[Part]]:
    """(forward's peak, the loss's backward): Transformers' loss in the running release (configs/transformers_paths.py)
    or another `loss_kernel`'s (loss_and_reference.loss_moments); docs/memory-model.md, "The loss" and "Versions"."""
    t, v = setup.tokens, setup.vocab
    saved = setup.acts.total if saved is None else saved  # `saved`: what a frozen base keeps (LoRA activations)
    if setup.loss is not None:
        return setup.loss.moments(setup, base, saved)
    if setup.loss_kernel != "hf":
        found = _kernel(setup)
        kept = [Part(P.ACTIVATIONS, saved - found.dropped), *(Part(*part) for part in found.kept)]
        return (M.LOSS, [*base, *kept, *(Part(*part) for part in found.forward)],
                [*base, *kept, *(Part(*part) for part in found.backward)])
    rows = setup.transformers.rows(t, setup.micro_batch)
    held = Part(P.ACTIVATIONS, saved - F32 * (t - rows) * v)  # the activations count the log-softmax of t rows
    forward = [*base, held, *(Part(P(name), size) for name, size in setup.transformers.forward(setup.c, t, v,
                                                                                               setup.micro_batch))]
    return M.LOSS, forward, [*base, held, Part(P.LOG_SOFTMAX_GRADIENTS, 2 * F32 * rows * v)]


def _composed(setup: Setup, base: list[Part], gathered: _Gathered, backward: dict[str, list[Part]],
              optimizer: dict[str, list[Part]], forwards: dict[str, list[Part]] | None = None, saved: int | None = None,
              head: list[Part] | None = None, head_before: str = M.TOP_LAYER) -> Moments:
    """An engine's moments around the loss every engine shares: the loss's forward over `base` with
    `gathered.at_loss`, its backward with `gathered.again`, and the head's backward (over `head`, by default the
    loss's backward's, placed before `head_before`) among the engine's own `forwards`, `backward`, `optimizer`.
    The head's backward is a moment of its own after a loss that leaves it to autograd (axolotl's chunked loss): the
    logits' gradient, the head's weight and input gradients, the loss's kept tensors freed (below Transformers' loss's
    backward)."""
    name, forward, _ = _loss_moments(setup, [*base, Part(P.GATHERED_PARAMETERS, gathered.at_loss)], saved)
    _, _, loss = _loss_moments(setup, [*base, Part(P.GATHERED_PARAMETERS, gathered.again)], saved)
    found = None if setup.loss_kernel == "hf" else _kernel(setup)
    backwards: dict[str, list[Part]] = {M.LOSS_BACKWARD: loss}
    for moment, parts in backward.items():
        if moment == head_before and found is not None and found.head is not None:
            kept = Part(P.ACTIVATIONS, (setup.acts.total if saved is None else saved) - found.dropped)
            head = head or [*base, Part(P.GATHERED_PARAMETERS, gathered.again)]
            backwards[M.HEAD_BACKWARD] = [*head, kept, *(Part(*part) for part in found.head)]
        backwards[moment] = parts
    before = (setup.acts.total if saved is None else saved) - setup.acts.logits_bytes  # the top layer's attention
    attention: dict[str, list[Part]] = {M.ATTENTION_FORWARD: [*base, Part(P.GATHERED_PARAMETERS, gathered.at_loss),
        Part(P.ACTIVATIONS, before), *setup.attention[0]]} if setup.attention[0] else {}
    return {"forward": {name: forward, **(forwards or {}), **attention}, "backward": backwards, "optimizer": optimizer}


def _layer_moments(setup: Setup, shape: ModelShape, base: list[Part], head_grads: int, layer_grads: int,
                   ) -> dict[str, list[Part]]:
    """The top and the bottom decoder layer's backward (one of the two ends holds the layers' peak:
    docs/memory-model.md, "The whole training step"): its saved tensors + `_layer_transient`."""
    acts, t = setup.acts, setup.tensors
    transient = Part(P.LAYER_BACKWARD, _layer_transient(shape, t, setup.tokens, setup.c))
    outer = acts.embedding_bytes + acts.shared_bytes
    if setup.checkpointing:  # (the bottom layer: one saved input)
        kept_top, layer = acts.checkpoint_bytes, [Part(P.RECOMPUTED_LAYER, acts.per_layer_bytes)]
        inputs = acts.checkpoint_bytes + acts.offloaded_bytes  # offloaded ones come back one by one
        kept_bottom = inputs - (t.layers - 1) * setup.c * setup.tokens * setup.hidden
    else:
        kept_top, kept_bottom, layer = acts.layer_bytes, acts.per_layer_bytes, []
    top = [*base, Part(P.ACTIVATIONS, outer + kept_top), *layer, Part(P.GRADIENTS, head_grads)]
    bottom = [*base, Part(P.ACTIVATIONS, outer + kept_bottom), *layer,
              Part(P.GRADIENTS, head_grads + (t.layers - 1) * layer_grads)]
    # an attention's exchange buffers (its recompute's, its backward's) in place of the MLP's, at the larger end
    end = max(top, bottom, key=lambda parts: sum(part.bytes for part in parts))
    forward, backward = setup.attention[0] * setup.checkpointing, setup.attention[1]
    attention: dict[str, list[Part]] = {name: [*end, *parts] for name, parts in (
        (M.ATTENTION_RECOMPUTE, forward), (M.ATTENTION_BACKWARD, backward)) if parts}
    return {M.TOP_LAYER: [*top, transient], M.BOTTOM_LAYER: [*bottom, transient], **attention}


def _layer_transient(shape: ModelShape, tensors: Tensors, tokens: int, c: int, weight_gradient: bool = True) -> int:
    """A decoder layer's backward at its largest, the MLP's (autograd's MulBackward / MmBackward nodes; the terms:
    docs/memory-model.md, "A layer's backward transient")."""
    return c * tokens * shape.hidden + c * max(tensors.layer) * weight_gradient + 2 * c * tokens * mlp_width(shape)


def mlp_width(shape: ModelShape) -> int:
    """The MLP's width a token goes through (a mixture of experts: its experts per token)."""
    if shape.experts and shape.sparse_layers:
        return shape.expert_intermediate * shape.experts_per_token
    return shape.intermediate


def _tied_sum(tensors: Tensors, w: int) -> int:
    """A tied weight's two gradients summed out of place (torch/csrc/autograd/input_buffer.cpp,
    `InputBuffer::add`; docs/memory-model.md, "Tied embeddings"): the embedding's gradient and the sum."""
    return 2 * w * tensors.embedding if not tensors.head else 0


def _persistent_numel(tensors: Tensors, threshold: int) -> int:
    """ZeRO-3 keeps parameters of at most `threshold` elements whole on every rank
    (`DeepSpeedZeRoOffload.mark_persistent_parameters`, deepspeed/runtime/zero/parameter_offload.py)."""
    return sum(numel for numel in tensors.all() if numel <= threshold)


@functools.lru_cache(maxsize=256)  # pure, and the same model and ranks recur across stages, variants and edits
def _touched(tensors: Tensors, ranks: int) -> tuple[tuple[int, int], ...]:
    """Per rank: (elements of the whole parameters its ⌈N/R⌉ slice of the flat parameter order overlaps, the
    largest overlap). ZeRO-1/2 keeps those parameters' gradients (`averaged_gradients`) until the step."""
    shard, found = ceil_div(tensors.total, ranks), []
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


def _ipg(w: int, stage: int, zero: Zero) -> int:
    """ZeRO-1/2's IPG reduce bucket (two with overlap_comm) when gradients are contiguous."""
    return w * zero.reduce * (2 if zero.overlap else 1) if stage in (1, 2) and zero.contiguous else 0


class _Gathered(NamedTuple):
    """What an engine holds gathered beside P, G, O (bytes): at the loss, at the loss's backward and in a layer's
    backward; ZeRO-3's first coalesced fetch and its reduce bucket."""

    at_loss: int = 0
    again: int = 0
    in_layer: int = 0
    fetch: int = 0
    bucket: int = 0


def _fsdp_group(engine: Fsdp, ranks: int) -> tuple[bool, int, bool]:
    """(sharded, ranks sharing the shards, reshard after forward); FSDP2 without sharding: FSDP2 over a group of one
    (measured: fsdp2-r2-fp32-replicate-ga2, lora-fsdp2-*-replicate; docs/adapters.md)."""
    if engine.version == 2 and not engine.sharded:
        return True, 1, True
    return engine.sharded, ranks if engine.sharded else 1, engine.reshard


def _frozen(setup: Setup, shape: ModelShape, frozen: FrozenBase, gathered: _Gathered,
            offload_optimizer: bool, in_place: bool, converted: bool = False) -> Moments:
    """The step with a frozen base: the full step's moments, no gradient for a frozen weight (docs/adapters.md).
    `in_place`: not one of torch's optimizers, taken to make no scratch (bitsandbytes' update in place; Adafactor's
    per-tensor copies are not modelled with an adapter). `converted`: the 16-bit gradient partition is dropped once
    copied to fp32 (ZeRO-1/2: stage_1_and_2.py `step`, `averaged_gradients[i] = None`; measured: lora-ds-z1-*)."""
    base = [Part(P.PARAMETERS, frozen.parameters), Part(P.OPTIMIZER_STATES, frozen.optimizer_states),
            Part(P.REDUCE_BUCKET, gathered.bucket)]
    forwards: dict[str, list[Part]] = {}
    if gathered.fetch:  # the flat output stays alive with its copies: every parameter of the fetch is registered
        # with its handle (partitioned_param_coordinator.py, `__inflight_param_registry`) until fetched for its
        # module, the last at the end of the forward (measured: lora-ds-z3-*)
        forwards[M.FIRST_FETCH] = [*base, Part(P.GATHERED_PARAMETERS, 2 * gathered.fetch),
                                   Part(P.ACTIVATIONS, frozen.activations - frozen.outside)]
    transient = _layer_transient(shape, setup.tensors, setup.tokens, setup.c, weight_gradient=False)
    # after Transformers' loss its kept tensors are freed; a trained head's backward holds the logits' gradient beside
    # its weight's and input's (measured: lora-*-mts-both-fp32)
    own = setup.loss is None and setup.loss_kernel == "hf"
    kept = frozen.activations - (setup.acts.logits_bytes if own else 0)
    top = [*base, Part(P.GATHERED_PARAMETERS, gathered.in_layer), Part(P.ACTIVATIONS, kept),
           Part(P.GRADIENTS, frozen.head_gradient), Part(P.RECOMPUTED_LAYER, frozen.recompute),
           Part(P.LAYER_BACKWARD, transient)]
    end = [*base, Part(P.GRADIENTS, frozen.gradients)]
    backward: dict[str, list[Part]] = {M.TOP_LAYER: top, M.END_OF_BACKWARD: end}
    if own and frozen.head_gradient:
        head = [*base, Part(P.GATHERED_PARAMETERS, gathered.again), Part(P.ACTIVATIONS, kept),
                Part(P.LOGITS_GRADIENT, setup.c * setup.tokens * setup.vocab),
                Part(P.HEAD_GRADIENT, frozen.head_gradient),
                Part(P.HIDDEN_STATE_GRADIENT, setup.c * setup.tokens * setup.hidden)]
        backward = {M.HEAD_BACKWARD: head, **backward}
    fp32 = F32 * frozen.trainable if frozen.fp32_gradients and not offload_optimizer else 0
    stepped = frozen.stepped or frozen.step_bytes * frozen.trainable
    largest = frozen.largest or stepped  # for-loop: one tensor at a time (tests/data/step/measured_lora.json)
    scratch = 0 if offload_optimizer or in_place else optimizer_step(  # torch's: by the bytes they step
        setup.optimizer, setup.impl, 1, [(stepped,)], largest=largest).scratch
    converted = converted and fp32 > 0
    step = [*base, Part(P.GRADIENTS, 0 if converted else frozen.gradients), Part(P.FP32_GRADIENTS, fp32),
            Part(P.OPTIMIZER_SCRATCH, scratch)]
    steps: dict[str, list[Part]] = {M.OPTIMIZER_STEP: step}
    if converted:
        steps[M.FP32_PARTITION_COPY] = [*base, Part(P.GRADIENTS, frozen.gradients), Part(P.FP32_GRADIENTS, fp32)]
    return _composed(setup, base, gathered, backward, steps, forwards, frozen.activations,
                     head_before=M.END_OF_BACKWARD)


def make_step(shape: ModelShape, sequence_length: int, micro_batch: int, *, checkpointing: bool = False,
              attention: str = "sdpa", engine: str = "torch", stage: int = 0, ranks: int = 1,
              param_dtype: str = "bf16", autocast: bool = False, optimizer: str = "adamw",
              optimizer_impl: str = "foreach", buckets: Buckets = Buckets(), fsdp_version: int = 2,
              fsdp_reshard: bool = True, fsdp_mixed: bool = False, fsdp_sharded: bool = True,
              ddp_bucket_view: bool = False, offload_optimizer: bool = False, offload_param: bool = False,
              frozen: FrozenBase | None = None, loss_kernel: str = "hf", loss: Head | None = None,
              gradient_accumulation_steps: int = 1, transformers_path: TransformersPath = NEWEST_PATH,
              parallelism: Parallelism = NONE) -> Step:
    """The Step these inputs describe, validated (StepInputError naming a bad input). param_dtype: the weights'
    stored dtype (DeepSpeed: its 16-bit dtype; FSDP: the shards'); the others as Step, Torch and Fsdp name them."""
    _choice("engine", engine, ENGINES)
    if frozen is None:  # with a frozen base the plan's O holds any optimizer's state (adapter_plan)
        _choice("optimizer", optimizer, ALL_OPTIMIZERS)
    _choice("optimizer_impl", optimizer_impl, OPTIMIZER_IMPLS)
    _choice("param_dtype", param_dtype, tuple(DTYPE_BYTES))
    _choice("attention", attention, ("sdpa", "eager"))
    _choice("loss_kernel", loss_kernel, LOSS_KERNELS)
    _count("ranks", ranks, 1)
    _count("gradient_accumulation_steps", gradient_accumulation_steps, 1)
    spec: EngineSpec
    if engine == "deepspeed":
        _choice("stage", stage, (0, 1, 2, 3))
        spec = DeepSpeed(stage, buckets, offload_optimizer, offload_param)
    elif engine == "fsdp":
        _choice("fsdp_version", fsdp_version, (1, 2))
        spec = Fsdp(fsdp_version, fsdp_reshard, fsdp_mixed, fsdp_sharded, offload_optimizer)
    else:
        spec = Torch(autocast, ddp_bucket_view)
    if autocast and engine != "torch":
        raise StepInputError("autocast applies to engine torch (DeepSpeed and FSDP bring their own precision)")
    if frozen is not None:
        _choice("compute dtype", frozen.compute_dtype, tuple(DTYPE_BYTES))
    return Step(shape, sequence_length, micro_batch, spec, ranks, checkpointing, attention, param_dtype, optimizer,
                optimizer_impl, frozen, loss_kernel, loss, gradient_accumulation_steps, transformers_path=transformers_path,
                parallelism=parallelism)


def estimate_step(shape: ModelShape, sequence_length: int, micro_batch: int, **inputs: Any) -> StepPeak:
    """`step_peak(make_step(...))`: the step these inputs describe (make_step's keywords)."""
    return step_peak(make_step(shape, sequence_length, micro_batch, **inputs))


def _engine_moments(setup: Setup, step: Step) -> Moments:
    """The moments of the step's engine (a frozen base's: `_frozen` over the engine's `gathered`)."""
    engine, frozen = step.engine, step.frozen
    if frozen is not None:
        g = (lambda elements: setup.c * elements) if engine.mixed else frozen.gathered
        return _frozen(setup, step.shape, frozen, engine.gathered(setup, g), step.offload_optimizer,
                       step.optimizer not in TORCH_OPTIMIZERS, isinstance(engine, DeepSpeed) and engine.stage in (1, 2))
    return engine.moments(setup, step)


#: Checkpointed layer inputs that stay on the device under checkpoint-input offload: DeepSpeed's keep_last_count (1) +
#: max_fwd_stash_count (2) (runtime/activation_checkpointing/offload_activations.py); axolotl's `hidden_states` stash
#: (2) and unsloth's checkpointer (`legacy`: the input moved at once, one brought back in backward) keep fewer
OFFLOAD_RESIDENT = 3


def kept_on_device(acts: Activations, nd: Parallelism, shape: ModelShape, w: int, tokens: int) -> Activations:
    """What stays on the device: a tiled MLP saves its input (already the norm's output) instead of its T × I tensors
    (DeepSpeed `TiledMLP`), Ulysses' replicated kv heads beside them; offloading every saved tensor (TRL
    `OffloadActivations`) leaves the loss's, the token ids and the final norm's in flight at the loss, one layer's
    brought back in its backward (measured: nd.json)."""
    mlp = (of(shape).mlp_kept * w * tokens * shape.intermediate if nd.tiled_mlp_shards else 0) - kv_replicated(
        shape, tokens, w, nd)  # beside it, the kv heads Ulysses replicates
    acts = acts._replace(per_layer_bytes=acts.per_layer_bytes - mlp, layer_bytes=acts.layer_bytes - mlp * acts.layers,
                         total=acts.total - (0 if acts.checkpointing else mlp * acts.layers))
    if nd.activation_offload == "cpu" and acts.checkpointing:  # derived: at most OFFLOAD_RESIDENT layer inputs stay
        moved = max(0, acts.layers - OFFLOAD_RESIDENT) * w * tokens * shape.hidden
        return acts._replace(checkpoint_bytes=acts.checkpoint_bytes - moved, total=acts.total - moved,
                             offloaded_bytes=moved)
    if nd.activation_offload != "cpu_all":
        return acts
    return acts._replace(layer_bytes=acts.per_layer_bytes, shared_bytes=0, total=acts.logits_bytes
                         + acts.embedding_bytes + acts.final_norm_bytes)


def step_peak(step: Step) -> StepPeak:
    """Per-phase peak bytes of one rank in a steady-state step (AdamW, or any precision.OPTIMIZERS one whose step
    memory/optimizer_step.py models); raises StepInputError naming what is not modelled. Under `step.parallelism`
    the step of one rank's share: its shape, tokens and shard group (configs/parallel_shape.py), what it keeps."""
    nd, parameters = step.parallelism, parameter_tensors(step.shape).total
    if step.frozen is not None and nd.tensor * nd.sequence_divisor > 1:  # the frozen base's bytes and
        raise StepInputError("a LoRA step under tensor, context or Ulysses parallelism is not modelled")
    if step.frozen is not None:  # LoRA's activations keep everything: offload and tiling not applied (an upper bound,
        nd = replace(NONE, expert=nd.expert)  # configs/parallel_shape.effects says so); experts ÷ e as in full FT
    if nd != NONE and max(nd.tensor * nd.sequence_divisor, nd.expert) > step.ranks:
        raise StepInputError(f"parallel degrees beyond the world size ({step.ranks} ranks): tensor {nd.tensor} × "
                             f"context {nd.context} × Ulysses {nd.ulysses}, expert {nd.expert}")
    if nd != NONE:  # an image bounded by the whole sequence, not one rank's share (configs/image_tokens.py `at`)
        shape = step.shape._replace(vision=step.shape.vision and step.shape.vision.at(step.sequence_length))
        step = replace(step, shape=rank_shape(shape, nd), sequence_length=rank_tokens(step.sequence_length, nd),
                       ranks=shard_group(step.ranks, nd), resident=(*step.resident, *resident(nd)))
    setup = setup_of(step)
    moments = _engine_moments(setup, step)
    if step.gradient_accumulation_steps > 1:
        frozen = step.frozen
        found = step.engine.held(
            setup, None if frozen is None else frozen.gradients if frozen.accumulated is None else frozen.accumulated)
        later_head = step.head.later(step.gradient_accumulation_steps) if step.head is not None else None
        source = _engine_moments(setup._replace(loss=later_head), step) if later_head is not None else None
        moments = later_moments(moments, found, source)
    if step.resident:
        moments = {phase: {name: [*parts, *step.resident] for name, parts in found_moments.items()}
                   for phase, found_moments in moments.items()}
    phases = phases_of(moments)
    peak_phase = max(PHASES, key=lambda name: phases[name].peak)
    return StepPeak(phases, peak_phase, phases[peak_phase].peak, setup.acts, parameters, derived(nd))


def setup_of(step: Step) -> Setup:
    """What the engines' moments read of `step`, derived once."""
    shape = step.shape
    try:
        acts = kept_on_device(estimate_activations(shape, step.sequence_length, step.micro_batch, step.compute_dtype,
                                          step.checkpointing, step.attention, step.transformers_path),
                     step.parallelism, shape, DTYPE_BYTES[step.compute_dtype], step.sequence_length * step.micro_batch)
    except ActivationInputError as error:
        raise StepInputError(str(error)) from None
    return Setup(parameter_tensors(shape), acts, step.sequence_length * step.micro_batch, shape.vocab, shape.hidden,
                 step.stored_bytes, DTYPE_BYTES[step.compute_dtype], step.ranks, step.optimizer_impl,
                 step.checkpointing, step.loss_kernel, step.frozen is None, step.micro_batch, step.head,
                 step.optimizer, step.transformers_path, attention_transients(
                     shape, step.sequence_length * step.micro_batch, DTYPE_BYTES[step.compute_dtype], step.parallelism))


__all__ = ["Buckets", "DeepSpeed", "ENGINES", "Fsdp", "Head", "PolicyLoss", "Setup", "Step", "Torch", "Zero", "kept_on_device", "make_step", "step_peak", "FrozenBase", "Moment", "OPTIMIZERS", "OPTIMIZER_IMPLS", "PHASES", "Part", "Phase", "StepInputError", "StepPeak",
           "Tensors", "estimate_step", "moment_of", "parameter_tensors"]
