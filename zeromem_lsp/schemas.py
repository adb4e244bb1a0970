"""JSON Schemas (draft-07, what VS Code's JSON service handles best) generated from the pydantic models.

`schemas/*.json` are written by `zeromem schema --write schemas`; a test fails when they are stale.
"""

from __future__ import annotations

import json

from zeromem_lsp.configs.deepspeed_models import DeepSpeedTopLevel
from zeromem_lsp.configs.settings import ZeromemSettings

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
    schema = ZeromemSettings.model_json_schema()
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


SCHEMAS = {"deepspeed.schema.json": deepspeed_schema, "zeromem-settings.schema.json": settings_schema}


def render(name: str) -> str:
    return json.dumps(SCHEMAS[name](), indent=2, ensure_ascii=False) + "\n"
