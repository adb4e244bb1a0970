"""Preference trainers in the step model (memory/preference.py) against TRL's measured DPO / KTO steps (no torch).

tests/data/step/preference.json is written by benchmarks/preference/measure.py: TRL 1.16's own `_compute_loss` on
CPU (its torch fallback of the fused LM head), per rank, the peak of live tensor storage bytes per phase of step 2.
The model is compared with `triton=False` (the fallback's fp32 tile temporaries); on a GPU they are not made.
Run this file as a script to print the error of every case and phase.
"""

import json
from pathlib import Path

import pytest

from zeromem_lsp.configs.model_config import model_shape
from zeromem_lsp.memory.precision import DTYPE_BYTES
from zeromem_lsp.configs.lora_modules import LoraSettings
from zeromem_lsp.memory.adapters import count_adapters
from zeromem_lsp.memory.lora_activations import estimate_lora_activations
from zeromem_lsp.memory.preference import Preference, estimate_preference_step, rows
from zeromem_lsp.memory.step import (PHASES, Buckets, DeepSpeed, FrozenBase, StepInputError, Torch, estimate_step,
                                    parameter_tensors)

RECORD_PATH = Path(__file__).resolve().parents[1] / "data" / "step" / "preference.json"
RECORD = json.loads(RECORD_PATH.read_text(encoding="utf-8"))
CASES = [case for case in RECORD["cases"] if "error" not in case and case["trainer"] != "grpo"]  # GRPO: test_grpo.py
GOAL = 0.05


def _frozen(case: dict, shape) -> FrozenBase:
    """A LoRA policy's per-rank state as PEFT places it: bf16 base, fp32 adapters (PEFT's autocast_adapter_dtype)."""
    lora = case["lora"]
    count = count_adapters(case["config"], LoraSettings(lora["r"], tuple(lora["target_modules"])))
    adapters = 4 * count.trainable
    acts = estimate_lora_activations(shape, count, case["sequence_length"], rows(case["trainer"], case["micro_batch"]),
                                     "bf16", "fp32", case["attention"], case["gradient_checkpointing"])
    return FrozenBase(parameters=2 * count.base + adapters, gradients=adapters, optimizer_states=2 * adapters,
                      trainable=count.trainable, step_bytes=4, activations=acts.total, recompute=acts.recompute_bytes,
                      compute_dtype="bf16", all_bytes=2 * count.base + adapters, all_parameters=count.all)


def arguments(case: dict) -> tuple[Preference, dict]:
    """estimate_preference_step's inputs for a measured case: what a user would tell zeromem about the run."""
    shape = model_shape(case["config"])
    kwargs = {"shape": shape, "sequence_length": case["sequence_length"], "micro_batch": case["micro_batch"],
              "checkpointing": case["gradient_checkpointing"], "attention": case["attention"], "ranks": case["ranks"],
              "param_dtype": "bf16", "optimizer_impl": case["optimizer"]["impl"]}
    tensors = parameter_tensors(shape)
    whole = DTYPE_BYTES["bf16"] * tensors.total
    stage: object = 0
    if case["engine"] == "deepspeed":
        zero = case["ds_config"]["zero_optimization"]
        stage = zero["stage"]
        kwargs.update(engine="deepspeed", stage=stage, buckets=Buckets(
            reduce_bucket_size=zero["reduce_bucket_size"], overlap_comm=zero["overlap_comm"],
            contiguous_gradients=zero["contiguous_gradients"]))
    else:
        kwargs["engine"] = "torch"
    if case["lora"]:
        kwargs["frozen"] = _frozen(case, shape)
    persistent = 2 * sum(numel for numel in tensors.all() if numel <= 100_000)  # DeepSpeed's default threshold
    engine = DeepSpeed(stage) if case["engine"] == "deepspeed" else Torch()
    # none beside a PEFT policy (its adapters disabled) or with precomputed log-probs
    absent = bool(case["lora"]) or case["reference"] == "precomputed"
    reference = 0 if absent else engine.reference(whole, persistent, case["ranks"])
    loss = "llamafactory" if case.get("llamafactory") else "logits" if case["trl_version"] == "1.8.0" else "fused"
    gathered = engine.reference_gathered(tensors, 2, case["ranks"], loss == "fused")
    if case.get("reference_free"):  # TRL's ORPO / CPO / SimPO
        return Preference(case["trainer"], 0, False, 0, triton=False), kwargs
    if case.get("llamafactory"):  # LLaMA-Factory's own trainer (orpo / simpo: no reference)
        with_reference = case["reference"] != "none"
        return Preference(case["trainer"], reference if with_reference else 0, with_reference,
                          gathered if with_reference else 0, triton=False, loss="llamafactory"), kwargs
    return Preference(case["trainer"], reference, case["reference"] != "precomputed", gathered,
                      triton=False, loss=loss,
                      kv_cache=case["config"].get("use_cache", True)), kwargs


