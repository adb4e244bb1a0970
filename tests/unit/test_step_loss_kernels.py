"""The whole-step model with axolotl's chunked cross-entropy against whole training steps measured on CPU (no torch).

tests/data/step/loss_kernels.json is written by benchmarks/step/loss_kernels.py: real HF model code, axolotl's
chunked loss compiled by torch.compile, live allocator bytes from torch's profiler per phase of step 2. Same
acceptance as tests/unit/test_step.py: every phase within ±5%. Liger's and cut-cross-entropy's kernels need a
GPU (Triton) and are derived; their tests check the arithmetic of what their code allocates.
"""

import json
from pathlib import Path

import pytest

from tests.cli.conftest import run_zeromem
from tests.unit.test_step_frozen import FROZEN, SHAPE, T, V
from zeromem_lsp.configs.model_config import model_shape
from zeromem_lsp.memory.loss_and_reference import loss_moments
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


ROWS = [(case, phase) for case in CASES for phase in PHASES if "lora" not in case]
LORA = [case for case in CASES if "lora" in case]


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


@pytest.mark.parametrize("case", LORA, ids=[case["id"] for case in LORA])
def test_a_lora_step_with_either_loss_through_zeromem_estimate(case, tmp_path):
    """PEFT LoRA on the bf16 model, measured whole: `zeromem estimate` with the same adapter, engine torch, one rank
    (the frozen-base step), each phase within ±5%, and PEFT's trainable count."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(case["config"]))
    lora = case["lora"]
    done = run_zeromem("estimate", "--model-config", str(config), "--lora-rank", str(lora["r"]), "--lora-targets",
                       ",".join(lora["target_modules"]), "--engine", "torch", "-R", "1", "--precision", "bf16",
                       "--sequence-length", str(case["sequence_length"]), "--micro-batch", str(case["micro_batch"]),
                       "--loss-kernel", case["loss"]["kernel"], "--format", "json")
    result = json.loads(done.stdout)
    assert result["inputs"]["trainable_parameters"] == case["per_rank"][0]["trainable_parameters"]
    for phase in PHASES:
        measured, model = case["per_rank"][0]["phases"][phase]["peak"], result["phases"]["ddp"]["phases"][phase]
        assert abs(model / measured - 1) <= GOAL, f"{case['id']} {phase}: model {model:,} measured {measured:,}"


# ---- derived kernels (Liger, cut-cross-entropy): what their code allocates, by hand (Llama-3-8B, T = 4096) ----

H = SHAPE.hidden


def moment(step, phase: str, name: str) -> dict[str, int]:
    found = step.phases[phase]
    assert found.moment == name, found.moment
    return dict(found.parts)


def test_liger_makes_the_head_gradient_in_forward_and_one_logits_chunk():
    full = estimate_step(SHAPE, T, 1, loss_kernel="liger_flce")
    hf = estimate_step(SHAPE, T, 1)
    forward = moment(full, "forward", "the loss")
    chunk = min(1 << (-(-T // -(-V // H)) - 1).bit_length(), T)  # next power of 2 of ⌈T / ⌈V/h⌉⌉ (= 128 here)
    assert chunk == 128 and forward["FLCE logits chunk"] == 2 * chunk * V
    assert forward["head gradient"] == 2 * V * H and forward["FLCE input gradient"] == 2 * T * H
    assert forward["FLCE loss per token"] == 4 * T and "logits" not in forward  # the head's output is never made
    # the activations: Transformers' loss term and the head's input are not kept
    assert forward["activations"] == hf.activations.total - hf.activations.logits_bytes - 2 * T * H
    frozen = dict(estimate_step(SHAPE, T, 1, frozen=FROZEN, loss_kernel="liger_flce").phases["forward"].parts)
    assert "head gradient" not in frozen and frozen["activations"] == FROZEN.activations - hf.activations.logits_bytes


def test_cut_cross_entropy_makes_its_gradients_in_the_losss_backward_and_no_vocabulary_sized_tensor():
    hf = estimate_step(SHAPE, T, 1)
    found = loss_moments("cut_cross_entropy", 1, T, H, V, 2, 2, hf.activations.logits_bytes)
    assert found.dropped == hf.activations.logits_bytes and found.forward == () and found.head is None
    assert dict(found.kept) == {"CCE log-sum-exp and logit averages": 4 * T + 4 * V, "CCE targets": 2 * 8 * T}
    assert dict(found.backward) == {"CCE input gradient": 2 * T * H, "head gradient": 2 * V * H,
                                    "CCE vocabulary order": 4 * V}
    step = estimate_step(SHAPE, T, 1, loss_kernel="cut_cross_entropy")
    for phase in step.phases.values():
        assert not {"logits", "fp32 logits copy", "log-softmax gradients", "logits gradient"} & set(dict(phase.parts))
    assert step.phases["backward"].peak < hf.phases["backward"].peak


def test_an_unknown_kernel_is_refused_by_name():
    with pytest.raises(StepInputError, match="loss_kernel must be one of hf, liger_flce, cut_cross_entropy, chunked_ce"):
        estimate_step(SHAPE, T, 1, loss_kernel="flash")
