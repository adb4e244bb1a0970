"""GRPO's step in the model (memory/grpo.py) against TRL 1.16's measured GRPO steps (no torch).

tests/data/step/preference.json's `grpo-` (TRL 1.16) and `trl18-grpo-` (TRL 1.8.0, axolotl's pin) cases are written
by benchmarks/preference/grpo.py: per phase of step 2,
generation (the policy's `generate`), reference (its log-probs, beta != 0), forward (`_compute_loss`), backward,
optimizer. The model's forward phase is the largest of its moments; each moment is compared with the measured phase
it stands for, on the whole and on what lies above the persistent state (the moment's own transients).
"""

import pytest

from tests.unit.test_preference import GOAL, RECORD, arguments
from zeromem_lsp.memory.grpo import Generation, kv_elements
from zeromem_lsp.memory.preference import Preference, estimate_preference_step
from zeromem_lsp.memory.step import Fsdp, parameter_tensors
from zeromem_lsp.memory.step import StepInputError

CASES = [case for case in RECORD["cases"] if case["trainer"] == "grpo" and "error" not in case]
GENERATION = ("the prompt's prefill", "a layer's cache update", "the last token's sampling")
UNSHARD = "the first layer's unshard"  # FSDP2 only
MEASURED = {**dict.fromkeys(GENERATION, "generation"), "the reference's log-probs": "reference",
            "the policy's LM head": "forward"}
PERSISTENT = ("parameters", "optimizer states", "reference model", "fp32 master", "gradient partitions", "reduce bucket")


def grpo(case: dict, moment: str | None = None) -> tuple[Preference, dict]:
    preference, kwargs = arguments(case)
    if case["engine"] == "fsdp2":  # fully_shard per layer and on the root; the harness builds this model in fp32
        kwargs.update(engine="fsdp", fsdp_version=2, param_dtype="fp32")
        if case["reference"] == "model":  # prepare_fsdp: the reference sharded, one unit (its root)
            tensors = parameter_tensors(kwargs["shape"])
            preference = preference._replace(
                reference_bytes=Fsdp(2).reference(4 * tensors.total, 0, case["ranks"]),
                reference_gathered=Fsdp(2).reference_gathered(tensors, 4, case["ranks"], fused=True))
    generation = Generation(case["completion_length"], case["steps_per_generation"], case["beta"] != 0, moment=moment)
    return preference._replace(generation=generation, reference_forward=case["beta"] != 0,
                               reference_bytes=preference.reference_bytes if case["beta"] else 0), kwargs


def test_the_grpo_cases_cover_a_reference_copy_an_adapter_reference_and_none():
    assert {case["reference"] for case in CASES} == {"model", "adapter", "none"}
    assert any(case["steps_per_generation"] > 1 for case in CASES)
    for case in CASES:  # every completion ran to max_completion_length (the worst case the model takes)
        assert case["per_rank"][0]["completion_lengths"] == [case["completion_length"]] * 2


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_each_phase_is_within_five_percent(case):
    step = estimate_preference_step(*grpo(case)[:1], **grpo(case)[1])
    measured = case["per_rank"][0]["phases"]
    forward = max(measured[name]["peak"] for name in ("generation", "reference", "forward"))
    for phase, found in (("forward", forward), ("backward", measured["backward"]["peak"]),
                         ("optimizer", measured["optimizer"]["peak"])):
        assert abs(step.phases[phase].peak / found - 1) <= GOAL, (case["id"], phase)


