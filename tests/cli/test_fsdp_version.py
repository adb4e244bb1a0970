"""Which FSDP runs, through `zeromem estimate` / `check` (cli.main in-process): the version each loader defaults to,
the key that writes it, the `--fsdp-version` flag and the `fsdp_version` setting, each credited in JSON
`peak_inputs.fsdp_version`; the adapter plan's engine and the step's gathered layers follow it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import run_zeromem

ROOT = Path(__file__).resolve().parents[2]
LLAMA3 = ROOT / "tests/data/models/Meta-Llama-3-8B/config.json"
WORKLOAD = ("--model-config", str(LLAMA3), "--engine", "fsdp", "--precision", "bf16", "--param-dtype", "bf16",
            "-R", "8", "--sequence-length", "1024", "--micro-batch", "1")
LAYER = 218_112_000  # one Llama-3-8B decoder layer's parameters


def estimate_json(*args: str) -> dict:
    done = run_zeromem("estimate", *args, "--format", "json")
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def gathered_at_loss(data: dict) -> int:
    return data["phases"]["zero3"]["parts"].get("gathered parameters", 0) if data["phases"]["zero3"][
        "moment"] == "the loss's backward" else None


def test_estimate_defaults_to_fsdp2_and_the_flag_is_credited():
    default = estimate_json(*WORKLOAD)
    assert default["peak_inputs"]["fsdp_version"]["value"] == 2
    assert default["peak_inputs"]["fsdp_version"]["from"].startswith("default: FSDP2 (Transformers' TrainingArguments")
    one = estimate_json(*WORKLOAD, "--fsdp-version", "1")
    assert one["peak_inputs"]["fsdp_version"] == {"value": 1, "from": "--fsdp-version"}
    # FSDP2 keeps one layer's all-gather output alive at the loss (forward); FSDP1 does not
    forward = {version: data["phases"]["zero3"]["phases"]["forward"] for version, data in ((1, one), (2, default))}
    assert forward[2] - forward[1] == 2 * LAYER


def test_the_adapter_plan_follows_the_version():
    lora = ("--lora-rank", "16")
    assert estimate_json(*WORKLOAD, *lora)["inputs"]["adapter"]["engine"] == "fsdp2"
    assert estimate_json(*WORKLOAD, *lora, "--fsdp-version", "1")["inputs"]["adapter"]["engine"] == "fsdp1"


@pytest.mark.parametrize("value", ["3", "two", "0"])
def test_a_bad_fsdp_version_is_a_usage_error(value):
    done = run_zeromem("estimate", *WORKLOAD, "--fsdp-version", value)
    assert done.returncode == 2 and "--fsdp-version" in done.stderr and "Traceback" not in done.stderr


def accelerate(tmp_path: Path, version_line: str, block: str = "") -> Path:
    path = tmp_path / "accelerate.yaml"
    path.write_text("distributed_type: FSDP\nnum_processes: 8\nfsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n"
                    f"{version_line}  zeromem:\n    parameters: {{from_config: {LLAMA3}}}\n    sequence_length: 1024\n"
                    f"    micro_batch: 1\n    precision: bf16\n{block}", encoding="utf-8")
    return path


def test_an_accelerate_yaml_runs_fsdp1_unless_it_says_and_the_flag_overrides_what_it_says(tmp_path):
    unversioned = estimate_json("--config", str(accelerate(tmp_path, "")))["peak_inputs"]["fsdp_version"]
    assert unversioned["value"] == 1 and "accelerate launch's --fsdp_version default" in unversioned["from"]
    written = accelerate(tmp_path, "  fsdp_version: 2\n")
    assert estimate_json("--config", str(written))["peak_inputs"]["fsdp_version"] == {
        "value": 2, "from": "fsdp_version 2"}
    flagged = estimate_json("--config", str(written), "--fsdp-version", "1")["peak_inputs"]["fsdp_version"]
    assert flagged == {"value": 1, "from": "--fsdp-version (overrides fsdp_version 2)"}


def test_a_zeromem_block_setting_fills_the_default_and_a_bad_one_is_zm104(tmp_path):
    filled = accelerate(tmp_path, "", "    fsdp_version: 2\n")
    assert estimate_json("--config", str(filled))["peak_inputs"]["fsdp_version"] == {
        "value": 2, "from": "fsdp_config.zeromem.fsdp_version"}
    bad = accelerate(tmp_path, "", "    fsdp_version: 3\n")
    done = run_zeromem("check", "--format", "json", str(bad))
    findings = [f for f in json.loads(done.stdout)["findings"] if f["code"] == "ZM104"]
    assert findings and "fsdp_version" in findings[0]["message"] and "1 or 2" in findings[0]["message"]


def test_a_transformers_fsdp_config_runs_fsdp2_resharding_by_default(tmp_path):
    path = tmp_path / "fsdp_config.json"
    block = {"parameters": {"from_config": str(LLAMA3)}, "world_size": 8, "sequence_length": 1024, "micro_batch": 1,
             "precision": "bf16"}
    path.write_text(json.dumps({"transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"], "zeromem": block}),
                    encoding="utf-8")
    data = estimate_json("--config", str(path))
    assert data["peak_inputs"]["fsdp_version"]["value"] == 2
    assert "transformers 5.24" in data["peak_inputs"]["fsdp_version"]["from"]
    assert data["stage"] == "zero3"  # FULL_SHARD: reshard_after_forward defaults to true
    path.write_text(json.dumps({"version": 1, "transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"], "zeromem": block}),
                    encoding="utf-8")
    assert estimate_json("--config", str(path))["peak_inputs"]["fsdp_version"] == {"value": 1, "from": "version 1"}


def test_hybrid_shard_under_transformers_fsdp2_is_refused(tmp_path):
    path = tmp_path / "train_args.json"
    path.write_text(json.dumps({"output_dir": "out", "fsdp": "hybrid_shard auto_wrap"}), encoding="utf-8")
    done = run_zeromem("check", "--format", "json", str(path))
    found = [(f["code"], f["message"]) for f in json.loads(done.stdout)["findings"]]
    assert any(code == "ZM306" and "only available with FSDP1" in message for code, message in found), found
    path.write_text(json.dumps({"output_dir": "out", "fsdp": "hybrid_shard auto_wrap", "fsdp_config": {"version": 1}}),
                    encoding="utf-8")
    done = run_zeromem("check", "--format", "json", str(path))
    assert not any("only available with FSDP1" in f["message"] for f in json.loads(done.stdout)["findings"])


def axolotl(tmp_path: Path, top: str, block: str) -> Path:
    path = tmp_path / "axolotl.yaml"
    path.write_text(f"base_model: {LLAMA3.parent}\nsequence_len: 1024\nmicro_batch_size: 1\nbf16: true\n"
                    f"adapter: lora\nlora_r: 16\nlora_target_linear: true\n{top}fsdp_config:\n"
                    f"  auto_wrap_policy: TRANSFORMER_BASED_WRAP\n{block}", encoding="utf-8")
    return path


def test_axolotl_pins_fsdp1_and_its_top_level_key_wins(tmp_path):
    pinned = estimate_json("--config", str(axolotl(tmp_path, "", "")), "-R", "8")
    assert pinned["peak_inputs"]["fsdp_version"]["value"] == 1 and "axolotl pins" in pinned["peak_inputs"][
        "fsdp_version"]["from"]
    assert pinned["inputs"]["adapter"]["engine"] == "fsdp1"
    both = estimate_json("--config", str(axolotl(tmp_path, "fsdp_version: 2\n", "  fsdp_version: 1\n")), "-R", "8")
    assert both["peak_inputs"]["fsdp_version"]["value"] == 2 and both["inputs"]["adapter"]["engine"] == "fsdp2"