def comparisons() -> list[dict]:
    found = []
    for case in CASES:
        preference, kwargs = arguments(case)
        estimate = estimate_preference_step(preference, **kwargs)
        for phase in PHASES:
            measured = max(rank["phases"][phase]["peak"] for rank in case["per_rank"])
            model = estimate.phases[phase].peak
            found.append({"id": case["id"], "phase": phase, "measured": measured, "model": model,
                          "error": model / measured - 1, "moment": estimate.phases[phase].moment})
    return found


ROWS = comparisons()


def test_the_record_is_there_with_its_versions():
    assert RECORD["versions"]["trl"] and RECORD["versions"]["torch"] and len(CASES) >= 5
    assert {case["reference"] for case in CASES if not case.get("llamafactory") and not case.get("reference_free")} \
        == {"model", "adapter", "precomputed"}
    assert any(case["engine"] == "deepspeed" and case["ds_config"]["zero_optimization"]["stage"] == 3
               and case["ranks"] == 2 for case in CASES)


@pytest.mark.parametrize("row", ROWS, ids=[f"{row['id']}-{row['phase']}" for row in ROWS])
def test_each_phase_is_within_five_percent(row):
    assert abs(row["error"]) <= GOAL, row


def test_the_reference_model_is_what_the_measurement_labelled():
    """The storages of the reference's parameters (labelled `ref_param` by the harness) weigh what the model says."""
    for case in CASES:
        preference, _ = arguments(case)
        for rank in case["per_rank"]:
            labelled = rank["phases"]["optimizer"]["parts"].get("ref_param", 0)
            assert abs(labelled - preference.reference_bytes) <= 0.01 * max(labelled, 1), case["id"]


def test_the_reference_is_a_part_of_every_phase_and_dpo_doubles_the_rows():
    case = next(case for case in CASES if case["id"] == "dpo-full-ref")
    preference, kwargs = arguments(case)
    step = estimate_preference_step(preference, **kwargs)
    for phase in step.phases.values():
        assert dict(phase.parts)["reference model"] == preference.reference_bytes > 0
        assert phase.peak == sum(part.bytes for part in phase.parts)
    assert step.activations.total == estimate_step(**{**kwargs, "micro_batch": 2 * kwargs["micro_batch"]}).activations.total
    # on a GPU (Triton) the tile is folded in place: no fp32 temporaries, a lower forward and backward
    gpu = estimate_preference_step(preference._replace(triton=False), **kwargs)
    lean = estimate_preference_step(preference._replace(triton=True), **kwargs)
    assert lean.phases["backward"].peak < gpu.phases["backward"].peak
    assert "fp32 tile temporaries" not in dict(lean.phases["backward"].parts)


