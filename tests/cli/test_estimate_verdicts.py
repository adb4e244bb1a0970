"""Issue 19, items 2-4 through `zeromem estimate` / `zeromem check` (cli.main in-process): the verdicts follow
the peak when it is known, the step's engine / parameter dtype / optimizer implementation can be named, and
`estimate --config` reads a config as `check` does.

The workload is the issue's: Qwen2.5-7B (tests/data/models), 4096 tokens × micro-batch 2, 8 GPUs of 80 GiB.
Expected figures are rebuilt from the parts the output itself shows (model state by the contract formula,
the phase holding the peak and its parts, the reserve), never copied from a run."""

import json
import math
import shutil
from fractions import Fraction
from pathlib import Path

import pytest

from tests.cli.conftest import run_zeromem, shown_peak
from zeromem_lsp.units import format_bytes

ROOT = Path(__file__).resolve().parents[2]
QWEN = ROOT / "tests/data/models/Qwen2.5-7B/config.json"
GiB = 2**30
STAGES = ("ddp", "zero1", "zero2", "zero3")
WORKLOAD = ("--model-config", str(QWEN), "-R", "8", "--sequence-length", "4096", "--micro-batch", "2")


def estimate_json(*args: str) -> dict:
    done = run_zeromem("estimate", "-v", *args, "--format", "json")
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def test_the_issue_example_zero1_no_longer_fits():
    data = estimate_json(*WORKLOAD, "--gpu-memory", "80GiB")
    n = data["inputs"]["parameters"]
    assert n == 7_615_616_512
    assert data["zero1"] == 2 * n + 2 * n + math.ceil(12 * n / 8)  # the contract figure, unchanged
    budget = 80 * GiB
    for stage in STAGES:
        assert data["peak"][stage] == shown_peak(data["phases"][stage])
        assert data["fits"][stage] is (data["peak"][stage] <= budget)
        assert data["model_state_fits"][stage] is (data[stage] <= budget)
    assert data["model_state_fits"]["zero1"] is True and data["fits"]["zero1"] is False  # the issue's contradiction
    zero1 = data["phases"]["zero1"]  # the loss's backward: every activation and two fp32 T×V gradients
    assert zero1["moment"] == "the loss's backward"
    assert zero1["parts"]["activations"] == data["activations"]["bytes"]
    assert zero1["parts"]["log-softmax gradients"] == 2 * 4 * 2 * 4096 * 152_064
    assert zero1["parts"]["parameters"] == 2 * n  # bf16 weights; no gradient exists yet at the loss
    assert "gradients" not in zero1["parts"]
    assert data["fits_by"] == "peak"
    # the verdict: the cheapest stage whose peak fits — none at micro-batch 2 (ZeRO-3 peaks at 80.3 GiB)
    assert data["cheapest_fitting_stage"] == next((s for s in STAGES if data["fits"][s]), None)
    assert data["cheapest_fitting_stage"] is None and data["peak"]["zero3"] > budget
    roomier = estimate_json(*WORKLOAD, "--gpu-memory", "81GiB")
    assert roomier["cheapest_fitting_stage"] == next(s for s in STAGES if roomier["fits"][s]) == "zero3"


def test_phases_per_stage_name_the_phase_holding_the_peak():
    data = estimate_json(*WORKLOAD)
    for stage, found in data["phases"].items():
        assert set(found["phases"]) == {"forward", "backward", "optimizer"}
        assert data["peak"][stage] == shown_peak(found)
    # DDP (ZeRO-0) under DeepSpeed bf16: the fp32 masters, their states, fp32 gradients and foreach's scratch
    ddp, n = data["phases"]["ddp"], data["inputs"]["parameters"]
    assert ddp["peak_phase"] == "optimizer"
    assert ddp["parts"] == {"parameters": 2 * n, "gradients": 2 * n, "fp32 master": 4 * n, "optimizer states": 8 * n,
                            "fp32 gradients": 4 * n, "optimizer scratch": 4 * n}


