"""Whole training steps with axolotl's chunked cross-entropy (CPU), measured with torch's profiler.

    pip download --no-deps --python-version 3.12 --only-binary=:all: axolotl==0.21.0 -d /tmp/axolotl
    (unzip it), then
    nice -n 5 /work/venv-measure/bin/python benchmarks/step/loss_kernels.py /tmp/axolotl/axolotl/monkeypatch/loss/chunked.py

axolotl's `patch_chunked_ce_loss_fn(num_output_chunks)` replaces ForCausalLMLoss by its chunked loss, whose
per-chunk cross-entropy is compiled by torch.compile (inductor). Dynamo compiles nothing while a
TorchDispatchMode is active, so the storage tracker of measure.py cannot be used here (the loss would run
eagerly), and inductor's own buffers are not dispatched anyway. Instead `torch.profiler` (profile_memory=True)
is started before the model is built: every allocation and free of the CPU allocator is an event, and the live
bytes are their running sum. On a Transformers-loss case the method gives the tracker's figures to the byte
(the `hf-twin` case, against torch-llama-h256-bf16-foreach in measured.json). Liger's fused linear
cross-entropy and cut-cross-entropy's kernel are Triton kernels for a GPU (cut-cross-entropy's `torch_compile`
implementation is another algorithm: it makes the whole logits): they are derived, not measured.

Cases are measure.py's (engines.Run, plain torch, one process); the record is
tests/data/step/loss_kernels.json, compared by tests/unit/test_step_loss_kernels.py.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from cases import _case  # noqa: E402
from measure import PHASES, live_peaks, run_case, versions  # noqa: E402

OUT = HERE.parents[1] / "tests" / "data" / "step" / "loss_kernels.json"
METHOD = ("torch.profiler profile_memory over the CPU allocator, started before the model is built; live bytes = "
          "running sum of allocation events; peak per phase of step 2 of 2")


def cases() -> list[dict]:
    # tokens T ≠ hidden h in most cases, so T×V and V×h terms can be told apart
    chunked = [("llama-h256", "bf16", "foreach", 128, 2, 8, False),
               ("llama-h256", "bf16", "foreach", 512, 1, 8, False),
               ("qwen2-h256-tied", "bf16", "foreach", 64, 2, 8, False),
               ("llama-h256", "fp32", "for-loop", 128, 4, 4, False),
               ("llama-h256", "bf16", "foreach", 128, 2, 8, True),
               ("llama-h512-tied", "bf16", "foreach", 64, 1, 16, False)]
    out = [_case("hf-twin-llama-h256-bf16-foreach", "llama-h256", regime="bf16", impl="foreach",
                 loss={"kernel": "hf"})]
    for model, regime, impl, seq, batch, chunks, gc in chunked:
        cid = f"chunked-{model}-{regime}-{impl}-s{seq}b{batch}-c{chunks}" + ("-gc" if gc else "")
        out.append(_case(cid, model, regime=regime, impl=impl, seq=seq, batch=batch, checkpointing=gc,
                         loss={"kernel": "chunked_ce", "chunks": chunks}))
    # LoRA (PEFT, its default fp32 adapters on a bf16 base): the same step with either loss, to compare the difference
    for kernel in ("hf", "chunked_ce"):
        out.append(_case(f"lora-{kernel}-llama-h256-bf16-foreach-s128b2", "llama-h256", regime="bf16", impl="foreach",
                         loss={"kernel": kernel, "chunks": 8},
                         lora={"r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"], "lora_dropout": 0.0}))
    return out


def _with_lora(build):
    """engines.build_model, then PEFT's get_peft_model with the case's LoraConfig (frozen base, trainable adapters)."""
    def built(case, torch):
        model = build(case, torch)
        if "lora" in case:
            from peft import LoraConfig, get_peft_model
            model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", **case["lora"]))
            case["_trainable"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
        return model
    return built


def run_rank(case: dict, chunked_path: str) -> dict:
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    import transformers
    from torch.profiler import ProfilerActivity, profile, record_function
    import engines
    from engines import Run
    engines.build_model = _with_lora(engines.build_model)
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    started = time.time()
    if case["loss"]["kernel"] == "chunked_ce":
        spec = importlib.util.spec_from_file_location("axolotl_chunked", chunked_path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.patch_chunked_ce_loss_fn(case["loss"]["chunks"])
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiler:
        run = Run(case, 0, 1, torch, None)
        ids = torch.randint(0, case["config"]["vocab_size"], (case["micro_batch"], case["sequence_length"]),
                            generator=torch.Generator().manual_seed(1))
        losses = []
        for step in (1, 2):
            with record_function("forward" if step == 2 else "step1-forward"):
                loss = run.forward(ids)
            with record_function("backward" if step == 2 else "step1-backward"):
                run.backward(loss)
                losses.append(float(loss.detach().float().item()))
                del loss
            with record_function("optimizer" if step == 2 else "step1-optimizer"):
                run.step()
    from torch._dynamo.utils import counters
    phases = live_peaks(profiler, PHASES)
    return {"rank": 0, "phases": phases, "persistent_before_step2": phases["forward"]["start"],
            "step_peak": max(phase["peak"] for phase in phases.values()),
            "peak_phase": max(PHASES, key=lambda name: phases[name]["peak"]), "losses": losses,
            "compiled_frames": int(counters["frames"].get("ok", 0)), "seconds": round(time.time() - started, 1),
            "trainable_parameters": case.get("_trainable")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chunked", help="axolotl/monkeypatch/loss/chunked.py of the axolotl wheel")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--world", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--only", action="append", help="case ids starting with this (repeatable)")
    args = parser.parse_args(argv)
    known = {case["id"]: case for case in cases()}
    if args.child:
        try:
            result = run_rank(known[args.child], args.chunked)
        except Exception as error:  # reported in the record
            import traceback
            result = {"rank": 0, "error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()[-3000:]}
        args.result.write_text(json.dumps(result))
        return 0
    record = json.loads(OUT.read_text()) if OUT.exists() else {"cases": []}
    kept = {case["id"]: case for case in record["cases"]}
    failed = 0
    for case in known.values():
        if args.only and not any(case["id"].startswith(prefix) for prefix in args.only):
            continue
        ranks = run_case(case, sys.executable, 1800, script=Path(__file__).resolve(), extra_args=(args.chunked,))
        entry = {**case, "per_rank": ranks}
        if "error" in ranks[0]:
            entry["error"] = ranks[0]["error"]
            failed += 1
        kept[case["id"]] = entry
        print(case["id"], ranks[0].get("error") or {name: ranks[0]["phases"][name]["peak"] for name in PHASES},
              ranks[0].get("seconds"), flush=True)
        record = {**versions(), "axolotl": "0.21.0", "device": "cpu", "method": METHOD, "phases": list(PHASES),
                  "cases": [kept[cid] for cid in known if cid in kept]}
        OUT.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
