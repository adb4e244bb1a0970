"""Measure supervised fine-tuning steps under TRL's `chunked_nll` loss (SFTConfig's default from TRL 1.7 to 1.14)
per phase on CPU: TRL's own patched forward, tiny random models.

    nice -n 5 /work/venv-measure/bin/python benchmarks/preference/trl_sft_chunked.py --trl DIR       # every case
    /work/venv-measure/bin/python benchmarks/preference/trl_sft_chunked.py --trl DIR --only sft14-llama --explain

DIR holds the TRL release the cases name (`pip install --no-deps --target DIR trl==1.14.0`, or the unpacked wheel);
it goes first on the children's PYTHONPATH (`--trl12 DIR` the same for the `sft12-` cases, TRL 1.12.0). What runs is
what SFTTrainer's `__init__` sets up for `loss_type="chunked_nll"` (trl/trainer/sft_trainer.py: the model's
forward replaced by `_patch_chunked_ce_lm_head(target, _CHUNKED_LM_HEAD_CHUNK_SIZE)`, `target` the PEFT model's
base), then Trainer's `compute_loss`: the model called with input_ids, attention_mask, labels (= input_ids) and
`num_items_in_batch`. The StorageTracker of benchmarks/step is entered before the model is built; step 2 of 2 is split
into forward, backward, optimizer (torch AdamW over the trainable parameters). Results:
tests/data/step/sft_chunked.json, with the versions (TRL's per case).
"""

from __future__ import annotations

import copy
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "step"))
OUT = HERE.parents[1] / "tests" / "data" / "step" / "sft_chunked.json"
PHASES = ("forward", "backward", "optimizer")
LORA = {"r": 8, "lora_alpha": 16, "lora_dropout": 0.0, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
        "quantization": None}


#: one wide layer and a small vocabulary: the head's weight gradients outweigh a chunk's fp32 tensors
WIDE = {"model_type": "llama", "hidden_size": 3072, "num_attention_heads": 24, "num_key_value_heads": 8,
        "intermediate_size": 1024, "num_hidden_layers": 1, "vocab_size": 8000, "tie_word_embeddings": False,
        "attention_dropout": 0.0}


def _case(cid, trl="1.14.0", model="llama-h256", regime="bf16", batch=1, seq=300, lora=False, checkpointing=False):
    from cases import MODELS
    case = {"id": cid, "trl_version": trl, "engine": "torch", "ranks": 1, "model": model,
            "config": dict(sorted({**MODELS, "llama-h3072-v8k": WIDE}[model].items())), "regime": regime,
            "micro_batch": batch,
            "sequence_length": seq, "attention": "sdpa", "gradient_checkpointing": checkpointing,
            "optimizer": {"name": "AdamW", "impl": "foreach", "lr": 1e-4}, "loss_type": "chunked_nll"}
    if lora:
        case["lora"] = dict(LORA)
    return case


def cases() -> list[dict]:
    """300 tokens: 299 scored positions per row, chunks of 256 (the last one partial)."""
    return copy.deepcopy([
        _case("sft14-llama-full"),
        _case("sft14-llama-full-b2", batch=2),
        _case("sft14-llama-full-fp32", regime="fp32"),
        _case("sft14-qwen2-tied-full", model="qwen2-h256-tied"),
        _case("sft14-qwen2-tied-full-b2", model="qwen2-h256-tied", batch=2),
        _case("sft14-llama-lora", lora=True),
        _case("sft14-llama-full-ckpt", checkpointing=True),
        _case("sft14-llama-full-s200", seq=200),
        _case("sft14-wide-full", model="llama-h3072-v8k"),
        _case("sft14-wide-full-s600", model="llama-h3072-v8k", seq=600),
        _case("sft14-wide-full-s200", model="llama-h3072-v8k", seq=200),
        _case("sft12-llama-full", trl="1.12.0"),
        _case("sft12-llama-full-b2", trl="1.12.0", batch=2),
        _case("sft12-qwen2-tied-full", trl="1.12.0", model="qwen2-h256-tied"),
        _case("sft12-llama-lora", trl="1.12.0", lora=True),
        _case("sft12-wide-full", trl="1.12.0", model="llama-h3072-v8k"),
    ])


def by_id() -> dict[str, dict]:
    return {case["id"]: case for case in cases()}


