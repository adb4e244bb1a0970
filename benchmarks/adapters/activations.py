"""Bytes autograd saves for backward with LoRA adapters on a frozen base (PEFT, CPU, random weights).

    /work/venv-measure/bin/python benchmarks/adapters/activations.py   # -> tests/data/adapters/lora_activations.json
    /work/venv-measure/bin/python benchmarks/adapters/activations.py moe   # only the cases not yet recorded, added

Same method as benchmarks/activations/measure.py (saved_tensors_hooks, unique storages, parameters -- the
frozen base and the adapters -- excluded), with the model wrapped by `get_peft_model` first. Measured at 1
and 2 layers (or 2 and 3), each in its own forked process: 2 layers - 1 layer is one layer whose input requires
grad; the first layer's input (the frozen embedding's output) does not, so it keeps less. QLoRA cases load the
base quantized by bitsandbytes on the CPU, with and without peft's prepare_model_for_kbit_training.
"""

from __future__ import annotations

import json
import multiprocessing
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "adapters" / "lora_activations.json"
sys.path[:0] = [str(ROOT / "benchmarks" / "activations"), str(ROOT / "benchmarks")]
from measure import BASE  # noqa: E402
from saved_tensors import SavedTensors  # noqa: E402

LORA = [  # (family, LoraConfig fields, autocast_adapter_dtype, sequence, micro-batch[, attention, layer counts,
    #          gradient checkpointing])
    ("llama", {"r": 8, "target_modules": ["q_proj", "v_proj"]}, True, 64, 2),
    ("llama", {"r": 16, "target_modules": "all-linear"}, True, 64, 2),
    ("llama", {"r": 16, "target_modules": "all-linear"}, False, 64, 2),
    ("llama", {"r": 8, "target_modules": ["o_proj", "down_proj"]}, True, 32, 3),
    ("qwen2", {"r": 8, "target_modules": "all-linear"}, True, 64, 2),
    ("mistral", {"r": 4, "target_modules": ["q_proj", "k_proj", "v_proj"]}, True, 96, 1),
    ("gemma", {"r": 8, "target_modules": "all-linear"}, True, 64, 2),
    ("qwen3", {"r": 8, "target_modules": ["q_proj", "v_proj", "up_proj"]}, False, 64, 2),
    ("llama", {"r": 16, "target_modules": "all-linear"}, True, 32, 2, "eager"),
    ("gemma", {"r": 8, "target_modules": ["q_proj", "v_proj"]}, False, 48, 2, "eager"),
    ("qwen2", {"r": 4, "target_modules": ["gate_proj", "up_proj", "down_proj"]}, False, 128, 1),
    ("mistral", {"r": 8, "target_modules": ["v_proj"]}, True, 64, 2),
    ("llama", {"r": 8, "target_modules": ["layers.1.self_attn.q_proj", "layers.2.mlp.down_proj"]}, True, 64, 2,
     "sdpa", (2, 3)),
    ("llama", {"r": 8, "target_modules": ["q_proj", "v_proj"]}, True, 64, 2, "sdpa", (1, 2), True),
    ("qwen2", {"r": 8, "target_modules": "all-linear"}, False, 64, 2, "sdpa", (1, 2), True),
    ("gemma", {"r": 16, "target_modules": "all-linear"}, True, 48, 2, "eager", (1, 2), True),
    ("phi3", {"r": 8, "target_modules": ["qkv_proj"]}, True, 64, 2),
    ("phi3", {"r": 8, "target_modules": "all-linear"}, False, 64, 2),
    ("phi3", {"r": 4, "target_modules": ["o_proj", "down_proj"]}, True, 32, 2, "eager"),
    ("gemma2", {"r": 8, "target_modules": "all-linear"}, True, 64, 2, "eager"),
    ("gemma2", {"r": 8, "target_modules": ["q_proj", "v_proj"]}, False, 48, 1, "eager"),
    ("gemma3_text", {"r": 8, "target_modules": "all-linear"}, True, 64, 2),
    ("gemma3_text", {"r": 8, "target_modules": ["q_proj", "v_proj"]}, False, 48, 2, "eager"),
    ("gpt2", {"r": 8, "target_modules": ["c_attn"]}, True, 64, 2),
    ("gpt2", {"r": 8, "target_modules": "all-linear"}, False, 64, 2, "eager"),
    ("gpt_neox", {"r": 8, "target_modules": ["query_key_value"]}, True, 64, 2),
    ("gpt_neox", {"r": 8, "target_modules": "all-linear"}, False, 48, 2, "eager"),
    ("gpt2", {"r": 4, "target_modules": ["mlp.c_proj"]}, True, 64, 2),
    ("gpt2", {"r": 4, "target_modules": ["c_fc", "attn.c_proj"]}, False, 32, 2, "eager"),
    ("gpt_neox", {"r": 4, "target_modules": ["dense_4h_to_h"]}, True, 64, 2),
    ("gpt_neox", {"r": 4, "target_modules": ["dense_h_to_4h"]}, False, 64, 2),
]
# QLoRA: (index into LORA, bitsandbytes config, prepare_model_for_kbit_training)
QUANTIZED = [
    (0, {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}, False),
    (0, {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}, True),
    (1, {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True}, True),
    (4, {"load_in_8bit": True}, True),
    (6, {"load_in_4bit": True, "bnb_4bit_quant_type": "fp4"}, False),
]


