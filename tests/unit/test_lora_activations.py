"""The LoRA activation model against PEFT on CPU (tests/data/adapters/lora_activations.json, written by
benchmarks/adapters/activations.py); no torch needed."""

import json
from pathlib import Path

import pytest

from zeromem_lsp.memory.precision import DTYPE_BYTES
from zeromem_lsp.memory.activations import ActivationInputError, estimate_activations
from zeromem_lsp.configs.model_config import model_shape
from zeromem_lsp.configs.lora_modules import LoraSettings
from zeromem_lsp.memory.adapters import count_adapters
from zeromem_lsp.memory.lora_activations import FAMILIES, activation_dtype, estimate_lora_activations

RECORD = json.loads((Path(__file__).resolve().parents[1] / "data" / "adapters" / "lora_activations.json").read_text())
ROWS = [(case, layers) for case in RECORD["cases"] for layers in case["layer_counts"]]


def estimate(case: dict, layers: int):
    config = {**case["config"], "num_hidden_layers": layers}
    lora = case["lora"]
    targets = lora["target_modules"]
    count = count_adapters(config, LoraSettings(lora["r"], targets if isinstance(targets, str) else tuple(targets),
                                                tuple(lora.get("modules_to_save", ())),
                                                target_parameters=tuple(lora.get("target_parameters", ()))))
    model_dtype = {"bfloat16": "bf16", "float32": "fp32"}[case["dtype"]]
    dtype = activation_dtype(model_dtype, bool(case.get("bnb")), case.get("prepare_kbit", False))
    adapter = "fp32" if case["autocast_adapter_dtype"] else dtype
    # on the CPU torch's dropout keeps its noise in the input's dtype (a GPU: a bool mask, mask_bytes' default 1)
    return estimate_lora_activations(model_shape(config), count, case["sequence_length"], case["micro_batch"],
                                     dtype, adapter, case["attention"], case["gradient_checkpointing"],
                                     dropout=lora.get("lora_dropout", 0) > 0, mask_bytes=DTYPE_BYTES[adapter])


def test_the_record_covers_families_dtypes_attention_and_partial_targets():
    cases = RECORD["cases"]
    assert {case["config"]["model_type"] for case in cases} == set(FAMILIES)
    assert {case["autocast_adapter_dtype"] for case in cases} == {True, False}
    assert {case["attention"] for case in cases} == {"sdpa", "eager"}
    assert any(case["layer_counts"] == [2, 3] for case in cases)  # adapters on later layers only
    assert {case["gradient_checkpointing"] for case in cases} == {True, False}
    quantized = [case for case in cases if case.get("bnb")]  # QLoRA: 4-bit and 8-bit, with and without k-bit prep
    assert {case["prepare_kbit"] for case in quantized} == {True, False}
    assert any(case["bnb"].get("load_in_8bit") for case in quantized)


#: phimoe's sparsemixer saves a T-row int64 tensor that is freed before backward in some runs: the measurement (unique
#: storages by address) then counts a later one at its address once, 8·T B less (seen in 1 of 3 runs of phimoe-77 L1)
#: DeepseekV3TopkRouter's per-group top-2 indices (T·n_group·2 int64) sit in a branch no gradient reaches (only the
#: chosen groups' indices leave it): freed after the router, their address is at times taken by a later saved tensor
#: of the same size, counted once (the models count them, as the full fine-tuning measurements that saw them)
ADDRESS_REUSE = {("phimoe-77", 1): 8 * 128, ("deepseek_v3-93", 1): 8 * 64 * 4 * 2,
                 ("deepseek_v3-93", 2): 8 * 64 * 4 * 2, ("deepseek_v3-95", 2): 8 * 128 * 4 * 2,
                 ("deepseek_v3-96", 2): 8 * 128 * 4 * 2}


@pytest.mark.parametrize("row", ROWS, ids=[f"{case['id']}-L{layers}" for case, layers in ROWS])
def test_every_measured_lora_case_is_exact(row):
    case, layers = row
    assert estimate(case, layers).total == case["saved_bytes"][str(layers)] + ADDRESS_REUSE.get((case["id"], layers), 0)


