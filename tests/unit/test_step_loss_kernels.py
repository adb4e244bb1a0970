"""The whole-step model with axolotl's chunked cross-entropy against whole training steps measured on CPU (no torch).

tests/data/step/loss_kernels.json is written by benchmarks/step/loss_kernels.py: real HF model code, axolotl's
chunked loss compiled by torch.compile, live allocator bytes from torch's profiler per phase of step 2. Same
acceptance as tests/unit/test_step.py: every phase within ±5%. Liger's and cut-cross-entropy's kernels need a
GPU (Triton) and are derived; their tests check the arithmetic of what their code allocates.
"""

import json
from pathlib import Path

import pytest

from zeromem_lsp.configs.model_config import model_shape
from zeromem_lsp.memory.step import PHASES, StepInputError, estimate_step

RECORD = json.loads((Path(__file__).resolve().parents[1] / "data" / "step" / "loss_kernels.json").read_text())
CASES = [case for case in RECORD["cases"] if "error" not in case]
STEP = json.loads((Path(__file__).resolve().parents[1] / "data" / "step" / "measured.json").read_text())
GOAL = 0.05
REGIMES = {"bf16": ("bf16", False), "fp32": ("fp32", False), "autocast": ("fp32", True)}


def estimate(case: dict):
    dtype, autocast = REGIMES[case["regime"]]
    return estimate_step(model_shape(case["config"]), case["sequence_length"], case["micro_batch"],
                         checkpointing=case["gradient_checkpointing"], attention=case["attention"], engine="torch",
                         param_dtype=dtype, autocast=autocast, optimizer_impl=case["optimizer"]["impl"],
                         loss_kernel=case["loss"]["kernel"])


ROWS = [(case, phase) for case in CASES for phase in PHASES]


def test_the_record_names_its_versions_and_compiled_the_loss():
    assert RECORD["torch"] and RECORD["transformers"] and RECORD["axolotl"] and len(CASES) >= 5
    chunked = [case for case in CASES if case["loss"]["kernel"] == "chunked_ce"]
    assert chunked and all(case["per_rank"][0]["compiled_frames"] >= 1 for case in chunked)


def test_the_profiler_method_gives_the_storage_trackers_figures():
    """The hf twin, measured like the chunked cases, against the tracker's record of the same case."""
    twin = next(case for case in CASES if case["id"].startswith("hf-twin-"))
    tracked = next(case for case in STEP["cases"] if case["id"] == "torch-" + twin["id"].removeprefix("hf-twin-"))
    for phase in PHASES:
        assert abs(twin["per_rank"][0]["phases"][phase]["peak"] - tracked["per_rank"][0]["phases"][phase]["peak"]) <= 16


@pytest.mark.parametrize("case, phase", ROWS, ids=[f"{case['id']}-{phase}" for case, phase in ROWS])
def test_each_phase_is_within_five_percent(case, phase):
    measured = case["per_rank"][0]["phases"][phase]["peak"]
    model = estimate(case).phases[phase].peak
    assert abs(model / measured - 1) <= GOAL, f"{case['id']} {phase}: model {model:,} measured {measured:,}"
