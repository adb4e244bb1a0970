"""JSON Schemas (draft-07, what VS Code's JSON service handles best) generated from the pydantic models.

`schemas/*.json` are written by `zeromem schema --write schemas`; a test fails when they are stale.
"""

from __future__ import annotations

import json

from zeromem_lsp.configs.deepspeed.models import DeepSpeedTopLevel
from zeromem_lsp.configs.settings_model import ZeromemSettingsModel

DRAFT_07 = "http://json-schema.org/draft-07/schema#"
BASE_URI = "https://raw.githubusercontent.com/zeromem-lsp/zeromem-lsp/main/schemas/"


def _draft07(schema: dict) -> dict:
    """pydantic emits `$defs`; draft-07 resolves `definitions`."""
    text = json.dumps(schema).replace('"#/$defs/', '"#/definitions/')
    converted = json.loads(text)
    if "$defs" in converted:
        converted["definitions"] = converted.pop("$defs")
    return converted


AUTO = {"const": "auto", "description": 'Filled in by HF Transformers / Accelerate; DeepSpeed itself drops "auto" keys in strict sections.'}
ANNOTATIONS = ("title", "description", "default", "deprecated", "examples")


def _allow_auto(schema: dict) -> dict:
    """DeepSpeed drops "auto" values in its strict sections, so every field there may be "auto"."""
    for definition in schema.get("definitions", {}).values():
        for name, field in definition.get("properties", {}).items():
            if '"auto"' in json.dumps(field):
                continue
            annotations = {key: field[key] for key in ANNOTATIONS if key in field}
            body = {key: value for key, value in field.items() if key not in ANNOTATIONS}
            definition["properties"][name] = {**annotations, "anyOf": [body, AUTO]}
    return schema


def _zeromem_block() -> dict:
    schema = ZeromemSettingsModel.model_json_schema()
    schema.pop("title", None)
    schema["description"] = (
        "zeromem's declarations (ignored by DeepSpeed): model size, ranks and the per-GPU memory budget."
    )
    return schema


def deepspeed_schema() -> dict:
    schema = _allow_auto(_draft07(DeepSpeedTopLevel.model_json_schema()))
    schema["properties"]["zeromem"] = _draft07(_zeromem_block())
    return {
        "$schema": DRAFT_07,
        "$id": BASE_URI + "deepspeed.schema.json",
        "title": "DeepSpeed configuration (ds_config.json) with zeromem declarations",
        **{key: value for key, value in schema.items() if key != "title"},
    }


def settings_schema() -> dict:
    block = _draft07(_zeromem_block())
    properties = {name.replace("_", "-"): value for name, value in block["properties"].items()}
    override = {
        "type": "object",
        "description": "Settings for files matching `files` (globs relative to this settings file).",
        "properties": {"files": {"type": "array", "items": {"type": "string"}, "minItems": 1}, **properties},
        "required": ["files"],
        "additionalProperties": False,
    }
    return {
        "$schema": DRAFT_07,
        "$id": BASE_URI + "zeromem-settings.schema.json",
        "title": "zeromem project settings ([tool.zeromem] in pyproject.toml, or zeromem.toml)",
        "type": "object",
        "properties": {**properties, "overrides": {"type": "array", "items": override}},
        "additionalProperties": False,
    }


def _enum_or_number(values: tuple[str, ...], numbers: int, description: str) -> dict:
    names = list(values) + [value.lower() for value in values]
    return {"description": description, "anyOf": [{"enum": names}, {"type": "integer", "minimum": 1, "maximum": numbers},
                                                   {"type": "string", "pattern": f"^[1-{numbers}]$"}]}


BOOLEAN_LIKE = {"anyOf": [{"type": "boolean"}, {"enum": ["true", "false", "True", "False", "yes", "no", "1", "0"]}]}


def fsdp_config_schema() -> dict:
    """HF Transformers' `--fsdp_config` JSON: every key with or without the `fsdp_` prefix (stripped on load)."""
    from zeromem_lsp.configs import fsdp

    fields = {
        "min_num_params": {"type": "integer", "minimum": 0, "description": "Size-based auto-wrap threshold; "
                           "mutually exclusive with transformer_layer_cls_to_wrap when above 0."},
        "transformer_layer_cls_to_wrap": {"description": "Layer class name(s) to wrap, e.g. LlamaDecoderLayer.",
                                          "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
        "version": {"enum": [1, 2, "1", "2"], "description": "FSDP version; 2 uses fully_shard (FSDP2)."},
        "backward_prefetch": _enum_or_number(fsdp.BACKWARD_PREFETCH, 2, "FSDP1 backward prefetch policy."),
        "forward_prefetch": {**BOOLEAN_LIKE, "description": "FSDP1: prefetch the next all-gather in forward."},
        "use_orig_params": {**BOOLEAN_LIKE, "description": "FSDP1: expose the original parameters (default true)."},
        "reshard_after_forward": {"description": "FSDP2: a boolean (true ≈ FULL_SHARD); FSDP1: a strategy name.",
                                  "anyOf": [BOOLEAN_LIKE, _enum_or_number(fsdp.SHARDING_STRATEGIES, 5, "")]},
        "sync_module_states": {**BOOLEAN_LIKE, "description": "Broadcast rank 0's weights (default true); "
                               "required by cpu_ram_efficient_loading."},
        "cpu_ram_efficient_loading": {**BOOLEAN_LIKE, "description": "Only rank 0 loads the checkpoint."},
        "activation_checkpointing": {**BOOLEAN_LIKE, "description": "FSDP activation checkpointing."},
        "limit_all_gathers": {**BOOLEAN_LIKE, "description": "Rate-limit in-flight all-gathers."},
        "xla": {**BOOLEAN_LIKE, "description": "Use PyTorch/XLA FSDP."},
        "xla_fsdp_v2": {**BOOLEAN_LIKE, "description": "Use XLA SPMD FSDPv2."},
        "xla_fsdp_grad_ckpt": {**BOOLEAN_LIKE, "description": "XLA gradient checkpointing."},
        "xla_fsdp_settings": {"type": "object", "description": "Keyword arguments for XLA FSDP."},
        "sharding_strategy": {"description": "NOT read by Transformers: the strategy comes from `--fsdp` "
                              "(zeromem reports ZM352). Accelerate's name.", "deprecated": True},
        "offload_params": {"description": "NOT read by Transformers: offload comes from `--fsdp` (ZM352).",
                           "deprecated": True},
    }
    properties = {}
    for name, field in fields.items():
        properties[name] = field
        properties[f"fsdp_{name}"] = field
    properties["zeromem"] = _draft07(_zeromem_block())
    return {
        "$schema": DRAFT_07,
        "$id": BASE_URI + "fsdp-config.schema.json",
        "title": "HF Transformers --fsdp_config (keys with or without the fsdp_ prefix) with zeromem declarations",
        "type": "object",
        "properties": properties,
        "additionalProperties": True,
    }


SCHEMAS = {"deepspeed.schema.json": deepspeed_schema, "zeromem-settings.schema.json": settings_schema,
           "fsdp-config.schema.json": fsdp_config_schema}


def render(name: str) -> str:
    return json.dumps(SCHEMAS[name](), indent=2, ensure_ascii=False) + "\n"
