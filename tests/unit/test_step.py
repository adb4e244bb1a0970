"""The whole-step phase model (zeromem_lsp/memory/step.py) against every measured training step (no torch).

tests/data/step/measured.json is written by benchmarks/step/measure.py (real HF model code on CPU, torch AdamW,
DeepSpeed over gloo, FSDP; FakeTensorMode at 7-8B scale): per rank, the peak of live tensor storage bytes in
each phase of step 2. Run this file as a script to print the error of every case and phase.
"""

import json
from pathlib import Path

import pytest

from zeromem_lsp.configs.model_config import model_shape
from zeromem_lsp.memory.step import PHASES, Buckets, StepInputError, estimate_step, parameter_tensors

RECORD_PATH = Path(__file__).resolve().parents[1] / "data" / "step" / "measured.json"
RECORD = json.loads(RECORD_PATH.read_text(encoding="utf-8"))
CASES = [case for case in RECORD["cases"] if "error" not in case]
GOAL, BOUND = 0.05, 0.10

#: measured regime -> (param_dtype, autocast, fsdp_mixed)
REGIMES = {"bf16": ("bf16", False, False), "fp32": ("fp32", False, False), "autocast": ("fp32", True, False),
           "ds-bf16": ("bf16", False, False), "ds-fp16": ("fp16", False, False), "ds-fp32": ("fp32", False, False),
           "fsdp-mixed": ("fp32", False, True)}
ZERO_KEYS = {"reduce_bucket_size": "reduce_bucket_size", "overlap_comm": "overlap_comm",
             "contiguous_gradients": "contiguous_gradients", "stage3_prefetch_bucket_size": "prefetch_bucket_size",
             "stage3_max_live_parameters": "max_live_parameters", "stage3_max_reuse_distance": "max_reuse_distance",
             "stage3_param_persistence_threshold": "persistence_threshold"}


def arguments(case: dict) -> dict:
    """estimate_step's keyword arguments for a measured case: what a user would tell zeromem about the run."""
    dtype, autocast, mixed = REGIMES[case["regime"]]
    impl = case["optimizer"]["impl"]
    kwargs = {"checkpointing": case["gradient_checkpointing"], "attention": case["attention"],
              "ranks": case["ranks"], "param_dtype": dtype, "autocast": autocast,
              "optimizer_impl": "fused" if impl == "ds-fused" else impl}
    engine = case["engine"]
    if engine == "ddp":
        kwargs.update(engine="torch", ddp_bucket_view=case["ddp"]["gradient_as_bucket_view"])
    elif engine == "deepspeed":
        zero = case["ds_config"]["zero_optimization"]
        kwargs.update(engine="deepspeed", stage=zero["stage"],
                      buckets=Buckets(**{ZERO_KEYS[key]: value for key, value in zero.items() if key in ZERO_KEYS},
                                      grad_accum_dtype=case["ds_config"].get("data_types", {}).get("grad_accum_dtype")))
    elif engine.startswith("fsdp"):
        settings = case.get("fsdp", {})
        kwargs.update(engine="fsdp", fsdp_version=int(engine[-1]), fsdp_mixed=mixed,
                      fsdp_reshard=settings.get("reshard_after_forward", True) is not False
                      and settings.get("sharding_strategy", "FULL_SHARD") == "FULL_SHARD",
                      fsdp_sharded=settings.get("sharding_strategy", "FULL_SHARD") != "NO_SHARD"
                      and not settings.get("replicate"))  # (FSDP2 over a replicate R x shard 1 mesh)
    else:
        kwargs["engine"] = "torch"
    return kwargs


def comparisons() -> list[dict]:
    """One row per case and phase: the largest rank's measured peak against the model."""
    rows = []
    for case in CASES:
        estimate = estimate_step(model_shape(case["config"]), case["sequence_length"], case["micro_batch"],
                                 **arguments(case))
        for phase in PHASES:
            measured = max(rank["phases"][phase]["peak"] for rank in case["per_rank"])
            model = estimate.phases[phase].peak
            rows.append({"id": case["id"], "phase": phase, "measured": measured, "model": model,
                         "error": model / measured - 1, "moment": estimate.phases[phase].moment})
        measured = max(rank["phases"][phase]["peak"] for rank in case["per_rank"] for phase in PHASES)
        rows.append({"id": case["id"], "phase": "step", "measured": measured, "model": estimate.peak,
                     "error": estimate.peak / measured - 1, "moment": estimate.peak_phase})
    return rows