def test_trl18_kto_holds_the_metrics_logits_copy_and_the_reference_kv_cache_beside_dpos_tensors():
    """TRL 1.8's KTO with b completions against its DPO with b/2 pairs (the same rows): the forward adds the
    `index_select`ed logits and, with the config's use_cache, the reference outputs' KV cache (it passes no
    `use_cache=False`); the backward is the same."""
    kto, dpo = (next(case for case in CASES if case["id"] == name) for name in ("trl18-kto-full-ref", "trl18-dpo-full-ref"))
    assert rows("kto", kto["micro_batch"]) == rows("dpo", dpo["micro_batch"])
    steps = {}
    for case in (kto, dpo):
        preference, kwargs = arguments(case)
        steps[case["trainer"]] = estimate_preference_step(preference, **kwargs)
    config, tokens = kto["config"], rows("kto", kto["micro_batch"]) * kto["sequence_length"]
    cache = 2 * 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * config["head_dim"] * tokens
    forward = dict(steps["kto"].phases["forward"].parts)
    assert forward["reference KV cache"] == cache and forward["logits selected for the metrics"] == 2 * tokens * 32000
    added = steps["kto"].phases["forward"].peak - steps["dpo"].phases["forward"].peak
    assert added == cache + 2 * tokens * 32000
    measured = {case["trainer"]: case["per_rank"][0]["phases"] for case in (kto, dpo)}
    assert abs(measured["kto"]["forward"]["peak"] - measured["dpo"]["forward"]["peak"] - added) <= 0.001 * added
    assert steps["kto"].phases["backward"] == steps["dpo"].phases["backward"]
    preference, kwargs = arguments(next(case for case in CASES if case["id"] == "trl18-kto-full-precomputed"))
    assert "reference KV cache" not in dict(estimate_preference_step(preference, **kwargs).phases["forward"].parts)
    assert "policy KV cache" not in forward  # sdpa (grouped-query, no mask) keeps the K/V its cache holds
    preference, kwargs = arguments(next(case for case in CASES if case["id"] == "trl18-kto-full-ref-eager"))
    assert dict(estimate_preference_step(preference, **kwargs).phases["forward"].parts)["policy KV cache"] == cache
    checkpointed = estimate_preference_step(preference, **{**kwargs, "checkpointing": True}).phases["forward"]
    assert "policy KV cache" not in dict(checkpointed.parts)  # the checkpointed layers drop the cache
    # axolotl's check_model_config sets use_cache False (the Preference default): no cache, measured one cache less
    axolotl = next(case for case in CASES if case["id"] == "trl18-kto-full-ref-axolotl")
    preference, kwargs = arguments(axolotl)
    assert not preference.kv_cache and preference == preference._replace(kv_cache=Preference("kto").kv_cache)
    parts = dict(estimate_preference_step(preference, **kwargs).phases["forward"].parts)
    assert "reference KV cache" not in parts and "policy KV cache" not in parts
    assert kto["per_rank"][0]["phases"]["forward"]["peak"] - axolotl["per_rank"][0]["phases"]["forward"]["peak"] \
        == cache


def test_kto_at_zero3_gathers_only_the_policys_head_at_its_loss():
    """KTO's KL forward runs the policy twice a step: DeepSpeed's ZeRO-3 trace is invalidated, nothing is
    prefetched; at the loss and its backward only the LM head is gathered (DPO's step keeps its prefetched
    parameters), and TRL 1.16's reference forward runs with none of the policy's. The measured backward: the
    same rows as DPO's, less the prefetched parameters beyond the head."""
    found = {}
    for name in ("trl18-kto-ds-z3-r2-full-ref", "trl18-dpo-ds-z3-r2-full-ref", "kto-ds-z3-r2-full-ref"):
        case = next(case for case in CASES if case["id"] == name)
        preference, kwargs = arguments(case)
        found[name] = (case, estimate_preference_step(preference, **kwargs))
    head = 2 * 32000 * 256
    kto, dpo = (dict(found[name][1].phases["backward"].parts) for name in ("trl18-kto-ds-z3-r2-full-ref",
                                                                           "trl18-dpo-ds-z3-r2-full-ref"))
    assert kto["gathered parameters"] == head < dpo["gathered parameters"]
    less = dpo["gathered parameters"] - head
    measured = {name: found[name][0]["per_rank"][0]["phases"]["backward"]["peak"] for name in found}
    assert abs(measured["trl18-dpo-ds-z3-r2-full-ref"] - measured["trl18-kto-ds-z3-r2-full-ref"] - less) \
        <= 0.001 * less
    reference = dict(found["kto-ds-z3-r2-full-ref"][1].phases["forward"].parts)
    assert found["kto-ds-z3-r2-full-ref"][1].phases["forward"].moment == "the reference model's forward"
    assert reference.get("gathered parameters", 0) == 0 and reference["reference gathered parameters"] == head