def test_text_says_the_peak_verdict_in_one_table():
    done = run_zeromem("estimate", "-v", *WORKLOAD, "--gpu-memory", "81GiB")
    assert done.returncode == 0, done.stderr
    zero3 = estimate_json(*WORKLOAD)["peak"]["zero3"]
    assert f"cheapest stage that fits: ZeRO-3 (peak {format_bytes(zero3)} per GPU)" in done.stdout
    [header] = [line for line in done.stdout.splitlines() if "model state" in line and "peak phase" in line]
    assert header.split()[:4] == ["stage", "model", "state", "peak"]
    verbose = done.stdout.split(header, 1)[1]  # the -v table, after the summary's
    zero1 = next(line for line in verbose.splitlines() if line.split()[:1] == ["ZeRO-1"])
    assert "39.0 GiB" in zero1 and " exceeds " in zero1 and "backward: activations" in zero1
    # the arithmetic line rebuilds the figure: the phase, its moment, every part, the reserve
    [line] = [line for line in done.stdout.splitlines() if line.strip().startswith("ZeRO-3 peak = ")]
    summed, reserve = line.split(": ", 1)[1].split(" = ")[0].split(" (", 1)  # the reserve's own parts in brackets
    parts = summed.split(" + ")
    assert sum(int(part.rsplit(" ", 1)[1].replace(",", "")) for part in parts) == zero3
    reserved = int(parts[-1].rsplit(" ", 1)[1].replace(",", ""))
    assert sum(int(part.rsplit(" ", 1)[1].rstrip(")").replace(",", "")) for part in reserve.split(" + ")) == reserved
    assert line.split("= ")[1].startswith("backward (the loss's backward): ")


def test_no_peak_fits_exits_1_though_model_state_fits():
    done = run_zeromem("estimate", "-v", *WORKLOAD, "--gpu-memory", "40GiB")
    assert done.returncode == 1
    assert "no stage's peak fits 40.0 GiB per GPU" in done.stdout
    data = estimate_json(*WORKLOAD, "--gpu-memory", "40GiB")
    assert data["model_state_fits"]["zero3"] is True and data["cheapest_fitting_stage"] is None


def test_engine_torch_has_only_ddp_and_no_master_copy():
    data = estimate_json(*WORKLOAD, "--engine", "torch")
    n = data["inputs"]["parameters"]
    assert list(data["peak"]) == ["ddp"] and list(data["phases"]) == ["ddp"]
    assert data["ddp"] == n * (2 + 2 + 4)  # bf16 weights, bf16 grads, AdamW m and v in bf16
    assert data["peak_inputs"]["engine"] == {"value": "torch", "from": "--engine"}
    fp32 = estimate_json(*WORKLOAD, "--engine", "torch", "--param-dtype", "fp32")
    assert fp32["ddp"] == n * (4 + 4 + 8)
    assert fp32["peak_inputs"]["param_dtype"] == {"value": "fp32", "from": "--param-dtype"}


def test_engine_fsdp_has_its_stages_and_fp32_shards():
    data = estimate_json(*WORKLOAD, "--engine", "fsdp", "--optimizer-impl", "for-loop")
    n = data["inputs"]["parameters"]
    assert list(data["peak"]) == ["ddp", "zero2", "zero3"]
    assert data["zero3"] == math.ceil(16 * n / 8)
    assert data["peak_inputs"]["optimizer_impl"] == {"value": "for-loop", "from": "--optimizer-impl"}


@pytest.mark.parametrize(("option", "value", "allowed"), [
    ("--engine", "jax", "'torch', 'deepspeed', 'fsdp'"),
    ("--param-dtype", "int8", "'bf16', 'fp16', 'fp32'"),
    ("--optimizer-impl", "apex", "'foreach', 'for-loop', 'fused'"),
])
def test_unknown_choices_name_the_allowed_values(option, value, allowed):
    done = run_zeromem("estimate", "-v", *WORKLOAD, option, value)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert option in done.stderr and allowed in done.stderr


def write_ds(tmp_path: Path, stage: int, budget: str, micro: int = 2, sequence: int = 4096, **block) -> Path:
    shutil.copy(QWEN, tmp_path / "config.json")
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps({
        "train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
        "zero_optimization": {"stage": stage},
        "zeromem": {"parameters": {"from_config": "config.json"}, "world_size": 8, "sequence_length": sequence,
                    "gpu_memory": budget, **block}}, indent=1))
    return path


def test_config_is_read_as_check_reads_it(tmp_path):
    config = write_ds(tmp_path, 1, "80GiB")
    data = estimate_json("--config", str(config))
    alone = estimate_json(*WORKLOAD, "--gpu-memory", "80GiB")
    for key in ("ddp", "zero1", "zero2", "zero3", "peak", "fits", "model_state_fits", "cheapest_fitting_stage"):
        assert data[key] == alone[key], key
    assert data["stage"] == "zero1" and "stage" not in alone
    assert data["peak_inputs"]["micro_batch"] == {"value": 2, "from": "train_micro_batch_size_per_gpu"}
    assert data["peak_inputs"]["sequence_length"] == {"value": 4096, "from": "zeromem.sequence_length"}
    text = run_zeromem("estimate", "-v", "--config", str(config)).stdout
    assert text.startswith("ZeRO-1 exceeds the budget")  # the verdict on the configured stage first
    assert next(line for line in text.splitlines() if " ZeRO-1 " in f" {line} " and "GiB" in line and
                not line.startswith("ZeRO")).startswith("▶")  # the configured stage marked in the table


