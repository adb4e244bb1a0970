"""The adapter model against PEFT's own counts and bitsandbytes' stored bytes (no torch needed).

tests/data/adapters/*.json are written by benchmarks/adapters/measure.py in the measurement venv.
"""

import json
from pathlib import Path

import pytest

from zeromem_lsp.memory.model_state import model_state_bytes
from zeromem_lsp.configs.lora_modules import AdapterInputError, LoraSettings, inventory, linear_leaf_names, module_tree
from zeromem_lsp.configs.model_config import model_shape
from zeromem_lsp.memory.activations import ActivationInputError
from zeromem_lsp.memory.lora_activations import estimate_lora_activations
from zeromem_lsp.memory.adapters import (
    Quantization,
    count_adapters,
    dequantized_transient_bytes,
    frozen_bytes,
    model_state,
    peft_reported_all,
    quantized_weight_bytes,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "adapters"
COUNTS = json.loads((DATA / "peft_counts.json").read_text())
BNB = json.loads((DATA / "bnb_bytes.json").read_text())


def _names(value):
    return value if isinstance(value, (str, int)) or value is None else tuple(value)


def settings(lora: dict, linear_names: bool = False) -> LoraSettings:
    """A recorded LoraConfig's arguments as LoraSettings (rank_pattern keeps the JSON object's key order);
    `linear_names`: the case adds the tools' list of linear leaf names to target_modules."""
    return LoraSettings(lora["r"], _names(lora["target_modules"]), tuple(lora.get("modules_to_save") or ()),
                        lora.get("use_dora", False), lora.get("lora_bias", False),
                        _names(lora.get("exclude_modules")) or (), _names(lora.get("layers_to_transform")),
                        _names(lora.get("layers_pattern")) or (), tuple((lora.get("rank_pattern") or {}).items()),
                        tuple(lora.get("target_parameters") or ()), linear_names)


def quantization(bnb: dict) -> Quantization:
    if bnb.get("load_in_8bit"):
        return Quantization("int8")
    return Quantization(bnb["bnb_4bit_quant_type"], bnb["bnb_4bit_use_double_quant"])


def test_the_records_cover_what_the_issue_asks():
    families = {case["config"]["model_type"] for case in COUNTS["cases"]}
    assert {"llama", "qwen2", "mistral", "gemma", "gpt2", "gpt_neox", "mixtral", "qwen3_moe"} <= families
    loras = [case["lora"] for case in COUNTS["cases"]]
    assert any(lora["target_modules"] == "all-linear" for lora in loras)
    assert any(lora.get("modules_to_save") for lora in loras) and any(lora.get("use_dora") for lora in loras)
    assert len({lora["r"] for lora in loras}) >= 4
    assert len(REFUSED) >= 2  # DoRA on MoE parameters
    assert any(isinstance(lora["target_modules"], str) and lora["target_modules"] != "all-linear" for lora in loras)
    assert any(lora.get("rank_pattern") for lora in loras) and any(lora.get("exclude_modules") for lora in loras)
    assert any(lora.get("layers_pattern") for lora in loras) and any(lora.get("target_parameters") for lora in loras)
    assert any("layers_to_transform" in lora and "layers_pattern" not in lora for lora in loras)
    recorded = {case["config"]["model_type"] for case in COUNTED if "named_modules" in case["measured"]}
    assert {"llama", "gemma3_text", "mixtral", "qwen3_moe", "gpt2", "gpt_neox", "phi3"} <= recorded
    kinds = {json.dumps(case["bnb"], sort_keys=True) for case in BNB["cases"]}
    assert len(kinds) == 4  # nf4, nf4 + double quantization, fp4 + double quantization, int8
    assert COUNTS["peft"] and BNB["bitsandbytes"]


COUNTED = [case for case in COUNTS["cases"] if "error" not in case["measured"]]
REFUSED = [case for case in COUNTS["cases"] if "error" in case["measured"]]


@pytest.mark.parametrize("case", COUNTED, ids=[case["id"] for case in COUNTED])
def test_trainable_and_all_parameters_equal_peft(case):
    counted = count_adapters(case["config"], settings(case["lora"], case.get("linear_names", False)))
    assert (counted.trainable, counted.all) == (case["measured"]["trainable"], case["measured"]["all"])


# PEFT's refusal (a phrase of its message) → what the model says, and the setting it names
REFUSALS = [
    ("not found in the base model", "match no module", "lora_target_modules"),
    ("No modules were targeted", "leave no module", "lora_target_modules"),
    ("All modules were excluded", "every module is excluded", "exclude_modules"),
    ("is not supported. Currently", "Target module ... is not supported", "lora_target_modules"),
    ("`layers_to_transform` cannot be used", "layers_to_transform cannot be used", "layers_to_transform"),
    ("`layers_to_transform` must also be specified", "layers_pattern needs layers_to_transform", "layers_pattern"),
    ("without also targeting", "cannot be targeted without", "lora_target_modules"),
    ("does not work with use_dora", "DoRA does not work", "use_dora"),
]


@pytest.mark.parametrize("case", REFUSED, ids=[case["id"] for case in REFUSED])
def test_what_peft_refuses_is_refused_for_the_same_reason(case):
    with pytest.raises(AdapterInputError) as refused:
        count_adapters(case["config"], settings(case["lora"]))
    measured = case["measured"]
    if measured.get("error_type") == "error":  # re.error: Python's own message, never a traceback; the position is
        # the user's pattern's (PEFT's counts from the start of the regex it wraps a rank_pattern key in)
        assert measured["error"].split(" at position")[0] in str(refused.value)
        assert "not a valid Python regular expression" in str(refused.value)
        return
    reason = [(ours, field) for peft, ours, field in REFUSALS if peft in measured["error"]]
    assert len(reason) == 1, measured["error"]
    assert reason[0][0] in str(refused.value) and refused.value.field == reason[0][1]


LINEAR_NAMES = [case for case in COUNTED if case.get("linear_names")]


@pytest.mark.parametrize("case", LINEAR_NAMES, ids=[case["id"] for case in LINEAR_NAMES])
def test_the_tools_linear_names_are_the_leaves_of_the_nn_linear_modules(case):
    # axolotl lora_target_linear / LLaMA-Factory lora_target all: a list, so MoE experts and routers and GPT-2's
    # Conv1D stay out (PEFT's all-linear would take them) and layers_to_transform applies
    modules, _ = module_tree(inventory(case["config"]))
    given = case["lora"]["target_modules"]
    assert sorted(set(given) | set(linear_leaf_names(modules))) == case["measured"]["target_modules_used"]


RECORDED_MODULES = [case for case in COUNTED if "named_modules" in case["measured"]]


@pytest.mark.parametrize("case", RECORDED_MODULES, ids=[case["config"]["model_type"] for case in RECORDED_MODULES])
def test_the_module_tree_is_named_modules(case):
    # what PEFT matches a regex against: every module torch lists, containers and parameterless ones included
    modules, _ = module_tree(inventory(case["config"]))
    assert sorted(m.key for m in modules) == sorted(case["measured"]["named_modules"])
    classes = case["measured"]["named_modules"]
    for module in modules:
        if module.kind in ("linear", "head"):  # (phimoe's router: PhimoeTopKRouter, an nn.Linear subclass)
            assert classes[module.key] == "Linear" or module.weight is not None and module.weight.role == "router"
        elif module.kind == "embedding":
            assert classes[module.key].endswith("Embedding")
        elif module.kind == "norm":
            assert classes[module.key].endswith("Norm")


@pytest.mark.parametrize("case", COUNTED, ids=[case["id"] for case in COUNTED])
def test_adapters_are_fp32_and_saved_copies_keep_the_model_dtype(case):
    # PEFT's autocast_adapter_dtype upcasts the adapters; a modules_to_save copy keeps bf16
    counted = count_adapters(case["config"], settings(case["lora"], case.get("linear_names", False)))
    expected = {"float32": 4 * counted.adapters}
    if counted.saved_copies:
        expected["bfloat16"] = 2 * counted.saved_copies
    assert case["measured"]["trainable_bytes"] == expected


@pytest.mark.parametrize("case", COUNTS["cases"], ids=[case["id"] for case in COUNTS["cases"]])
def test_the_inventory_adds_up_to_the_parameter_count(case):
    found = inventory(case["config"])
    assert sum(w.parameters * w.instances for w in found.weights if not (w.kind == "head" and found.tied)) == found.total


@pytest.mark.parametrize("case", BNB["cases"], ids=[case["id"] for case in BNB["cases"]])
def test_every_quantized_weight_has_the_bytes_bitsandbytes_stores(case):
    q = quantization(case["bnb"])
    modules = case["measured"]["modules"]
    assert modules
    for name, module in modules.items():
        out_features, in_features = module["shape"]
        assert quantized_weight_bytes(out_features * in_features, out_features, q) == sum(module["bytes"].values()), name


@pytest.mark.parametrize("case", BNB["cases"], ids=[case["id"] for case in BNB["cases"]])
def test_the_quantized_model_is_what_bitsandbytes_keeps(case):
    lora = settings(case["lora"])
    q = quantization(case["bnb"])
    found = inventory(case["config"])
    counted = count_adapters(case["config"], lora)
    assert counted.trainable == case["measured"]["trainable"]
    assert peft_reported_all(found, counted, q) == case["measured"]["all"]
    quantized_names = {w.path.replace("{i}", str(i)) for w in found.weights if w.kind in ("linear", "conv1d")
                       for i in (w.layers or ())}
    assert set(case["measured"]["modules"]) == quantized_names  # head, embeddings, experts, router stay 16-bit
    as_loaded = frozen_bytes(found, counted, q, "bf16", kbit_upcast=False)
    assert as_loaded.total == case["measured"]["loaded"]["unique_storage_bytes"]
    loaded_parameters = sum(case["measured"]["loaded"]["parameter_bytes"].values())
    assert as_loaded.total - as_loaded.constant_bytes == loaded_parameters  # constants live beside the parameters
    prepared = frozen_bytes(found, counted, q, "bf16", kbit_upcast=True)
    assert prepared.float_bytes == case["measured"]["prepared_frozen_bytes"]["float32"]
    # after k-bit preparation the adapters and the modules_to_save copies (of the upcast modules) are fp32
    trainable = model_state(case["config"], lora, q, kbit_upcast=True)
    assert trainable.parameter_bytes - prepared.total == sum(case["measured"]["trainable_bytes"].values())


def test_four_bit_bytes_by_hand():
    # 128 × 320 weight: 40,960 values → 20,480 packed bytes, 640 blocks of 64, the 16-value fp32 code
    assert quantized_weight_bytes(40_960, 128, Quantization("nf4")) == 20_480 + 640 * 4 + 64
    # double quantization: 640 one-byte absmax, an fp32 offset, ceil(640 / 256) = 3 fp32 absmax, a 256-value code
    assert quantized_weight_bytes(40_960, 128, Quantization("nf4", True)) == 20_480 + 64 + 640 + 4 + 3 * 4 + 1024
    assert quantized_weight_bytes(40_960, 128, Quantization("int8")) == 40_960 + 128 * 4
    assert quantized_weight_bytes(7, 1, Quantization("fp4")) == 4 + 64 + 4  # odd count: padded to a full byte


LLAMA = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
         "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256}


def test_llama3_8b_lora_by_hand():
    counted = count_adapters(LLAMA, LoraSettings(16, ("q_proj", "v_proj")))
    assert counted.trainable == 32 * 16 * ((4096 + 4096) + (4096 + 1024)) == 6_815_744
    assert counted.all == 8_030_261_248 + 6_815_744


def test_pooled_inputs_with_frozen_weights():
    lora = LoraSettings(16, ("q_proj", "v_proj"))
    state = model_state(LLAMA, lora)  # PEFT: bf16 base, fp32 adapters, fp32 gradients, AdamW m + v
    n = 6_815_744
    assert state.parameter_bytes == 2 * 8_030_261_248 + 4 * n
    assert (state.gradient_bytes, state.optimizer_bytes) == (4 * n, 8 * n)
    recast = model_state(LLAMA, lora, engine="deepspeed")  # bf16 adapters, fp32 master copy in the optimizer
    assert (recast.parameter_bytes, recast.gradient_bytes, recast.optimizer_bytes) == (
        2 * (8_030_261_248 + n), 2 * n, 12 * n)
    # ZeRO-2 shards only G and O, the frozen 16 GB stay on every rank; ZeRO-3 partitions them too
    per_rank = model_state_bytes(recast.parameter_bytes, recast.gradient_bytes, recast.optimizer_bytes, 8)
    assert per_rank["zero2"] == recast.parameter_bytes + -(-(14 * n) // 8)
    assert per_rank["zero3"] == -(-(2 * (8_030_261_248 + n) + 14 * n) // 8)


def test_without_deepspeed_saved_copies_and_16_bit_adapters_keep_their_dtype_and_no_master_copy():
    n = 6_815_744
    copies = model_state(LLAMA, LoraSettings(16, ("q_proj", "v_proj"), ("lm_head",)))
    head = 128256 * 4096  # the trainable copy of the head, bf16 like the model (measured in peft_counts.json)
    assert copies.parameter_bytes == 2 * (8_030_261_248 + head) + 4 * n
    assert (copies.gradient_bytes, copies.optimizer_bytes) == (4 * n + 2 * head, 8 * n + 4 * head)
    bf16 = model_state(LLAMA, LoraSettings(16, ("q_proj", "v_proj")), adapter_dtype="bf16")
    assert (bf16.gradient_bytes, bf16.optimizer_bytes) == (2 * n, 4 * n)  # torch AdamW: m, v in bf16
    eight_bit = model_state(LLAMA, LoraSettings(16, ("q_proj", "v_proj")), optimizer_state=2, state_follows_dtype=False)
    assert eight_bit.optimizer_bytes == 2 * n


def test_an_input_embedding_copy_keeps_32_bit_state_under_an_8_bit_optimizer():
    """HF Trainer registers optim_bits=32 for every nn.Embedding weight under bitsandbytes' 8-bit optimizers
    (transformers/trainer.py create_optimizer): the embedding's copy gets fp32 m and v, the head's copy 8-bit ones."""
    n, copy = 6_815_744, 128256 * 4096
    lora = LoraSettings(16, ("q_proj", "v_proj"), ("embed_tokens", "lm_head"))
    eight_bit = model_state(LLAMA, lora, optimizer_state=2, state_follows_dtype=False, embedding_state=8)
    assert eight_bit.optimizer_bytes == 2 * n + 2 * copy + 8 * copy
    adamw = model_state(LLAMA, lora, embedding_state=0)  # torch AdamW: every copy's m, v in its bf16
    assert adamw.optimizer_bytes == 8 * n + 4 * copy + 4 * copy
    assert model_state(LLAMA, lora, engine="deepspeed", optimizer_state=2, state_follows_dtype=False,
                       embedding_state=8).optimizer_bytes == (2 + 4) * (n + 2 * copy)  # ZeRO's flat partitions


def test_qlora_keeps_head_and_embeddings_in_16_bit_and_upcasts_them_when_prepared():
    lora = LoraSettings(16, "all-linear")
    counted = count_adapters(LLAMA, lora)
    found = inventory(LLAMA)
    linear = sum(w.elements * w.instances for w in found.weights if w.kind == "linear")
    plain = frozen_bytes(found, counted, Quantization("nf4", True), kbit_upcast=False)
    assert plain.quantized_weights == linear
    assert plain.other_parameters == 8_030_261_248 - linear == 2 * 128256 * 4096 + 65 * 4096
    upcast = frozen_bytes(found, counted, Quantization("nf4", True))
    assert upcast.float_bytes == 2 * plain.float_bytes


def test_the_largest_dequantized_weight_is_the_mlp():
    found = inventory(LLAMA)
    assert dequantized_transient_bytes(found, Quantization("nf4", True)) == 2 * 4096 * 14336
    assert dequantized_transient_bytes(found, Quantization("none")) == 0


def test_fsdp1_mixed_units_cost_gradients_for_their_frozen_parameters():
    lora = LoraSettings(8, ("layers.3.self_attn.q_proj",))
    alone = model_state(LLAMA, lora, engine="fsdp1")
    mixed = model_state(LLAMA, lora, engine="fsdp1", fsdp_mixed_units=True)
    layer = (8_030_261_248 - 2 * 128256 * 4096 - 4096) // 32
    assert mixed.gradient_bytes - alone.gradient_bytes == 2 * layer  # one flat parameter, one dtype: the model's
    assert mixed.parameter_bytes == alone.parameter_bytes


def test_mixtral_all_linear_reaches_experts_and_router_as_peft_converts_them():
    mixtral = {**LLAMA, "model_type": "mixtral", "num_local_experts": 8, "num_hidden_layers": 1, "vocab_size": 32000}
    counted = count_adapters(mixtral, LoraSettings(4, "all-linear"))
    attention = 4 * ((4096 + 4096) * 2 + (4096 + 1024) * 2)
    router = 4 * (4096 + 8)
    experts = 8 * 8 * (4096 + 2 * 14336) + 8 * 4 * (14336 + 4096)  # gate_up at rank 2r, down at r
    assert counted.trainable == attention + router + experts
    with pytest.raises(AdapterInputError, match="w1 cannot be targeted without w3"):
        count_adapters(mixtral, LoraSettings(4, ("w1", "w2")))


def test_phimoe_and_llama4_routers_are_adapted_as_linears_and_gpt_oss_refused():
    """No PEFT conversion for phimoe, llama4_text, gpt_oss (Moe.converted): `router` names the module, which PEFT adapts
    where it is an nn.Linear subclass (was: mapped to the v4 `gate.weight` and silently dropped)."""
    phimoe = {"model_type": "phimoe", "hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
              "intermediate_size": 64, "num_local_experts": 4, "num_hidden_layers": 2, "vocab_size": 1000}
    router, q = 4 * (128 + 4), 4 * (128 + 128)
    assert count_adapters(phimoe, LoraSettings(4, ("q_proj", "router"))).trainable == 2 * (router + q)
    assert count_adapters(phimoe, LoraSettings(4, ("router",))).trainable == 2 * router
    with pytest.raises(ActivationInputError, match="not on router"):  # the activation model: measured without
        estimate_lora_activations(model_shape(phimoe), count_adapters(phimoe, LoraSettings(4, ("q_proj", "router"))),
                                  16, 1)
    gpt_oss = {**phimoe, "model_type": "gpt_oss", "head_dim": 32}
    with pytest.raises(AdapterInputError, match="a MoE router"):
        count_adapters(gpt_oss, LoraSettings(4, ("q_proj", "router")))


@pytest.mark.parametrize("rank", [0, -4, True, 2.5, "8"])
def test_a_rank_that_is_not_positive_is_refused(rank):
    with pytest.raises(AdapterInputError, match="positive integer") as error:
        count_adapters(LLAMA, LoraSettings(rank, ("q_proj",)))
    assert error.value.field == "lora_r"


def test_an_absurd_rank_is_refused():
    with pytest.raises(AdapterInputError, match="not be low-rank") as error:
        count_adapters(LLAMA, LoraSettings(8192, ("q_proj", "v_proj")))
    assert error.value.field == "lora_r"
    with pytest.raises(AdapterInputError, match="absurd"):
        count_adapters(LLAMA, LoraSettings(10**12, ("q_proj",)))


def test_targets_matching_nothing_name_the_targets_and_the_models_linear_layers():
    with pytest.raises(AdapterInputError) as error:
        count_adapters(LLAMA, LoraSettings(8, ("query", "value")))
    message = str(error.value)
    assert error.value.field == "lora_target_modules"
    assert "query, value" in message
    for name in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"):
        assert name in message
    gpt2 = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 32, "vocab_size": 100}
    with pytest.raises(AdapterInputError, match="c_attn, c_proj, c_fc"):
        count_adapters(gpt2, LoraSettings(8, ("q_proj",)))


def test_other_bad_settings_are_named():
    with pytest.raises(AdapterInputError, match=r"not a valid Python regular expression: .* at position 0"):
        count_adapters(LLAMA, LoraSettings(8, r"*q_proj"))
    with pytest.raises(AdapterInputError, match="modules_to_save 'score'"):
        count_adapters(LLAMA, LoraSettings(8, ("q_proj",), ("score",)))
    with pytest.raises(AdapterInputError, match="quantization must be one of"):
        frozen_bytes(inventory(LLAMA), count_adapters(LLAMA, LoraSettings(8)), Quantization("int4"))
    with pytest.raises(AdapterInputError, match="must name modules"):
        count_adapters(LLAMA, LoraSettings(8, ("q_proj",), (None,)))
    with pytest.raises(AdapterInputError, match="must name modules"):
        count_adapters(LLAMA, LoraSettings(8, ()))
    with pytest.raises(AdapterInputError, match="not a bitsandbytes quantization"):
        quantized_weight_bytes(64, 8, Quantization("none"))
    with pytest.raises(AdapterInputError, match="engine must be one of"):
        model_state(LLAMA, LoraSettings(8), engine="megatron")


SHARDING = json.loads((DATA / "sharding.json").read_text())


def test_engines_shard_and_grade_as_measured():
    # benchmarks/adapters/sharding.py: one adapter on layer 1's q_proj of a 2-layer llama, fp32
    runs, lora = SHARDING["runs"], LoraSettings(SHARDING["lora"]["r"], tuple(SHARDING["lora"]["target_modules"]))
    counted = count_adapters(SHARDING["config"], lora)
    assert counted.trainable == runs["fsdp2"]["gradient_elements"]  # FSDP2: gradients for trainable parameters only
    for stage in ("zero1", "zero2"):  # ZeRO-1/2 flatten only trainable parameters; frozen ones stay whole
        assert runs[stage]["flattened_elements"] == counted.trainable
        assert runs[stage]["frozen_elements_per_rank"] == counted.frozen and not runs[stage]["frozen_partitioned"]
    zero3 = runs["zero3"]  # ZeRO-3 partitions every parameter, frozen ones included
    assert zero3["all_full_elements"] == counted.all and zero3["frozen_full_elements"] == counted.frozen
    assert zero3["frozen_elements_per_rank"] == -(-counted.frozen // zero3["world_size"])
    # FSDP1 use_orig_params=True: the unit mixing frozen and trainable parameters keeps a gradient for all of it
    mixed = model_state(SHARDING["config"], lora, engine="fsdp1", dtype="fp32", fsdp_mixed_units=True)
    assert mixed.gradient_bytes // 4 == sum(unit["gradient_elements"] for unit in runs["fsdp1"]["units"])
    alone = model_state(SHARDING["config"], lora, engine="fsdp2", dtype="fp32")
    assert alone.gradient_bytes // 4 == counted.trainable


def test_deepspeed_recasts_peft_fp32_adapters_to_bf16_as_measured():
    run = SHARDING["runs"]["zero2_bf16"]
    assert (run["trainable_dtypes_before"], run["trainable_dtypes"]) == (["torch.float32"], ["torch.bfloat16"])
    lora = LoraSettings(SHARDING["lora"]["r"], tuple(SHARDING["lora"]["target_modules"]))
    counted = count_adapters(SHARDING["config"], lora)
    state = model_state(SHARDING["config"], lora, engine="deepspeed", dtype="bf16")
    assert state.parameter_bytes == 2 * counted.all and state.gradient_bytes == 2 * counted.trainable
