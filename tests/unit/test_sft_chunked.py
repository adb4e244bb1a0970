"""TRL's `chunked_nll` SFT loss in the step model (memory/chunked_nll.py) against measured steps (no torch).

tests/data/step/sft_chunked.json is written by benchmarks/preference/trl_sft_chunked.py: TRL 1.14's and 1.12's own
patched forward (`_patch_chunked_ce_lm_head`) on CPU, the peak of live tensor storage bytes per phase of step 2.
Run this file as a script to print the error of every case and phase.
"""

import json
from pathlib import Path

import pytest

from tests.unit.test_preference import _frozen
from zeromem_lsp.configs.model_config import model_shape
from zeromem_lsp.memory.chunked_nll import CHUNK
from zeromem_lsp.memory.preference import Preference, estimate_preference_step
from zeromem_lsp.memory.step import PHASES

RECORD = json.loads((Path(__file__).resolve().parents[1] / "data" / "step" / "sft_chunked.json").read_text())
CASES = [case for case in RECORD["cases"] if "error" not in case]
GOAL = 0.02
#: the `sft_loss` each measured release resolves to (configs/recipes.trl_sft_loss)
LOSS = {"1.14.0": "chunked_nll", "1.12.0": "chunked_nll_fp32"}


def estimate(case: dict, loss: str | None = None):
    """The step for a measured case, as zeromem takes it: SFT through TRL's chunked loss of the case's release."""
    shape = model_shape(case["config"])
    kwargs = {"shape": shape, "sequence_length": case["sequence_length"], "micro_batch": case["micro_batch"],
              "checkpointing": case["gradient_checkpointing"], "attention": case["attention"], "engine": "torch",
              "param_dtype": case["regime"], "optimizer_impl": case["optimizer"]["impl"]}
    if "lora" in case:
        kwargs["frozen"] = _frozen({**case, "trainer": "sft"}, shape)
    preference = Preference("sft", 0, False, 0, loss=loss or LOSS[case["trl_version"]])
    return estimate_preference_step(preference, **kwargs)


def comparisons() -> list[dict]:
    found = []
    for case in CASES:
        step = estimate(case)
        for phase in PHASES:
            measured = case["per_rank"][0]["phases"][phase]["peak"]
            model = step.phases[phase].peak
            found.append({"id": case["id"], "phase": phase, "measured": measured, "model": model,
                          "error": model / measured - 1, "moment": step.phases[phase].moment})
    return found


ROWS = comparisons()


def test_the_record_has_both_matmuls_and_partial_chunks():
    assert {case["trl_version"] for case in CASES} == set(LOSS)
    assert RECORD["versions"]["torch"] and RECORD["versions"]["transformers"]
    assert all(rank["chunk_size"] == CHUNK for case in CASES for rank in case["per_rank"])
    assert any((case["sequence_length"] - 1) * case["micro_batch"] % CHUNK for case in CASES)
    assert {case["regime"] for case in CASES} == {"bf16", "fp32"} and any("lora" in case for case in CASES)


@pytest.mark.parametrize("row", ROWS, ids=[f"{row['id']}-{row['phase']}" for row in ROWS])
def test_each_phase_is_within_two_percent(row):
    assert abs(row["error"]) <= GOAL, row


if __name__ == "__main__":
    for row in ROWS:
        print(f"{row['id']:28} {row['phase']:9} measured {row['measured']:>13,} model {row['model']:>13,} "
              f"{row['error']:+.3%}  {row['moment']}")


def test_the_words_say_the_constants_the_model_uses(monkeypatch):
    """The chunk size and the release ranges appear in messages written in configs/ and present.py (configs/ may
    not import memory/): they must say what memory/chunked_nll.py and the version gates use."""
    from zeromem_lsp.configs import recipes
    from zeromem_lsp.memory import chunked_nll

    monkeypatch.setattr(recipes, "running", lambda package: ("1.14.0", True))
    found = recipes.trl_sft_loss({})
    assert found is not None and f"chunks of {chunked_nll.CHUNK} tokens" in found.note
    first, compute, fused = recipes.TRL_CHUNKED_SFT, recipes.TRL_CHUNKED_COMPUTE_DTYPE, recipes.TRL_FUSED_SFT
    assert fused[:2] == (compute[0], compute[1] + 2)  # the compute-dtype matmul ran in the last two releases
    said = set(recipes.TRL_SFT_RELEASES.values())  # what present.head_line names
    assert f"TRL {first[0]}.{first[1]}-{compute[0]}.{compute[1] - 1}" in said
    assert f"TRL {compute[0]}.{compute[1]}-{fused[0]}.{fused[1] - 1}" in said
