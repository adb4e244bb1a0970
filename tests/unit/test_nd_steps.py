"""The step model under `Parallelism` against N-D parallel, offload and tiled steps measured on CPU (issue 30).

tests/data/step/nd.json is written by benchmarks/step/nd.py (DTensor tensor parallelism over gloo, TRL's
OffloadActivations with its host copies left out, DeepSpeed's TiledMLP; real HF Llama code, random weights, the
storage tracker per phase of step 2). Acceptance as tests/unit/test_step.py: every phase within ±5%, each case's
largest rank. `Parallelism()` is plain data parallelism: the same figures as before, to the byte.
"""

import json
from pathlib import Path

import pytest

from zeromem_lsp.configs.model_config import model_shape
from zeromem_lsp.configs.parallel_shape import rank_shape, rank_tokens, shard_group
from zeromem_lsp.configs.parallelism import NONE, Parallelism
from zeromem_lsp.memory.optimizer_step import parameter_tensors
from zeromem_lsp.memory.step import PHASES, StepInputError, estimate_step
from tests.unit.test_step import arguments

RECORD = json.loads((Path(__file__).resolve().parents[1] / "data" / "step" / "nd.json").read_text())
CASES = [case for case in RECORD["cases"] if "error" not in case]
GOAL = 0.05


def estimate(case: dict, parallelism: Parallelism | None = None):
    """What a user would tell zeromem about the run (test_step.arguments: engine, ranks, dtypes) and its degrees."""
    return estimate_step(model_shape(case["config"]), case["sequence_length"], case["micro_batch"], **arguments(case),
                         parallelism=Parallelism(**case["nd"]) if parallelism is None else parallelism)


def twin_of(case: dict) -> str:
    """The measured case without the mechanism: the single-rank base, or ZeRO over the same two ranks."""
    _, _, rest = case["id"].split("-", 2)
    if rest.startswith("z"):
        stage, rest = rest.split("-", 1)
        return f"nd-{stage}-r2-{rest}"
    return "nd-base-" + ("ckpt-" if case["gradient_checkpointing"] else "") + rest.removeprefix("ckpt-")


ROWS = [(case, phase) for case in CASES for phase in PHASES]


def test_the_record_names_its_versions_and_covers_each_measured_mechanism():
    assert RECORD["torch"] and RECORD["transformers"] and RECORD["deepspeed"] and RECORD["trl"]
    assert len(CASES) >= 20
    kinds = {key for case in CASES for key in case["nd"]}
    assert {"tensor", "ulysses", "activation_offload", "tiled_mlp_shards"} <= kinds
    ulysses = [case for case in CASES if case["nd"].get("ulysses", 1) > 1]
    # attention went through DeepSpeed's all-to-alls on every rank
    assert ulysses and all(rank["all_to_all_calls"] > 0 for case in ulysses for rank in case["per_rank"])


@pytest.mark.parametrize("case, phase", ROWS, ids=[f"{case['id']}-{phase}" for case, phase in ROWS])
def test_each_phase_is_within_five_percent(case, phase):
    measured = max(rank["phases"][phase]["peak"] for rank in case["per_rank"])
    model = estimate(case).phases[phase].peak
    assert abs(model / measured - 1) <= GOAL, f"{case['id']} {phase}: model {model:,} measured {measured:,}"


def test_the_measured_mechanisms_move_the_estimate_as_the_measurements_do():
    """Each mechanism's case against its twin without it: the model's saving has the measured sign and size."""
    by_id = {case["id"]: case for case in CASES}
    checked = 0
    for case in CASES:
        twin = by_id.get(twin_of(case))
        if not case["nd"] or twin is None:
            continue
        for phase in ("forward", "backward"):
            base = max(rank["phases"][phase]["peak"] for rank in twin["per_rank"])
            measured = max(rank["phases"][phase]["peak"] for rank in case["per_rank"]) - base
            model = estimate(case).phases[phase].peak - estimate(twin).phases[phase].peak
            assert model <= 0 and measured <= 0
            # the saving within 5% of itself, give or take half the phase bar of the twin's peak
            assert abs(model - measured) <= GOAL * (abs(measured) + base / 2), (case["id"], phase, model, measured)
        checked += 1
    assert checked >= 25


