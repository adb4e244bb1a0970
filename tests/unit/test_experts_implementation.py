"""Transformers' `experts_implementation` against the activation models (tests/data/activations/experts_impl.json,
written by benchmarks/activations/experts_impl.py; no torch needed): grouped_mm, Transformers 5's default, is what
the full and the LoRA models are measured under; eager and batched_mm keep more, by what their code keeps per routed
visit (integrations/moe.py), and stay named as not modelled (axolotl's key)."""

import json
from pathlib import Path

import pytest

from zeromem_lsp.configs import key_inventory
from zeromem_lsp.configs.lora_modules import LoraSettings
from zeromem_lsp.configs.model_config import model_shape
from zeromem_lsp.memory.activations import estimate_activations
from zeromem_lsp.memory.adapters import count_adapters
from zeromem_lsp.memory.lora_activations import estimate_lora_activations
from zeromem_lsp.memory.precision import DTYPE_BYTES

RECORD = json.loads((Path(__file__).resolve().parents[1] / "data" / "activations" / "experts_impl.json").read_text())
ROWS = [(case, layers) for case in RECORD["cases"] for layers in case["layer_counts"]]
DTYPES = {"bfloat16": "bf16", "float32": "fp32"}


def modelled(case: dict, layers: int) -> int:
    config = {**case["config"], "num_hidden_layers": layers}
    shape, dtype = model_shape(config), DTYPES[case["dtype"]]
    if case["lora"] is None:
        return estimate_activations(shape, case["sequence_length"], case["micro_batch"], dtype, False,
                                    case["attention"]).total
    count = count_adapters(config, LoraSettings(case["lora"]["r"], tuple(case["lora"]["target_modules"])))
    return estimate_lora_activations(shape, count, case["sequence_length"], case["micro_batch"], dtype, "fp32",
                                     case["attention"]).total


def extra_per_layer(case: dict) -> int:
    """What eager / batched_mm keep beyond grouped_mm in one MoE layer, read off integrations/moe.py and the
    experts' own loop: eager keeps per visit the routed row a second time (the product before index_add_'s cast,
    h wide in the model dtype) and one int64 pair (torch.where's rows) instead of grouped_mm's three int64
    permutations and int32 offsets; batched_mm keeps per visit the gathered expert weights (gate_up and down:
    3·h·I) that its bmm needs for the input's gradient, and no permutations."""
    shape = model_shape({**case["config"], "num_hidden_layers": 1})
    w, visits = DTYPE_BYTES[DTYPES[case["dtype"]]], case["sequence_length"] * case["micro_batch"] * (
        shape.experts_per_token)
    permutations = 3 * 8 * visits + 4 * shape.experts
    if case["experts_implementation"] == "eager":
        return visits * (w * shape.hidden + 2 * 8) - permutations
    if case["experts_implementation"] == "batched_mm":
        return visits * 3 * shape.hidden * shape.expert_intermediate * w - permutations
    return 0


def test_the_record_covers_each_implementation_trained_and_frozen():
    assert {case["experts_implementation"] for case in RECORD["cases"]} == {"grouped_mm", "eager", "batched_mm"}
    assert {case["lora"] is None for case in RECORD["cases"]} == {True, False}
    assert RECORD["transformers"] == "5.24.0"


@pytest.mark.parametrize("row", [row for row in ROWS if row[0]["experts_implementation"] == "grouped_mm"],
                         ids=lambda row: f"{row[0]['id']}-L{row[1]}")
def test_grouped_mm_is_what_the_models_count(row):
    case, layers = row
    assert modelled(case, layers) == case["saved_bytes"][str(layers)]


@pytest.mark.parametrize("row", [row for row in ROWS if row[0]["experts_implementation"] != "grouped_mm"
                                 and row[0]["config"]["model_type"] != "gpt_oss"],
                         ids=lambda row: f"{row[0]['id']}-L{row[1]}")
def test_eager_and_batched_mm_keep_more_by_what_their_code_keeps_per_visit(row):
    case, layers = row
    assert case["saved_bytes"][str(layers)] - modelled(case, layers) == layers * extra_per_layer(case)


def test_gpt_oss_runs_its_own_eager_loop_and_batched_mm_keeps_the_gathered_weights():
    """gpt_oss's eager is its experts' own loop (biased, clamped SwiGLU): more than grouped_mm, about as mixtral's."""
    for case in RECORD["cases"]:
        if case["config"]["model_type"] == "gpt_oss" and case["experts_implementation"] != "grouped_mm":
            extra = case["saved_bytes"]["1"] - modelled(case, 1)
            assert 0.95 < extra / extra_per_layer(case) < 1.05


def test_only_grouped_mm_counts_as_modelled_in_a_recipe():
    assert key_inventory.not_modelled("axolotl", {"experts_implementation": "grouped_mm"}) == []
    for other in ("eager", "batched_mm", "scattermoe"):
        [(path, value, why)] = key_inventory.not_modelled("axolotl", {"experts_implementation": other})
        assert path == ("experts_implementation",) and value == other and "batched_mm" in why