def run_rank(case: dict, rank: int, world: int) -> dict:
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    import transformers
    import trl
    from engines import Labeller, build_model, torch_optimizer
    from tracker import StorageTracker
    from trl.trainer import sft_trainer
    if trl.__version__ != case["trl_version"]:
        raise RuntimeError(f"the case needs trl {case['trl_version']} (--trl / --trl12), found {trl.__version__}")
    measure = _measure_module()
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    started = time.time()
    tracker = StorageTracker()
    extra: dict = {}
    with tracker:
        model = build_model(case, torch)
        target = model.get_base_model() if "lora" in case else model  # SFTTrainer.__init__ patches the PEFT base
        sft_trainer._patch_chunked_ce_lm_head(target, chunk_size=sft_trainer._CHUNKED_LM_HEAD_CHUNK_SIZE)
        extra["chunk_size"] = sft_trainer._CHUNKED_LM_HEAD_CHUNK_SIZE
        params = [p for p in model.parameters() if p.requires_grad]
        extra["trainable_parameters"] = sum(p.numel() for p in params)
        inner = torch_optimizer(case, params, torch)
        labeller = Labeller(tracker, model, inner)
        generator = torch.Generator().manual_seed(1 + rank)
        b, s = case["micro_batch"], case["sequence_length"]
        ids = torch.randint(0, case["config"]["vocab_size"], (b, s), generator=generator)
        mask = torch.ones(b, s, dtype=torch.long)
        items = torch.tensor(b * (s - 1))  # Trainer's num_items_in_batch: the scored labels of the batch
        losses = []
        for step in (1, 2):
            phase = (lambda name: None) if step == 1 else tracker.begin
            if step == 1:
                tracker.begin("step1")
            else:
                labeller.collect()
            phase("forward")
            loss = model(input_ids=ids, attention_mask=mask, labels=ids, num_items_in_batch=items).loss
            phase("backward")
            loss.backward()
            losses.append(float(loss.detach().float().item()))
            del loss
            if step == 2:
                labeller.collect()
            phase("optimizer")
            inner.step()
            inner.zero_grad(set_to_none=True)
            tracker.end()
        result = measure.rank_result(rank, tracker, labeller.labels, PHASES, "forward", losses=losses,
                                     seconds=round(time.time() - started, 1), **extra)
    return result


def _measure_module():
    import importlib.util
    spec = importlib.util.spec_from_file_location("preference_measure", HERE / "measure.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _child_main(case_id: str, rank: int, world: int, out: Path) -> int:
    measure = _measure_module()
    out.write_text(json.dumps(measure.child_result(rank, lambda: run_rank(by_id()[case_id], rank, world))))
    return 0


def merge(out: Path, case: dict, ranks: list[dict]) -> None:
    """The case into the record (by id, in this script's order), with the versions of the measuring Python."""
    measure = _measure_module()
    record = json.loads(out.read_text()) if out.exists() else {"cases": []}
    kept = {item["id"]: item for item in record["cases"]}
    entry = {**case, "per_rank": ranks}
    errors = [rank["error"] for rank in ranks if "error" in rank]
    if errors:
        entry["error"] = errors[0]
    kept[case["id"]] = entry
    found = {name: version for name, version in measure.versions().items() if name != "trl"}
    from measure import METHOD
    record = {"versions": {**found, "trl": "per case (trl_version)"}, "device": "cpu", "phases": list(PHASES),
              "method": METHOD + "; TRL's chunked_nll forward (_patch_chunked_ce_lm_head) called as Trainer does",
              "cases": [kept[cid] for cid in by_id() if cid in kept]}
    measure.write_record(out, record)


def main(argv=None) -> int:
    from measure import parser_with_common_arguments, run_case, summary
    parser = parser_with_common_arguments(__doc__.splitlines()[0], timeout=900)
    parser.add_argument("--explain", action="store_true")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--trl", help="a directory holding trl 1.14.0 (pip install --no-deps --target DIR)")
    parser.add_argument("--trl12", help="a directory holding trl 1.12.0")
    args = parser.parse_args(argv)
    if args.child:
        return _child_main(args.child, args.rank, args.world, args.result)
    selected = [case for case in cases() if not args.only or any(case["id"].startswith(p) for p in args.only)]
    failed = 0
    for index, case in enumerate(selected, 1):
        folder = args.trl12 if case["trl_version"] == "1.12.0" else args.trl
        if not folder:
            print(f"{case['id']}: skipped (needs {'--trl12' if case['trl_version'] == '1.12.0' else '--trl'})")
            continue
        ranks = run_case(case, sys.executable, args.timeout, script=Path(__file__).resolve(),
                         env={"PYTHONPATH": folder})
        print(f"{index}/{len(selected)} {summary(case, ranks)}", flush=True)
        failed += any("error" in rank for rank in ranks)
        if args.explain:
            print(json.dumps(ranks, indent=1)[:8000])
        else:
            merge(args.out, case, ranks)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