def test_moe_families_are_measured_with_frozen_experts_in_both_dtypes_and_with_checkpointing():
    moe = [case for case in RECORD["cases"] if model_shape(case["config"]).experts]
    assert {case["config"]["model_type"] for case in moe} >= {"mixtral", "qwen3_moe", "olmoe", "qwen2_moe", "phimoe",
                                                                "glm4_moe", "gpt_oss", "llama4_text"}
    assert {case["dtype"] for case in moe} == {"bfloat16", "float32"}
    assert {case["gradient_checkpointing"] for case in moe} == {True, False}
    for case in moe:  # full fine-tuning keeps more: the frozen experts' gathered inputs and down inputs
        if case["lora"].get("target_parameters") or "w1" in case["lora"]["target_modules"]:
            continue  # (adapted experts keep more: test_adapted_routed_experts_keep_their_whole_folded_stack)
        for layers in case["layer_counts"]:
            config = {**case["config"], "num_hidden_layers": layers}
            dtype = {"bfloat16": "bf16", "float32": "fp32"}[case["dtype"]]
            full = estimate_activations(model_shape(config), case["sequence_length"], case["micro_batch"], dtype,
                                        case["gradient_checkpointing"], case["attention"])
            assert case["saved_bytes"][str(layers)] < full.total


def test_adapted_routed_experts_keep_their_whole_folded_stack_by_hand():
    """target_parameters on Mixtral's experts (bf16, b=2, s=64: T=128, S=T·k=256 visits, h=128, I=192, E=4, fp32
    adapters r=8) against the frozen-expert twin: each MoE layer keeps W + B·A per stack (ParamWrapper's fold), the
    operand grouped_mm keeps for that weight's gradient and the factors' bf16 casts — more than full fine-tuning."""
    frozen, adapted = (next(case for case in RECORD["cases"] if case["id"] == name) for name in ("mixtral-65",
                                                                                                  "mixtral-107"))
    assert adapted["lora"]["target_modules"] == frozen["lora"]["target_modules"]
    gate_up = 2 * 4 * 128 * 384 + 2 * 256 * 128 + 2 * 4 * 8 * (128 + 384)  # stack, gathered input, factors
    down = 2 * 4 * 192 * 128 + 2 * 256 * 192 + 2 * 4 * 8 * (192 + 128)  # stack, the product (down's input), factors
    for layers in (1, 2):  # the first layer too: its experts' input carries a gradient after the q / v adapters
        assert adapted["saved_bytes"][str(layers)] - frozen["saved_bytes"][str(layers)] == layers * (gate_up + down)
        assert estimate(adapted, layers).total - estimate(frozen, layers).total == layers * 806_912
    config = {**adapted["config"], "num_hidden_layers": 2}
    full = estimate_activations(model_shape(config), 64, 2, "bf16")
    assert adapted["saved_bytes"]["2"] > full.total


def test_one_llama_layer_with_q_and_v_adapters_by_hand():
    case = next(case for case in RECORD["cases"] if case["id"] == "llama-0")  # b=2, s=64: T=128, h=128, I=320, bf16
    norms = 2 * (4 * 128 * 128 + 4 * 128)  # frozen RMSNorms keep the fp32 input and 1/rms only
    attention = 2 * 128 * 192 + 2 * 2 * 128 * 96 + 2 * 128 * 192 + 4 * 2 * 4 * 64  # sdpa: q, k, v, out, lse
    mlp = 3 * 2 * 128 * 320  # gate out, silu out, up out; the frozen down_proj keeps no input
    adapters = 2 * (4 * 128 * 128 + 4 * 128 * 8)  # per adapter: fp32 copy of its input, A's output (r=8)
    layer = norms + attention + mlp + adapters
    assert layer == 666_624 == case["saved_bytes"]["2"] - case["saved_bytes"]["1"]
    assert estimate(case, 2).per_layer_bytes == layer
    full = estimate_activations(model_shape({**case["config"], "num_hidden_layers": 2}), 64, 2, "bf16")
    assert full.per_layer_bytes - layer == 740_352 - 666_624  # less than full fine-tuning here


