"""LoRA / DoRA / QLoRA in the memory model: frozen and trainable parameters, their bytes, and P, G, O.

Pure (no torch). Every rule mirrors the library code named beside it; docs/adapters.md lists the sources,
tests/unit/test_adapters.py compares the counts with PEFT's own `get_nb_trainable_parameters()` and the
quantized bytes with what bitsandbytes stores (both recorded by benchmarks/adapters/measure.py).

P, G, O stay the pooled formula's inputs (zeromem_lsp/core.py). The engines shard them as the formula
already says once frozen and trainable parameters are told apart: ZeRO-1/2 flatten and shard only trainable
parameters (frozen ones stay whole on every rank, inside P); ZeRO-3 and FSDP2 partition every parameter;
FSDP1 with use_orig_params=True keeps a gradient for the whole flat parameter of a unit that mixes frozen
and trainable parameters (`fsdp_mixed_units`).
"""

from __future__ import annotations

from typing import NamedTuple

from zeromem_lsp.configs.model_config import (
    LLAMA_LIKE,
    MAX_SIZE,
    ModelShape,
    UnsupportedModel,
    count_parameters,
    model_shape,
)

ALL_LINEAR = "all-linear"  # peft.utils.constants.INCLUDE_LINEAR_LAYERS_SHORTHAND
QUANTIZATIONS = ("none", "int8", "nf4", "fp4")
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
ENGINES = ("peft", "deepspeed", "fsdp1", "fsdp2")
LINEAR_KINDS = ("linear", "conv1d")
BLOCKSIZE = 64  # bitsandbytes.functional.quantize_4bit default blocksize
NESTED_BLOCKSIZE = 256  # quantize_4bit(compress_statistics=True) → quantize_blockwise(absmax, blocksize=256)
NF4_CODE_BYTES = 16 * 4  # get_4bit_type: 16 fp32 values, a new tensor per quantized weight
DYNAMIC_CODE_BYTES = 256 * 4  # quantize_blockwise's dynamic map, copied into each nested QuantState
# transformers v4 names PEFT maps onto v5's fused MoE parameters (peft/utils/transformers_weight_conversion.py,
# _MOE_TARGET_MODULE_MAPPING / _MOE_FUSED_TARGETS): (router, fused gate+up pair, down)
MOE_ALIASES = {"mixtral": ("gate", ("w1", "w3"), "w2"), "qwen3_moe": ("gate", ("gate_proj", "up_proj"), "down_proj")}


class AdapterInputError(ValueError):
    """Adapter settings the model cannot take; `field` names the setting (lora_r, lora_target_modules, ...)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class Weight(NamedTuple):
    """One weight of the model, as PEFT and bitsandbytes see it.

    `path` is the module name with `{i}` for the decoder-layer index; `layers` the indices holding it (None:
    outside the layers). `experts` > 0 marks a stacked (E, out, in) MoE parameter (not an nn.Linear)."""

    path: str
    in_features: int
    out_features: int
    layers: tuple[int, ...] | None
    kind: str = "linear"  # linear, conv1d (gpt2), embedding, head, router, experts, norm (in_features 1)
    bias: bool = False
    experts: int = 0

    @property
    def instances(self) -> int:
        return 1 if self.layers is None else len(self.layers)

    @property
    def elements(self) -> int:
        """Weight elements of one instance (no bias)."""
        return max(self.experts, 1) * self.in_features * self.out_features

    @property
    def parameters(self) -> int:
        """Parameters of one instance, bias included."""
        return self.elements + (self.out_features if self.bias else 0)


class Inventory(NamedTuple):
    """A model's weights and its exact parameter count (configs/model_config.count_parameters)."""

    model_type: str
    weights: tuple[Weight, ...]
    total: int
    tied: bool

    @property
    def linear_names(self) -> tuple[str, ...]:
        """The leaf names of the linear layers, for messages (PEFT's all-linear leaves the head out)."""
        kinds = LINEAR_KINDS + ("head",)
        return tuple(dict.fromkeys(w.path.rsplit(".", 1)[-1] for w in self.weights if w.kind in kinds))