def test_flags_override_the_config_and_are_credited(tmp_path):
    config = write_ds(tmp_path, 1, "80GiB")
    data = estimate_json("--config", str(config), "--micro-batch", "1", "--engine", "torch", "--gpu-memory", "90GiB")
    assert data["peak_inputs"]["micro_batch"] == {"value": 1, "from": "--micro-batch"}  # beats the config's 2
    assert data["gpu_memory"] == 90 * GiB
    engine = data["peak_inputs"]["engine"]
    assert engine["value"] == "torch" and engine["from"] == "--engine (overrides deepspeed, which the config is)"
    halved = estimate_json(*WORKLOAD[:-1], "1")
    assert data["activations"]["bytes"] == halved["activations"]["bytes"]


def test_a_bad_setting_in_the_config_is_positioned_zm104(tmp_path):
    config = write_ds(tmp_path, 1, "80GiB", engine="jax")
    done = run_zeromem("estimate", "-v", "--config", str(config))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    line = next(number for number, text in enumerate(config.read_text().splitlines(), 1) if '"jax"' in text)
    assert f"{config}:{line}:" in done.stderr and "ZM104" in done.stderr
    assert "'torch', 'deepspeed' or 'fsdp'" in done.stderr


def test_zm106_is_an_error_beyond_the_model_uncertainty(tmp_path):
    config = write_ds(tmp_path, 1, "80GiB")
    peak = estimate_json("--config", str(config))["peak"]["zero1"]
    assert peak > 80 * GiB * Fraction(11, 10)  # 88.1 GiB: beyond the 10%
    done = run_zeromem("check", str(config))
    assert done.returncode == 1
    assert "ZM106 error" in done.stdout and "beyond the model's ±10% uncertainty" in done.stdout
    assert f"= {peak:,} B" in done.stdout
    # nothing peaks within 80 GiB at micro-batch 2; halving it (accumulation keeps the global batch) does, the
    # doubled accumulation's held gradients counted (ZeRO-1 keeps every 16-bit gradient between micro-batches)
    halved = estimate_json(*WORKLOAD[:-1], "1", "--gradient-accumulation-steps", "2")["peak"]["zero1"]
    assert estimate_json(*WORKLOAD[:-1], "1")["peak"]["zero1"] < halved <= 80 * GiB
    assert f"the cheapest whose peak fits is ZeRO-1 with micro-batch 1 (peak {format_bytes(halved)}/GPU" in done.stdout


def test_zm106_is_a_warning_inside_the_model_uncertainty(tmp_path):
    peak = estimate_json(*WORKLOAD)["peak"]["zero1"]
    budget = math.ceil(Fraction(peak) / Fraction(105, 100))  # the peak is 5% over this budget
    config = write_ds(tmp_path, 1, str(budget))
    done = run_zeromem("check", str(config))
    assert done.returncode == 0, done.stdout
    assert "ZM106 warning" in done.stdout and "within the model's ±10% uncertainty" in done.stdout
    assert run_zeromem("check", "--fail-on", "warning", str(config)).returncode == 1


def test_zm101_fix_picks_a_stage_whose_peak_fits(tmp_path):
    """The issue's other case: a 7B config on 24 GiB GPUs must not be moved to a stage whose peak exceeds it."""
    config = write_ds(tmp_path, 0, "24GiB", micro=4, sequence=1024)
    done = run_zeromem("check", str(config))
    assert done.returncode == 1 and "ZM101" in done.stdout
    assert "the cheapest whose peak fits is" in done.stdout
    fixed = run_zeromem("check", "--fix", "--unsafe-fixes", str(config))
    assert "ZM101" not in fixed.stdout and "ZM106" not in fixed.stdout, fixed.stdout
    assert fixed.returncode == 0
    data = estimate_json("--config", str(config))
    written = json.loads(config.read_text())
    stage = ("ddp", "zero1", "zero2", "zero3")[written["zero_optimization"]["stage"]]
    assert data["peak"][stage] <= 24 * GiB
    # the global batch is kept: micro-batch × accumulation as before
    assert written["train_micro_batch_size_per_gpu"] * written["gradient_accumulation_steps"] == 4


