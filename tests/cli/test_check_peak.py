"""ZM106 (peak over budget while model state fits), the peak's ZM103 and a bad model config's ZM104, through
`zeromem check --format json`. Expected bytes: measured activations + hand arithmetic."""

import json
import math

import pytest

from tests.cli.conftest import run_zeromem, shown_peak, text_at
from tests.cli.test_estimate_peak import CASES, GiB, llama0_parameters, write_config

MEASURED = CASES["llama-0"]["saved_bytes"]["2"]  # b 2, s 64, bf16, sdpa, 2 layers


def zero2_state() -> int:
    n = llama0_parameters()
    return 2 * n + math.ceil(14 * n / 8)


def deepspeed(model: str, budget: int, *, bucket: int = 500_000_000, reserved: str | None = None) -> str:
    block = {"parameters": {"from_config": model}, "world_size": 8, "sequence_length": 64, "gpu_memory": budget}
    if reserved is not None:
        block["reserved"] = reserved
    return json.dumps({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
                       "zero_optimization": {"stage": 2, "reduce_bucket_size": bucket, "allgather_bucket_size": bucket},
                       "zeromem": block}, indent=1)


def check(tmp_path, text: str, name: str = "ds_config.json"):
    path = tmp_path / name
    path.write_text(text)
    done = run_zeromem("check", "--format", "json", str(path))
    assert "Traceback" not in done.stderr and done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)["findings"], done.returncode


def shown(tmp_path, text: str, stage: str, name: str = "ds_config.json") -> tuple[int, dict]:
    """The peak at `stage` as `zeromem estimate --config` shows it (its phase's parts + reserved), and those
    parts."""
    path = tmp_path / name
    path.write_text(text)
    done = run_zeromem("estimate", "--config", str(path), "--format", "json")
    found = json.loads(done.stdout)["phases"][stage]
    return shown_peak(found), found["parts"]


def shown_reserve(tmp_path, text: str, stage: str, name: str = "ds_config.json") -> int:
    """The reserve the stage's peak adds: the cuBLAS workspaces, the CUDA context and NCCL, each shown."""
    path = tmp_path / name
    path.write_text(text)
    gpu = json.loads(run_zeromem("estimate", "--config", str(path), "--format", "json").stdout)["phases"][stage]["gpu"]
    return gpu["cublas_workspaces_bytes"] + gpu["cuda_context_bytes"] + gpu["nccl_bytes"]


def test_buffers_drive_the_peak_over_the_budget(tmp_path):
    model = str(write_config(tmp_path, "llama-0"))
    peak, parts = shown(tmp_path, deepspeed(model, GiB), "zero2")
    reserved = shown_reserve(tmp_path, deepspeed(model, GiB), "zero2")
    assert parts["reduce bucket"] == 2 * 500_000_000 == max(parts.values())  # the IPG buffer, 2 B × the size
    assert peak == sum(parts.values()) + reserved
    text = deepspeed(model, peak - 1)
    findings, status = check(tmp_path, text)
    [hit] = [f for f in findings if f["code"] == "ZM106"]
    assert hit["severity"] == "warning" and status == 0
    assert f"= {peak:,} B" in hit["message"] and "largest part beside model state is reduce bucket" in hit["message"]
    assert text_at(text, hit["range"]) == "500000000"  # the reduce bucket: the value that drives it most
    assert not [f for f in findings if f["code"] == "ZM101"]


def test_activations_drive_the_peak(tmp_path):
    model = str(write_config(tmp_path, "llama-0"))
    peak, parts = shown(tmp_path, deepspeed(model, GiB, bucket=1000, reserved="0"), "zero2")
    assert parts["activations"] == MEASURED and parts["log-softmax gradients"] == 2 * 4 * 2 * 64 * 1000  # the loss
    assert parts["parameters"] == 2 * llama0_parameters() and peak == sum(parts.values())
    text = deepspeed(model, peak - 1, bucket=1000, reserved="0")
    findings, _ = check(tmp_path, text)
    [hit] = [f for f in findings if f["code"] == "ZM106"]
    assert f"= {peak:,} B" in hit["message"] and "largest part beside model state is activations" in hit["message"]
    assert text_at(text, hit["range"]) == "2"  # train_micro_batch_size_per_gpu