def _moment(case: dict, moment: str):
    preference, kwargs = grpo(case, moment)
    return estimate_preference_step(preference, **kwargs).phases["forward"]


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_each_moment_and_its_transients_match_the_measured_phase(case):
    """The largest generation moment is the measured generation phase's peak (within 1% of what it adds to the
    persistent state); the reference's and the policy's moments theirs; no generation moment exceeds it."""
    rank = case["per_rank"][0]
    names = [name for name in MEASURED if case["beta"] or name != "the reference's log-probs"]
    generation = GENERATION + ((UNSHARD,) if case["engine"] == "fsdp2" else ())
    names += [UNSHARD] if case["engine"] == "fsdp2" else []
    found = {name: _moment(case, name) for name in names}
    largest = max(generation, key=lambda name: found[name].peak)
    for name in [largest, *(name for name in names if name not in generation)]:
        phase = found[name]
        measured = rank["phases"][MEASURED.get(name, "generation")]["peak"]
        above = phase.peak - sum(size for part, size in phase.parts if part in PERSISTENT)
        assert abs(phase.peak / measured - 1) <= GOAL, (case["id"], name)
        assert abs(above / (measured - rank["persistent_before_step2"]) - 1) <= 0.01, (case["id"], name)
    # (ZeRO-3: the reference's small parameters are whole on every rank only from its forward on; the model keeps
    # them whole throughout, 0.4% of this case's generation)
    assert all(found[name].peak <= 1.005 * rank["phases"]["generation"]["peak"] for name in generation)
    # FSDP2: the root's and the first layer's unshard; else a long prompt's prefill, or the last token's sampling
    long_prompt = case["prompt_length"] > case["completion_length"]
    assert largest == (UNSHARD if case["engine"] == "fsdp2" else
                       "the prompt's prefill" if long_prompt else "the last token's sampling")


def test_the_generation_holds_the_cache_of_every_generated_row_and_names_its_moment():
    case = next(case for case in CASES if case["id"] == "grpo-full-ref-spg2")
    sampling = dict(_moment(case, "the last token's sampling").parts)
    rows = case["micro_batch"] * case["steps_per_generation"]  # the generation batch, not the micro-batch
    assert sampling["KV cache (generation)"] == 2 * kv_elements(_shape(case), rows * (case["sequence_length"] - 1))
    assert "gradients" not in sampling  # generation runs after zero_grad
    preference, kwargs = grpo(case)
    long = estimate_preference_step(preference._replace(generation=preference.generation._replace(
        steps_per_generation=1024)), **kwargs)  # 2048 completions at once
    assert long.phases["forward"].moment.startswith("GRPO's generation")
    assert long.peak_phase == "forward" and long.phases["forward"].peak > \
        estimate_preference_step(preference, **kwargs).phases["forward"].peak


def test_beta_zero_runs_no_reference_and_peft_disables_the_adapters_instead_of_a_copy():
    noref = next(case for case in CASES if case["reference"] == "none")
    preference, kwargs = grpo(noref)
    step = estimate_preference_step(preference, **kwargs)
    assert not [name for phase in step.phases.values() for name, _ in phase.parts if name.startswith("reference")]
    with pytest.raises(StepInputError, match="no moment"):
        estimate_preference_step(*grpo(noref, "the reference's log-probs")[:1], **kwargs)
    lora = next(case for case in CASES if case["reference"] == "adapter")
    preference, _ = grpo(lora)
    assert preference.reference_bytes == 0 and preference.generation.reference


def _shape(case):
    from zeromem_lsp.configs.model_config import model_shape
    return model_shape(case["config"])


@pytest.mark.parametrize("change, named", [
    ({"use_vllm": True}, "vLLM"), ({"completion_length": 128}, "leaves no prompt"),
    ({"steps_per_generation": 0}, "at least 1")])
def test_what_the_model_does_not_follow_is_refused_with_the_reason(change, named):
    preference, kwargs = grpo(CASES[0])
    with pytest.raises(StepInputError, match=named):
        estimate_preference_step(preference._replace(generation=preference.generation._replace(**change)), **kwargs)
    with pytest.raises(StepInputError, match="sharded FSDP1"):
        estimate_preference_step(preference, **{**kwargs, "engine": "fsdp", "fsdp_version": 1, "ranks": 2})


