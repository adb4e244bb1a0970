"""The optimizer step of SGD, SGD with momentum, Adagrad, Adafactor and torchao's AdamW8bit (memory/optimizer_step.py in the whole-step
model) against every measured step (no torch).

tests/data/step/measured_optimizers.json is written by `benchmarks/step/measure.py --optimizers` (real HF model
code on CPU; plain torch, DeepSpeed ZeRO-1/2/3 with a client optimizer, FSDP2): per rank, the peak of live tensor
storage bytes in each phase of step 2. Run this file as a script to print the error of every case and phase.
"""

import json
from math import prod
from pathlib import Path

import pytest

from tests.unit.test_step import arguments
from zeromem_lsp.configs.model_config import model_shape, weights_shape
from zeromem_lsp.memory.optimizer_step import (OptimizerNotModelled, adafactor_scratch, adafactor_states,
                                               adam8bit_states, adam8bit_torchao_states, optimizer_step,
                                               parameter_shapes, STATE_NAMES)
from zeromem_lsp.memory.step import PHASES, StepInputError, estimate_step, parameter_tensors

RECORD = json.loads((Path(__file__).resolve().parents[1] / "data" / "step" / "measured_optimizers.json").read_text())
CASES = [case for case in RECORD["cases"] if "error" not in case]
GOAL = 0.05  # every phase of every measured case (test_step.py holds AdamW's cases to the same)
MODELS = Path(__file__).resolve().parents[1] / "data" / "models"
ROOT = Path(__file__).resolve().parents[2]


def optimizer(case: dict) -> str:
    """The measured optimizer as precision.OPTIMIZERS names it."""
    settings = case["optimizer"]
    if settings["name"] == "SGD":
        return "sgd_momentum" if settings.get("momentum", 0) > 0 else "sgd"
    return {"AdamW8bit": "adam8bit_torchao"}.get(settings["name"], settings["name"].lower())


def comparisons() -> list[dict]:
    rows = []
    for case in CASES:
        kwargs = arguments(case)
        if optimizer(case) in ("adafactor", "adam8bit_torchao"):  # one implementation each (a Python loop; a
            kwargs["optimizer_impl"] = "for-loop"  # compiled step per tensor); `impl` is not read
        estimate = estimate_step(model_shape(case["config"]), case["sequence_length"], case["micro_batch"],
                                 optimizer=optimizer(case), **kwargs)
        for phase in PHASES:
            measured = max(rank["phases"][phase]["peak"] for rank in case["per_rank"])
            model = estimate.phases[phase].peak
            rows.append({"id": case["id"], "phase": phase, "measured": measured, "model": model,
                         "error": model / measured - 1, "parts": estimate.phases[phase].parts})
        persistent = max(rank["persistent_before_step2"] for rank in case["per_rank"])
        rows.append({"id": case["id"], "phase": "persistent", "measured": persistent, "error": None,
                     "model": None, "parts": ()})
    return rows


ROWS = [row for row in comparisons() if row["error"] is not None]


def test_the_record_covers_the_optimizers_and_engines():
    assert RECORD["torch"] and RECORD["transformers"] and RECORD["deepspeed"] and RECORD["method"]
    assert {optimizer(case) for case in CASES} == {"sgd", "sgd_momentum", "adagrad", "adafactor", "adam8bit_torchao"}
    assert RECORD["torchao"]
    assert {case["engine"] for case in CASES} == {"torch", "deepspeed", "fsdp2"}
    stages = {case["ds_config"]["zero_optimization"]["stage"] for case in CASES if case["engine"] == "deepspeed"}
    assert {2, 3} <= stages
    assert len(CASES) == len(RECORD["cases"])


@pytest.mark.parametrize("row", ROWS, ids=[f"{row['id']}-{row['phase']}" for row in ROWS])
def test_every_measured_phase_is_within_five_percent(row):
    assert abs(row["error"]) <= GOAL, row


