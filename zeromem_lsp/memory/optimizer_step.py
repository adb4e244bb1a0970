"""The optimizer step of a full fine-tune, per optimizer (pure, exact ints, no torch): the state the optimizer keeps
for the tensors it steps on one rank, and the scratch its step makes at its largest.

`tensors` are the shapes the optimizer steps, in its order: the model's parameters (engine torch, FSDP's shards),
or one flat fp32 partition (DeepSpeed ZeRO 1-3), each `width` bytes per element. Which are measured on CPU
(tests/data/step/measured.json, measured_optimizers.json: torchao's AdamW8bit among them) and which derived from
their code (Lion, LAMB, 8-bit Adam: bitsandbytes' blockwise AdamW8bit): docs/memory-model.md, "The optimizer step per optimizer".
"""

from __future__ import annotations

from math import prod
from typing import NamedTuple

from zeromem_lsp.configs.families import Weight, sparse_indices, weights
from zeromem_lsp.configs.model_config import ModelShape
from zeromem_lsp.memory.activations import F32

#: bitsandbytes keeps 32-bit state for tensors below `min_8bit_size` and one fp32 absmax per 256-element block
#: (bitsandbytes/optim/optimizer.py, `Optimizer2State.init_state`); its two quantile maps (256 fp32 each) once
BNB_MIN_8BIT, BNB_BLOCK, BNB_QMAPS = 4096, 256, 2 * 256 * F32
#: HF Trainer keeps bitsandbytes' 8-bit optimizers at 32 bits (fp32 m, v) for every nn.Embedding weight: the input
#: embedding, gpt2's positions, a modules_to_save copy; not the head (nn.Linear). transformers/trainer.py
#: `create_optimizer` registers optim_bits 32 per module; bitsandbytes `check_overrides` matches the parameter by id at
#: the first step, so DeepSpeed's flat partitions stay 8-bit (measured: tests/data/step/bnb_embedding_state.json)
EMBEDDING_STATE = {"adam8bit": 2 * F32}
#: torchao's AdamW8bit (HF `adamw_torch_8bit`, block_size 256): per tensor (an FSDP2 DTensor's local shard) of at
#: least 4096 elements that 256 divides, each of m, v uint8 codes + an fp32 scale per block + its own 256-entry fp32
#: quantile map; otherwise `zeros_like` (the parameter's dtype). torchao/optim/adam.py `_AdamBase._new_buffer`,
#: subclass_8bit.py `OptimState8bit.zeros`
AO_MIN_8BIT, AO_BLOCK, AO_QMAP = 4096, 256, 256 * F32
#: Its step (`single_param_adam`, compiled per tensor): fp32 m and v before they are re-quantized, and the new
#: scales (measured: opt-*-adam8bit-ao, compiled on CPU)
AO_SCRATCH_COPIES = 2
#: Optimizers whose state depends on each tensor's size: FSDP2 hands them every parameter's local shard
PER_TENSOR = ("adam8bit_torchao",)
#: FusedLamb's per-tensor buffers: two 512-element L2 partial sums and the coefficient (fused_lamb_cuda.cpp)
LAMB_BUFFERS = (2 * 512 + 1) * F32
#: The name each optimizer's state has among a phase's parts (rules/peak.py counts them as model state)
STATE_NAMES = {"adamw": "optimizer states", "adam": "optimizer states", "sgd": "optimizer states",
               "sgd_momentum": "momentum buffers", "adagrad": "Adagrad sums", "adafactor": "Adafactor factors",
               "lion": "Lion momentum (derived)", "lamb": "LAMB m, v (derived)",
               "adam8bit": "8-bit m, v + block scales (derived)", "adam8bit_torchao": "8-bit m, v + block scales"}
#: Adafactor over one flat tensor (DeepSpeed's partition); torch Adagrad's sums made for the model before DeepSpeed
UNFACTORED = "Adafactor second moment (flat: not factored)"
ADAGRAD_FIRST_SUMS = "Adagrad sums made before DeepSpeed"
STATE_PARTS = (*dict.fromkeys(STATE_NAMES.values()), UNFACTORED, ADAGRAD_FIRST_SUMS)


class OptimizerNotModelled(ValueError):
    """A combination whose optimizer step is not modelled (not a bad input): why."""


class Stepped(NamedTuple):
    states: int  # what the optimizer keeps between steps
    scratch: int  # what its step makes at the most
    state_name: str  # the part's name, as shown
    derived: bool = False  # derived from code, not measured


def _numel(tensors: list[tuple[int, ...]]) -> list[int]:
    return [prod(shape) for shape in tensors]


