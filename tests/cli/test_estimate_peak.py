"""`zeromem estimate` with a model config: activations, buffers and peak beside the model state.

Expected figures come from the measurements of the real model code (tests/data/activations/measured.json)
and hand arithmetic, not from the implementation."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.conftest import shown_peak

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
    done = zeromem("estimate", "-v", "--model-config", str(write_config(tmp_path, "llama-0")), "-R", "8",
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
    zero2_state = 2 * n + math.ceil(14 * n / 8)
    assert data["zero2"] == zero2_state  # the model-state contract is unchanged
    for stage in ("ddp", "zero1", "zero2", "zero3"):
        assert data["peak"][stage] == shown_peak(data["phases"][stage])
    zero2 = data["phases"]["zero2"]  # a tiny model: DeepSpeed's default reduce bucket outweighs everything
    assert zero2["moment"] == "the top layer's backward"
    shard = math.ceil(n / 8)
    assert zero2["parts"]["reduce bucket"] == 2 * 500_000_000  # IPG buffer, 2 B × default size, no overlap_comm
    assert zero2["parts"]["parameters"] == 2 * n
    assert zero2["parts"]["fp32 master"] == 4 * shard and zero2["parts"]["optimizer states"] == 8 * shard
    acts = data["activations"]  # at the top layer every layer's saved tensors are still held, the loss's are freed
    assert zero2["parts"]["activations"] == acts["embedding_bytes"] + acts["shared_bytes"] + acts["layer_bytes"]
    zero3 = data["phases"]["zero3"]  # at the loss's backward: all of forward's activations + two fp32 T×V gradients
    assert zero3["moment"] == "the loss's backward"
    assert zero3["parts"]["activations"] == measured
    assert zero3["parts"]["log-softmax gradients"] == 2 * 4 * 2 * 64 * 1000
    assert zero3["parts"]["gradient partitions"] == 2 * shard


def test_checkpointing_case_and_reserved(tmp_path):
    case = CASES["llama-4"]  # checkpointing on
    done = zeromem("estimate", "-v", "--model-config", str(write_config(tmp_path, "llama-4")), "-R", "2",
                   "--sequence-length", "96", "--micro-batch", "2", "--gradient-checkpointing",
                   "--reserved", "0", "--format", "json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["activations"]["checkpointing"] is True
    assert data["activations"]["bytes"] == case["saved_bytes"]["2"]
    assert data["reserved_bytes"] == 0
    n = data["inputs"]["parameters"]
    for stage in ("ddp", "zero1", "zero2", "zero3"):
        assert data["peak"][stage] == shown_peak(data["phases"][stage])
    ddp = data["phases"]["ddp"]  # ZeRO-0: the optimizer step of fp32 masters over the 16-bit model holds the peak
    assert ddp["peak_phase"] == "optimizer"
    assert ddp["parts"] == {"parameters": 2 * n, "gradients": 2 * n, "fp32 master": 4 * n, "optimizer states": 8 * n,
                            "fp32 gradients": 4 * n, "optimizer scratch": 4 * n}  # foreach: one fp32 copy


def test_text_shows_the_breakdown(tmp_path):
    case = CASES["llama-0"]
    done = zeromem("estimate", "-v", "--model-config", str(write_config(tmp_path, "llama-0")), "-R", "8",
                   "--sequence-length", "64", "--micro-batch", "2", "--gpu-memory", "3GB")
    assert done.returncode == 0, done.stderr
    measured = f"{case['saved_bytes']['2']:,}"
    assert f"= {measured} B" in done.stdout
    # the reserve: two cuBLAS workspaces, the CUDA context and one NCCL communicator (8 ranks), each named
    assert "reserved: per stage: the cuBLAS workspaces + the CUDA context" in done.stdout
    from zeromem_lsp.gpu.fixed_costs import WORKSPACES_PER_STEP, fixed_costs
    costs = fixed_costs("H100", ranks=8)
    workspaces, context, nccl = WORKSPACES_PER_STEP * costs.workspace, costs.context.low, costs.nccl.low
    assert (f"reserved {workspaces + context + nccl:,} (cuBLAS workspaces {workspaces:,} + CUDA context {context:,} + "
            f"NCCL {nccl:,})") in done.stdout
    assert "reduce bucket 1,000,000,000" in done.stdout  # the IPG buffer in the peak's sum, exact
    # the largest peak is the 1e9 B reduce bucket + the 2³⁰ B reserve + a few MB: every stage fits 3e9 B, so the
    # cheapest is DDP (the old sum counted 2e9 B of buckets at DDP-ZeRO-2 and chose ZeRO-3)
    rows = {line.split()[0]: line for line in done.stdout.splitlines()
            if line.startswith(("  DDP ", "  ZeRO-")) and " GiB " in line and ":" in line and "=" not in line}
    assert set(rows) == {"DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3"}
    assert all(" fits " in row for row in rows.values())  # every peak is under 3e9 B
    assert "cheapest stage that fits: DDP (peak" in done.stdout


def test_missing_input_is_named_and_model_state_still_shows(tmp_path):
    done = zeromem("estimate", "-v", "--model-config", str(write_config(tmp_path, "llama-0")), "-R", "8", "--format", "json")
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
    alone = zeromem("estimate", "-v", "--model-config", str(path), "-R", "8", "--sequence-length", "64")
    assert alone.returncode == 2 and "Traceback" not in alone.stderr
    assert "ZM104" in alone.stderr and field in alone.stderr
    counted = zeromem("estimate", "-v", "--model-config", str(path), "--parameters", "7B", "-R", "8",
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
    done = zeromem("estimate", "-v", "--model-config", str(path), "-R", "2", "--sequence-length", "8", "--micro-batch", "1")
    assert done.returncode == 0 and "ZM104" in done.stderr and "model_type" in done.stderr
    assert "ZeRO-3  = ceil((P + G + O) / R)" in done.stdout and "not computable" in done.stdout


@pytest.mark.parametrize("output", ["text", "json"])
def test_parameters_beside_a_model_config_says_which_wins(tmp_path, output):
    """Issue 21 item 7: --parameters is the count used for model state; the notes say so, with both counts."""
    path = write_config(tmp_path, "llama-0")
    counted = llama0_parameters()
    done = zeromem("estimate", "-v", "--model-config", str(path), "--parameters", "7B", "-R", "8", "--format", output)
    assert done.returncode == 0, done.stderr
    shown = done.stdout if output == "text" else " ".join(json.loads(done.stdout)["assumptions"])
    assert f"--parameters 7B (7,000,000,000) wins over the {counted:,} parameters {path} counts" in shown
    if output == "json":
        assert json.loads(done.stdout)["ddp"] == 7 * 10**9 * 16
    same = zeromem("estimate", "-v", "--model-config", str(path), "--parameters", str(counted), "-R", "8")
    assert "wins over" not in same.stdout
