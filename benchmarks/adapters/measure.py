"""Record PEFT's own trainable-parameter counts and bitsandbytes' stored bytes (CPU, random weights).

Run with the measurement venv (torch 2.13.0 CPU, transformers, peft, bitsandbytes), never in CI:

    /work/venv-measure/bin/python benchmarks/adapters/measure.py counts    # -> tests/data/adapters/peft_counts.json
    /work/venv-measure/bin/python benchmarks/adapters/measure.py quantized # -> tests/data/adapters/bnb_bytes.json

`counts`: each model is built from a config dict (AutoModelForCausalLM.from_config, never downloaded) and
wrapped with `get_peft_model`; the record keeps `PeftModel.get_nb_trainable_parameters()` and the bytes of
the trainable parameters by dtype (PEFT's autocast_adapter_dtype upcasts adapters to fp32), or PEFT's error
when it refuses the config.
`quantized`: the random model is saved to a temporary directory and loaded back with a BitsAndBytesConfig
on the CPU (transformers' own replace_with_bnb_linear path); the record keeps, per quantized module, the
bytes of every tensor bitsandbytes keeps (packed weight, absmax, code, nested state), the model's unique
storages in total, and PEFT's counts after prepare_model_for_kbit_training. One forked process per case.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "adapters"
sys.path.insert(0, str(ROOT / "benchmarks" / "activations"))
from measure import BASE  # noqa: E402  (the activation benchmark's small, architecture-faithful shapes)
# Odd sizes: weights with an odd element count and a partial last 64-block, more than 256 blocks

FAMILIES = ("llama", "qwen2", "mistral", "gemma", "gpt2", "gpt_neox", "mixtral", "qwen3_moe", "phi3")
ODD = {"model_type": "llama", "hidden_size": 105, "num_attention_heads": 5, "num_key_value_heads": 1, "head_dim": 26,
       "intermediate_size": 251, "vocab_size": 1001, "tie_word_embeddings": False, "attention_dropout": 0.0}
ATTENTION_PAIR = {"gpt2": ["c_attn"], "gpt_neox": ["query_key_value"], "phi3": ["qkv_proj"]}


def lora_cases() -> list[dict]:
    out = []
    for family in FAMILIES:
        config = {**BASE[family], ("n_layer" if family == "gpt2" else "num_hidden_layers"): 2}
        pair = ATTENTION_PAIR.get(family, ["q_proj", "v_proj"])
        settings = [
            {"r": 8, "target_modules": pair},
            {"r": 16, "target_modules": "all-linear"},
            {"r": 4, "target_modules": "all-linear", "modules_to_save": ["lm_head"]},
            {"r": 8, "target_modules": "all-linear", "use_dora": True},
            {"r": 64, "target_modules": pair, "lora_bias": True},
        ]
        if family in ("llama", "qwen2", "gemma"):
            settings.append({"r": 8, "target_modules": ["q_proj", "embed_tokens"],
                             "modules_to_save": ["embed_tokens"] if family == "qwen2" else None})
            settings.append({"r": 2, "target_modules": ["layers.1.self_attn.o_proj", "down_proj"]})
        for index, lora in enumerate(settings):
            out.append({"id": f"{family}-{index}", "config": dict(sorted(config.items())),
                        "lora": {k: v for k, v in lora.items() if v is not None}})
    extra_cases = [  # transformers 5's fused experts: PEFT maps v4 names onto them (and off the dense layers)
        ("qwen3_moe", {"mlp_only_layers": [1]}, {"r": 8, "target_modules": "all-linear"}),
        ("qwen3_moe", {"mlp_only_layers": [0]}, {"r": 4, "target_modules": ["q_proj", "gate_proj", "up_proj"]}),
        ("qwen3_moe", {}, {"r": 4, "target_modules": ["gate", "o_proj"]}),
        ("mixtral", {}, {"r": 4, "target_modules": ["w1", "w3", "k_proj"]}),
        ("mixtral", {}, {"r": 4, "target_modules": ["w1", "w2"]}),  # refused: w1 is fused with w3
        ("llama", {}, {"r": 8, "target_modules": ["query", "value"]}),  # refused: no such module
        ("llama", {}, {"r": 4, "target_modules": ["down_proj"], "modules_to_save": ["layers.1.mlp.down_proj"]}),
        ("qwen3", {}, {"r": 4, "target_modules": ["q_proj"], "modules_to_save": ["norm"]}),  # every *norm module
        # the input embedding's trainable copy beside the head's: untied, tied (each copied apart), gpt2's wte beside
        # its frozen wpe, gpt_neox's embed_in
        ("llama", {}, {"r": 8, "target_modules": QV, "modules_to_save": ["embed_tokens", "lm_head"]}),
        ("qwen2", {}, {"r": 8, "target_modules": QV, "modules_to_save": ["embed_tokens", "lm_head"]}),
        ("gpt2", {}, {"r": 8, "target_modules": ["c_attn"], "modules_to_save": ["wte"]}),
        ("gpt_neox", {}, {"r": 8, "target_modules": ["dense_4h_to_h"], "modules_to_save": ["embed_in"]}),
    ]
    for index, (family, changes, lora) in enumerate(extra_cases):
        config = {**BASE[family], **changes, "num_hidden_layers": 2}
        out.append({"id": f"{family}_extra-{index}", "config": dict(sorted(config.items())), "lora": lora})
    odd = {**ODD, "num_hidden_layers": 3}
    out.append({"id": "llama_odd-0", "config": dict(sorted(odd.items())), "lora": {"r": 3, "target_modules": "all-linear"}})
    seen = set()
    for index, (family, lora) in enumerate(MATCHING_CASES):
        config = {**BASE[family], ("n_layer" if family == "gpt2" else "num_hidden_layers"): 3}
        out.append({"id": f"{family}_match-{index}", "config": dict(sorted(config.items())), "lora": lora,
                    **({"modules": True} if family not in seen | TREE_GAPS else {})})  # named_modules once per family
        seen.add(family)
    for index, (family, lora) in enumerate(LINEAR_NAMES_CASES):
        changes = {"mlp_only_layers": [1]} if family == "qwen3_moe" else {}
        config = {**BASE[family], **changes, ("n_layer" if family == "gpt2" else "num_hidden_layers"): 3}
        out.append({"id": f"{family}_linear_names-{index}", "config": dict(sorted(config.items())), "lora": lora,
                    "linear_names": True})
    return out


def _linear_leaf_names(model) -> list[str]:
    """The last name component of every module whose class is (or is named) Linear, the output head left out."""
    import torch
    head = model.get_output_embeddings()
    return sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                   if (isinstance(module, torch.nn.Linear) or "Linear" in type(module).__name__) and module is not head})


QV = ["q_proj", "v_proj"]
# PEFT's matching (check_target_module_exists, get_pattern_key, _convert_peft_config_moe) on 3-layer models:
# regex targets, layers_to_transform with and without layers_pattern, exclude_modules, rank_pattern,
# target_parameters, and what PEFT refuses
MATCHING_CASES = [
    ("llama", {"r": 8, "target_modules": r".*\.(q_proj|v_proj)"}),
    ("llama", {"r": 4, "target_modules": r".*layers\.1\..*proj"}),
    ("llama", {"r": 4, "target_modules": r".*\.mlp"}),  # refused: LlamaMLP is not a supported module
    ("llama", {"r": 4, "target_modules": r"(q_proj"}),  # refused: not a regular expression
    ("llama", {"r": 4, "target_modules": "q_proj"}),  # refused: a string is fullmatched against the whole name
    ("llama", {"r": 4, "target_modules": r".*"}),  # refused: the root module matches
    ("llama", {"r": 8, "target_modules": QV, "layers_to_transform": [1]}),
    ("llama", {"r": 8, "target_modules": QV, "layers_to_transform": 2, "layers_pattern": "layers"}),
    ("llama", {"r": 8, "target_modules": QV, "layers_to_transform": [0, 2], "layers_pattern": ["h", "blocks"]}),
    ("llama", {"r": 8, "target_modules": ["model.layers.0.self_attn.q_proj", "v_proj"], "layers_to_transform": [1]}),
    ("llama", {"r": 8, "target_modules": r".*proj", "layers_to_transform": [1]}),  # refused: regex + layers
    ("llama", {"r": 8, "target_modules": QV, "layers_pattern": "layers"}),  # refused: pattern without indices
    ("llama", {"r": 8, "target_modules": "all-linear", "exclude_modules": ["layers.0.self_attn.q_proj", "down_proj"]}),
    ("llama", {"r": 8, "target_modules": "all-linear", "exclude_modules": r".*mlp.*"}),
    ("llama", {"r": 8, "target_modules": "all-linear", "exclude_modules": r".*"}),  # refused: all excluded
    ("llama", {"r": 8, "target_modules": ["q_proj"], "exclude_modules": ["q_proj"], "modules_to_save": ["lm_head"]}),
    ("llama", {"r": 8, "target_modules": QV, "rank_pattern": {"v_proj": 16, "layers.1.self_attn.q_proj": 32}}),
    ("llama", {"r": 8, "target_modules": "all-linear", "rank_pattern": {r".*mlp.*": 2, "down_proj": 64}}),
    ("llama", {"r": 8, "target_modules": QV, "rank_pattern": {"proj": 2, r"^model\.layers\.0.*": 4}}),
    ("llama", {"r": 8, "target_modules": QV, "rank_pattern": {"q_proj[": 4}}),  # refused: not a regular expression
    ("llama", {"r": 4, "target_modules": ["lm_head", "q_proj"], "modules_to_save": ["lm_head"]}),
    ("llama", {"r": 4, "target_modules": [], "target_parameters": ["self_attn.q_proj.weight"]}),
    ("qwen2", {"r": 8, "target_modules": r"model\.layers\.[02]\.self_attn\.[qkv]_proj", "use_dora": True}),
    ("qwen2", {"r": 8, "target_modules": ["k_proj", "up_proj"], "layers_to_transform": [0, 1],
               "rank_pattern": {"up_proj": 3}}),
    ("gpt2", {"r": 8, "target_modules": r".*\.(c_attn|c_fc)"}),
    ("gpt2", {"r": 8, "target_modules": ["c_attn", "c_proj"], "layers_to_transform": [1],
              "rank_pattern": {"mlp.c_proj": 2}}),
    ("gpt_neox", {"r": 8, "target_modules": "all-linear", "exclude_modules": ["dense"]}),
    ("gpt_neox", {"r": 8, "target_modules": ["query_key_value"], "layers_to_transform": [0, 2],
                  "layers_pattern": "layers"}),
    ("phi3", {"r": 8, "target_modules": r".*(qkv|o)_proj", "rank_pattern": {"o_proj": 4}}),
    ("gemma3_text", {"r": 8, "target_modules": r".*self_attn\.(q|k|v|o)_proj"}),
    ("gemma3_text", {"r": 8, "target_modules": "all-linear", "exclude_modules": ["o_proj"],
                     "rank_pattern": {"down_proj": 2}}),
    ("gemma3_text", {"r": 16, "target_modules": ["q_proj", "gate_proj"], "layers_to_transform": [2],
                     "layers_pattern": "layers"}),
    ("mixtral", {"r": 4, "target_modules": r".*\.(w1|w3|q_proj)"}),
    ("mixtral", {"r": 4, "target_modules": ["q_proj", "w2"], "layers_to_transform": [1]}),
    ("mixtral", {"r": 4, "target_modules": r".*\.w1"}),  # refused: w1 without w3
    ("qwen3_moe", {"r": 4, "target_modules": r".*\.gate"}),
    ("qwen3_moe", {"r": 4, "target_modules": "all-linear", "rank_pattern": {"gate_up_proj": 3, "q_proj": 2}}),
    ("qwen3_moe", {"r": 4, "target_modules": [], "target_parameters": ["mlp.experts.down_proj"]}),
    ("qwen3_moe", {"r": 4, "target_modules": "all-linear", "exclude_modules": r".*self_attn.*"}),
    # no conversion in PEFT for these (transformers' _MODEL_TO_CONVERSION_PATTERN lacks them): targets match modules
    # as named; phimoe's and llama4's routers are nn.Linear subclasses (adapted), gpt_oss's is not (refused)
    ("phimoe", {"r": 4, "target_modules": ["q_proj", "router"]}),
    ("phimoe", {"r": 4, "target_modules": "all-linear"}),
    ("phimoe", {"r": 4, "target_modules": ["gate_up_proj", "q_proj"]}),  # gate_up_proj is a parameter: no module
    ("llama4_text", {"r": 4, "target_modules": ["router", "v_proj"]}),
    ("llama4_text", {"r": 4, "target_modules": "all-linear"}),
    ("gpt_oss", {"r": 4, "target_modules": ["q_proj", "router"]}),  # refused: GptOssTopKRouter is no nn.Linear
    ("gpt_oss", {"r": 4, "target_modules": "all-linear"}),
    # routed experts through target_parameters (axolotl's lora_target_parameters), beside attention adapters
    ("qwen3_moe", {"r": 8, "target_modules": ["q_proj", "v_proj"],
                   "target_parameters": ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]}),
    ("mixtral", {"r": 16, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
                 "target_parameters": ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]}),
]
#: the module tree's known gap (docs/model-families.md): llama4_text's weightless qk_norm and dense activation_fn
TREE_GAPS = {"llama4_text"}
# axolotl's lora_target_linear / LLaMA-Factory's lora_target all: the leaf names of the nn.Linear modules but the
# head, as a list (plus the targets given); measured with that list, which the record keeps
LINEAR_NAMES_CASES = [
    ("llama", {"r": 8, "target_modules": [], "layers_to_transform": [0, 2]}),
    ("mixtral", {"r": 4, "target_modules": []}),
    ("qwen3_moe", {"r": 4, "target_modules": ["gate"]}),
    ("gpt2", {"r": 4, "target_modules": ["c_attn"]}),
]


def quantized_cases() -> list[dict]:
    out = []
    shapes = {"llama": BASE["llama"], "llama_odd": ODD, "qwen2": BASE["qwen2"], "gpt2": BASE["gpt2"],
              "mixtral": BASE["mixtral"]}
    variants = [{"load_in_4bit": True, "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": False},
                {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True},
                {"load_in_4bit": True, "bnb_4bit_quant_type": "fp4", "bnb_4bit_use_double_quant": True},
                {"load_in_8bit": True}]
    for family, base in shapes.items():
        config = {**base, ("n_layer" if family == "gpt2" else "num_hidden_layers"): 2}
        for index, bnb in enumerate(variants):
            if family in ("qwen2", "gpt2", "mixtral") and index == 2:
                continue
            out.append({"id": f"{family}-{index}", "config": dict(sorted(config.items())), "bnb": bnb,
                        "lora": {"r": 8, "target_modules": "all-linear"}})
    # modules_to_save after k-bit preparation: the copies of the fp32-upcast embedding and head (tied qwen2: each apart)
    for family in ("llama", "qwen2"):
        config = {**shapes[family], "num_hidden_layers": 2}
        out.append({"id": f"{family}-mts", "config": dict(sorted(config.items())), "bnb": variants[0],
                    "lora": {"r": 8, "target_modules": QV, "modules_to_save": ["embed_tokens", "lm_head"]}})
    return out


def _model(config: dict, dtype):
    from transformers import AutoConfig, AutoModelForCausalLM
    fields = dict(config)
    model_type = fields.pop("model_type")
    return AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **fields), dtype=dtype)


def _bytes_by_dtype(parameters) -> dict[str, int]:
    found: dict[str, int] = {}
    for parameter in parameters:
        key = str(parameter.dtype).removeprefix("torch.")
        found[key] = found.get(key, 0) + parameter.numel() * parameter.element_size()
    return dict(sorted(found.items()))


def count(case: dict) -> dict:
    import torch
    from peft import LoraConfig, get_peft_model
    torch.manual_seed(0)
    base = _model(case["config"], torch.bfloat16)
    modules = {name: type(module).__name__ for name, module in base.named_modules() if name}
    lora, used = dict(case["lora"]), {}
    if case.get("linear_names"):
        lora["target_modules"] = used["target_modules_used"] = sorted(set(lora["target_modules"])
                                                                      | set(_linear_leaf_names(base)))
    try:
        model = get_peft_model(base, LoraConfig(**lora))
    except (ValueError, TypeError, re.error) as error:  # PEFT refuses the config: recorded, refused here too
        return {"error": str(error), "error_type": type(error).__name__, **used}
    trainable, total = model.get_nb_trainable_parameters()
    return {"trainable": trainable, "all": total, **used, **({"named_modules": modules} if case.get("modules") else {}),
            "trainable_bytes": _bytes_by_dtype(p for p in model.parameters() if p.requires_grad),
            "frozen_bytes": _bytes_by_dtype(p for p in model.parameters() if not p.requires_grad)}


def _tensor_bytes(tensor) -> int:
    return tensor.untyped_storage().nbytes()


def _state_tensors(state) -> dict[str, object]:
    """The tensors a bitsandbytes QuantState holds, by name (nested state included)."""
    import torch
    found = {}
    for name in ("absmax", "code", "offset"):
        value = getattr(state, name, None)
        if isinstance(value, torch.Tensor):
            found[name] = value
    if getattr(state, "state2", None) is not None:
        for name in ("absmax", "code"):
            found[f"state2.{name}"] = getattr(state.state2, name)
    return found


def quantize(case: dict) -> dict:
    import torch
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as folder:
        _model(case["config"], torch.bfloat16).save_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(
            folder, dtype=torch.bfloat16, device_map="cpu",
            quantization_config=BitsAndBytesConfig(**case["bnb"], bnb_4bit_compute_dtype=torch.bfloat16))
    modules, storages = {}, {}
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        kind = type(weight).__name__
        if kind == "Params4bit":
            tensors = {"weight": weight, **_state_tensors(weight.quant_state)}
        elif kind == "Int8Params":
            tensors = {"weight": weight, "SCB": weight.SCB}
        else:
            continue
        modules[name] = {"class": type(module).__name__, "shape": list(weight.quant_state.shape) if kind == "Params4bit"
                         else list(weight.shape), "bytes": {key: _tensor_bytes(t) for key, t in tensors.items()},
                         "dtypes": {key: str(t.dtype).removeprefix("torch.") for key, t in tensors.items()}}
        for tensor in tensors.values():
            storages[tensor.untyped_storage().data_ptr()] = _tensor_bytes(tensor)
    for parameter in model.parameters():
        storages[parameter.untyped_storage().data_ptr()] = _tensor_bytes(parameter)
    loaded = {"unique_storage_bytes": sum(storages.values()),
              "parameter_bytes": _bytes_by_dtype(model.parameters())}
    prepared = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    peft_model = get_peft_model(prepared, LoraConfig(**case["lora"]))
    trainable, total = peft_model.get_nb_trainable_parameters()
    return {"modules": modules, "loaded": loaded, "trainable": trainable, "all": total,
            "prepared_frozen_bytes": _bytes_by_dtype(p for p in peft_model.parameters() if not p.requires_grad),
            "trainable_bytes": _bytes_by_dtype(p for p in peft_model.parameters() if p.requires_grad)}


def _child(arguments):
    what, case = arguments
    import warnings
    warnings.filterwarnings("ignore")
    import transformers
    transformers.logging.set_verbosity_error()
    try:
        return (count if what == "counts" else quantize)(case)
    except Exception as error:  # reported per case
        return f"{case['id']}: {type(error).__name__}: {error}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("counts", "quantized"))
    parser.add_argument("--only", help="only case ids starting with this")
    args = parser.parse_args(argv)
    import bitsandbytes
    import peft
    import torch
    import transformers
    selected = [case for case in (lora_cases() if args.what == "counts" else quantized_cases())
                if not args.only or case["id"].startswith(args.only)]
    with multiprocessing.get_context("fork").Pool(1, maxtasksperchild=1) as pool:
        results = list(pool.imap(_child, [(args.what, case) for case in selected], chunksize=1))
    failed = [result for result in results if isinstance(result, str)]
    for case, result in zip(selected, results):
        if not isinstance(result, str):
            case["measured"] = result
    print(*failed, sep="\n", file=sys.stderr)
    record = {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
              "bitsandbytes": bitsandbytes.__version__, "device": "cpu",
              "cases": [case for case in selected if "measured" in case]}
    name = "peft_counts.json" if args.what == "counts" else "bnb_bytes.json"
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / name).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"{len(record['cases'])} cases -> {OUT / name}; {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
