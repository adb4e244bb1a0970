import json
from pathlib import Path

import jsonschema
import pytest

from zeromem_lsp.schemas import SCHEMAS, render

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_committed_schema_is_current_and_valid_draft_07(name):
    committed = (ROOT / "schemas" / name).read_text(encoding="utf-8")
    assert committed == render(name), f"schemas/{name} is stale: run `zeromem schema --write schemas`"
    schema = json.loads(committed)
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    jsonschema.Draft7Validator.check_schema(schema)


def _validator():
    return jsonschema.Draft7Validator(json.loads(render("deepspeed.schema.json")))


def test_deepspeed_schema_accepts_a_real_config_and_documents_fields():
    schema = json.loads(render("deepspeed.schema.json"))
    config = {
        "train_micro_batch_size_per_gpu": "auto",
        "bf16": {"enabled": "auto"},
        "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}, "stage3_prefetch_bucket_size": 5e7},
        "zeromem": {"parameters": "7B", "gpu_memory": "80GiB", "world_size": 8},
    }
    assert list(_validator().iter_errors(config)) == []
    zero = schema["definitions"]["ZeroConfig"]["properties"]
    assert zero["stage"].get("description") and "default" in zero["stage"]
    assert schema["properties"]["zeromem"]["properties"]["gpu_memory"]["description"]


@pytest.mark.parametrize(
    "config",
    [
        {"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_sz": 5}},
        {"zero_optimization": {"stage": 7}},
        {"zeromem": {"gpu_memory": "80 GBs"}},
        {"zeromem": {"gpus": 8}},
    ],
)
def test_deepspeed_schema_rejects_what_zeromem_rejects(config):
    assert list(_validator().iter_errors(config)) != []


def test_settings_schema_uses_toml_spelling():
    validator = jsonschema.Draft7Validator(json.loads(render("zeromem-settings.schema.json")))
    good = {"gpu-memory": "80GiB", "world-size": 8, "overrides": [{"files": ["a/*.json"], "parameters": "7B"}]}
    assert list(validator.iter_errors(good)) == []
    assert list(validator.iter_errors({"gpu_memory": "80GiB"})) != []
    assert list(validator.iter_errors({"overrides": [{"parameters": "7B"}]})) != []