def test_config_buckets_and_optimizer_section_reach_the_peak(tmp_path):
    config = write_ds(tmp_path, 2, "80GiB")
    data = json.loads(config.read_text())
    data["zero_optimization"].update({"reduce_bucket_size": 100_000_000, "allgather_bucket_size": 100_000_000,
                                      "overlap_comm": False})
    data["optimizer"] = {"type": "AdamW", "params": {"lr": 1e-5}}
    config.write_text(json.dumps(data))
    found = estimate_json("--config", str(config))
    parts = {part["name"]: part["bytes"] for part in found["buffers"]["zero2"]["parts"]}
    assert parts == {"reduce_bucket_size": 2 * 100_000_000, "allgather_bucket_size": 2 * 100_000_000}
    assert found["peak_inputs"]["optimizer_impl"] == {
        "value": "fused", "from": "DeepSpeed's FusedAdam for the config's optimizer section"}
    assert found["peak_inputs"]["engine"] == {"value": "deepspeed", "from": "default: the config is deepspeed"}
    flagged = estimate_json("--config", str(config), "--optimizer-impl", "for-loop")
    assert flagged["peak_inputs"]["optimizer_impl"] == {"value": "for-loop", "from": "--optimizer-impl"}


def test_param_dtype_changes_the_figures():
    """--param-dtype fp32 under DeepSpeed: an fp32 model (4 B weights, fp32 activations) instead of bf16."""
    bf16 = estimate_json(*WORKLOAD)
    fp32 = estimate_json(*WORKLOAD, "--param-dtype", "fp32")
    n = bf16["inputs"]["parameters"]
    assert fp32["peak_inputs"]["param_dtype"] == {"value": "fp32", "from": "--param-dtype"}
    assert bf16["phases"]["zero1"]["parts"]["parameters"] == 2 * n
    assert fp32["phases"]["zero1"]["parts"]["parameters"] == 4 * n
    assert fp32["activations"]["bytes"] > bf16["activations"]["bytes"]
    assert fp32["phases"]["zero1"]["parts"]["activations"] == fp32["activations"]["bytes"]
    for stage in STAGES:
        assert fp32["peak"][stage] == shown_peak(fp32["phases"][stage]) > bf16["peak"][stage]


def test_optimizer_impl_changes_the_figures():
    """DeepSpeed ZeRO-0 (DDP) with bf16 weights: torch AdamW's scratch in fp32 — foreach one copy of every
    tensor (4 B × N), for-loop twice the largest tensor (the vocabulary × hidden embedding)."""
    found = {impl: estimate_json(*WORKLOAD, "--optimizer-impl", impl) for impl in ("foreach", "for-loop", "fused")}
    n = found["foreach"]["inputs"]["parameters"]
    step = {impl: data["phases"]["ddp"]["phases"]["optimizer"] for impl, data in found.items()}
    assert step["foreach"] - step["for-loop"] == 4 * n - 2 * 4 * 152_064 * 3584  # the scratch is the difference
    assert found["foreach"]["phases"]["ddp"]["parts"]["optimizer scratch"] == 4 * n  # it holds the peak there
    # DeepSpeed's FusedAdam (FP16_Optimizer): no scratch, but every gradient cast to fp32 and flattened beside
    fused = found["fused"]["phases"]["ddp"]["parts"]
    assert "optimizer scratch" not in fused and fused["fp32 gradients"] == 2 * 4 * n
    for impl, data in found.items():
        assert data["peak_inputs"]["optimizer_impl"]["value"] == impl
        assert data["peak"]["ddp"] == shown_peak(data["phases"]["ddp"])
    assert found["foreach"]["peak"]["ddp"] > found["for-loop"]["peak"]["ddp"]


def test_an_optimizer_outside_the_phase_model_leaves_the_peak_unknown():
    """LAMB outside DeepSpeed (no torch or Transformers LAMB to follow) is not in the phase model: no figure is
    guessed, the reason reads as what is not modelled (not as a bad input); the verdict is the model state's."""
    args = (*WORKLOAD, "--optimizer", "lamb", "--engine", "torch", "--gpu-memory", "80GiB")
    data = estimate_json(*args)
    why = "the optimizer step of lamb is modelled under DeepSpeed only (its FusedLamb); no torch or Transformers LAMB to follow"
    assert data["peak"] == {"ddp": None}  # engine torch: DDP only
    assert data["phases"] == {"ddp": {"unknown": why}}
    assert data["fits_by"] == "model state" and data["fits"] == data["model_state_fits"]
    assert data["cheapest_fitting_stage"] == "ddp"
    text = run_zeromem("estimate", "-v", *args).stdout
    assert f"peak unknown: {why}" in text and "must be one of" not in text
    assert f"cheapest stage that fits: DDP (model state {format_bytes(data['ddp'])} per GPU; its peak is unknown)" in text


def test_sgd_has_a_peak_and_the_verdict_follows_it():
    """SGD's step is modelled (memory/optimizer_step.py, measured): every stage has a peak, the verdict follows it."""
    data = estimate_json(*WORKLOAD, "--optimizer", "sgd", "--gpu-memory", "80GiB")
    assert all(isinstance(data["peak"][stage], int) for stage in STAGES)
    assert data["fits_by"] == "peak"