def optimizer_step(optimizer: str, impl: str, width: int, tensors: list[tuple[int, ...]],
                   engine: str = "torch", largest: int | None = None, embeddings: int = 0) -> Stepped:
    """States and scratch of `optimizer` (precision.OPTIMIZERS) stepping `tensors` of `width` bytes per element,
    `impl` foreach / for-loop / fused where torch has them; `largest`: the largest tensor a for-loop steps when
    `tensors` only stand for their elements (FSDP's shards); the first `embeddings` tensors are nn.Embedding weights
    (EMBEDDING_STATE). Raises OptimizerNotModelled with the reason."""
    sizes = _numel(tensors)
    every, largest = sum(sizes), max(sizes, default=0) if largest is None else largest
    if optimizer in ("adam", "adamw"):  # torch/optim/adam.py: exp_avg, exp_avg_sq `zeros_like(p)`
        # `_multi_tensor_adam` makes `_foreach_sqrt(exp_avg_sq)` for every tensor; `_single_tensor_adam`
        # `exp_avg_sq.sqrt()` and its quotient for one; `_fused_adam` nothing
        scratch = {"foreach": width * every, "for-loop": 2 * width * largest, "fused": 0}[impl]
        return Stepped(2 * width * every, scratch, STATE_NAMES[optimizer])
    if optimizer == "sgd":  # torch/optim/sgd.py: no state; `param.add_(grad)` (weight_decay 0) in every path
        return Stepped(0, 0, STATE_NAMES[optimizer])
    if optimizer == "sgd_momentum":  # momentum_buffer = `grad.clone()` once, then `mul_` / `add_` in place
        return Stepped(width * every, 0, STATE_NAMES[optimizer])
    if optimizer == "adagrad":  # torch/optim/adagrad.py: state["sum"] `full_like(p)`; `_multi_tensor_adagrad`:
        # `_foreach_sqrt(sums)` and `_foreach_mul(grads, -clr)` for every tensor; `_single_tensor_adagrad`:
        # `state_sum.sqrt()` for one; `_fused_adagrad` nothing
        scratch = {"foreach": 2 * width * every, "for-loop": width * largest, "fused": 0}[impl]
        return Stepped(width * every, scratch, STATE_NAMES[optimizer])
    if optimizer == "adafactor":
        if engine == "fsdp":
            raise OptimizerNotModelled("the optimizer step of adafactor under FSDP is not modelled (under FSDP2 "
                                       "Transformers' Adafactor fails: its row and column means are plain tensors "
                                       "beside DTensor shards; FSDP1 not measured)")
        factored = any(len(shape) >= 2 for shape in tensors)  # DeepSpeed's flat partition is not
        return Stepped(adafactor_states(tensors), adafactor_scratch(width, sizes),
                       STATE_NAMES[optimizer] if factored else UNFACTORED)
    if optimizer == "lion":
        if engine == "fsdp":
            raise OptimizerNotModelled("the optimizer step of lion under FSDP is not modelled")
        # bitsandbytes `Optimizer1State.init_state`: state1 fp32 whatever the parameter's dtype; FusedLion
        # `zeros_like(p)` of DeepSpeed's fp32 partition; both update in place (multi_tensor_lion / kOptimizer32bit1State)
        return Stepped(F32 * every, 0, STATE_NAMES[optimizer], True)
    if optimizer == "lamb":
        if engine != "deepspeed":
            raise OptimizerNotModelled("the optimizer step of lamb is modelled under DeepSpeed only (its FusedLamb); "
                                       "no torch or Transformers LAMB to follow")
        # deepspeed/ops/lamb/fused_lamb.py: exp_avg, exp_avg_sq `zeros_like(p.data)`; per tensor two 512-element
        # L2 partial sums and a coefficient
        return Stepped(2 * width * every, LAMB_BUFFERS if tensors else 0, STATE_NAMES[optimizer], True)
    if optimizer == "adam8bit":
        if engine == "fsdp":
            raise OptimizerNotModelled("the optimizer step of adam8bit (bitsandbytes) under FSDP is not modelled")
        return Stepped(adam8bit_states(sizes[embeddings:]) + EMBEDDING_STATE[optimizer] * sum(sizes[:embeddings]), 0,
                       STATE_NAMES[optimizer], True)
    if optimizer == "adam8bit_torchao":
        quantized = [n for n in sizes if _ao_quantized(n)]
        scratch = max(quantized, default=0) if largest is None or not _ao_quantized(largest) else largest
        return Stepped(adam8bit_torchao_states(width, sizes),
                       AO_SCRATCH_COPIES * F32 * (scratch + scratch // AO_BLOCK), STATE_NAMES[optimizer])
    raise OptimizerNotModelled(f"the optimizer step of {optimizer} is not modelled")


def adafactor_states(tensors: list[tuple[int, ...]]) -> int:
    """transformers/optimization.py `Adafactor.step` (beta1 unset, HF Trainer's `adafactor`): fp32 state
    (`.to(grad)` after `grad.float()`): for a tensor of two or more dimensions the row means (shape[:-1]) and the
    column means (shape[:-2] + shape[-1:]), else the whole second moment."""
    total = 0
    for shape in tensors:
        if len(shape) >= 2:
            total += F32 * (prod(shape[:-1]) + prod(shape[:-2]) * shape[-1])
        else:
            total += F32 * prod(shape)
    return total


def adafactor_scratch(width: int, sizes: list[int]) -> int:
    """Adafactor steps one tensor at a time: the largest of (4 or 2) × 4 B × n + 4 B × the previous tensor's n
    (fp32 copies of a 16-bit tensor, `grad**2`, `+ eps`; docs/memory-model.md; measured: opt-torch-*-adafactor-*)."""
    copies = 4 if width < F32 else 2
    return max((copies * F32 * n + F32 * (sizes[i - 1] if i else 0) for i, n in enumerate(sizes)), default=0)


def adam8bit_states(sizes: list[int]) -> int:
    """bitsandbytes 8-bit AdamW: two uint8 states and two fp32 absmax per 256-element block for a tensor of at
    least 4096 elements, else two fp32 states; the two quantile maps once."""
    total = 0
    for n in sizes:
        total += 2 * n + 2 * F32 * -(-n // BNB_BLOCK) if n >= BNB_MIN_8BIT else 2 * F32 * n
    return total + (BNB_QMAPS if sizes else 0)


def _ao_quantized(n: int) -> bool:
    return n >= AO_MIN_8BIT and n % AO_BLOCK == 0


def adam8bit_torchao_states(width: int, sizes: list[int]) -> int:
    """torchao's AdamW8bit: per quantized tensor two uint8 codes, two fp32 scales per 256-element block and two
    quantile maps; any other tensor's m, v in its own dtype (`width`)."""
    return sum(2 * (n + F32 * (n // AO_BLOCK) + AO_QMAP) if _ao_quantized(n) else 2 * width * n for n in sizes)


class Tensors(NamedTuple):
    """The parameter tensors of a causal LM, in elements (what the optimizer and the engines see)."""

    embedding: int
    head: int  # 0 when tied to the embedding
    final_norm: int
    layer: tuple[int, ...]  # one decoder layer's tensors (the largest layer when they differ)
    layers: int
    positions: int = 0  # gpt2's position embedding
    layer_norms: int = 0  # elements of one layer's norm weights (autocast does not cast them)

    @property
    def layer_total(self) -> int:
        return sum(self.layer)

    @property
    def total(self) -> int:
        return self.embedding + self.positions + self.head + self.final_norm + self.layers * self.layer_total

    @property
    def largest(self) -> int:
        return max((self.embedding, self.head, self.positions, *self.layer))

    @property
    def root(self) -> int:
        """What FSDP's root unit holds: embeddings, the final norm and the head."""
        return self.embedding + self.positions + self.head + self.final_norm

    @property
    def embeddings(self) -> int:
        """How many nn.Embedding weights lead `parameter_shapes`: the input embedding and any positions."""
        return 1 + bool(self.positions)

    def all(self) -> list[int]:
        return ([self.embedding] + ([self.positions] if self.positions else []) + list(self.layer) * self.layers
                + [self.final_norm] + ([self.head] if self.head else []))


def _model(shape: ModelShape) -> tuple[dict[str, Weight], list[Weight]]:
    """The weights outside the layers by role, and one decoder layer's (a sparse one when any: the step model
    takes every layer to be the MoE layer), from configs/families.weights."""
    found, sparse = weights(shape), sparse_indices(shape)
    index = sparse[0] if sparse else 0
    return {w.role: w for w in found if w.layers is None}, [w for w in found if w.layers and index in w.layers]


def parameter_shapes(shape: ModelShape) -> list[tuple[int, ...]]:
    """The parameters' shapes in `model.parameters()` order (modeling_<family>.py)."""
    outside, layer = _model(shape)
    before = [s for role in ("embedding", "positions") if role in outside for s in outside[role].shapes()]
    after = [s for role in ("final_norm", "head")[:2 - shape.tied] for s in outside[role].shapes()]
    return before + [s for w in layer for s in w.shapes()] * shape.layers + after


def parameter_tensors(shape: ModelShape) -> Tensors:
    """The tensors Transformers builds for the shape, in elements: biases where the family has them."""
    outside, layer = _model(shape)
    size = {role: w.parameters for role, w in outside.items()}
    return Tensors(size["embedding"], 0 if shape.tied else size["head"], size["final_norm"],
                   tuple(prod(s) for w in layer for s in w.shapes()), shape.layers, size.get("positions", 0),
                   sum(w.parameters for w in layer if w.role == "norm"))


__all__ = ["ADAGRAD_FIRST_SUMS", "EMBEDDING_STATE", "OptimizerNotModelled", "PER_TENSOR", "STATE_NAMES", "STATE_PARTS",
           "UNFACTORED", "Stepped", "Tensors", "adafactor_scratch", "adafactor_states", "adam8bit_states",
           "adam8bit_torchao_states", "optimizer_step", "parameter_shapes", "parameter_tensors"]
