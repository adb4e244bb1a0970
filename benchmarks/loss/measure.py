"""Saved-for-backward bytes of the causal-LM loss: Transformers' default against axolotl's chunked loss (CPU).

    pip download --no-deps --python-version 3.12 --only-binary=:all: axolotl==0.21.0 -d /tmp/axolotl
    (unzip it), then
    /work/venv-measure/bin/python benchmarks/loss/measure.py /tmp/axolotl/axolotl/monkeypatch/loss/chunked.py

axolotl's module is loaded by path (it imports only torch) and patched in with its own
`patch_chunked_ce_loss_fn(num_output_chunks)`, which replaces ForCausalLMLoss by the chunked loss compiled with
torch.compile (inductor; needs a C compiler). The model is built from a config (1 decoder layer, random
weights); the saved tensors are counted as in benchmarks/activations/measure.py. One forked process per run.
Liger's fused linear cross-entropy and cut-cross-entropy's kernel need Triton on a GPU: they are derived from
their code (zeromem_lsp/memory/loss_and_reference.py), not measured here.
"""

from __future__ import annotations

import importlib.util
import json
import multiprocessing
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "loss" / "measured.json"
sys.path[:0] = [str(ROOT / "benchmarks" / "activations"), str(ROOT / "benchmarks")]
from measure import BASE  # noqa: E402
from saved_tensors import SavedTensors  # noqa: E402

CASES = [("llama", 64, 2, 8), ("llama", 128, 1, 4), ("qwen2", 64, 2, 8), ("gemma", 48, 3, 6)]


def run(arguments) -> int | str:
    case, kernel, chunked_path = arguments
    try:
        import warnings
        warnings.filterwarnings("ignore")
        import torch
        import transformers
        from transformers import AutoConfig, AutoModelForCausalLM
        transformers.logging.set_verbosity_error()
        if kernel == "chunked_ce":
            spec = importlib.util.spec_from_file_location("axolotl_chunked", chunked_path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            module.patch_chunked_ce_loss_fn(case["chunks"])
        torch.manual_seed(0)
        fields = {**case["config"], "num_hidden_layers": 1}
        model_type = fields.pop("model_type")
        config = AutoConfig.for_model(model_type, **fields)
        config._attn_implementation = "sdpa"
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        model.train()
        saved = SavedTensors(model)
        ids = torch.randint(0, fields["vocab_size"], (case["micro_batch"], case["sequence_length"]),
                            generator=torch.Generator().manual_seed(1))
        with saved.hooks():
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        return saved.total
    except Exception as error:
        return f"{case['id']} {kernel}: {type(error).__name__}: {error}"


def main(argv: list[str]) -> int:
    chunked_path = argv[0]
    import torch
    import transformers
    cases = [{"id": f"{family}-{index}", "config": dict(sorted(BASE[family].items())), "sequence_length": seq,
              "micro_batch": batch, "chunks": chunks, "dtype": "bfloat16", "attention": "sdpa", "layers": 1}
             for index, (family, seq, batch, chunks) in enumerate(CASES)]
    jobs = [(case, kernel, chunked_path) for case in cases for kernel in ("hf", "chunked_ce")]
    with multiprocessing.get_context("fork").Pool(1, maxtasksperchild=1) as pool:
        results = list(pool.imap(run, jobs, chunksize=1))
    failed = [result for result in results if isinstance(result, str)]
    if failed:
        print(*failed, sep="\n", file=sys.stderr)
        return 1
    for index, case in enumerate(cases):
        case["saved_bytes"] = {"hf": results[2 * index], "chunked_ce": results[2 * index + 1]}
    record = {"torch": torch.__version__, "transformers": transformers.__version__, "axolotl": "0.21.0",
              "device": "cpu", "method": "saved_tensors_hooks, unique storages, parameters excluded; 1 layer",
              "cases": cases}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"{len(cases)} cases -> {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
