"""PEFT's own counts for full-size models built on the meta device (no weights allocated).

    /work/venv-measure/bin/python benchmarks/adapters/full_size_counts.py  # -> tests/data/adapters/peft_counts_full_size.json

Each model is built from a config.json in tests/data/models (AutoModelForCausalLM.from_config under
torch.device("meta")), wrapped with `get_peft_model`, and `PeftModel.get_nb_trainable_parameters()` is
recorded — the figures `zeromem estimate --lora-rank/--lora-targets` must reproduce (tests/cli/test_estimate_lora.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "adapters" / "peft_counts_full_size.json"
CASES = [
    {"id": "llama3-8b-qv-r16", "model": "Meta-Llama-3-8B", "lora": {"r": 16, "target_modules": ["q_proj", "v_proj"]}},
    {"id": "llama3-8b-all-r16", "model": "Meta-Llama-3-8B", "lora": {"r": 16, "target_modules": "all-linear"}},
    {"id": "llama3-8b-all-r16-dora", "model": "Meta-Llama-3-8B",
     "lora": {"r": 16, "target_modules": "all-linear", "use_dora": True}},
    # PEFT's matching (--lora-target-regex, --layers-to-transform, --lora-rank-pattern)
    {"id": "llama3-8b-regex-qv-r16", "model": "Meta-Llama-3-8B",
     "lora": {"r": 16, "target_modules": r".*\.(q_proj|v_proj)"}},
    {"id": "llama3-8b-qv-layers-rank-pattern", "model": "Meta-Llama-3-8B",
     "lora": {"r": 16, "target_modules": ["q_proj", "v_proj"], "layers_to_transform": [0, 1, 30, 31],
              "rank_pattern": {"v_proj": 64, "layers.31.self_attn.q_proj": 8}}},
]


def main() -> int:
    import peft
    import torch
    import transformers
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    for case in CASES:
        config = AutoConfig.from_pretrained(ROOT / "tests" / "data" / "models" / case["model"])
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
            wrapped = get_peft_model(model, LoraConfig(**case["lora"]))
        trainable, total = wrapped.get_nb_trainable_parameters()
        case["measured"] = {"trainable": trainable, "all": total}
        print(case["id"], trainable, total, flush=True)
    record = {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
              "device": "meta", "cases": CASES}
    OUT.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