ROWS = comparisons()


def test_the_record_is_there():
    assert RECORD["torch"] and RECORD["transformers"] and CASES


@pytest.mark.parametrize("row", ROWS, ids=[f"{row['id']}-{row['phase']}" for row in ROWS])
def test_every_measured_phase_is_within_ten_percent(row):
    assert abs(row["error"]) <= BOUND, row


def test_the_peak_phase_is_the_measured_one():
    """The phase holding the peak, where the measured phases are more than 5% apart."""
    for case in CASES:
        rank = max(case["per_rank"], key=lambda item: max(item["phases"][phase]["peak"] for phase in PHASES))
        peaks = {phase: rank["phases"][phase]["peak"] for phase in PHASES}
        ordered = sorted(peaks.values(), reverse=True)
        if ordered[0] > 1.05 * ordered[1]:
            estimate = estimate_step(model_shape(case["config"]), case["sequence_length"], case["micro_batch"],
                                     **arguments(case))
            assert estimate.peak_phase == max(peaks, key=peaks.get), case["id"]


def test_error_distribution(capsys):
    steps = [row for row in ROWS if row["phase"] == "step"]
    inside = sum(abs(row["error"]) <= GOAL for row in ROWS)
    with capsys.disabled():
        print(f"\nstep model vs {len(steps)} cases ({len(ROWS)} phase rows): {inside} rows within ±5%, worst "
              f"{max(ROWS, key=lambda row: abs(row['error']))['error']:+.2%}")
    assert inside == len(ROWS), "the goal: every measured phase within ±5%"


# --- hand-derived figures (docs/memory-model.md, "The whole training step", writes the same arithmetic) ---

SMALL = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 64, "intermediate_size": 688, "num_hidden_layers": 2, "vocab_size": 8000,
         "tie_word_embeddings": False}


def test_parameter_tensors_count_the_model():
    tensors = parameter_tensors(model_shape(SMALL))
    assert tensors.total == 5_547_264  # the measured model's numel
    assert tensors.largest == 8000 * 256


def test_forward_and_loss_backward_by_hand():
    shape = model_shape(SMALL)
    step = estimate_step(shape, 128, 2)
    acts, tokens, n = step.activations, 256, 5_547_264
    persistent = 2 * n + 4 * n  # bf16 parameters + AdamW's two bf16 states
    assert step.phases["forward"].peak == persistent + acts.total + 2 * tokens * 8000 + 4 * tokens * 8000
    assert step.phases["backward"].peak == persistent + acts.total + 2 * 4 * tokens * 8000
    assert step.phases["backward"].moment == "the loss's backward"
    assert step.phases["optimizer"].peak == persistent + 2 * n + 2 * n  # gradients + foreach's sqrt copy
    assert estimate_step(shape, 128, 2, optimizer_impl="for-loop").phases["optimizer"].peak == \
        persistent + 2 * n + 2 * 2 * 8000 * 256
    assert estimate_step(shape, 128, 2, optimizer_impl="fused").phases["optimizer"].peak == persistent + 2 * n


def test_zero2_optimizer_phase_by_hand():
    """ZeRO-2, 2 ranks, bf16, for-loop: 16-bit weights whole, fp32 master + AdamW states on the rank's half,
    then its fp32 gradients and for-loop's two partition-sized temporaries (one flat tensor)."""
    step = estimate_step(model_shape(SMALL), 128, 2, engine="deepspeed", stage=2, ranks=2,
                         optimizer_impl="for-loop")
    n, half = 5_547_264, 2_773_632
    assert step.phases["optimizer"].peak == 2 * n + 12 * half + 4 * half + 2 * 4 * half
    assert step.phases["optimizer"].moment == "the optimizer step"


def test_tied_embeddings_hold_three_gradients_at_the_end_of_backward():
    tied = estimate_step(model_shape({**SMALL, "tie_word_embeddings": True}), 16, 1, param_dtype="fp32")
    n = parameter_tensors(model_shape({**SMALL, "tie_word_embeddings": True})).total
    end = 4 * n + 8 * n + 4 * n + 4 * 16 * 256 + 2 * 4 * 8000 * 256  # + the embedding's incoming gradient
    assert tied.phases["backward"].peak == end and tied.phases["backward"].moment == "the end of backward"