def test_quiet_when_the_peak_fits(tmp_path):
    model = str(write_config(tmp_path, "llama-0"))
    peak, _ = shown(tmp_path, deepspeed(model, GiB), "zero2")
    findings, _ = check(tmp_path, deepspeed(model, peak))
    assert [f["code"] for f in findings if f["code"] in ("ZM101", "ZM103", "ZM106")] == []


def test_model_state_over_budget_is_zm101_not_zm106(tmp_path):
    model = str(write_config(tmp_path, "llama-0"))
    findings, status = check(tmp_path, deepspeed(model, zero2_state() - 1))
    assert [f["code"] for f in findings if f["code"] in ("ZM101", "ZM106")] == ["ZM101"] and status == 1


def test_peak_inputs_missing_are_named(tmp_path):
    text = json.dumps({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2},
                       "zeromem": {"parameters": "1B", "world_size": 8, "sequence_length": 64, "gpu_memory": "80GiB"}})
    findings, _ = check(tmp_path, text)
    [hit] = [f for f in findings if f["code"] == "ZM103"]
    assert "peak" in hit["message"] and "model shape" in hit["message"]
    assert not [f for f in findings if f["code"] in ("ZM101", "ZM102", "ZM106")]  # model state 16 GB fits


@pytest.mark.parametrize(("config", "field"), [
    ({"model_type": "bloom", "hidden_size": 64}, "model_type"),
    ({**CASES["llama-0"]["config"], "num_hidden_layers": 2, "attention_dropout": 7}, "attention_dropout"),
    ({"model_type": "phi", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 128, "vocab_size": 10_000}, "model_type"),
])
def test_bad_model_config_is_zm104_and_model_state_still_shows(tmp_path, config, field):
    (tmp_path / "config.json").write_text(json.dumps(config))
    text = json.dumps({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2},
                       "zeromem": {"parameters": {"from_config": "config.json"}, "world_size": 8,
                                   "sequence_length": 64, "gpu_memory": "1MiB"}})
    findings, status = check(tmp_path, text)
    [problem] = [f for f in findings if f["code"] == "ZM104"]
    assert field in problem["message"] and status == 1
    if config["model_type"] != "bloom":  # countable: the model-state check still runs (1 MiB is far too small)
        assert [f for f in findings if f["code"] == "ZM101"]


def test_training_arguments_supply_batch_and_sequence(tmp_path):
    model = str(write_config(tmp_path, "llama-0"))
    args = {"output_dir": "out", "per_device_train_batch_size": 2, "max_seq_length": 64, "bf16": True,
            "deepspeed": {"train_micro_batch_size_per_gpu": "auto", "bf16": {"enabled": True},
                          "zero_optimization": {"stage": 2, "reduce_bucket_size": 1000, "allgather_bucket_size": 1000},
                          "zeromem": {"parameters": {"from_config": model}, "world_size": 1, "reserved": 0}}}
    args["deepspeed"]["zeromem"]["gpu_memory"] = GiB
    peak, parts = shown(tmp_path, json.dumps(args), "zero2", "training_args.json")
    # one rank: the optimizer step of fp32 masters holds the peak (whole fp32 gradients and foreach's copy)
    n = llama0_parameters()
    assert parts == {"parameters": 2 * n, "fp32 master": 4 * n, "optimizer states": 8 * n, "fp32 gradients": 4 * n,
                     "optimizer scratch": 4 * n}
    args["deepspeed"]["zeromem"]["gpu_memory"] = peak - 1
    text = json.dumps(args, indent=1)
    findings, _ = check(tmp_path, text, "training_args.json")
    [hit] = [f for f in findings if f["code"] == "ZM106"]
    assert f"= {peak:,} B" in hit["message"]
    assert text_at(text, hit["range"]) == "2"  # the stage: the optimizer step grows with no batch or bucket
    args["deepspeed"]["zeromem"]["gpu_memory"] = peak
    findings, _ = check(tmp_path, json.dumps(args), "training_args.json")
    assert not [f for f in findings if f["code"] == "ZM106"]