def test_a_first_delta_net_layer_without_in_proj_ba_keeps_no_decay_terms_by_hand():
    """qwen3_next's layer 0 is a gated delta-net; without in_proj_ba's adapter β and the decay carry no gradient
    (bf16, b=2, s=64: T=128, Hv=4 value heads of 32, R=b·Hv=8 rows, one 64-token chunk, h=128, fp32 adapters r=8)."""
    plain, twin = (next(case for case in RECORD["cases"] if case["id"] == name)
                   for name in ("qwen3_next-97", "qwen3_next-106"))
    assert twin["lora"]["target_modules"] == ["in_proj_qkvz", "in_proj_ba", "out_proj", "q_proj", "v_proj"]
    adapter = 4 * 128 * 128 + 4 * 128 * 8  # in_proj_ba's own fp32 copy of its input, A's output
    front = 2 * 128 * 4 + 4 * 128 * 4 + 4 * 4  # sigmoid's output, softplus's fp32 input, -exp(A_log)
    rule = 4 * 8 * 64 * 32 + 2 * 4 * 8 * 64 * 64 + 64 * 64 + 4 * 8  # v, k_β·kᵀ and q·kᵀ, the mask, exp(total decay)
    assert twin["saved_bytes"]["2"] - plain["saved_bytes"]["2"] == adapter + front + rule == 404_528
    assert twin["saved_bytes"]["3"] - plain["saved_bytes"]["3"] == 404_528 + adapter  # layer 2: the adapter only
    assert estimate(twin, 2).first_layer_bytes - estimate(plain, 2).first_layer_bytes == 404_528


def test_qlora_keeps_what_lora_keeps_and_runs_in_fp32_after_kbit_preparation():
    plain = next(case for case in RECORD["cases"] if case["id"] == "llama-0")
    for case in RECORD["cases"]:
        if case.get("bnb") and case["lora"] == plain["lora"]:
            if case["prepare_kbit"]:
                assert case["saved_bytes"]["2"] > plain["saved_bytes"]["2"]
            else:  # a bitsandbytes linear keeps no input: the 4-bit base changes nothing
                assert case["saved_bytes"] == plain["saved_bytes"]


def test_checkpointing_keeps_the_layer_inputs_as_without_adapters():
    case = next(case for case in RECORD["cases"] if case["gradient_checkpointing"] and case["id"].startswith("llama"))
    config = {**case["config"], "num_hidden_layers": 2}
    full = estimate_activations(model_shape(config), 64, 2, "bf16", True, "sdpa")
    lora = estimate(case, 2)
    assert lora.checkpoint_bytes == full.checkpoint_bytes
    # the frozen embedding keeps no ids (8·T), the frozen final norm and head no bf16 copies (2 × 2·T·h)
    assert full.total - lora.total == 8 * 128 + 2 * 2 * 128 * 128 == 66_560
    assert lora.recompute_bytes == estimate({**case, "gradient_checkpointing": False}, 2).per_layer_bytes


def test_unmeasured_settings_are_refused_by_name():
    hybrid = next(case for case in RECORD["cases"] if case["config"]["model_type"] == "qwen3_next")
    for targets in (("in_proj_ba", "q_proj"), ("out_proj",)):  # the first (delta-net) layer without in_proj_qkvz
        with pytest.raises(ActivationInputError, match="in_proj_qkvz"):
            estimate({**hybrid, "lora": {"r": 8, "target_modules": list(targets)}}, 2)
    mla = {**next(case for case in RECORD["cases"] if case["id"] == "deepseek_v3-92")["config"], "num_hidden_layers": 2}
    count = count_adapters(mla, LoraSettings(8, ("q_b_proj", "o_proj")))  # q with a gradient, k and v without
    with pytest.raises(ActivationInputError, match="q, k and v all or none"):
        estimate_lora_activations(model_shape(mla), count, 16, 1)
    for family, targets, experts, why in (
            ("qwen3_moe", ("gate_proj", "up_proj"), (), "attention in the first adapted"),  # routed experts alone
            ("llama4_text", ("shared_expert.gate_proj",), (), "attention in the first adapted"),
            ("gpt_oss", ("q_proj",), ("mlp.experts.down_proj",), r"grouped_mm's \(experts, out, in\) stacks"),
            ("llama4_text", ("q_proj",), ("feed_forward.experts.down_proj",), "grouped_mm's")):  # (its own bmm)
        config = {**next(case for case in RECORD["cases"] if case["config"]["model_type"] == family)["config"],
                  "num_hidden_layers": 2}
        count = count_adapters(config, LoraSettings(8, targets, target_parameters=experts))
        with pytest.raises(ActivationInputError, match=why):
            estimate_lora_activations(model_shape(config), count, 16, 1)
    llama = {**RECORD["cases"][0]["config"], "num_hidden_layers": 2}
    gpt2 = {**next(case for case in RECORD["cases"] if case["config"]["model_type"] == "gpt2")["config"], "n_layer": 2}
    for config, saved in ((llama, "post_attention_layernorm"), (gpt2, "wpe")):  # a norm; learned positions
        count = count_adapters(config, LoraSettings(8, ("q_proj",) if config is llama else ("c_attn",), (saved,)))
        with pytest.raises(ActivationInputError, match=r"\(and the input embedding and LM head in modules_to_save\)"):
            estimate_lora_activations(model_shape(config), count, 16, 1)