#: lora_dropout > 0: each adapter's own nn.Dropout between its (cast) input and lora_A (after the cases above, whose
#: ids are indices)
DROPOUT = [
    ("llama", {"r": 16, "target_modules": "all-linear", "lora_dropout": 0.05}, True, 64, 2),
    ("llama", {"r": 8, "target_modules": ["q_proj", "v_proj"], "lora_dropout": 0.1}, False, 64, 2),
    ("qwen2", {"r": 8, "target_modules": "all-linear", "lora_dropout": 0.05}, False, 64, 2, "sdpa", (1, 2), True),
    ("gpt2", {"r": 8, "target_modules": ["c_attn", "mlp.c_proj"], "lora_dropout": 0.05}, True, 64, 2),
    ("gpt_neox", {"r": 8, "target_modules": "all-linear", "lora_dropout": 0.05}, False, 64, 2),
    ("llama", {"r": 8, "target_modules": ["o_proj", "down_proj"], "lora_dropout": 0.05}, True, 32, 3),
]

#: issue 29's families with full fine-tuning activations measured (after the cases above, whose ids are indices):
#: all-linear with fp32 adapters, q/v with adapters in the model's dtype, q/v with checkpointing
FAMILIES_29 = [
    row for family in ("smollm3", "granite", "olmo2", "olmo3", "starcoder2", "cohere", "cohere2") for row in (
        (family, {"r": 8, "target_modules": "all-linear"}, True, 64, 2),
        (family, {"r": 8, "target_modules": ["q_proj", "v_proj"]}, False, 64, 2),
        (family, {"r": 8, "target_modules": ["q_proj", "v_proj"]}, True, 64, 2, "sdpa", (1, 2), True))
] + [
    ("smollm3", {"r": 8, "target_modules": "all-linear"}, False, 48, 2, "eager"),
    ("granite", {"r": 8, "target_modules": ["o_proj", "down_proj"]}, True, 48, 2, "eager"),
]

#: issue 29's MoE families, experts and routers frozen (after the cases above, whose ids are indices): q/v with fp32
#: adapters; q/k/v/o with adapters in the model's dtype, fp32, eager; q/v with checkpointing; then variants: dense and
#: MoE layers mixed, an unrotated llama4 layer, llama4's shared expert adapted. (family, LoraConfig fields,
#: autocast_adapter_dtype, sequence, micro-batch, attention, layer counts, checkpointing, dtype, config changes)
QV, QKVO = ["q_proj", "v_proj"], ["q_proj", "k_proj", "v_proj", "o_proj"]
MOE = [
    row for family in ("mixtral", "qwen3_moe", "olmoe", "qwen2_moe", "phimoe", "glm4_moe", "gpt_oss", "llama4_text")
    for attention in ("eager" if family == "gpt_oss" else "sdpa",) for row in (
        (family, {"r": 8, "target_modules": QV}, True, 64, 2, attention, (1, 2), False, "bfloat16", {}),
        (family, {"r": 8, "target_modules": QKVO}, False, 32, 2, "eager", (1, 2), False, "float32", {}),
        (family, {"r": 8, "target_modules": QV}, True, 64, 2, attention, (1, 2), True, "bfloat16", {}))
] + [
    ("qwen3_moe", {"r": 8, "target_modules": QV}, True, 64, 2, "sdpa", (1, 2), False, "bfloat16",
     {"mlp_only_layers": [1]}),
    ("llama4_text", {"r": 8, "target_modules": QKVO}, False, 64, 2, "sdpa", (2, 4), False, "bfloat16", {}),
    ("llama4_text", {"r": 8, "target_modules": QV + ["shared_expert.gate_proj", "shared_expert.up_proj"]}, True, 64,
     2, "sdpa", (1, 2), False, "bfloat16", {"interleave_moe_layer_step": 1}),
]