def _llama_like_weights(config: dict, shape: ModelShape) -> list[Weight]:
    qkv_bias, o_bias = LLAMA_LIKE[shape.model_type][:2]
    attention_bias = bool(config.get("attention_bias", False))
    qkv_bias = attention_bias if qkv_bias is None else qkv_bias
    o_bias = attention_bias if o_bias is None else o_bias
    mlp_bias = bool(config.get("mlp_bias", False))
    h, layers = shape.hidden, tuple(range(shape.layers))
    q, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    prefix = "model.layers.{i}."
    weights = [Weight("model.embed_tokens", shape.vocab, h, None, "embedding")]
    if shape.model_type == "phi3":  # fused qkv_proj and gate_up_proj (Phi3Attention, Phi3MLP)
        weights += [Weight(prefix + "self_attn.qkv_proj", h, q + 2 * kv, layers),
                    Weight(prefix + "self_attn.o_proj", q, h, layers)]
    else:
        weights += [Weight(prefix + "self_attn.q_proj", h, q, layers, bias=qkv_bias),
                    Weight(prefix + "self_attn.k_proj", h, kv, layers, bias=qkv_bias),
                    Weight(prefix + "self_attn.v_proj", h, kv, layers, bias=qkv_bias),
                    Weight(prefix + "self_attn.o_proj", q, h, layers, bias=o_bias)]
    sparse = _sparse_layers(config, shape)
    dense = tuple(i for i in layers if i not in sparse)
    if shape.model_type == "phi3":
        weights += [Weight(prefix + "mlp.gate_up_proj", h, 2 * shape.intermediate, dense),
                    Weight(prefix + "mlp.down_proj", shape.intermediate, h, dense)]
    elif dense:
        weights += [Weight(prefix + "mlp.gate_proj", h, shape.intermediate, dense, bias=mlp_bias),
                    Weight(prefix + "mlp.up_proj", h, shape.intermediate, dense, bias=mlp_bias),
                    Weight(prefix + "mlp.down_proj", shape.intermediate, h, dense, bias=mlp_bias)]
    if sparse:  # transformers 5: a router weight and stacked expert parameters, none of them nn.Linear
        e, width = shape.experts, shape.expert_intermediate
        weights += [Weight(prefix + "mlp.gate", h, e, sparse, "router"),
                    Weight(prefix + "mlp.experts.gate_up_proj", h, 2 * width, sparse, "experts", experts=e),
                    Weight(prefix + "mlp.experts.down_proj", width, h, sparse, "experts", experts=e)]
    norms = ("input_layernorm", "post_attention_layernorm")
    if shape.model_type in ("gemma2", "gemma3_text"):
        norms += ("pre_feedforward_layernorm", "post_feedforward_layernorm")
    weights += [Weight(prefix + name, 1, h, layers, "norm") for name in norms]
    if shape.model_type in ("qwen3", "qwen3_moe", "gemma3_text"):
        weights += [Weight(prefix + f"self_attn.{name}", 1, shape.head_dim, layers, "norm")
                    for name in ("q_norm", "k_norm")]
    return weights + [Weight("model.norm", 1, h, None, "norm"), Weight("lm_head", h, shape.vocab, None, "head")]


def _sparse_layers(config: dict, shape: ModelShape) -> tuple[int, ...]:
    """Indices of the MoE layers (Qwen3MoeDecoderLayer: i not in mlp_only_layers and (i + 1) % step == 0)."""
    if not shape.sparse_layers:
        return ()
    if shape.model_type == "mixtral":
        return tuple(range(shape.layers))
    step = config.get("decoder_sparse_step") or 1
    dense_only = set(config.get("mlp_only_layers") or ())
    return tuple(i for i in range(shape.layers) if i not in dense_only and (i + 1) % step == 0)


