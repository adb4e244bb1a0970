"""LoRA / DoRA / QLoRA in the memory model: frozen and trainable parameters, their bytes, and P, G, O.

Pure (no torch). Which weights a LoRA config adapts (PEFT's matching against the model's named modules) is
configs/lora_modules.py's; this module counts and places what they hold. Every rule mirrors the library code named beside it; docs/adapters.md lists the sources and how
the engines shard P, G, O (the pooled formula's inputs, memory/model_state.py) once frozen and trainable parameters
are told apart; tests/unit/test_adapters.py compares the counts with PEFT's `get_nb_trainable_parameters()` and the
quantized bytes with what bitsandbytes stores (both recorded by benchmarks/adapters/measure.py).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from zeromem_lsp.configs.families import Weight
from zeromem_lsp.configs.lora_modules import (LINEAR_KINDS, AdapterInputError, Inventory, LoraSettings, Target,
                                              inventory, resolve_targets)
from zeromem_lsp.configs.settings_values import QUANTIZATIONS
from zeromem_lsp.memory.precision import DTYPE_BYTES

DTYPES = "fp32, bf16, fp16"  # as this module's messages list DTYPE_BYTES
EMBEDDING_COPIES = "modules_to_save input embedding copies"  # trainable_groups' label of their group
ENGINES = ("peft", "deepspeed", "fsdp1", "fsdp2")
BLOCKSIZE = 64  # bitsandbytes.functional.quantize_4bit default blocksize
NESTED_BLOCKSIZE = 256  # quantize_4bit(compress_statistics=True) → quantize_blockwise(absmax, blocksize=256)
NF4_CODE_BYTES = 16 * 4  # get_4bit_type: 16 fp32 values, a new tensor per quantized weight
DYNAMIC_CODE_BYTES = 256 * 4  # quantize_blockwise's dynamic map, copied into each nested QuantState



def adapter_parameters(target: Target, lora: LoraSettings) -> int:
    """LoRA parameters on one target, all instances: r·(in + out) per weight (×E for stacked experts:
    ParamWrapper's A is in → r·E, B r·E → out), + out for lora_bias, + out for DoRA's magnitude vector."""
    weight, r = target.weight, target.rank
    per = max(weight.experts, 1) * r * (weight.in_features + weight.out_features)
    per += weight.out_features * (int(lora.lora_bias) + int(lora.dora))
    return per * target.instances


class AdapterCount(NamedTuple):
    """Parameters as PEFT counts them (get_nb_trainable_parameters)."""

    trainable: int  # adapters + modules_to_save copies
    all: int  # base + adapters + copies (the original of a saved module stays, frozen)
    adapters: int
    saved_copies: int
    base: int
    targets: tuple[Target, ...]
    saved: tuple[Target, ...]  # modules_to_save copies (rank 0)

    @property
    def frozen(self) -> int:
        return self.all - self.trainable


def count_adapters(config: dict[str, Any], lora: LoraSettings) -> AdapterCount:
    """Trainable and total parameters of the PEFT model; raises AdapterInputError / UnsupportedModel."""
    found = inventory(config)
    targets, saved = resolve_targets(found, lora)
    adapters = sum(adapter_parameters(target, lora) for target in targets)
    copies = sum(target.weight.parameters * target.instances for target in saved)
    return AdapterCount(adapters + copies, found.total + adapters + copies, adapters, copies, found.total,
                        targets, saved)


# --- bytes of the frozen base (bitsandbytes) ---

class Quantization(NamedTuple):
    kind: str = "none"  # none, int8, nf4, fp4
    double_quant: bool = False  # bnb_4bit_use_double_quant (compress_statistics)


def quantized_weight_bytes(elements: int, rows: int, quantization: Quantization) -> int:
    """What bitsandbytes keeps for one quantized weight of `elements` values and `rows` output rows (4-bit:
    functional.quantize_4bit, with compress_statistics; 8-bit: int8_vectorwise_quant): docs/adapters.md."""
    if quantization.kind == "int8":
        return elements + 4 * rows
    if quantization.kind not in ("nf4", "fp4"):
        raise AdapterInputError("quantization", f"{quantization.kind!r} is not a bitsandbytes quantization")
    blocks = -(-elements // BLOCKSIZE)
    kept = (elements + 1) // 2 + NF4_CODE_BYTES
    if quantization.double_quant:
        return kept + blocks + 4 + 4 * -(-blocks // NESTED_BLOCKSIZE) + DYNAMIC_CODE_BYTES
    return kept + 4 * blocks


def quantized(weight: Weight) -> bool:
    """transformers' replace_with_bnb_linear: every nn.Linear and Conv1D except the output head
    (modules_to_not_convert); embeddings, norms, routers and stacked experts stay in the model dtype."""
    return weight.kind in LINEAR_KINDS


def peft_reported_all(found: Inventory, count: AdapterCount, quantization: Quantization) -> int:
    """get_nb_trainable_parameters' total: a Params4bit counts as 2 × its packed bytes, so a weight with an
    odd number of values counts one more (the padding nibble)."""
    if quantization.kind not in ("nf4", "fp4"):
        return count.all
    return count.all + sum(w.instances * (w.elements % 2) for w in found.weights if quantized(w))


def packed_bytes(elements: int, quantization: Quantization) -> int:
    """The quantized values alone (the parameter's own storage), without absmax / scale / code constants."""
    return elements if quantization.kind == "int8" else (elements + 1) // 2


class FrozenBytes(NamedTuple):
    quantized_bytes: int  # packed weights and their constants
    constant_bytes: int  # of which QuantState / SCB constants: attributes, not parameters (no ZeRO-3 partition)
    quantized_weights: int  # weight elements stored quantized
    other_parameters: int  # frozen parameters kept as floats (embeddings, head, norms, biases, experts)
    float_bytes: int  # their bytes
    total: int


def frozen_bytes(found: Inventory, count: AdapterCount, quantization: Quantization, dtype: str = "bf16",
                 kbit_upcast: bool = True) -> FrozenBytes:
    """Bytes of the frozen base. `kbit_upcast`: peft prepare_model_for_kbit_training casts every fp16/bf16
    parameter that is not Params4bit to fp32 (its default when the model is quantized)."""
    if quantization.kind not in QUANTIZATIONS:
        raise AdapterInputError("quantization", f"quantization must be one of {', '.join(QUANTIZATIONS)}, "
                                f"got {quantization.kind!r}")
    if dtype not in DTYPE_BYTES:
        raise AdapterInputError("dtype", f"dtype must be one of {DTYPES}, got {dtype!r}")
    stored = constants = elements = 0
    if quantization.kind != "none":
        for weight in found.weights:
            if quantized(weight):
                kept = quantized_weight_bytes(weight.elements, weight.out_features, quantization)
                stored += weight.instances * kept
                constants += weight.instances * (kept - packed_bytes(weight.elements, quantization))
                elements += weight.instances * weight.elements
    other = count.frozen - elements
    width = 4 if quantization.kind != "none" and kbit_upcast else DTYPE_BYTES[dtype]
    return FrozenBytes(stored, constants, elements, other, other * width, stored + other * width)


def dequantized_transient_bytes(found: Inventory, quantization: Quantization, compute_dtype: str = "bf16") -> int:
    """The largest weight bitsandbytes dequantizes at a time: MatMul4Bit.backward computes grad_A against
    `F.dequantize_4bit(B, state).to(grad_output.dtype)` (bitsandbytes/autograd/_functions.py), one
    out × in weight in the compute dtype, freed after its layer; 0 without quantization."""
    if quantization.kind == "none":
        return 0
    return max((w.elements for w in found.weights if quantized(w)), default=0) * DTYPE_BYTES[compute_dtype]


# --- P, G, O ---

class AdapterState(NamedTuple):
    """The pooled formula's inputs with adapters, and how each was made."""

    parameter_bytes: int
    gradient_bytes: int
    optimizer_bytes: int
    trainable: int
    frozen: FrozenBytes
    notes: tuple[str, ...]


def model_state(config: dict[str, Any], lora: LoraSettings, quantization: Quantization = Quantization(),
                engine: str = "peft", dtype: str = "bf16", adapter_dtype: str = "fp32", optimizer_state: int = 8,
                gradient_dtype: str = "", kbit_upcast: bool = True, fsdp_mixed_units: bool = False,
                state_follows_dtype: bool = True, embedding_state: int = 0) -> AdapterState:
    """P, G, O (bytes) for LoRA training; the stage then applies zeromem_lsp.memory.model_state.model_state_bytes.
    The frozen base (`frozen_bytes`; DeepSpeed recasts an fp32-upcast one too) and the trainable parameters
    (`trainable_groups`), gradients alike, no master copy but DeepSpeed's, optimizer bytes by `state_each`
    (`optimizer_state`: per fp32 parameter, Adam 8; `state_follows_dtype=False` for 8-bit optimizers; `embedding_state`:
    an input embedding's copy's, `trainable_groups`). "fsdp1" with
    `fsdp_mixed_units` (use_orig_params=True, a wrapped unit holding frozen and trainable parameters): the gradient
    covers the frozen parameters of every decoder layer that holds an adapter."""
    if engine not in ENGINES:
        raise AdapterInputError("engine", f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    checked = (("adapter_dtype", adapter_dtype), ("dtype", dtype), ("gradient_dtype", gradient_dtype or dtype))
    for name, value in checked:
        if value not in DTYPE_BYTES:
            raise AdapterInputError(name, f"{name} must be one of {DTYPES}, got {value!r}")
    found = inventory(config)
    count = count_adapters(config, lora)
    notes = [f"{count.trainable:,} trainable of {count.all:,} parameters (LoRA r={lora.rank})"]
    if engine == "deepspeed":
        notes.append(f"DeepSpeed casts every float parameter to {dtype}, adapters and upcast ones included")
    upcast = kbit_upcast and engine != "deepspeed"
    frozen = frozen_bytes(found, count, quantization, dtype, upcast)
    # modules_to_save copies are made of the prepared (upcast) modules: fp32 (measured: bnb_bytes.json, `-mts`)
    groups = trainable_groups(count, engine, "fp32" if upcast and quantization.kind != "none" else dtype, adapter_dtype,
                              optimizer_state, state_follows_dtype, embedding_state)
    gradient = DTYPE_BYTES[gradient_dtype] if gradient_dtype else 0
    parameters = sum(n * width for _, n, width, _ in groups)
    gradients = sum(n * (gradient or width) for _, n, width, _ in groups)
    optimizer = sum(n * each for _, n, _, each in groups)
    if engine == "fsdp1" and fsdp_mixed_units:
        gradients += _mixed_unit_frozen(found, count) * (gradient or DTYPE_BYTES[dtype])
        notes.append("FSDP1 use_orig_params=True: units mixing frozen and trainable parameters keep a "
                     "gradient for all of them")
    return AdapterState(parameter_bytes=frozen.total + parameters, gradient_bytes=gradients,
                        optimizer_bytes=optimizer, trainable=count.trainable, frozen=frozen, notes=tuple(notes))


def trainable_groups(count: AdapterCount, engine: str, dtype: str, adapter_dtype: str = "fp32", state: int = 8,
                     follows: bool = True, embedding_state: int = 0) -> tuple[tuple[str, int, int, int], ...]:
    """(label, parameters, bytes each, optimizer bytes each by `state_each`) of the trainable parameters: DeepSpeed
    casts every float parameter to `dtype` (_cast_module_mixed_precision); else the adapters in `adapter_dtype` (PEFT's
    autocast_adapter_dtype: fp32) and modules_to_save copies in `dtype`, the input embeddings' with `embedding_state`
    when not 0 (HF Trainer keeps bitsandbytes' 8-bit optimizers at 32 bits for every nn.Embedding weight, a copy's
    included: transformers/trainer.py `create_optimizer`, register_module_override with optim_bits 32: fp32 states)."""
    a, c = DTYPE_BYTES[adapter_dtype], DTYPE_BYTES[dtype]
    if engine == "deepspeed":
        return ((f"trainable ({dtype}, DeepSpeed's recast)", count.trainable, c, state_each(engine, c, state)),)
    embeddings = sum(t.weight.parameters * t.instances for t in count.saved if t.weight.role == "embedding")
    copy = state_each(engine, c, state, follows)
    return ((f"adapters ({adapter_dtype}, PEFT's {'autocast' if adapter_dtype == 'fp32' else 'base dtype'})",
             count.adapters, a, state_each(engine, a, state, follows)),
            (f"modules_to_save copies ({dtype})", count.saved_copies - embeddings, c, copy),
            (f"{EMBEDDING_COPIES} ({dtype})", embeddings, c, embedding_state or copy))


def state_each(engine: str, width: int, state: int, follows: bool = True) -> int:
    """Optimizer bytes per trainable parameter of `width` bytes: DeepSpeed's fp32 state + an fp32 master of a
    16-bit one; else `state` scaled to the parameter's dtype when it follows it (torch/optim/adam.py:
    `torch.zeros_like(param)`)."""
    if engine == "deepspeed":
        return state + (4 if width < 4 else 0)
    return state * width // 4 if follows else state


def _mixed_unit_frozen(found: Inventory, count: AdapterCount) -> int:
    """Frozen parameters of the decoder layers holding an adapter (one FSDP unit per decoder layer, as
    transformer_auto_wrap_policy wraps them): their weights, biases and norms."""
    adapted: set[int] = set()
    for target in count.targets:
        adapted |= set(target.layers or ())
    return sum(w.parameters * len(set(w.layers) & adapted) for w in found.weights if w.layers is not None)