#: MLA and a hybrid (after the cases above, whose ids are indices): deepseek_v3's latent projections (q_lora_rank set
#: and None, first_k_dense_replace's dense layer before the MoE one and none), o_proj alone; qwen3_next's gated
#: delta-net projections beside full attention's (its torch fallbacks, measured at 2 and 3 layers: delta-net, full
#: attention, delta-net)
MLA = ["q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"]
MOE += [
    ("deepseek_v3", {"r": 8, "target_modules": MLA}, True, 64, 2, "sdpa", (1, 2), False, "bfloat16", {}),
    ("deepseek_v3", {"r": 8, "target_modules": ["q_proj", "kv_b_proj"]}, False, 32, 2, "eager", (1, 2), False,
     "float32", {"q_lora_rank": None, "first_k_dense_replace": 0}),
    ("deepseek_v3", {"r": 8, "target_modules": ["q_b_proj", "kv_b_proj"]}, True, 64, 2, "sdpa", (1, 2), True,
     "bfloat16", {}),
    ("deepseek_v3", {"r": 8, "target_modules": ["q_a_proj", "kv_a_proj_with_mqa", "o_proj"]}, False, 64, 2, "sdpa",
     (1, 2), False, "bfloat16", {"first_k_dense_replace": 0}),
    ("deepseek_v3", {"r": 8, "target_modules": ["o_proj"]}, True, 64, 2, "sdpa", (1, 2), False, "bfloat16", {}),
    ("qwen3_next", {"r": 8, "target_modules": ["in_proj_qkvz", "out_proj"] + QV}, True, 64, 2, "sdpa", (2, 3), False,
     "bfloat16", {}),
    ("qwen3_next", {"r": 8, "target_modules": ["in_proj_qkvz", "in_proj_ba", "out_proj"] + QKVO}, False, 48, 2,
     "eager", (2, 3), False, "float32", {}),
    ("qwen3_next", {"r": 8, "target_modules": ["in_proj_qkvz"] + QV}, True, 64, 2, "sdpa", (2, 3), True, "bfloat16",
     {}),
]
#: qwen3_next's delta-net by layout (after the cases above, whose ids are indices): two chunks, padded, key and value
#: heads of different widths, b 1; fp32 at a chunk multiple with as many key as value heads (q, k token-major);
#: in_proj_ba adapted, eager; attention adapters only (the first adapted layer a full-attention one, after an
#: unadapted delta-net layer); delta-net adapters only in fp32 (the full-attention layer without adapters); fp32 at a
#: chunk multiple with grouped key heads; the first case's twin with in_proj_ba adapted
MOE += [
    ("qwen3_next", {"r": 8, "target_modules": ["in_proj_qkvz", "out_proj"] + QV}, True, 80, 1, "sdpa", (2, 3), False,
     "bfloat16", {"linear_key_head_dim": 16}),
    ("qwen3_next", {"r": 8, "target_modules": ["in_proj_qkvz"] + QKVO}, False, 128, 2, "sdpa", (2, 3), False,
     "float32", {"linear_num_key_heads": 4}),
    ("qwen3_next", {"r": 8, "target_modules": ["in_proj_qkvz", "in_proj_ba"] + QV}, True, 80, 2, "eager", (2, 3),
     False, "bfloat16", {"linear_value_head_dim": 16}),
    ("qwen3_next", {"r": 8, "target_modules": QV}, True, 64, 2, "sdpa", (2, 3), False, "bfloat16", {}),
    ("qwen3_next", {"r": 8, "target_modules": ["in_proj_qkvz", "in_proj_ba", "out_proj"]}, False, 128, 2, "sdpa",
     (2, 3), False, "float32", {"linear_num_key_heads": 4}),
    ("qwen3_next", {"r": 8, "target_modules": ["in_proj_qkvz", "out_proj"] + QV}, False, 128, 2, "sdpa", (2, 3), False,
     "float32", {}),
    ("qwen3_next", {"r": 8, "target_modules": ["in_proj_qkvz", "in_proj_ba", "out_proj"] + QV}, True, 64, 2, "sdpa",
     (2, 3), False, "bfloat16", {}),
]
#: routed experts adapted (after the cases above, whose ids are indices): target_parameters on both stacks with fp32
#: adapters (their bf16 casts kept) and in the model's dtype (fp32, eager), on down_proj alone, on gate_up_proj alone
#: with checkpointing, Mixtral's v4 names (PEFT converts them: gate_up at rank 2r), qwen2_moe beside its shared expert
EXPERTS = ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]
MOE += [
    ("mixtral", {"r": 8, "target_modules": QV, "target_parameters": EXPERTS}, True, 64, 2, "sdpa", (1, 2), False,
     "bfloat16", {}),
    ("qwen3_moe", {"r": 8, "target_modules": QKVO, "target_parameters": EXPERTS}, False, 32, 2, "eager", (1, 2), False,
     "float32", {}),
    ("qwen3_moe", {"r": 8, "target_modules": QV, "target_parameters": EXPERTS[1:]}, False, 64, 2, "sdpa", (1, 2), False,
     "bfloat16", {}),
    ("qwen3_moe", {"r": 8, "target_modules": QV, "target_parameters": EXPERTS[:1]}, True, 64, 2, "sdpa", (1, 2), True,
     "bfloat16", {}),
    ("mixtral", {"r": 4, "target_modules": QV + ["w1", "w3", "w2"]}, True, 64, 2, "sdpa", (1, 2), False, "bfloat16", {}),
    ("qwen2_moe", {"r": 8, "target_modules": QV, "target_parameters": EXPERTS}, True, 64, 2, "sdpa", (1, 2), False,
     "bfloat16", {}),
]

