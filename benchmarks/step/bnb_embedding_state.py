"""bitsandbytes' 8-bit AdamW as HF Trainer builds it (`optim: adamw_bnb_8bit`, Trainer.create_optimizer: optim_bits 32
registered for every nn.Embedding weight), measured on CPU: the bytes of its state after one step, every tensor counted
once (its quantile maps are shared), beside the same optimizer made without the override (bitsandbytes.optim.AdamW8bit
on the same parameters). Writes tests/data/step/bnb_embedding_state.json (tests/unit/test_step_optimizers.py reads it).

    OMP_NUM_THREADS=1 nice -n 5 /work/venv-fam/bin/python benchmarks/step/bnb_embedding_state.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE.parents[1] / "tests/data/step/bnb_embedding_state.json"
sys.path.insert(0, str(HERE))

#: small shapes whose every matrix has at least 4096 elements (bitsandbytes' min_8bit_size): an untied llama, a tied
#: qwen2, gpt2 (learned positions: a second nn.Embedding)
MODELS = {
    "llama-untied": {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1,
                     "intermediate_size": 128, "num_hidden_layers": 2, "vocab_size": 1000,
                     "tie_word_embeddings": False},
    "qwen2-tied": {"model_type": "qwen2", "hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1,
                   "intermediate_size": 128, "num_hidden_layers": 2, "vocab_size": 1000, "tie_word_embeddings": True},
    "gpt2": {"model_type": "gpt2", "n_embd": 64, "n_head": 2, "n_layer": 2, "vocab_size": 1000, "n_positions": 128},
}


def state_bytes(optimizer, names: dict[int, str]) -> tuple[int, dict[str, str]]:
    """Bytes of every tensor in the optimizer's state (each storage once), and each parameter's state dtype."""
    import torch
    seen, dtypes = {}, {}
    for group in optimizer.param_groups:
        for param in group["params"]:
            state = optimizer.state.get(param, {})
            for tensor in (v for v in state.values() if torch.is_tensor(v)):
                seen[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
            dtypes[names[id(param)]] = str(state["state1"].dtype) if "state1" in state else "none"
    return sum(seen.values()), dtypes


def measure(name: str, config: dict) -> dict:
    import bitsandbytes as bnb
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, Trainer, TrainingArguments

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config), dtype=torch.float32)
    ids = torch.randint(0, config["vocab_size"], (1, 16))
    found, names = {}, {id(p): name for name, p in model.named_parameters()}
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, optim="adamw_bnb_8bit", use_cpu=True, report_to=[])
        trainer = Trainer(model=model, args=args)
        for how, make in (("trainer", trainer.create_optimizer),
                          ("plain", lambda: bnb.optim.AdamW8bit(model.parameters(), lr=1e-4))):
            bnb.optim.GlobalOptimManager.get_instance().initialize()  # the singleton keeps the last run's overrides
            optimizer = make()
            model(input_ids=ids, labels=ids).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            found[how], dtypes = state_bytes(optimizer, names)
            found[f"{how}_dtypes"] = dtypes
            trainer.optimizer = None
    embeddings = [m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Embedding)]
    return {"id": name, "config": config, "embedding_parameters": embeddings,
            "parameters": [p.numel() for p in model.parameters()], "state_bytes": found["trainer"],
            "state_bytes_without_override": found["plain"], "state_dtypes": found["trainer_dtypes"]}


def main() -> None:
    from measure import versions
    record = {"generator": "benchmarks/step/bnb_embedding_state.py", "versions": versions(), "device": "cpu",
              "cases": [measure(name, config) for name, config in MODELS.items()]}
    OUT.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps([{k: c[k] for k in ("id", "state_bytes", "state_bytes_without_override")}
                      for c in record["cases"]]))


if __name__ == "__main__":
    main()
