"""LoRA / DoRA / QLoRA in the memory model: frozen and trainable parameters, their bytes, and P, G, O.

Pure (no torch). Every rule mirrors the library code named beside it; docs/adapters.md lists the sources and how
the engines shard P, G, O (the pooled formula's inputs, memory/model_state.py) once frozen and trainable parameters
are told apart; tests/unit/test_adapters.py compares the counts with PEFT's `get_nb_trainable_parameters()` and the
quantized bytes with what bitsandbytes stores (both recorded by benchmarks/adapters/measure.py).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from zeromem_lsp.configs.families import FAMILIES, MLP_ROLES, MOE_ROLES, Weight, weights
from zeromem_lsp.configs.model_config import MAX_SIZE, UnsupportedModel, count_parameters, weights_shape
from zeromem_lsp.configs.settings_values import ALL_LINEAR, QUANTIZATIONS
from zeromem_lsp.memory.precision import DTYPE_BYTES
from zeromem_lsp.memory.lora_targets import (
    Excluded, TargetSpec, TargetSpecError, check_spec, checked_regex, matches, pattern_key, suffix_matches,
)

DTYPES = "fp32, bf16, fp16"  # as this module's messages list DTYPE_BYTES
ENGINES = ("peft", "deepspeed", "fsdp1", "fsdp2")
LINEAR_KINDS = ("linear", "conv1d")
BLOCKSIZE = 64  # bitsandbytes.functional.quantize_4bit default blocksize
NESTED_BLOCKSIZE = 256  # quantize_4bit(compress_statistics=True) → quantize_blockwise(absmax, blocksize=256)
NF4_CODE_BYTES = 16 * 4  # get_4bit_type: 16 fp32 values, a new tensor per quantized weight
DYNAMIC_CODE_BYTES = 256 * 4  # quantize_blockwise's dynamic map, copied into each nested QuantState


AdapterInputError = TargetSpecError  # adapter settings the model cannot take, matching fields or others


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


def inventory(config: dict[str, Any]) -> Inventory:
    """The weights of the model a config.json describes (configs/families.weights); raises UnsupportedModel."""
    counted = count_parameters(config)
    shape = weights_shape(config)  # the count's fields: no activation model needed (phi, the issue-29 families)
    return Inventory(shape.model_type, weights(shape), counted.total, shape.tied)


# --- the model's named modules, as torch lists them (what PEFT matches target names against) ---

class Module(NamedTuple):
    """One entry of named_modules(): its full name, what it is (a Weight kind, "container", or "other" for an
    activation, dropout or rotary embedding: no parameters), the weight it holds and its layer index."""

    key: str
    kind: str
    weight: Weight | None = None
    layer: int | None = None


class Parameter(NamedTuple):
    """One entry of named_parameters(): a weight (2-D, or 3-D stacked experts) or a 1-D bias / norm weight."""

    key: str
    weight: Weight
    layer: int | None
    dims: int


def _parameterless(found: Inventory) -> list[tuple[str, tuple[int, ...] | None]]:
    """Modules without parameters (checked against named_modules in tests/data/adapters/peft_counts.json): the
    family's outside and per-layer ones (an MLP's on the dense layers), and the experts modules of sparse layers."""
    family = FAMILIES[found.model_type]
    every = tuple(sorted({i for w in found.weights for i in (w.layers or ())}))
    dense = next((w.layers for w in found.weights if w.role in MLP_ROLES and w.layers), ())
    sparse = next((w.layers for w in found.weights if w.role in MOE_ROLES and w.layers), ())
    out: list[tuple[str, tuple[int, ...] | None]] = [(name, None) for name in family.outside_modules]
    out += [(family.prefix + name, dense if name.startswith("mlp.") else every) for name in family.layer_modules]
    return [(path, layers) for path, layers in out if layers != ()] + [
        (family.prefix + name, sparse) for name in (family.moe.modules if family.moe else ()) if sparse]


def _instances(path: str, layers: tuple[int, ...] | None) -> list[tuple[str, int | None]]:
    return [(path, None)] if layers is None else [(path.replace("{i}", str(i)), i) for i in layers]


def module_tree(found: Inventory) -> tuple[tuple[Module, ...], tuple[Parameter, ...]]:
    """Every named module (containers included) and every named parameter of the model, by full name."""
    leaves: dict[str, Module] = {}
    parameters: list[Parameter] = []
    for weight in found.weights:
        for key, layer in _instances(weight.path, weight.layers):
            if weight.kind == "experts":  # a parameter of the experts module, not a module
                parameters.append(Parameter(key, weight, layer, 3))
                continue
            leaves[key] = Module(key, weight.kind, weight, layer)
            parameters.append(Parameter(key + ".weight", weight, layer, len(weight.shapes()[0])))
            if weight.bias:
                parameters.append(Parameter(key + ".bias", weight, layer, 1))
    for path, layers in _parameterless(found):
        for key, layer in _instances(path, layers):
            leaves[key] = Module(key, "other", None, layer)
    containers: dict[str, Module] = {}
    for key in leaves:
        parts = key.split(".")
        for end in range(1, len(parts)):
            prefix = ".".join(parts[:end])
            if prefix not in leaves:
                containers.setdefault(prefix, Module(prefix, "container"))
    return tuple(containers.values()) + tuple(leaves.values()), tuple(parameters)


# --- which weights a LoRA config targets (peft/tuners/tuners_utils.py: BaseTuner.inject_adapter) ---

ADAPTABLE = LINEAR_KINDS + ("head", "embedding")  # lora's dispatchers: nn.Linear, Conv1D, nn.Embedding
KIND_WORDS = {"container": "module holding other modules", "other": "module without weights", "norm": "norm layer",
              "router": "MoE router (not an nn.Linear in transformers 5)"}


class Target(NamedTuple):
    """One adapted weight: LoRA A (in → r) and B (r → out) on every instance in `layers`."""

    weight: Weight
    layers: tuple[int, ...] | None
    rank: int

    @property
    def instances(self) -> int:
        return 1 if self.layers is None else len(self.layers)


class LoraSettings(NamedTuple):
    """A LoRA config as PEFT's LoraConfig takes it. A string `targets` is a regular expression (or all-linear);
    `rank_pattern` keeps its keys in order (the first matching key wins)."""

    rank: int
    targets: tuple[str, ...] | str = ALL_LINEAR
    modules_to_save: tuple[str, ...] = ()
    dora: bool = False
    lora_bias: bool = False
    exclude_modules: tuple[str, ...] | str = ()
    layers_to_transform: tuple[int, ...] | int | None = None
    layers_pattern: tuple[str, ...] | str = ()
    rank_pattern: tuple[tuple[str, int], ...] = ()
    target_parameters: tuple[str, ...] = ()
    linear_names: bool = False  # targets gain every nn.Linear's leaf name but the head's (linear_leaf_names)


def linear_leaf_names(modules: tuple[Module, ...]) -> tuple[str, ...]:
    """What axolotl (`find_all_linear_names`) and LLaMA-Factory (`find_all_linear_modules`) pass as target_modules:
    every nn.Linear's last name component but the head's (not PEFT's all-linear: docs/adapters.md)."""
    return tuple(sorted({m.key.rsplit(".", 1)[-1] for m in modules if m.kind == "linear"}))


def _check_rank(rank: object, field: str = "lora_r") -> int:
    if isinstance(rank, bool) or not isinstance(rank, int) or rank <= 0:
        raise AdapterInputError(field, f"LoRA rank must be a positive integer, got {rank!r}")
    if rank > MAX_SIZE:
        raise AdapterInputError(field, f"LoRA rank {rank:,} is absurd (more than {MAX_SIZE:,})")
    return rank


def _aliases(model_type: str) -> tuple[str, tuple[str, str], str]:
    moe = FAMILIES[model_type].moe
    assert moe is not None, model_type
    return moe.aliases


def _moe_mapping(model_type: str) -> dict[str, str]:
    """_MOE_TARGET_MODULE_MAPPING: a v4 name → the v5 parameter it targets (router, fused pair, down)."""
    router, pair, down = _aliases(model_type)
    return {router: "gate.weight", pair[0]: "gate_up_proj", pair[1]: "gate_up_proj", down: "down_proj"}


def _convert_moe(found: Inventory, spec: TargetSpec, modules: tuple[Module, ...], parameters: tuple[Parameter, ...],
                 names: set[str], rank: int) -> tuple[TargetSpec, set[str], tuple[tuple[str, int], ...]]:
    """_convert_peft_config_moe: v4 names become target_parameters on v5's fused MoE weights, a string target
    resolved to leaf names first (_resolve_string_target_modules); the fused pair together, at rank 2r."""
    mapping = _moe_mapping(found.model_type)
    targets = spec.targets
    if isinstance(targets, str):
        if targets.lower() == ALL_LINEAR:
            resolved = {m.key.rsplit(".", 1)[-1] for m in modules if m.kind in LINEAR_KINDS} | set(mapping)
        else:
            keys = [m.key for m in modules] + [p.key for p in parameters]
            resolved = {key.rsplit(".", 1)[-1] for key in keys if matches(spec, key)}
            for old, new in mapping.items():
                containers = [p.key.rpartition(".")[0] for p in parameters if p.key.rsplit(".", 1)[-1] == new]
                if old not in resolved and any(matches(spec, f"{container}.{old}") for container in containers):
                    resolved.add(old)
        if not resolved:
            return spec, names, ()
        targets = tuple(sorted(resolved))
    names, remaining, fused = set(names), [], set()
    for target in targets:
        mapped = next((old for old in mapping if target == old or target.endswith(f".{old}")), None)
        if mapped is None:
            remaining.append(target)
            continue
        names.add(mapping[mapped])
        if mapping[mapped] == "gate_up_proj":
            fused.add(mapped)
    pair = _aliases(found.model_type)[1]
    if 0 < len(fused) < 2:
        missing = ", ".join(sorted(set(pair) - fused))
        raise AdapterInputError("lora_target_modules", (
            f"{', '.join(sorted(fused))} cannot be targeted without {missing}: transformers fuses them "
            f"into experts.gate_up_proj (peft _convert_peft_config_moe)"))
    doubled = ((r".*\.gate_up_proj", 2 * rank),) if fused else ()
    return spec._replace(targets=tuple(remaining)), names, doubled


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


def _spec(lora: LoraSettings) -> TargetSpec:
    """The matching fields, type-checked, then LoraConfig's own refusals (lora_targets.check_spec)."""
    targets = lora.targets
    if not isinstance(targets, str):
        targets = tuple(targets)
        if not all(isinstance(name, str) and name for name in targets) or not (targets or lora.target_parameters):
            raise AdapterInputError("lora_target_modules", f"target_modules must name modules, got {lora.targets!r}")
    return check_spec(TargetSpec(targets, lora.exclude_modules, tuple(lora.modules_to_save), lora.layers_to_transform,
                                 lora.layers_pattern))


def _rank_table(lora: LoraSettings) -> tuple[tuple[str, int], ...]:
    table = []
    for key, value in lora.rank_pattern:
        checked_regex(key, "rank_pattern", "rank_pattern key")
        table.append((key, _check_rank(value, "rank_pattern")))
    return tuple(table)


def _nothing_targeted(found: Inventory, lora: LoraSettings, excluded: bool, unmatched: bool) -> AdapterInputError:
    """inject_adapter's errors when no module and no parameter was adapted, each naming the model's linears."""
    targets = lora.targets if isinstance(lora.targets, str) else ", ".join(sorted(lora.targets)) or "[]"
    if isinstance(lora.targets, str) and lora.targets.lower() != ALL_LINEAR:
        example = next(f"{w.path.replace('{i}', '0')}" for w in found.weights if w.kind in LINEAR_KINDS)
        targets = f"regex {lora.targets!r} (matched against each module's full name, e.g. {example})"
    if excluded and not unmatched:
        field, lead = "exclude_modules", "every module is excluded by exclude_modules / modules_to_save"
    elif not excluded and not lora.targets:
        field, lead = "lora_target_modules", "no target_modules and no target_parameters matched"
    elif not excluded:
        field, lead = "lora_target_modules", f"LoRA targets {targets} match no module of this {found.model_type} model"
    else:
        field, lead = "lora_target_modules", (f"LoRA targets {targets} leave no module of this {found.model_type} "
                                              "model once exclude_modules and modules_to_save are taken out")
    if lora.layers_to_transform is not None:
        lead += f" (layers_to_transform {lora.layers_to_transform!r}"
        lead += f", layers_pattern {lora.layers_pattern!r})" if lora.layers_pattern else ")"
    return AdapterInputError(field, f"{lead}; its linear layers are {', '.join(found.linear_names)}")


def resolve_targets(inventory_: Inventory, lora: LoraSettings) -> tuple[tuple[Target, ...], tuple[Target, ...]]:
    """(adapted weights, modules_to_save copies) as PEFT's inject_adapter finds them; raises AdapterInputError
    naming the setting. Every named module is matched (lora_targets.matches); a matched module that is not a
    Linear, Conv1D or Embedding is refused as PEFT refuses it; target_parameters wrap parameters."""
    rank = _check_rank(lora.rank)
    table = _rank_table(lora)
    saved = _saved_modules(inventory_, tuple(lora.modules_to_save))
    modules, parameters = module_tree(inventory_)
    if lora.linear_names:  # axolotl wraps a string target in a list first
        given = (lora.targets,) if isinstance(lora.targets, str) else tuple(lora.targets)
        lora = lora._replace(targets=tuple(dict.fromkeys(given + linear_leaf_names(modules))))
    spec = _spec(lora)
    if lora.dora and lora.lora_bias:
        raise AdapterInputError("use_dora", "lora_bias is not supported with DoRA (peft LoraConfig)")
    names, doubled = set(lora.target_parameters), tuple[tuple[str, int], ...]()
    if FAMILIES[inventory_.model_type].moe:
        spec, names, doubled = _convert_moe(inventory_, spec, modules, parameters, names, rank)
    if isinstance(spec.targets, str) and spec.targets.lower() == ALL_LINEAR:
        # _maybe_include_all_linear_layers: the full names of every nn.Linear / Conv1D but the output embeddings
        spec = spec._replace(targets=frozenset(m.key for m in modules if m.kind in LINEAR_KINDS))
    table += doubled
    keys = tuple(key for key, _ in table)

    def rank_of(key: str) -> int:
        found = pattern_key(keys, key)
        return rank if found is None else dict(table)[found]

    chosen: dict[tuple[Weight, int], set[int | None]] = {}
    adapted: set[tuple[Weight, int | None]] = set()
    excluded = unmatched = False
    for module in modules:
        result = matches(spec, module.key)
        if isinstance(result, Excluded):
            excluded = True
        elif not result:
            unmatched = True
        elif module.kind not in ADAPTABLE or module.weight is None:
            raise AdapterInputError("lora_target_modules", (
                f"target_modules match {module.key}, a {KIND_WORDS.get(module.kind, module.kind)}: PEFT's LoRA adapts "
                "only Linear, Conv1D and Embedding modules (\"Target module ... is not supported\")"))
        else:
            chosen.setdefault((module.weight, rank_of(module.key)), set()).add(module.layer)
            adapted.add((module.weight, module.layer))
    for parameter in parameters if names else ():
        if not suffix_matches(names, parameter.key):
            continue
        if parameter.dims == 1:
            raise AdapterInputError("target_parameters", f"target_parameters match {parameter.key}, a 1-D parameter: "
                                    "PEFT's lora.ParamWrapper takes 2-D and 3-D parameters only")
        if (parameter.weight, parameter.layer) in adapted:
            raise AdapterInputError("target_parameters", f"{parameter.key} is targeted both as a module and as a "
                                    "parameter (PEFT refuses wrapping a LoRA layer's parameter)")
        chosen.setdefault((parameter.weight, rank_of(parameter.key)), set()).add(parameter.layer)
    if not chosen:
        raise _nothing_targeted(inventory_, lora, excluded, unmatched)
    targets = [Target(weight, None if weight.layers is None else tuple(sorted(i for i in layers if i is not None)), r)
               for (weight, r), layers in chosen.items()]
    if all(min(t.weight.in_features, t.weight.out_features) < t.rank for t in targets):
        widest = max(min(t.weight.in_features, t.weight.out_features) for t in targets)
        raise AdapterInputError("lora_r", (
            f"LoRA rank {rank:,} exceeds the smaller side of every targeted weight (at most {widest:,}): "
            "the adapter would not be low-rank"))
    if lora.dora and any(t.weight.kind in ("router", "experts") for t in targets):
        raise AdapterInputError("use_dora", "DoRA does not work on MoE expert or router parameters "
                                "(peft lora.ParamWrapper refuses use_dora)")
    return tuple(targets), tuple(saved)


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
                state_follows_dtype: bool = True) -> AdapterState:
    """P, G, O (bytes) for LoRA training; the stage then applies zeromem_lsp.memory.model_state.model_state_bytes.
    The frozen base (`frozen_bytes`; DeepSpeed recasts an fp32-upcast one too) and the trainable parameters
    (`trainable_groups`), gradients alike, no master copy but DeepSpeed's, optimizer bytes by `state_each`
    (`optimizer_state`: per fp32 parameter, Adam 8; `state_follows_dtype=False` for 8-bit optimizers). "fsdp1" with
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
    frozen = frozen_bytes(found, count, quantization, dtype, kbit_upcast and engine != "deepspeed")
    groups = trainable_groups(count, engine, dtype, adapter_dtype)
    gradient = DTYPE_BYTES[gradient_dtype] if gradient_dtype else 0
    parameters = sum(n * width for _, n, width in groups)
    gradients = sum(n * (gradient or width) for _, n, width in groups)
    optimizer = sum(n * state_each(engine, width, optimizer_state, state_follows_dtype) for _, n, width in groups)
    if engine == "fsdp1" and fsdp_mixed_units:
        gradients += _mixed_unit_frozen(found, count) * (gradient or DTYPE_BYTES[dtype])
        notes.append("FSDP1 use_orig_params=True: units mixing frozen and trainable parameters keep a "
                     "gradient for all of them")
    return AdapterState(parameter_bytes=frozen.total + parameters, gradient_bytes=gradients,
                        optimizer_bytes=optimizer, trainable=count.trainable, frozen=frozen, notes=tuple(notes))


def trainable_groups(count: AdapterCount, engine: str, dtype: str,
                     adapter_dtype: str = "fp32") -> tuple[tuple[str, int, int], ...]:
    """(label, parameters, bytes each) of the trainable parameters: DeepSpeed casts every float parameter to `dtype`
    (_cast_module_mixed_precision); else the adapters in `adapter_dtype` (PEFT's autocast_adapter_dtype: fp32) and
    modules_to_save copies in `dtype`."""
    if engine == "deepspeed":
        return ((f"trainable ({dtype}, DeepSpeed's recast)", count.trainable, DTYPE_BYTES[dtype]),)
    return ((f"adapters ({adapter_dtype}, PEFT's {'autocast' if adapter_dtype == 'fp32' else 'base dtype'})",
             count.adapters, DTYPE_BYTES[adapter_dtype]),
            (f"modules_to_save copies ({dtype})", count.saved_copies, DTYPE_BYTES[dtype]))


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
