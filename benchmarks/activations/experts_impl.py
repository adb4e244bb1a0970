"""What each of Transformers' `experts_implementation`s keeps for backward (CPU, random weights, issue 29).

    /work/venv-fam/bin/python benchmarks/activations/experts_impl.py   # -> tests/data/activations/experts_impl.json

A model whose experts class carries `@use_experts_implementation` (integrations/moe.py) runs `grouped_mm` unless
told otherwise (modeling_utils `get_correct_experts_implementation`); axolotl's `experts_implementation` key reaches
it through `set_experts_implementation` after loading (loaders/model.py `_configure_experts_implementation`), which
is what each case does here. Every case is measured as measure.py and adapters/activations.py measure (unique
storages saved for backward, parameters excluded) at 1 and 2 layers, with all weights trained (full fine-tuning)
and with q/v LoRA adapters on a frozen base (experts and router frozen).
"""

from __future__ import annotations

import json
import multiprocessing
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "activations" / "experts_impl.json"
sys.path[:0] = [str(ROOT / "benchmarks" / "activations"), str(ROOT / "benchmarks")]
from measure import BASE  # noqa: E402
from saved_tensors import SavedTensors  # noqa: E402

IMPLEMENTATIONS = ("grouped_mm", "eager", "batched_mm")
#: (family, config changes, sequence, micro-batch, dtype)
SHAPES = [("mixtral", {}, 64, 2, "bfloat16"), ("qwen3_moe", {}, 32, 2, "float32"),
          ("gpt_oss", {"num_experts_per_tok": 1}, 64, 1, "bfloat16")]
LORA = {"r": 8, "target_modules": ["q_proj", "v_proj"]}


def cases() -> list[dict]:
    return [{"id": f"{family}-{implementation}-{'lora' if lora else 'full'}",
             "config": dict(sorted({**BASE[family], **changes}.items())), "experts_implementation": implementation,
             "lora": LORA if lora else None, "sequence_length": seq, "micro_batch": batch, "dtype": dtype,
             "attention": "eager" if family == "gpt_oss" else "sdpa", "layer_counts": [1, 2]}
            for family, changes, seq, batch, dtype in SHAPES for implementation in IMPLEMENTATIONS
            for lora in (False, True)]


def measure(arguments) -> int | str:
    case, layers = arguments
    try:
        import warnings
        warnings.filterwarnings("ignore")
        import torch
        import transformers
        from transformers import AutoConfig, AutoModelForCausalLM
        transformers.logging.set_verbosity_error()
        torch.manual_seed(0)
        fields = {**case["config"], "num_hidden_layers": layers}
        model_type = fields.pop("model_type")
        config = AutoConfig.for_model(model_type, **fields)
        config._attn_implementation = case["attention"]
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, case["dtype"]))
        model.set_experts_implementation(case["experts_implementation"])  # as axolotl sets it after loading
        if model.config._experts_implementation != case["experts_implementation"]:
            return f"{case['id']}: runs {model.config._experts_implementation}"
        if case["lora"]:
            from peft import LoraConfig, get_peft_model
            model = get_peft_model(model, LoraConfig(**case["lora"]), autocast_adapter_dtype=True)
        model.train()
        saved = SavedTensors(model)
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
    jobs = [(case, layers) for case in selected for layers in case["layer_counts"]]
    with multiprocessing.get_context("fork").Pool(1, maxtasksperchild=1) as pool:
        results = list(pool.imap(measure, jobs, chunksize=1))
    failed = [result for result in results if isinstance(result, str)]
    if failed:
        print(*failed, sep="\n", file=sys.stderr)
        return 1
    pending = iter(results)
    for case in selected:
        case["saved_bytes"] = {str(layers): next(pending) for layers in case["layer_counts"]}
    record = {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
              "device": "cpu", "method": "saved_tensors_hooks, unique storages, parameters excluded; "
              "set_experts_implementation after loading", "cases": selected}
    OUT.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"{len(selected)} cases -> {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