def test_zero3_gathers_the_whole_policy_for_generation_and_only_the_head_at_the_loss_after_it():
    """ZeRO-3 (2 ranks, measured): `unwrap_model_for_generation` gathers every parameter not kept whole; after it,
    `add_hooks` invalidates the coordinator's trace, so the micro-step's forward fetches without prefetch and holds
    only the LM head gathered at the fused head; with steps_per_generation > 1 later micro-steps run as any step."""
    case = next(case for case in CASES if case["id"] == "grpo-ds-z3-r2-full-ref")
    rank = max(case["per_rank"], key=lambda found: found["phases"]["generation"]["peak"])
    sampling = dict(_moment(case, "the last token's sampling").parts)
    shape = _shape(case)
    head = 2 * shape.vocab * shape.hidden
    own = sampling["gathered parameters"] + sampling["reduce bucket"] + sampling["KV cache (generation)"] \
        + sampling["next-token logits and probabilities"] + sampling["token ids and mask"]
    assert abs(own / rank["phases"]["generation"]["parts"]["other"] - 1) <= 0.001
    assert dict(_moment(case, "the policy's LM head").parts)["gathered parameters"] == head
    preference, kwargs = grpo(case)
    later = preference._replace(generation=preference.generation._replace(steps_per_generation=2))
    assert dict(estimate_preference_step(later, **kwargs).phases["backward"].parts)["gathered parameters"] > head


def test_trl18s_loss_makes_the_logits_of_the_completion_positions_only():
    """TRL 1.8 (axolotl's pin): `logits_to_keep` = completion + 1, so a longer prompt adds no logits; each row's
    log-softmax is kept for backward; the reference's log-probs hold its logits and two rows' log-softmaxes."""
    case = next(case for case in CASES if case["id"] == "trl18-grpo-full-ref")
    preference, kwargs = grpo(case)
    assert preference.loss == "logits"
    forward = dict(_moment(case, "the policy's LM head").parts)
    b, completion, vocab = case["micro_batch"], case["completion_length"], case["config"]["vocab_size"]
    assert forward["logits"] == 2 * b * (completion + 1) * vocab
    assert forward["completion logits copy"] == 2 * b * completion * vocab
    longer = estimate_preference_step(preference, **{**kwargs, "sequence_length": 2 * case["sequence_length"]})
    assert dict(longer.phases["forward"].parts)["logits"] == forward["logits"]
    reference = dict(_moment(case, "the reference's log-probs").parts)
    assert reference["reference log-softmax"] == 2 * 2 * completion * vocab
    measured = case["per_rank"][0]["phases"]
    assert abs(measured["backward"]["peak"] / estimate_preference_step(preference, **kwargs).phases["backward"].peak
               - 1) <= 0.001


def test_under_gradient_accumulation_only_a_generation_micro_step_generates():
    """TRL generates once per steps_per_generation micro-steps (its default: gradient_accumulation_steps), from the
    first micro-step of an optimizer step, after zero_grad: the later micro-batches, which hold the accumulated
    gradients, run the policy's head only. When steps_per_generation is no multiple of the accumulation a generation
    can land on a later micro-batch, with the gradients alive beside it."""
    case = next(case for case in CASES if case["id"] == "grpo-full-ref-spg2")
    preference, kwargs = grpo(case)
    generating = preference._replace(generation=preference.generation._replace(steps_per_generation=1024))
    alone = estimate_preference_step(generating, **kwargs).phases["forward"]
    assert alone.moment.startswith("GRPO's generation")
    accumulated = estimate_preference_step(generating, **kwargs, gradient_accumulation_steps=2).phases["forward"]
    assert accumulated.peak == alone.peak and "accumulated gradients" not in dict(accumulated.parts)
    odd = generating._replace(generation=generating.generation._replace(steps_per_generation=1023))
    alone = estimate_preference_step(odd, **kwargs).phases["forward"]
    later = estimate_preference_step(odd, **kwargs, gradient_accumulation_steps=2).phases["forward"]
    assert later.moment.startswith("GRPO's generation") and later.moment.endswith("a later micro-batch")
    assert later.peak - alone.peak == dict(later.parts)["accumulated gradients"] > 0