def test_no_parallelism_is_the_plain_step_to_the_byte():
    for case in CASES:
        plain = estimate(case, NONE)
        again = estimate_step(model_shape(case["config"]), case["sequence_length"], case["micro_batch"],
                              **arguments(case))
        assert plain == again and plain.derived == ()


def test_one_tensor_parallel_rank_computes_a_divided_model():
    shape = model_shape(next(case for case in CASES if case["model"] == "llama-h1024")["config"])
    ranked = rank_shape(shape, Parallelism(tensor=4))
    assert (ranked.heads, ranked.kv_heads, ranked.intermediate) == (4, 1, 704)
    whole, one = parameter_tensors(shape), parameter_tensors(ranked)
    assert one.embedding == whole.embedding and one.final_norm == whole.final_norm  # replicated
    assert one.head * 4 == whole.head and (one.layer_total - 2048) * 4 == whole.layer_total - 2048  # norms whole


def test_tokens_and_the_shard_group_follow_the_degrees():
    assert rank_tokens(4096, Parallelism(context=2, ulysses=2)) == 1024
    assert shard_group(16, Parallelism(tensor=2, context=4)) == 8  # FSDP2 + CP: dp_shard × cp
    assert shard_group(16, Parallelism(ulysses=4)) == 16  # ZeRO + Ulysses: dp × u
    assert shard_group(16, Parallelism(mics_shard=4)) == 4


def test_context_parallel_is_derived_and_says_so():
    case = {**next(case for case in CASES if case["id"] == "nd-base-h512-v8k-s2048"), "ranks": 2}  # DDP: 2 ranks
    whole = estimate(case, NONE)
    split = estimate(case, Parallelism(context=2))
    assert split.derived == ("context",) and estimate(case, Parallelism(ulysses=2)).derived == ()
    assert estimate(case, Parallelism(activation_offload="cpu")).derived == ("activation_offload",)
    assert split.phases["forward"].peak < whole.phases["forward"].peak
    # the activations of one rank are those of half the sequence
    half = estimate({**case, "sequence_length": 1024}, NONE)
    assert split.activations == half.activations
    with pytest.raises(StepInputError, match="beyond the world size"):  # two context ranks need two ranks
        estimate({**case, "ranks": 1}, Parallelism(context=2))


LLAMA_8B = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
            "intermediate_size": 14336, "num_hidden_layers": 32, "vocab_size": 128256, "tie_word_embeddings": False}
MIXTRAL = {"model_type": "mixtral", "hidden_size": 1024, "num_attention_heads": 8, "num_key_value_heads": 4,
           "intermediate_size": 2048, "num_hidden_layers": 4, "num_local_experts": 8, "num_experts_per_tok": 2,
           "vocab_size": 32000, "tie_word_embeddings": False}


@pytest.mark.parametrize("config, degrees", [
    (LLAMA_8B, {"tensor": 2}), (LLAMA_8B, {"context": 2}), (LLAMA_8B, {"ulysses": 4}),
    (LLAMA_8B, {"activation_offload": "cpu_all"}), (LLAMA_8B, {"tiled_mlp_shards": 4}),
    (MIXTRAL, {"expert": 4})], ids=["tp", "cp", "ulysses", "offload", "tiled", "ep"])
def test_each_degree_moves_an_8_gpu_zero3_estimate_down(config, degrees):
    """Llama-3-8B at 32k tokens (a small Mixtral for EP) under ZeRO-3 on 8 ranks with checkpointing off: each degree
    alone lowers the peak, and the larger degree lowers it further."""
    def peak(parallelism):
        return estimate_step(model_shape(config), 32768 if config is LLAMA_8B else 4096, 1, engine="deepspeed",
                             stage=3, ranks=8, parallelism=parallelism).peak
    name, value = next(iter(degrees.items()))
    doubled = {name: value * 2} if isinstance(value, int) else {"tiled_mlp_shards": 8, "activation_offload": value}
    assert peak(Parallelism(**doubled)) <= peak(Parallelism(**degrees)) < peak(NONE)