def test_a_trained_head_keeps_its_input():
    """modules_to_save=["lm_head"]: the head's copy needs its input (T × h in the model dtype) for its weight's
    gradient; nothing else changes (measured whole: tests/data/step/measured_lora.json, `-mts`)."""
    llama = {**RECORD["cases"][0]["config"], "num_hidden_layers": 2}
    shape = model_shape(llama)
    plain = estimate_lora_activations(shape, count_adapters(llama, LoraSettings(8, ("q_proj",))), 16, 1)
    head = estimate_lora_activations(shape, count_adapters(llama, LoraSettings(8, ("q_proj",), ("lm_head",))), 16, 1)
    assert head.total - plain.total == head.outside_bytes - plain.outside_bytes == 2 * 16 * shape.hidden


def test_a_trained_input_embedding_keeps_its_token_ids_and_a_gradient_into_the_first_layer():
    """modules_to_save=["embed_tokens"]: the copy's backward keeps the int64 ids, and the first layer's input carries a
    gradient, so it keeps what any later layer keeps (measured: one layer differs from two as two from three)."""
    plain, trained = (next(case for case in RECORD["cases"] if case["lora"] == lora and case["dtype"] == "bfloat16"
                           and case["config"]["model_type"] == "llama" and not case["gradient_checkpointing"])
                      for lora in ({"r": 8, "target_modules": ["q_proj", "v_proj"]},
                                   {"r": 8, "target_modules": ["q_proj", "v_proj"], "modules_to_save": ["embed_tokens"]}))
    tokens = trained["sequence_length"] * trained["micro_batch"]
    layer = plain["saved_bytes"]["2"] - plain["saved_bytes"]["1"]  # a layer whose input carries a gradient
    assert trained["saved_bytes"]["2"] - trained["saved_bytes"]["1"] == layer
    first = estimate(plain, 1)
    assert trained["saved_bytes"]["1"] == first.outside_bytes + 8 * tokens + layer > plain["saved_bytes"]["1"] + 8 * tokens


def test_a_sliding_window_the_sequence_outgrows_changes_lora_activations_as_it_changes_full_ones():
    """Derived, not measured: what sliding-window layers keep apart from full-attention ones is attention's own,
    which LoRA leaves as it is — the difference between a windowed and an unwindowed twin carries over whole."""
    base = {**next(case for case in RECORD["cases"] if case["config"]["model_type"] == "gemma3_text")["config"],
            "num_hidden_layers": 2, "layer_types": ["sliding_attention", "full_attention"]}
    windowed, open_ = {**base, "sliding_window": 32}, {**base, "sliding_window": 4096}
    full = {name: estimate_activations(model_shape(config), 64, 1) for name, config in (("windowed", windowed), ("open", open_))}
    full_gap = full["windowed"].layer_bytes - full["open"].layer_bytes
    assert full_gap != 0  # the window really changes what the layers keep
    lora = {name: estimate_lora_activations(model_shape(config), count_adapters(config, LoraSettings(8)), 64, 1)
            for name, config in (("windowed", windowed), ("open", open_))}
    assert lora["windowed"].layer_bytes - lora["open"].layer_bytes == full_gap
    assert lora["windowed"].total - lora["open"].total == full["windowed"].total - full["open"].total