#: modules_to_save on the input embedding (after the cases above, whose ids are indices): its trainable copy keeps the
#: token ids and makes every layer's input carry a gradient. q/v alone and beside lm_head's copy (untied llama, tied
#: qwen2 whose head keeps the frozen original), a first adapted layer after an unadapted one, checkpointing, fp32,
#: gemma's scaled embedding (eager), gpt2's wte beside its frozen wpe, gpt_neox's embed_in, lora_dropout's masks
MTS = [
    ("llama", {"r": 8, "target_modules": QV, "modules_to_save": ["embed_tokens"]}, True, 64, 2, "sdpa", (1, 2),
     False, "bfloat16", {}),
    ("llama", {"r": 8, "target_modules": QV, "modules_to_save": ["embed_tokens", "lm_head"]}, True, 64, 2, "sdpa",
     (1, 2), False, "bfloat16", {}),
    ("llama", {"r": 8, "target_modules": ["layers.1.self_attn.q_proj"], "modules_to_save": ["embed_tokens"]}, True,
     64, 2, "sdpa", (2, 3), False, "bfloat16", {}),
    ("llama", {"r": 8, "target_modules": QV, "modules_to_save": ["embed_tokens", "lm_head"]}, True, 64, 2, "sdpa",
     (1, 2), True, "bfloat16", {}),
    ("qwen2", {"r": 8, "target_modules": "all-linear", "modules_to_save": ["embed_tokens"]}, False, 64, 2, "sdpa",
     (1, 2), False, "float32", {}),
    ("qwen2", {"r": 8, "target_modules": QV, "modules_to_save": ["embed_tokens", "lm_head"]}, True, 64, 2, "sdpa",
     (1, 2), False, "bfloat16", {}),
    ("qwen2", {"r": 8, "target_modules": ["o_proj", "down_proj"], "modules_to_save": ["embed_tokens"]}, True, 64, 2,
     "sdpa", (1, 2), True, "bfloat16", {}),
    ("gemma", {"r": 8, "target_modules": QV, "modules_to_save": ["embed_tokens"]}, True, 48, 2, "eager", (1, 2),
     False, "bfloat16", {}),
    ("gpt2", {"r": 8, "target_modules": ["c_attn"], "modules_to_save": ["wte"]}, True, 64, 2, "sdpa", (1, 2), False,
     "bfloat16", {}),
    ("gpt_neox", {"r": 8, "target_modules": ["dense_4h_to_h"], "modules_to_save": ["embed_in"]}, True, 64, 2, "sdpa",
     (1, 2), False, "bfloat16", {}),
    ("llama", {"r": 8, "target_modules": QV, "lora_dropout": 0.1, "modules_to_save": ["embed_tokens", "lm_head"]},
     True, 64, 2, "sdpa", (1, 2), False, "bfloat16", {}),
]