def _gpt2_weights(config: dict, shape: ModelShape) -> list[Weight]:
    h, layers, inner = shape.hidden, tuple(range(shape.layers)), shape.intermediate
    positions = config.get("n_positions", config.get("max_position_embeddings"))
    prefix = "transformer.h.{i}."
    return [Weight("transformer.wte", shape.vocab, h, None, "embedding"),
            Weight("transformer.wpe", positions, h, None, "embedding"),
            Weight(prefix + "attn.c_attn", h, 3 * h, layers, "conv1d", True),
            Weight(prefix + "attn.c_proj", h, h, layers, "conv1d", True),
            Weight(prefix + "mlp.c_fc", h, inner, layers, "conv1d", True),
            Weight(prefix + "mlp.c_proj", inner, h, layers, "conv1d", True),
            Weight(prefix + "ln_1", 1, h, layers, "norm", True), Weight(prefix + "ln_2", 1, h, layers, "norm", True),
            Weight("transformer.ln_f", 1, h, None, "norm", True), Weight("lm_head", h, shape.vocab, None, "head")]


def _gpt_neox_weights(config: dict, shape: ModelShape) -> list[Weight]:
    h, layers, inner = shape.hidden, tuple(range(shape.layers)), shape.intermediate
    bias = bool(config.get("attention_bias", True))
    prefix = "gpt_neox.layers.{i}."
    return [Weight("gpt_neox.embed_in", shape.vocab, h, None, "embedding"),
            Weight(prefix + "attention.query_key_value", h, 3 * h, layers, bias=bias),
            Weight(prefix + "attention.dense", h, h, layers, bias=bias),
            Weight(prefix + "mlp.dense_h_to_4h", h, inner, layers, bias=True),
            Weight(prefix + "mlp.dense_4h_to_h", inner, h, layers, bias=True),
            Weight(prefix + "input_layernorm", 1, h, layers, "norm", True),
            Weight(prefix + "post_attention_layernorm", 1, h, layers, "norm", True),
            Weight("gpt_neox.final_layer_norm", 1, h, None, "norm", True),
            Weight("lm_head", h, shape.vocab, None, "head")]


def inventory(config: dict) -> Inventory:
    """The weights of the model a config.json describes; raises UnsupportedModel naming the field."""
    counted = count_parameters(config)
    shape = model_shape(config)
    inner = config.get("text_config") if shape.model_type != config.get("model_type") else None
    fields = inner if isinstance(inner, dict) else config
    if shape.model_type == "gpt2":
        weights = _gpt2_weights(fields, shape)
    elif shape.model_type == "gpt_neox":
        weights = _gpt_neox_weights(fields, shape)
    else:
        weights = _llama_like_weights(fields, shape)
    return Inventory(shape.model_type, tuple(weights), counted.total, shape.tied)


# --- which weights a LoRA config targets (peft/tuners/tuners_utils.py: check_target_module_exists) ---

def _matching_layers(weight: Weight, target: str) -> tuple[int, ...] | None:
    """The instances whose full name is `target` or ends with "." + target; None when no instance matches.

    A target reaching the layer index ("layers.1.self_attn.o_proj") matches that layer only."""
    path, wanted = weight.path.split("."), target.split(".")
    if len(wanted) > len(path):
        return None
    layers = weight.layers
    for part, want in zip(path[-len(wanted):], wanted):
        if part == "{i}":
            if not want.isdigit() or str(int(want)) != want or int(want) not in (layers or ()):
                return None
            layers = (int(want),)
        elif part != want:
            return None
    return () if layers is None else layers


class Target(NamedTuple):
    """One adapted weight: LoRA A (in → r) and B (r → out) on every instance in `layers`."""

    weight: Weight
    layers: tuple[int, ...] | None
    rank: int

    @property
    def instances(self) -> int:
        return 1 if self.layers is None else len(self.layers)


class LoraSettings(NamedTuple):
    """A LoRA config as PEFT's LoraConfig takes it."""

    rank: int
    targets: tuple[str, ...] | str = ALL_LINEAR
    modules_to_save: tuple[str, ...] = ()
    dora: bool = False
    lora_bias: bool = False


