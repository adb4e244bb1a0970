"""The whole-step measurements are complete and self-consistent; the measuring scripts' pure parts work.

tests/data/step/measured.json is written by benchmarks/step/measure.py (torch on CPU, a separate venv). No torch
is needed here; the one test that runs the measuring loop skips unless a Python with torch is at hand
(this interpreter, or the one named by ZEROMEM_MEASURE_PYTHON).
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STEP = ROOT / "benchmarks" / "step"
DATA = ROOT / "tests" / "data" / "step" / "measured.json"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"step_{name}", STEP / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cases = _load("cases")
measure_gpu = _load("measure_gpu")
CASES = cases.cases()
RECORD = json.loads(DATA.read_text())
MEASURED = RECORD["cases"]
RANKS = [(case["id"], rank) for case in MEASURED for rank in case["per_rank"]]
PHASES = ("forward", "backward", "optimizer")


def test_the_cases_cover_what_the_issue_asks():
    assert len(CASES) >= 60
    assert len({case["id"] for case in CASES}) == len(CASES)
    engines = {case["engine"] for case in CASES}
    assert engines == {"torch", "ddp", "deepspeed", "fsdp1", "fsdp2"}
    deepspeed = [case for case in CASES if case["engine"] == "deepspeed"]
    stage_ranks = {(case["ds_config"]["zero_optimization"]["stage"], case["ranks"]) for case in deepspeed}
    assert {(stage, ranks) for stage in range(4) for ranks in (1, 2, 4)} <= stage_ranks
    assert {case["ds_config"]["zero_optimization"]["overlap_comm"] for case in deepspeed} == {True, False}
    for knob in ("stage3_prefetch_bucket_size", "stage3_max_live_parameters", "stage3_max_reuse_distance",
                 "stage3_param_persistence_threshold"):
        assert any(knob in case["ds_config"]["zero_optimization"] for case in deepspeed), knob
    assert len({case["ds_config"]["zero_optimization"]["reduce_bucket_size"] for case in deepspeed}) >= 3
    assert {"bf16", "fp32", "autocast"} <= {case["regime"] for case in CASES}
    assert {"foreach", "for-loop"} <= {case["optimizer"]["impl"] for case in CASES}
    assert {case["gradient_checkpointing"] for case in CASES} == {True, False}
    assert {case["config"]["tie_word_embeddings"] for case in CASES} == {True, False}
    fake = [case for case in CASES if case["fake"]]
    assert any(case["config"]["hidden_size"] >= 3584 and case["sequence_length"] == 4096 for case in fake)


def test_the_record_is_the_case_list_measured_with_versions():
    assert RECORD["torch"] and RECORD["transformers"] and RECORD["deepspeed"]
    assert RECORD["device"] == "cpu"
    by_id = {case["id"]: case for case in CASES}
    assert [case["id"] for case in MEASURED] == [case["id"] for case in CASES], "run measure.py --skip-done"
    for case in MEASURED:
        assert "error" not in case, (case["id"], case["error"])
        recorded = {key: value for key, value in case.items()
                    if key not in ("per_rank", "step_peak_max_rank")}
        assert recorded == by_id[case["id"]], f"{case['id']}: the case changed since it was measured"
        assert len(case["per_rank"]) == case["ranks"]
        assert sorted(rank["rank"] for rank in case["per_rank"]) == list(range(case["ranks"]))


@pytest.mark.parametrize("case_id,rank", RANKS, ids=[f"{cid}-r{rank['rank']}" for cid, rank in RANKS])
def test_each_phase_peak_is_the_sum_of_its_parts(case_id, rank):
    assert rank["step_peak"] == max(rank["phases"][name]["peak"] for name in PHASES)
    assert rank["phases"][rank["peak_phase"]]["peak"] == rank["step_peak"]
    assert rank["phases"]["forward"]["start"] == rank["persistent_before_step2"]
    for name in PHASES:
        phase = rank["phases"][name]
        assert sum(phase["parts"].values()) == phase["peak"]
        assert phase["peak"] >= max(phase["start"], phase["end"])
        assert all(item["bytes"] <= phase["parts"].get("other", 0) for item in phase["largest_other"])
    # the phases follow each other: one ends where the next starts, step 2 ends where it started
    assert rank["phases"]["forward"]["end"] == rank["phases"]["backward"]["start"]
    assert rank["phases"]["backward"]["end"] == rank["phases"]["optimizer"]["start"]


def test_memtracker_agrees_to_the_byte_where_it_was_run_alongside():
    """MemTracker also counts meta tensors (DeepSpeed's ZeRO-1/2 keeps one per parameter); they live through
    the whole step, so its peaks are ours plus their bytes."""
    checked = [(case["id"], rank) for case in MEASURED for rank in case["per_rank"]
               if "memtracker_phase_peaks" in rank]
    assert len(checked) >= 4
    assert any(rank["meta_bytes"] for _, rank in checked) and any(not rank["meta_bytes"] for _, rank in checked)
    for case_id, rank in checked:
        expected = {name: rank["phases"][name]["peak"] + rank["meta_bytes"] for name in PHASES}
        assert rank["memtracker_phase_peaks"] == expected, case_id


def test_a_fake_tensor_run_equals_its_real_twin_phase_by_phase():
    by_id = {case["id"]: case for case in MEASURED}
    twins = [cid for cid in by_id if cid.startswith("fake-twin-")]
    assert twins
    for cid in twins:
        fake, real = by_id[cid]["per_rank"][0], by_id["torch-" + cid.removeprefix("fake-twin-")]["per_rank"][0]
        fake_peaks = {name: fake["phases"][name]["peak"] for name in PHASES}
        real_peaks = {name: real["phases"][name]["peak"] for name in PHASES}
        if by_id[cid]["gradient_checkpointing"]:  # one extra b*s^2 bf16 tensor seen in checkpointed fake runs
            extra = by_id[cid]["micro_batch"] * by_id[cid]["sequence_length"] ** 2 * 2
            assert all(0 <= fake_peaks[name] - real_peaks[name] <= extra for name in PHASES), cid
        else:
            assert fake_peaks == real_peaks, cid


def test_the_phase_meter_resets_the_peak_at_each_phase():
    allocator = {"now": 100, "peak": 100}

    def stats():
        return allocator["now"], allocator["peak"], allocator["now"] + 50, allocator["peak"] + 50

    def reset():
        allocator["peak"] = allocator["now"]

    def use(delta):
        allocator["now"] += delta
        allocator["peak"] = max(allocator["peak"], allocator["now"])

    meter = measure_gpu.PhaseMeter(stats, reset)
    use(500)  # step 1 is not measured
    use(-500)
    meter.begin("forward")
    use(300)
    meter.begin("backward")
    use(200)
    use(-250)
    meter.begin("optimizer")
    use(-250)
    use(40)
    use(-40)
    meter.end()
    result = meter.result()
    assert {name: phase["max_allocated"] for name, phase in result["phases"].items()} == {
        "forward": 400, "backward": 600, "optimizer": 350}
    assert result["phases"]["backward"]["start_allocated"] == 400
    assert result["phases"]["optimizer"]["end_allocated"] == 100
    assert result["step_max_allocated"] == 600 and result["peak_phase"] == "backward"
    assert result["step_max_reserved"] == 650


def _python_with_torch():
    named = os.environ.get("ZEROMEM_MEASURE_PYTHON")
    if named:
        return shutil.which(named) or named
    if importlib.util.find_spec("torch") and importlib.util.find_spec("transformers"):
        return sys.executable
    return None


def test_the_gpu_script_runs_its_cpu_path_on_a_tiny_case(tmp_path):
    python = _python_with_torch()
    if python is None:
        pytest.skip("no Python with torch and transformers (set ZEROMEM_MEASURE_PYTHON)")
    out = tmp_path / "gpu.json"
    run = subprocess.run([python, str(STEP / "measure_gpu.py"), "--device", "cpu", "--smoke", "--out", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    record = json.loads(out.read_text())
    (case,) = record["cases"]
    (rank,) = case["per_rank"]
    assert case["id"] == cases.smoke_case()["id"] and record["device"] == "cpu"
    phases = rank["phases"]
    assert set(phases) == set(PHASES)
    # two AdamW states exist before step 2, so the step starts above the parameters alone
    assert phases["forward"]["start_allocated"] > 0
    assert phases["backward"]["max_allocated"] >= phases["backward"]["start_allocated"]
    assert phases["optimizer"]["end_allocated"] == phases["forward"]["start_allocated"]
    assert rank["step_max_allocated"] == max(phase["max_allocated"] for phase in phases.values())


def test_the_single_gpu_suite_runs_its_cpu_path_on_a_tiny_case(tmp_path):
    """`--suite single` on CPU: three steps with per-phase peaks (the tracker standing in for the allocator); the
    steady steps repeat, and the record says which versions ran."""
    python = _python_with_torch()
    if python is None:
        pytest.skip("no Python with torch and transformers (set ZEROMEM_MEASURE_PYTHON)")
    run = subprocess.run([python, str(STEP / "measure_gpu.py"), "--suite", "single", "--device", "cpu", "--smoke",
                          "--out-dir", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    record = json.loads((tmp_path / "results_default.json").read_text())
    assert {"torch", "transformers"} <= set(record["versions"]) and record["device"] == "cpu"
    (case,) = record["cases"]
    steps = case["steps"]
    assert len(steps) == 3 and set(steps[0]) == set(PHASES)
    assert steps[1] == steps[2]  # the steady state: step 2 and step 3 hold the same bytes
    assert case["step_max_allocated"] == max(step[phase]["max_allocated"] for step in steps[1:] for phase in PHASES)


TRACKER_CHECK = """
import sys
sys.path.insert(0, sys.argv[1])
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from tracker import StorageTracker
tracker = StorageTracker()
with tracker:
    real = torch.empty(1000)  # 4,000 B
    with FakeTensorMode():  # another mode's fake (DTensor's sharding propagation makes such): no memory
        other = torch.empty(50_000)
    tracker.fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    with tracker.fake_mode:  # the case's own mode: counted, as the FakeTensorMode cases need
        own = torch.empty(2000)
print(tracker.current)
"""


def test_the_tracker_counts_only_the_cases_own_fake_tensors():
    python = _python_with_torch()
    if python is None:
        pytest.skip("no Python with torch and transformers (set ZEROMEM_MEASURE_PYTHON)")
    run = subprocess.run([python, "-c", TRACKER_CHECK, str(STEP)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert int(run.stdout.split()[-1]) == 4_000 + 8_000
