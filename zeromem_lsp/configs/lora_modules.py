"""Which weights a LoRA config adapts: the model's named modules and parameters as torch lists them, matched as
PEFT's `inject_adapter` matches a LoraConfig's fields against them (pure; mirrors peft 0.21.2). The string rules:
configs/lora_targets.py; the adapters' parameters and bytes: memory/adapters.py; sources and order: docs/adapters.md.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from zeromem_lsp.configs.families import FAMILIES, MLP_ROLES, MOE_ROLES, Weight, weights
from zeromem_lsp.configs.lora_targets import (
    Excluded, TargetSpec, TargetSpecError, check_spec, checked_regex, matches, pattern_key, suffix_matches,
)
from zeromem_lsp.configs.model_config import MAX_SIZE, count_parameters, weights_shape
from zeromem_lsp.configs.settings_values import ALL_LINEAR

LINEAR_KINDS = ("linear", "conv1d")
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
    moe = FAMILIES[inventory_.model_type].moe
    if moe and moe.converted:
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
