"""`zeromem estimate --config` with bf16 and `data_types.grad_accum_dtype: fp32` at ZeRO-1: DeepSpeed 0.19.8 then
wraps the optimizer in BF16_Optimizer (engine.py `_do_optimizer_sanity_check`), which keeps one fp32 gradient
buffer as large as the whole model on every rank. Expected figures: the measured record
(tests/data/step/measured.json, case ds-z1-r2-gradfp32) and hand arithmetic."""

import json
import math
from pathlib import Path

from tests.cli.conftest import run_zeromem

ROOT = Path(__file__).resolve().parents[2]
CASES = {case["id"]: case for case in json.loads((ROOT / "tests/data/step/measured.json").read_text())["cases"]}
BUFFER = "fp32 gradient buffer (BF16_Optimizer)"


def estimate(tmp_path: Path, grad_accum_dtype: str | None) -> dict:
    case = CASES["ds-z1-r2-gradfp32"]
    model = tmp_path / "config.json"
    model.write_text(json.dumps(case["config"]))
    config = {key: value for key, value in case["ds_config"].items() if key != "data_types"}
    if grad_accum_dtype is not None:
        config["data_types"] = {"grad_accum_dtype": grad_accum_dtype}
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(config))
    done = run_zeromem("estimate", "-v", "--config", str(path), "--model-config", str(model), "-R", str(case["ranks"]),
                       "--sequence-length", str(case["sequence_length"]), "--optimizer-impl", "for-loop",
                       "--format", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_fp32_gradient_accumulation_at_zero1_holds_the_whole_fp32_gradient_buffer(tmp_path):
    data = estimate(tmp_path, "fp32")
    n = data["inputs"]["parameters"]
    zero1 = data["phases"]["zero1"]
    assert zero1["parts"][BUFFER] == 4 * math.ceil(n / 2) * 2  # not partitioned across the 2 ranks
    assert zero1["parts"]["fp32 master"] == 4 * math.ceil(n / 2)
    measured = CASES["ds-z1-r2-gradfp32"]["per_rank"]
    for phase in ("forward", "backward", "optimizer"):
        peak = max(rank["phases"][phase]["peak"] for rank in measured)
        assert abs(zero1["phases"][phase] / peak - 1) <= 0.05, (phase, zero1["phases"][phase], peak)


def test_the_default_gradient_dtype_keeps_zero1s_partitioned_path(tmp_path):
    fp32, plain = estimate(tmp_path, "fp32"), estimate(tmp_path, None)
    assert BUFFER not in plain["phases"]["zero1"]["parts"]
    assert fp32["peak"]["zero1"] > plain["peak"]["zero1"]
    # ZeRO-2 and ZeRO-3 never take BF16_Optimizer: their phases do not name it
    assert all(BUFFER not in fp32["phases"][stage]["parts"] for stage in ("zero2", "zero3", "ddp"))


def test_the_text_names_the_setting_and_the_buffer(tmp_path):
    case = CASES["ds-z1-r2-gradfp32"]
    (tmp_path / "config.json").write_text(json.dumps(case["config"]))
    (tmp_path / "ds_config.json").write_text(json.dumps(case["ds_config"]))
    done = run_zeromem("estimate", "-v", "--config", str(tmp_path / "ds_config.json"), "--model-config",
                       str(tmp_path / "config.json"), "-R", "2", "--sequence-length", "128")
    assert done.returncode == 0, done.stderr
    assert "data_types.grad_accum_dtype" in done.stdout
    assert f"{BUFFER} " in done.stdout