def cases() -> list[dict]:
    out = []
    for index, (family, lora, autocast, seq, batch, *rest) in enumerate(LORA):
        attention, layers, checkpointing = (rest + ["sdpa", (1, 2), False][len(rest):])[:3]
        out.append({"id": f"{family}-{index}", "config": dict(sorted(BASE[family].items())), "lora": lora,
                    "autocast_adapter_dtype": autocast, "sequence_length": seq, "micro_batch": batch,
                    "dtype": "bfloat16", "attention": attention, "gradient_checkpointing": checkpointing,
                    "layer_counts": list(layers)})
    for index, (base, bnb, prepare) in enumerate(QUANTIZED, start=len(out)):
        case = dict(out[base])
        out.append({**case, "id": f"{case['config']['model_type']}-{index}", "bnb": bnb, "prepare_kbit": prepare})
    for index, (family, lora, autocast, seq, batch, *rest) in enumerate(DROPOUT + FAMILIES_29, start=len(out)):
        attention, layers, checkpointing = (rest + ["sdpa", (1, 2), False][len(rest):])[:3]
        out.append({"id": f"{family}-{index}", "config": dict(sorted(BASE[family].items())), "lora": lora,
                    "autocast_adapter_dtype": autocast, "sequence_length": seq, "micro_batch": batch,
                    "dtype": "bfloat16", "attention": attention, "gradient_checkpointing": checkpointing,
                    "layer_counts": list(layers)})
    for index, (family, lora, autocast, seq, batch, attention, layers, checkpointing, dtype, changes) in enumerate(
            MOE + MTS, start=len(out)):
        out.append({"id": f"{family}-{index}", "config": dict(sorted({**BASE[family], **changes}.items())),
                    "lora": lora, "autocast_adapter_dtype": autocast, "sequence_length": seq, "micro_batch": batch,
                    "dtype": dtype, "attention": attention, "gradient_checkpointing": checkpointing,
                    "layer_counts": list(layers)})
    return out


def measure(arguments) -> int | str:
    case, layers = arguments
    try:
        import warnings
        warnings.filterwarnings("ignore")
        import torch
        import transformers
        from peft import LoraConfig, get_peft_model
        from transformers import AutoConfig, AutoModelForCausalLM
        transformers.logging.set_verbosity_error()
        torch.manual_seed(0)
        fields = {**case["config"], "num_hidden_layers": layers}
        model_type = fields.pop("model_type")
        config = AutoConfig.for_model(model_type, **fields)
        config._attn_implementation = case["attention"]
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, case["dtype"]))
        if case.get("bnb"):  # saved and loaded back quantized on the CPU, as transformers loads a QLoRA base
            from peft import prepare_model_for_kbit_training
            from transformers import BitsAndBytesConfig
            with tempfile.TemporaryDirectory() as folder:
                model.save_pretrained(folder)
                model = AutoModelForCausalLM.from_pretrained(
                    folder, dtype=getattr(torch, case["dtype"]), device_map="cpu",
                    attn_implementation=case["attention"],
                    quantization_config=BitsAndBytesConfig(**case["bnb"], bnb_4bit_compute_dtype=torch.bfloat16))
            if case["prepare_kbit"]:
                model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
        model = get_peft_model(model, LoraConfig(**case["lora"]), autocast_adapter_dtype=case["autocast_adapter_dtype"])
        model.train()
        saved = SavedTensors(model)
        if case["gradient_checkpointing"]:  # non-reentrant; what a checkpoint keeps are its inputs (as measure.py)
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            saved.record_checkpoint_inputs(model)
        ids = torch.randint(0, fields["vocab_size"], (case["micro_batch"], case["sequence_length"]),
                            generator=torch.Generator().manual_seed(1))
        with saved.hooks():
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        return saved.total
    except Exception as error:
        return f"{case['id']}: {type(error).__name__}: {error}"


def main() -> int:
    import peft
    import torch
    import transformers
    selected = cases()
    if sys.argv[1:] == ["moe"]:  # the MoE cases only, merged into the record (the others as recorded)
        recorded = json.loads(OUT.read_text())["cases"]
        selected = [case for case in selected if case["id"] not in {old["id"] for old in recorded}]
    jobs = [(case, layers) for case in selected for layers in case["layer_counts"]]
    with multiprocessing.get_context("fork").Pool(1, maxtasksperchild=1) as pool:
        results = list(pool.imap(measure, jobs, chunksize=1))
    failed = [result for result in results if isinstance(result, str)]
    if failed:
        print(*failed, sep="\n", file=sys.stderr)
        return 1
    for index, case in enumerate(selected):
        case["saved_bytes"] = {str(layers): results[2 * index + k] for k, layers in enumerate(case["layer_counts"])}
    if sys.argv[1:] == ["moe"]:
        selected = recorded + selected
    record = {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
              "device": "cpu", "method": "saved_tensors_hooks, unique storages, parameters (base and adapters) excluded",
              "cases": selected}
    OUT.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"{len(selected)} cases -> {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
