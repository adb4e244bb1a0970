"""The first training step against the steady state the step model gives (no torch here).

benchmarks/step/measure.py records step 1 per phase (`step1_phases`, beside step 2's `phases`); the FSDP cases of
tests/data/step/measured.json and measured_lora.json carry them. Step 1's forward and backward hold what step 2's
hold except the optimizer state, which torch AdamW makes inside step 1's optimizer phase (torch/optim/adam.py
`_init_group`: `exp_avg`, `exp_avg_sq` and a 4-byte `step` per parameter tensor); step 1's optimizer phase holds
what step 2's does. So step 1 never peaks above the steady state, and the model's steady peak is the job's peak
(docs/memory-model.md, "The first step"). Every record (measured.json, measured_lora.json, preference.json) has
each rank's `step1_peak`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.test_step import GOAL, arguments
from tests.unit.test_step_lora import estimated
from zeromem_lsp.configs.model_config import model_shape
from zeromem_lsp.memory.step import PHASES, estimate_step

DATA = Path(__file__).resolve().parents[1] / "data" / "step"
RECORDS = {name: json.loads((DATA / name).read_text(encoding="utf-8"))["cases"]
           for name in ("measured.json", "measured_lora.json", "preference.json")}
#: DeepSpeed's step 1 is not "step 2 less its optimizer state" (docs/memory-model.md, "The first step"): only the
#: torch and FSDP cases are compared phase by phase
PER_PHASE = [(name, case) for name in ("measured.json", "measured_lora.json") for case in RECORDS[name]
             if "error" not in case and all("step1_phases" in rank for rank in case["per_rank"])
             and case["engine"] != "deepspeed"]
STATE_PARTS = ("optimizer_state",)  # the tracker's name for AdamW's exp_avg / exp_avg_sq (engines.Labeller)


def test_every_recorded_first_step_peaks_no_higher_than_the_second():
    ranks = [(case["id"], rank) for cases in RECORDS.values() for case in cases if "error" not in case
             for rank in case["per_rank"]]
    assert len(ranks) > 200
    for case_id, rank in ranks:
        assert rank["step1_peak"] <= rank["step_peak"], case_id


def test_the_fsdp_cases_have_step_one_per_phase():
    engines = {case["engine"] for _, case in PER_PHASE}
    assert {"fsdp1", "fsdp2"} <= engines
    assert sum(case["engine"] == "fsdp2" and "lora" not in case for _, case in PER_PHASE) >= 8
    assert any("lora" in case for _, case in PER_PHASE)


@pytest.mark.parametrize("record,case", PER_PHASE, ids=[case["id"] for _, case in PER_PHASE])
def test_measured_step_one_is_step_two_without_the_optimizer_state(record, case):
    for rank in case["per_rank"]:
        first, steady = rank["step1_phases"], rank["phases"]
        assert rank["step1_peak"] == max(first[name]["peak"] for name in PHASES)
        assert first["forward"]["start"] < steady["forward"]["start"]  # no optimizer state before step 1's step
        assert first["optimizer"]["end"] == steady["forward"]["start"]  # step 1 ends where step 2 starts
        for name in ("forward", "backward"):
            state = sum(steady[name]["parts"].get(part, 0) for part in STATE_PARTS)
            missing = steady[name]["peak"] - first[name]["peak"]
            # AdamW's `step` scalars (4 B per parameter tensor) are "other" in the breakdown; a few kB at most
            assert 0 <= missing - state < 4096 and (missing - state) % 4 == 0, (case["id"], name, missing, state)
        assert first["optimizer"]["peak"] == steady["optimizer"]["peak"], case["id"]


def _model_phases(record: str, case: dict, folder: Path) -> tuple[dict[str, int], int]:
    """The model's steady phases for a measured case and the optimizer-state bytes they hold (its part)."""
    if record == "measured_lora.json":
        found = estimated(case, folder)["stage"]
        return found["phases"], found["parts"]["optimizer states"]
    step = estimate_step(model_shape(case["config"]), case["sequence_length"], case["micro_batch"],
                         **arguments(case))
    state = dict(step.phases[step.peak_phase].parts)["optimizer states"]
    return {name: step.phases[name].peak for name in PHASES}, state


@pytest.mark.parametrize("record,case", PER_PHASE, ids=[case["id"] for _, case in PER_PHASE])
def test_the_model_gives_step_one_and_its_steady_peak_covers_it(record, case, tmp_path):
    steady, state = _model_phases(record, case, tmp_path)
    first = {name: steady[name] - (state if name != "optimizer" else 0) for name in PHASES}
    for name in PHASES:
        measured = max(rank["step1_phases"][name]["peak"] for rank in case["per_rank"])
        assert abs(first[name] / measured - 1) <= GOAL, (case["id"], name, first[name], measured)
    measured_first = max(rank["step1_peak"] for rank in case["per_rank"])
    assert max(first.values()) <= max(steady.values())
    assert measured_first <= max(steady.values()) * (1 + GOAL), case["id"]