def _check_rank(rank: object) -> int:
    if isinstance(rank, bool) or not isinstance(rank, int) or rank <= 0:
        raise AdapterInputError("lora_r", f"LoRA rank must be a positive integer, got {rank!r}")
    if rank > MAX_SIZE:
        raise AdapterInputError("lora_r", f"LoRA rank {rank:,} is absurd (more than {MAX_SIZE:,})")
    return rank


def _moe_targets(inventory_: Inventory, names: set[str], rank: int) -> tuple[list[Target], set[str]]:
    """PEFT's _convert_peft_config_moe: v4 names become target_parameters on v5's fused MoE weights.

    The fused gate+up pair must be targeted together and gets rank 2r; a mapped name leaves the module
    targets (whatever the layer prefix, it applies to every sparse layer)."""
    aliases = MOE_ALIASES.get(inventory_.model_type)
    if aliases is None:
        return [], set()
    router, pair, down = aliases
    leaf = {name: name.rsplit(".", 1)[-1] for name in names}
    used = {name for name, last in leaf.items() if last in (router, down, *pair)}
    present = {leaf[name] for name in used}
    if 0 < len(present & set(pair)) < 2:
        missing = ", ".join(sorted(set(pair) - present))
        raise AdapterInputError("lora_target_modules", (
            f"{', '.join(sorted(present & set(pair)))} cannot be targeted without {missing}: transformers fuses them "
            f"into experts.gate_up_proj (peft _convert_peft_config_moe)"))
    by_leaf = {w.path.rsplit(".", 1)[-1]: w for w in inventory_.weights if w.kind in ("router", "experts")}
    chosen = []
    if router in present and "gate" in by_leaf:
        chosen.append(Target(by_leaf["gate"], by_leaf["gate"].layers, rank))
    if set(pair) <= present and "gate_up_proj" in by_leaf:
        chosen.append(Target(by_leaf["gate_up_proj"], by_leaf["gate_up_proj"].layers, 2 * rank))
    if down in present and "down_proj" in by_leaf:
        experts_down = next(w for w in inventory_.weights if w.kind == "experts" and w.path.endswith("down_proj"))
        chosen.append(Target(experts_down, experts_down.layers, rank))
    return chosen, used


def _saved_modules(inventory_: Inventory, names: tuple[str, ...]) -> list[Target]:
    """modules_to_save: every module whose name ends with a listed name (peft/utils/other.py _set_trainable)."""
    saved: dict[Weight, set[int] | None] = {}
    for name in names:
        if not isinstance(name, str) or not name:
            raise AdapterInputError("modules_to_save", f"modules_to_save must name modules, got {name!r}")
        found = False
        for weight in inventory_.weights:
            layers = _suffix_layers(weight, name)
            if layers is not None and weight.kind not in ("router", "experts"):
                found = True
                saved[weight] = None if weight.layers is None else (saved.get(weight) or set()) | set(layers)
        if not found:
            known = ", ".join(w.path.rsplit(".", 1)[-1] for w in inventory_.weights if w.layers is None)
            raise AdapterInputError("modules_to_save", f"modules_to_save {name!r} names no module of this "
                                    f"{inventory_.model_type} model (modules outside the layers: {known})")
    return [Target(weight, None if layers is None else tuple(sorted(layers)), 0) for weight, layers in saved.items()]


def _suffix_layers(weight: Weight, name: str) -> tuple[int, ...] | None:
    """_set_trainable's test `key.endswith(target_key)` (no dot required): the matching instances, or None."""
    if weight.layers is None:
        return () if weight.path.endswith(name) else None
    if not any(character.isdigit() for character in name):  # the layer index cannot matter
        return weight.layers if weight.path.replace("{i}", "0").endswith(name) else None
    layers = tuple(i for i in weight.layers if weight.path.replace("{i}", str(i)).endswith(name))
    return layers or None