def test_the_optimizer_phase_names_its_parts():
    """The measured optimizer phases are made of the parts the model names: a momentum buffer or Adagrad's sums
    where the optimizer keeps one, Adafactor's factors and scratch."""
    names = {row["id"]: {part.name for part in row["parts"]} for row in ROWS if row["phase"] == "optimizer"}
    assert "momentum buffers" in names["opt-torch-llama-h256-bf16-sgdm-foreach"]
    assert "optimizer states" not in names["opt-torch-llama-h256-bf16-sgd-foreach"]
    assert {"Adagrad sums", "optimizer scratch"} <= names["opt-torch-llama-h256-bf16-adagrad-foreach"]
    assert "optimizer scratch" not in names["opt-torch-llama-h256-bf16-adagrad-fused"]
    assert {"Adafactor factors", "optimizer scratch"} <= names["opt-torch-llama-h256-bf16-adafactor-for-loop"]
    assert "Adagrad sums made before DeepSpeed" in names["opt-ds-z2-r2-adagrad"]
    # DeepSpeed hands Adafactor one flat fp32 partition: a whole second moment, 4 B per element of the shard
    assert "Adafactor second moment (flat: not factored)" in names["opt-ds-z2-r2-adafactor"]


def test_the_record_is_the_case_list_measured():
    """Each recorded case is benchmarks/step/cases.py's as it stands (re-measure when one changes)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("step_cases", ROOT / "benchmarks" / "step" / "cases.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    listed = {case["id"]: case for case in module.optimizer_cases()}
    assert [case["id"] for case in RECORD["cases"]] == list(listed)
    for case in RECORD["cases"]:
        assert {key: value for key, value in case.items() if key not in ("per_rank", "step_peak_max_rank")} \
            == listed[case["id"]], case["id"]
        assert len(case["per_rank"]) == case["ranks"]


def test_the_optimizer_states_are_model_state_to_zm106():
    """ZM106 names the largest part beside the model state: every optimizer's state part counts as state."""
    from zeromem_lsp.rules.peak import STATE_PARTS
    for row in ROWS:
        for part in row["parts"]:
            if "sums" in part.name or "momentum" in part.name or "Adafactor" in part.name:
                assert part.name in STATE_PARTS, part.name


def test_the_step_scratch_by_hand():
    """llama-h256: N = 17,835,264, the largest tensors the 32000 × 256 embedding and head (8,192,000)."""
    shapes = parameter_shapes(model_shape(CASES[0]["config"]))
    n, largest = 17_835_264, 8_192_000
    assert optimizer_step("adagrad", "foreach", 2, shapes).scratch == 2 * 2 * n
    assert optimizer_step("adagrad", "for-loop", 2, shapes).scratch == 2 * largest
    assert optimizer_step("sgd_momentum", "foreach", 2, shapes) .states == 2 * n
    # Adafactor, bf16: the head (last) in fp32 four times, beside the final norm's (256) last `update`
    assert adafactor_scratch(2, [s[0] * (s[1] if len(s) > 1 else 1) for s in shapes]) == 16 * largest + 4 * 256
    # one flat partition (DeepSpeed): not factored
    assert adafactor_states([(1000,)]) == 4000 and adafactor_states([(32000, 256)]) == 4 * (32000 + 256)


def test_adam8bit_states_by_hand():
    """bitsandbytes: uint8 m, v and an fp32 absmax each per 256 elements from 4096 elements; fp32 below."""
    assert adam8bit_states([4096]) == 2 * 4096 + 2 * 4 * 16 + 2048
    assert adam8bit_states([4095]) == 8 * 4095 + 2048
    assert adam8bit_states([4097]) == 2 * 4097 + 2 * 4 * 17 + 2048


def test_adam8bit_torchao_states_by_hand():
    """torchao: uint8 m, v, an fp32 scale per 256 elements and a 256-entry fp32 map each, from 4096 elements that
    256 divides; below, or not divisible, m and v in the parameter's dtype (2 B here), unlike bitsandbytes' fp32."""
    assert adam8bit_torchao_states(2, [4096]) == 2 * 4096 + 2 * 4 * 16 + 2 * 1024
    assert adam8bit_torchao_states(2, [4352]) == 2 * 4352 + 2 * 4 * 17 + 2 * 1024
    assert adam8bit_torchao_states(2, [4100]) == 4 * 4100 and adam8bit_torchao_states(4, [256]) == 8 * 256
    assert adam8bit_torchao_states(2, [100]) == (adam8bit_states([100]) - 2048) // 2  # bnb: fp32 (+ its maps)
    # its compiled step: fp32 m, v and new scales of the largest quantized tensor
    step = optimizer_step("adam8bit_torchao", "for-loop", 2, [(256,), (64, 256), (32, 256)])
    assert step.scratch == 2 * 4 * (64 * 256 + 64) and not step.derived


