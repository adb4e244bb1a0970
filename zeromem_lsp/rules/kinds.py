"""The one table from reader issue kinds to rules.

Readers (configs/) report namespaced kinds — `deepspeed.unknown_key`, `fsdp.invalid_value`,
`accelerate.unknown_key` — and this table says which rule each one is. An issue's severity is its
rule's severity: it is defined in the registry only.
"""

from __future__ import annotations

from zeromem_lsp.rules.registry import Rule, rule

KIND_RULES: dict[str, Rule] = {
    "deepspeed.unknown_key": rule("ZM201"),
    "deepspeed.invalid_value": rule("ZM202"),
    "deepspeed.batch_missing": rule("ZM204"),
    "deepspeed.batch_non_positive": rule("ZM205"),
    "deepspeed.batch_inconsistent": rule("ZM206"),
    "deepspeed.fp16_and_bf16": rule("ZM207"),
    "deepspeed.deprecated_with_replacement": rule("ZM208"),
    "deepspeed.partial_offload_below_stage3": rule("ZM209"),
    "deepspeed.removed_feature": rule("ZM210"),
    "deepspeed.alias_conflict": rule("ZM211"),
    "deepspeed.invalid_combination": rule("ZM211"),
    "deepspeed.deprecated_key": rule("ZM251"),
    "deepspeed.offload_param_below_stage3": rule("ZM252"),
    "deepspeed.auto_not_filled": rule("ZM254"),
    "deepspeed.top_level_near_miss": rule("ZM255"),
    "deepspeed.unknown_optimizer": rule("ZM256"),
    "deepspeed.incompatible_optimizer": rule("ZM256"),
    "deepspeed.unsupported_optimizer_param": rule("ZM256"),
    "deepspeed.suspicious_value": rule("ZM257"),
    "fsdp.invalid_value": rule("ZM301"),
    "fsdp.offload_alone": rule("ZM302"),
    "fsdp.full_shard_with_shard_grad_op": rule("ZM303"),
    "fsdp.min_params_with_layer_cls": rule("ZM304"),
    "fsdp.ram_efficient_without_sync": rule("ZM305"),
    "fsdp.fsdp2_rejects": rule("ZM306"),
    "fsdp.deprecated_key": rule("ZM351"),
    "fsdp.ignored_setting": rule("ZM352"),
    "accelerate.unknown_key": rule("ZM307"),
    "accelerate.accelerate_value": rule("ZM308"),
    "accelerate.deepspeed_file_conflict": rule("ZM309"),
    "accelerate.ignored_setting": rule("ZM352"),
    "recipe.unknown_key": rule("ZM310"),
    "recipe.unknown_script_key": rule("ZM357"),
    "recipe.wrong_type": rule("ZM358"),
    "recipe.missing_file": rule("ZM311"),
    "recipe.invalid_value": rule("ZM104"),
    "recipe.ignored_key": rule("ZM353"),
    "recipe.accelerate_unreadable": rule("ZM312"),
    "recipe.launch_refused": rule("ZM313"),
    "recipe.launch_overridden": rule("ZM356"),
}


def rule_for_kind(key: str) -> Rule:
    """The rule of a namespaced issue kind ("deepspeed.unknown_key")."""
    return KIND_RULES[key]


def severities(reader: str) -> dict[str, str]:
    """kind -> severity for one reader's kinds (a view of the registry)."""
    prefix = f"{reader}."
    return {key[len(prefix):]: found.severity for key, found in KIND_RULES.items() if key.startswith(prefix)}