def resolve_targets(inventory_: Inventory, lora: LoraSettings) -> tuple[tuple[Target, ...], tuple[Target, ...]]:
    """(adapted weights, modules_to_save copies); raises AdapterInputError naming the setting."""
    rank = _check_rank(lora.rank)
    saved = _saved_modules(inventory_, tuple(lora.modules_to_save))
    if isinstance(lora.targets, str):
        if lora.targets.lower() != ALL_LINEAR:
            raise AdapterInputError("lora_target_modules", (
                f"target_modules {lora.targets!r}: a regular expression is not evaluated here; list the module "
                f"names ({', '.join(inventory_.linear_names)}) or use {ALL_LINEAR!r}"))
        # _maybe_include_all_linear_layers: every nn.Linear / Conv1D except the output embeddings
        names = {w.path.rsplit(".", 1)[-1] for w in inventory_.weights if w.kind in LINEAR_KINDS}
        if inventory_.model_type in MOE_ALIASES:
            names |= {alias for entry in MOE_ALIASES[inventory_.model_type]
                      for alias in (entry if isinstance(entry, tuple) else (entry,))}
        whole = True
    else:
        names, whole = set(lora.targets), False
        if not names or not all(isinstance(name, str) and name for name in names):
            raise AdapterInputError("lora_target_modules", f"target_modules must name modules, got {lora.targets!r}")
    chosen, used = _moe_targets(inventory_, names, rank)
    excluded = {target.weight: set(target.layers or ()) for target in saved}
    for weight in inventory_.weights:
        if weight.kind in ("router", "experts") or (weight in excluded and not excluded[weight]):
            continue  # MoE parameters are reached only through the v4 aliases; modules_to_save wins
        if whole and weight.kind not in LINEAR_KINDS:
            continue
        layers: set[int] = set()
        hit = False
        for name in names - used:
            found = _matching_layers(weight, name)
            if found is not None:
                hit = True
                layers |= set(found)
        layers -= excluded.get(weight, set())
        if hit and (weight.layers is None or layers):
            chosen.append(Target(weight, None if weight.layers is None else tuple(sorted(layers)), rank))
    if not chosen:
        listed = ALL_LINEAR if whole else ", ".join(sorted(names))
        raise AdapterInputError("lora_target_modules", (
            f"LoRA targets {listed} match no module of this {inventory_.model_type} model; its linear layers are "
            f"{', '.join(inventory_.linear_names)}"))
    if max(min(t.weight.in_features, t.weight.out_features) for t in chosen) < rank:
        widest = max(min(t.weight.in_features, t.weight.out_features) for t in chosen)
        raise AdapterInputError("lora_r", (
            f"LoRA rank {rank:,} exceeds the smaller side of every targeted weight (at most {widest:,}): "
            "the adapter would not be low-rank"))
    if lora.dora and any(t.weight.kind in ("router", "experts") for t in chosen):
        raise AdapterInputError("use_dora", "DoRA does not work on MoE expert or router parameters "
                                "(peft lora.ParamWrapper refuses use_dora)")
    return tuple(chosen), tuple(saved)


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


def count_adapters(config: dict, lora: LoraSettings) -> AdapterCount:
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
    """What bitsandbytes keeps for one quantized weight of `elements` values and `rows` output rows.

    4-bit (functional.quantize_4bit): two values per byte, (n + 1) // 2; one fp32 absmax per 64-block; the
    16-value fp32 code. Double quantization: the absmax as uint8 (1 B per block), an fp32 offset, one fp32
    absmax per 256 of those, and a copy of the 256-value dynamic code. 8-bit (Int8Params,
    int8_vectorwise_quant): 1 B per value and one fp32 scale (SCB) per output row."""
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
        raise AdapterInputError("dtype", f"dtype must be one of {', '.join(DTYPE_BYTES)}, got {dtype!r}")
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