def test_parts_sum_to_the_phase_peak_and_come_largest_first():
    step = estimate_step(model_shape(SMALL), 128, 2, engine="deepspeed", stage=2, ranks=4)
    for phase in step.phases.values():
        assert sum(part.bytes for part in phase.parts) == phase.peak
        assert [part.bytes for part in phase.parts] == sorted((part.bytes for part in phase.parts), reverse=True)
    assert step.peak == max(phase.peak for phase in step.phases.values())


def test_sharding_lowers_the_optimizer_phase():
    shape = model_shape(SMALL)
    peaks = [estimate_step(shape, 128, 2, engine="deepspeed", stage=2, ranks=ranks).phases["optimizer"].peak
             for ranks in (1, 2, 4)]
    assert peaks[0] > peaks[1] > peaks[2]


@pytest.mark.parametrize("kwargs, named", [({"engine": "jax"}, "engine"), ({"optimizer_impl": "apex"}, "optimizer_impl"),
                                           ({"optimizer": "muon"}, "optimizer"), ({"micro_batch": 0}, "micro_batch"),
                                           ({"param_dtype": "int8"}, "param_dtype"), ({"ranks": 0}, "ranks"),
                                           ({"engine": "deepspeed", "stage": 4}, "stage"),
                                           ({"engine": "fsdp", "autocast": True}, "autocast")])
def test_bad_input_names_the_allowed_values(kwargs, named):
    batch = kwargs.pop("micro_batch", 2)
    with pytest.raises(StepInputError, match=named):
        estimate_step(model_shape(SMALL), 128, batch, **kwargs)


# --- the accuracy table in docs/memory-model.md, generated from the record ---

DOCS = Path(__file__).resolve().parents[2] / "docs" / "memory-model.md"
BEGIN = "<!-- step-accuracy: written by `python tests/unit/test_step.py --write-docs`; checked by tests/unit/test_step.py -->"
END = "<!-- /step-accuracy -->"


def engine_of(case_id: str) -> str:
    return next(case["engine"] for case in CASES if case["id"] == case_id) + (
        "-fake" if next(case["fake"] for case in CASES if case["id"] == case_id) else "")


def table() -> str:
    groups: dict[str, list[dict]] = {}
    for row in ROWS:
        groups.setdefault(engine_of(row["id"]), []).append(row)
    lines = [f"torch {RECORD['torch']}, transformers {RECORD['transformers']}, deepspeed {RECORD['deepspeed']}; "
             f"{len(CASES)} cases, {len(ROWS)} rows (3 phases + the step's peak per case).", "",
             "| engine | cases | rows | within ±1% | within ±5% | within ±10% | worst error | mean abs. error |",
             "|---|---|---|---|---|---|---|---|"]
    for engine in sorted(groups):
        rows = groups[engine]
        worst = max(rows, key=lambda row: abs(row["error"]))["error"]
        mean = sum(abs(row["error"]) for row in rows) / len(rows)
        lines.append(f"| {engine} | {len({row['id'] for row in rows})} | {len(rows)} | "
                     f"{sum(abs(row['error']) <= 0.01 for row in rows)} | {sum(abs(row['error']) <= GOAL for row in rows)} | "
                     f"{sum(abs(row['error']) <= BOUND for row in rows)} | {worst:+.2%} | {mean:.2%} |")
    return "\n".join(lines)


def with_table(docs: str) -> str:
    head, _, rest = docs.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


def test_the_docs_table_is_generated_from_the_record():
    docs = DOCS.read_text(encoding="utf-8")
    assert BEGIN in docs and END in docs
    assert with_table(docs) == docs, "run python tests/unit/test_step.py --write-docs"


if __name__ == "__main__":
    import sys
    if "--write-docs" in sys.argv:
        DOCS.write_text(with_table(DOCS.read_text(encoding="utf-8")), encoding="utf-8")
    for row in ROWS:
        flag = "" if abs(row["error"]) <= GOAL else (" <- >5%" if abs(row["error"]) <= BOUND else " <- >10%")
        print(f"{row['id']:48} {row['phase']:9} {row['measured']:>14,} {row['model']:>14,} {row['error']:+7.2%}"
              f"  {row['moment']}{flag}")