@pytest.mark.parametrize("trainer, loss, named", [
    ("grpo", "llamafactory", "LLaMA-Factory has no GRPO trainer"), ("ppo", "fused", "trainer must be one of"),
    ("cpo", "llamafactory", "LLaMA-Factory has no CPO trainer")])
def test_trainers_not_modelled_are_refused_with_the_reason(trainer, loss, named):
    case = CASES[0]
    _, kwargs = arguments(case)
    with pytest.raises(StepInputError, match=named):
        estimate_preference_step(Preference(trainer, loss=loss), **{**kwargs, "sequence_length": 1024})


def test_llamafactory_cases_are_recorded_with_their_versions():
    """benchmarks/preference/llamafactory.py: LLaMA-Factory's trainer at the cited commit, on TRL 0.24.0."""
    ours = [case for case in CASES if case.get("llamafactory")]
    assert RECORD["versions"]["llamafactory (lf- cases)"] == ours[0]["llamafactory"]
    assert RECORD["versions"]["trl (lf- cases)"] == "0.24.0"
    assert {case["reference"] for case in ours} == {"model", "adapter", "none"}
    assert {case["trainer"] for case in ours} == {"dpo", "orpo", "simpo", "kto"}


def test_llamafactory_orpo_runs_no_reference_and_its_kto_the_kl_completions_through_the_reference():
    case = next(case for case in CASES if case["id"] == "lf-orpo-full")
    preference, kwargs = arguments(case)
    step = estimate_preference_step(preference, **kwargs)
    assert not [name for name, _ in step.phases["forward"].parts if name.startswith("reference")]
    assert dict(step.phases["forward"].parts)["fp32 logits"] == 4 * 2 * 128 * case["config"]["vocab_size"]
    trl = estimate_preference_step(preference._replace(loss="fused"), **kwargs)  # TRL's ORPO: bf16 logits, no cast
    assert "logits" in dict(trl.phases["forward"].parts) and "fp32 logits" not in dict(trl.phases["forward"].parts)
    kto = next(case for case in CASES if case["id"] == "lf-kto-full-ref")
    preference, kwargs = arguments(kto)
    forward = estimate_preference_step(preference, **kwargs).phases["forward"]
    logits = 4 * kto["micro_batch"] * 128 * kto["config"]["vocab_size"]  # b completions, not stacked pairs
    assert dict(forward.parts)["reference KL fp32 logits"] == dict(forward.parts)["reference fp32 logits"] == logits
    assert forward.moment == "the reference model's forward"


def test_trls_reference_free_trainers_are_recorded():
    """benchmarks/preference/trl_reference_free.py: TRL's ORPOTrainer and CPOTrainer (sigmoid, simpo), no reference."""
    ours = [case for case in CASES if case.get("reference_free")]
    assert {case["trainer"] for case in ours} == {"orpo", "cpo", "simpo"} and any(case["lora"] for case in ours)
    for case in ours:
        assert all("ref_param" not in rank["phases"]["forward"]["parts"] for rank in case["per_rank"])


def test_trls_reference_free_loss_on_a_gpu_and_under_trl_18():
    """TRL 1.8 (axolotl) has no Triton log-prob kernel: its ORPO is the measured torch path; TRL 1.16 on a GPU keeps
    the logits for the kernel instead of a log-softmax per row (derived): a lower forward."""
    case = next(case for case in CASES if case["id"] == "trl-orpo-full")
    preference, kwargs = arguments(case)
    measured = estimate_preference_step(preference, **kwargs)
    axolotl = estimate_preference_step(preference._replace(loss="logits", triton=True), **kwargs)
    gpu = estimate_preference_step(preference._replace(triton=True), **kwargs)
    assert axolotl.phases == measured.phases
    assert gpu.phases["forward"].peak < measured.phases["forward"].peak
    assert dict(gpu.phases["forward"].parts)["activations"] < dict(measured.phases["forward"].parts)["activations"]


if __name__ == "__main__":
    for row in ROWS:
        print(f"{row['id']:28} {row['phase']:9} measured {row['measured']:>12,} model {row['model']:>12,} "
              f"{row['error']:+.2%}  {row['moment']}")