def model_state(config: dict, lora: LoraSettings, quantization: Quantization = Quantization(),
                engine: str = "peft", dtype: str = "bf16", adapter_dtype: str = "fp32", optimizer_state: int = 8,
                gradient_dtype: str = "", kbit_upcast: bool = True, fsdp_mixed_units: bool = False,
                state_follows_dtype: bool = True) -> AdapterState:
    """P, G, O (bytes) for LoRA training; the stage then applies zeromem_lsp.memory.model_state.model_state_bytes.

    `optimizer_state`: the optimizer's bytes per fp32 parameter (Adam 8). engine "peft" (and "fsdp1"/"fsdp2"):
    adapters in `adapter_dtype` (PEFT's autocast_adapter_dtype: fp32), modules_to_save copies in the model
    dtype, gradients alike; no master copy, and a torch optimizer keeps its state in each parameter's dtype
    (torch/optim/adam.py: `torch.zeros_like(param)`; `state_follows_dtype=False` for 8-bit optimizers).
    "deepspeed": the engine casts every float parameter to the training dtype (_cast_module_mixed_precision),
    adapters and any fp32-upcast frozen parameter included; the optimizer keeps fp32 state and an fp32 master
    copy of 16-bit parameters. "fsdp1" with `fsdp_mixed_units` (use_orig_params=True, a wrapped unit holding
    frozen and trainable parameters): the gradient covers the frozen parameters of every decoder layer that
    holds an adapter."""
    if engine not in ENGINES:
        raise AdapterInputError("engine", f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    checked = (("adapter_dtype", adapter_dtype), ("dtype", dtype), ("gradient_dtype", gradient_dtype or dtype))
    for name, value in checked:
        if value not in DTYPE_BYTES:
            raise AdapterInputError(name, f"{name} must be one of {', '.join(DTYPE_BYTES)}, got {value!r}")
    found = inventory(config)
    count = count_adapters(config, lora)
    notes = [f"{count.trainable:,} trainable of {count.all:,} parameters (LoRA r={lora.rank})"]
    if engine == "deepspeed":
        notes.append(f"DeepSpeed casts every float parameter to {dtype}, adapters and upcast ones included")
        frozen = frozen_bytes(found, count, quantization, dtype, kbit_upcast=False)
        width = DTYPE_BYTES[dtype]
        parameters = count.trainable * width
        gradients = count.trainable * (DTYPE_BYTES[gradient_dtype] if gradient_dtype else width)
        optimizer = count.trainable * (optimizer_state + (4 if width < 4 else 0))
    else:
        frozen = frozen_bytes(found, count, quantization, dtype, kbit_upcast)
        groups = ((count.adapters, DTYPE_BYTES[adapter_dtype]), (count.saved_copies, DTYPE_BYTES[dtype]))
        parameters = sum(n * width for n, width in groups)
        gradients = sum(n * (DTYPE_BYTES[gradient_dtype] if gradient_dtype else width) for n, width in groups)
        optimizer = sum(n * (optimizer_state * width // 4 if state_follows_dtype else optimizer_state)
                        for n, width in groups)
        if engine == "fsdp1" and fsdp_mixed_units:
            unit_width = DTYPE_BYTES[gradient_dtype] if gradient_dtype else DTYPE_BYTES[dtype]
            gradients += _mixed_unit_frozen(found, count) * unit_width
            notes.append("FSDP1 use_orig_params=True: units mixing frozen and trainable parameters keep a "
                         "gradient for all of them")
    return AdapterState(parameter_bytes=frozen.total + parameters, gradient_bytes=gradients,
                        optimizer_bytes=optimizer, trainable=count.trainable, frozen=frozen, notes=tuple(notes))


def _mixed_unit_frozen(found: Inventory, count: AdapterCount) -> int:
    """Frozen parameters of the decoder layers holding an adapter (one FSDP unit per decoder layer, as
    transformer_auto_wrap_policy wraps them): their weights, biases and norms."""
    adapted: set[int] = set()
    for target in count.targets:
        adapted |= set(target.layers or ())
    return sum(w.parameters * len(set(w.layers) & adapted) for w in found.weights if w.layers is not None)