def test_fsdp2_hands_torchao_each_local_shard():
    """Under FSDP2 every parameter's dim-0 shard is a tensor of its own: at 4 ranks a 256-element norm's 64-element
    shard stays in the parameter's dtype, and the state is not the flat shard's."""
    shape = model_shape(CASES[0]["config"])
    flat = estimate_step(shape, 128, 2, optimizer="adam8bit_torchao", engine="fsdp", ranks=4, param_dtype="fp32")
    local = [(-(-s[0] // 4), *s[1:]) for s in parameter_shapes(shape)]
    parts = dict(flat.phases["optimizer"].parts)
    assert parts["8-bit m, v + block scales"] == adam8bit_torchao_states(4, [prod(s) for s in local])
    assert any(prod(s) < 4096 for s in local)


@pytest.mark.parametrize("path", sorted(MODELS.glob("*/config.json")), ids=lambda p: p.parent.name)
def test_parameter_shapes_are_the_step_models_tensors(path):
    config = json.loads(path.read_text())  # a vision-language composite (no activation shape): its language model
    shape = weights_shape(config) if "vision_config" in config else model_shape(config)
    shapes = parameter_shapes(shape)
    sizes = [1 if not s else __import__("math").prod(s) for s in shapes]
    assert sum(sizes) == parameter_tensors(shape).total
    assert max(sizes) == max(parameter_tensors(shape).all())


@pytest.mark.parametrize("name, engine", [("lamb", "torch"), ("adafactor", "fsdp"), ("lion", "fsdp"),
                                          ("adam8bit", "fsdp")])
def test_what_is_not_modelled_says_so(name, engine):
    with pytest.raises(StepInputError, match=f"the optimizer step of {name}.* not modelled|modelled under"):
        estimate_step(model_shape(CASES[0]["config"]), 128, 2, optimizer=name, engine=engine, ranks=2,
                      param_dtype="fp32")
    with pytest.raises(OptimizerNotModelled):
        optimizer_step(name, "foreach", 4, [(10,)], engine)


def test_derived_optimizers_give_a_peak_under_deepspeed():
    shape = model_shape(CASES[0]["config"])
    for name in ("lion", "lamb", "adam8bit"):
        step = estimate_step(shape, 128, 2, optimizer=name, engine="deepspeed", stage=2, ranks=2)
        assert any("derived" in part.name for part in step.phases["optimizer"].parts), name
        assert optimizer_step(name, "foreach", 4, [(10,)], "deepspeed").derived
    assert not any(optimizer_step(name, "foreach", 4, [(10,)]).derived
                   for name in ("adamw", "sgd", "sgd_momentum", "adagrad", "adafactor"))


if __name__ == "__main__":
    for row in ROWS:
        print(f"{row['id']:55} {row['phase']:9} measured {row['measured']:>13,} model {row['model']:>13,} "
              f"{row['error']:+.2%}")


BNB = json.loads((Path(__file__).resolve().parents[1] / "data" / "step" / "bnb_embedding_state.json").read_text())


@pytest.mark.parametrize("case", BNB["cases"], ids=lambda case: case["id"])
def test_hf_trainer_keeps_8bit_adam_at_32_bits_for_the_embeddings(case):
    """bitsandbytes' AdamW8bit as HF Trainer builds it (adamw_bnb_8bit: nn.Embedding weights at 32 bits) holds exactly
    the state the step model gives the full fine-tune under plain torch; without the override, the 8-bit figure."""
    shape = model_shape(case["config"])
    tensors = parameter_tensors(shape)
    assert [tensors.embedding, tensors.positions][:tensors.embeddings] == case["embedding_parameters"]
    shapes = parameter_shapes(shape)
    assert sorted(map(prod, shapes)) == sorted(case["parameters"])
    step = estimate_step(shape, 16, 1, optimizer="adam8bit", param_dtype="fp32")
    for phase in step.phases.values():
        assert {part.name: part.bytes for part in phase.parts}[STATE_NAMES["adam8bit"]] == case["state_bytes"]
    plain = optimizer_step("adam8bit", "foreach", 4, shapes).states
    assert plain == case["state_bytes_without_override"]
    assert case["state_bytes"] - plain == sum(6 * n - 8 * -(-n // 256) for n in case["embedding_parameters"])
