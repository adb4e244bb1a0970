"""The resolved settings' LoRA fields → the plan's `Adapter` (memory/adapter_plan.py), each with its origin, and the
setting at fault when the model cannot take the adapter (a positioned ZM104). Settings resolution, not modelling:
the adapter's bytes are memory/adapter_plan.py's and memory/adapters.py's.
"""

from __future__ import annotations

from typing import Any

from zeromem_lsp.configs.model_config import UnsupportedModel
from zeromem_lsp.configs.settings import ZeromemSettings
from zeromem_lsp.memory.adapter_plan import Adapter
from zeromem_lsp.configs.lora_modules import AdapterInputError
from zeromem_lsp.memory.adapters import count_adapters
from zeromem_lsp.provenance import Origin

#: adapters.py's field names → the zeromem setting each comes from (for a positioned ZM104).
SETTING_OF_FIELD = {"lora_r": "lora_rank", "lora_target_modules": "lora_targets", "modules_to_save": "modules_to_save",
                    "use_dora": "dora", "quantization": "quantization", "exclude_modules": "exclude_modules",
                    "layers_to_transform": "layers_to_transform", "layers_pattern": "layers_pattern",
                    "rank_pattern": "lora_rank_pattern", "target_parameters": "target_parameters"}
#: The settings an Adapter field comes from (the PEFT matching fields after the original six).
SETTING_OF_ADAPTER = {"rank": "lora_rank", "targets": "lora_targets", "modules_to_save": "modules_to_save",
                      "dora": "dora", "quantization": "quantization", "double_quant": "double_quant",
                      "exclude_modules": "exclude_modules", "layers_to_transform": "layers_to_transform",
                      "layers_pattern": "layers_pattern", "rank_pattern": "lora_rank_pattern",
                      "target_parameters": "target_parameters", "target_linear": "lora_target_linear",
                      "kbit_prepare": "kbit_prepare", "dropout": "lora_dropout"}

def adapter_from_settings(settings: ZeromemSettings, origins: dict[str, Origin]) -> Adapter | None:
    """The adapter the resolved settings describe (None without `lora_rank`); each field keeps its origin. A
    {"regex": ...} setting (settings_values.TargetRegex) becomes the string PEFT takes."""
    if settings.lora_rank is None:
        return None
    fields = SETTING_OF_ADAPTER
    values = {field: getattr(settings, name) for field, name in fields.items() if getattr(settings, name) is not None}
    for field in ("targets", "exclude_modules"):
        values[field] = getattr(values.get(field), "regex", values.get(field))
        if values[field] is None:
            del values[field]
    if values.get("target_linear") and "targets" not in values:
        values["targets"] = ()  # the linear names alone, not PEFT's all-linear
    kept = tuple((field, origins[fields[field]]) for field in values if fields[field] in origins)
    return Adapter(**values, origins=kept)


def adapter_problem(adapter: Adapter, config: dict[str, Any] | None) -> tuple[str, str] | None:
    """(the setting at fault, why) when the model cannot take this adapter, or there is no model to take it."""
    if config is None:
        return "lora_rank", ("a LoRA adapter needs the model's shape, its config.json (its linear layers are what "
                             "lora_targets name): give --model-config PATH, or parameters = {from_config = \"PATH\"} "
                             "in [tool.zeromem] or the file's zeromem block where its tool accepts one")
    try:
        count_adapters(config, adapter.lora)
    except AdapterInputError as error:
        return SETTING_OF_FIELD.get(error.field, "lora_rank"), str(error)
    except UnsupportedModel:
        return None  # the count of from_config reports it
    return None
