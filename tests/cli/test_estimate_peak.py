"""`zeromem estimate` with a model config: activations, buffers and peak beside the model state.

Expected figures come from the measurements of the real model code (tests/data/activations/measured.json)
and hand arithmetic, not from the implementation."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CASES = {case["id"]: case for case in json.loads((ROOT / "tests/data/activations/measured.json").read_text())["cases"]}
GiB = 2**30


def zeromem(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zeromem_lsp", *args], capture_output=True, text=True, timeout=60)


def write_config(tmp_path: Path, case_id: str, layers: int = 2) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**CASES[case_id]["config"], "num_hidden_layers": layers}))
    return path


def llama0_parameters() -> int:
    """llama-0 by hand: V 1000, h 128, 4 q heads and 2 kv heads of 48, I 320, 2 layers, untied head."""
    attention = 128 * 4 * 48 + 2 * 128 * 2 * 48 + 4 * 48 * 128
    layer = attention + 3 * 128 * 320 + 2 * 128
    return 1000 * 128 + 2 * layer + 128 + 1000 * 128


def test_peak_of_a_measured_case(tmp_path):
    case = CASES["llama-0"]  # bf16, sdpa, b 2, s 64, no checkpointing
    done = zeromem("estimate", "--model-config", str(write_config(tmp_path, "llama-0")), "-R", "8",
                   "--sequence-length", str(case["sequence_length"]), "--micro-batch", str(case["micro_batch"]),
                   "--format", "json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    n = llama0_parameters()
    assert data["inputs"]["parameters"] == n
    measured = case["saved_bytes"]["2"]
    assert data["activations"]["bytes"] == measured
    assert data["activations"]["per_layer_bytes"] == case["saved_bytes"]["2"] - case["saved_bytes"]["1"]
    assert data["activations"]["layers"] == 2
    logits_copy = 4 * 2 * 64 * 1000
    zero2_state = 2 * n + math.ceil(14 * n / 8)
    default_buckets = 2 * 500_000_000 + 2 * 500_000_000  # reduce + allgather, 2 B each, no overlap_comm
    assert data["zero2"] == zero2_state  # the model-state contract is unchanged
    assert data["peak"]["zero2"] == zero2_state + default_buckets + measured + logits_copy + GiB
    zero3_buffers = 2 * 500_000_000 + 2 * 50_000_000 + 2 * n  # max live parameters capped at the model
    assert data["buffers"]["zero3"]["bytes"] == zero3_buffers
    assert data["peak"]["zero3"] == math.ceil(16 * n / 8) + zero3_buffers + measured + logits_copy + GiB


def test_checkpointing_case_and_reserved(tmp_path):
    case = CASES["llama-4"]  # checkpointing on
    done = zeromem("estimate", "--model-config", str(write_config(tmp_path, "llama-4")), "-R", "2",
                   "--sequence-length", "96", "--micro-batch", "2", "--gradient-checkpointing",
                   "--reserved", "0", "--format", "json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["activations"]["checkpointing"] is True
    assert data["activations"]["bytes"] == case["saved_bytes"]["2"]
    assert data["reserved_bytes"] == 0
    at_peak = data["activations"]["at_peak_bytes"]
    assert at_peak == case["saved_bytes"]["2"] + data["activations"]["recompute_bytes"]
    assert data["peak"]["ddp"] == data["ddp"] + 2_000_000_000 + at_peak + 4 * 2 * 96 * 1000


def test_text_shows_the_breakdown(tmp_path):
    case = CASES["llama-0"]
    done = zeromem("estimate", "--model-config", str(write_config(tmp_path, "llama-0")), "-R", "8",
                   "--sequence-length", "64", "--micro-batch", "2", "--gpu-memory", "3GB")
    assert done.returncode == 0, done.stderr
    measured = f"{case['saved_bytes']['2']:,}"
    assert f"= {measured} B" in done.stdout
    assert "allgather_bucket_size (2 B × 500,000,000) 1,000,000,000" in done.stdout
    assert "reserved 1,073,741,824" in done.stdout
    # DDP / ZeRO-1 / ZeRO-2: 2e9 B of buckets + 2³⁰ B reserve alone exceed 3e9 B; ZeRO-3 holds 1.1e9 B of buffers
    rows: dict[str, str] = {}
    for line in done.stdout.splitlines():
        if " backward: " in line:
            rows.setdefault(line.split()[0], line)  # the table's row, before the arithmetic lines
    assert [label for label, row in rows.items() if " exceeds " in row] == ["DDP", "ZeRO-1", "ZeRO-2"]
    assert " fits " in rows["ZeRO-3"]
    assert "cheapest stage that fits: ZeRO-3 (peak" in done.stdout


def test_missing_input_is_named_and_model_state_still_shows(tmp_path):
    done = zeromem("estimate", "--model-config", str(write_config(tmp_path, "llama-0")), "-R", "8", "--format", "json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["peak"] is None and data["activations"] is None
    assert any("sequence length" in item for item in data["peak_missing"])
    assert any("micro-batch" in item for item in data["peak_missing"])
    assert data["zero3"] == math.ceil(16 * llama0_parameters() / 8)


@pytest.mark.parametrize(("config", "field"), [
    ({"model_type": "bloom", "hidden_size": 64}, "model_type"),
    ({"model_type": "llama", "hidden_size": None, "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 8, "vocab_size": 10}, "hidden_size"),  # null: LlamaConfig's default does not apply
    ({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 10**12, "num_attention_heads": 4,
      "intermediate_size": 8, "vocab_size": 10}, "num_hidden_layers"),
])
def test_bad_model_config_is_zm104_naming_the_field(tmp_path, config, field):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    alone = zeromem("estimate", "--model-config", str(path), "-R", "8", "--sequence-length", "64")
    assert alone.returncode == 2 and "Traceback" not in alone.stderr
    assert "ZM104" in alone.stderr and field in alone.stderr
    counted = zeromem("estimate", "--model-config", str(path), "--parameters", "7B", "-R", "8",
                      "--sequence-length", "64", "--micro-batch", "1", "--format", "json")
    assert counted.returncode == 0 and "Traceback" not in counted.stderr
    assert "ZM104" in counted.stderr and field in counted.stderr
    data = json.loads(counted.stdout)
    assert data["ddp"] == 7 * 10**9 * 16  # model state still shows
    assert data["peak"] is None and any(field in item for item in data["peak_missing"])


def test_shape_refused_but_count_works(tmp_path):
    path = tmp_path / "config.json"  # counted (phi is countable) but no activation model for it
    path.write_text(json.dumps({"model_type": "phi", "hidden_size": 64, "num_hidden_layers": 2,
                                "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100}))
    done = zeromem("estimate", "--model-config", str(path), "-R", "2", "--sequence-length", "8", "--micro-batch", "1")
    assert done.returncode == 0 and "ZM104" in done.stderr and "model_type" in done.stderr
    assert "ZeRO-3  = ceil((P + G + O) / R)" in done.stdout and "not computable" in done.stdout


@pytest.mark.parametrize("output", ["text", "json"])
def test_parameters_beside_a_model_config_says_which_wins(tmp_path, output):
    """Issue 21 item 7: --parameters is the count used for model state; the notes say so, with both counts."""
    path = write_config(tmp_path, "llama-0")
    counted = llama0_parameters()
    done = zeromem("estimate", "--model-config", str(path), "--parameters", "7B", "-R", "8", "--format", output)
    assert done.returncode == 0, done.stderr
    shown = done.stdout if output == "text" else " ".join(json.loads(done.stdout)["assumptions"])
    assert f"--parameters 7B (7,000,000,000) wins over the {counted:,} parameters {path} counts" in shown
    if output == "json":
        assert json.loads(done.stdout)["ddp"] == 7 * 10**9 * 16
    same = zeromem("estimate", "--model-config", str(path), "--parameters", str(counted), "-R", "8")
    assert "wins over" not in same.stdout
