"""Run the step cases on CUDA: torch.cuda max_memory_allocated / max_memory_reserved per phase.

    python benchmarks/step/measure_gpu.py                        # every non-fake case on cuda -> JSON
    python benchmarks/step/measure_gpu.py --only ds-z3 --only fsdp2
    python benchmarks/step/measure_gpu.py --device cpu --smoke   # the same loop on CPU (tested in CI)
    python benchmarks/step/measure_gpu.py --suite single --out-dir OUT   # the single-GPU suite (gpu_single.py)

Same cases, engines and two-step loop as measure.py (cases.py, engines.py); one process per rank (NCCL on
CUDA, gloo on CPU). Before each phase of step 2 the allocator's peak statistics are reset
(`torch.cuda.reset_peak_memory_stats`); at its end the phase's max_memory_allocated and max_memory_reserved
are read. What a CPU cannot show (CUDA context, allocator rounding and segments, cuBLAS / flash-attention
workspaces, NCCL buffers, 1-byte dropout masks, fused CUDA optimizers) appears here as the difference to
the CPU storage count in tests/data/step/measured.json. With `--device cpu` the StorageTracker stands in for
the allocator (allocated = live storage bytes, reserved unknown), so the path runs without a GPU. FakeTensor
cases are skipped: the allocator never sees fake tensors.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
OUT = HERE.parents[1] / "tests" / "data" / "step" / "measured_cuda.json"
PHASES = ("forward", "backward", "optimizer")
METHOD = {"cuda": "torch.cuda max_memory_allocated / max_memory_reserved, peaks reset before each phase of step 2",
          "cpu": "StorageTracker live storage bytes standing in for max_memory_allocated (reserved unknown)"}


class PhaseMeter:
    """Peak statistics per phase from allocator callables (pure: the test drives it with stand-ins).

    stats() -> (allocated, max_allocated, reserved, max_reserved); reset() resets the peaks; sync() waits."""

    def __init__(self, stats, reset, sync=lambda: None):
        self.stats, self.reset, self.sync = stats, reset, sync
        self.phases: dict[str, dict] = {}
        self.phase: str | None = None

    def begin(self, name: str) -> None:
        self.end()
        self.sync()
        self.reset()
        allocated, _, reserved, _ = self.stats()
        self.phase = name
        self.phases[name] = {"start_allocated": allocated, "start_reserved": reserved}

    def end(self) -> None:
        if self.phase is None:
            return
        self.sync()
        allocated, max_allocated, reserved, max_reserved = self.stats()
        self.phases[self.phase].update(end_allocated=allocated, max_allocated=max_allocated,
                                       end_reserved=reserved, max_reserved=max_reserved)
        self.phase = None

    def result(self) -> dict:
        peaks = {name: phase["max_allocated"] for name, phase in self.phases.items()}
        reserved = [phase["max_reserved"] for phase in self.phases.values() if phase["max_reserved"] is not None]
        return {"phases": self.phases, "step_max_allocated": max(peaks.values()),
                "peak_phase": max(peaks, key=peaks.get), "step_max_reserved": max(reserved) if reserved else None}


def cuda_meter(torch) -> PhaseMeter:
    cuda = torch.cuda

    def stats():
        return (cuda.memory_allocated(), cuda.max_memory_allocated(), cuda.memory_reserved(),
                cuda.max_memory_reserved())
    return PhaseMeter(stats, cuda.reset_peak_memory_stats, cuda.synchronize)


def tracker_meter(tracker) -> PhaseMeter:
    """CPU stand-in: the storage tracker's current bytes, its running maximum reset per phase."""
    state = {"peak": tracker.current}
    original = tracker._touch

    def touch():
        original()
        state["peak"] = max(state["peak"], tracker.current)
    tracker._touch = touch

    def reset():
        state["peak"] = tracker.current
    return PhaseMeter(lambda: (tracker.current, max(state["peak"], tracker.current), None, None), reset)


def run_rank(case: dict, rank: int, world: int, device: str) -> dict:
    import contextlib
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    import transformers
    from engines import Run
    from tracker import StorageTracker
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    started = time.time()
    with contextlib.ExitStack() as stack:
        if device == "cuda":
            torch.cuda.set_device(rank)
            where, tracker = f"cuda:{rank}", None
            meter = cuda_meter(torch)
        else:
            torch.set_num_threads(1)
            where, tracker = "cpu", StorageTracker()
            stack.enter_context(tracker)
            meter = tracker_meter(tracker)
        run = Run(case, rank, world, torch, tracker, device=where)
        generator = torch.Generator().manual_seed(1 + rank)
        ids = torch.randint(0, case["config"]["vocab_size"], (case["micro_batch"], case["sequence_length"]),
                            generator=generator).to(where)
        for step in (1, 2):
            begin = meter.begin if step == 2 else (lambda name: None)
            begin("forward")
            loss = run.forward(ids)
            begin("backward")
            run.backward(loss)
            del loss
            begin("optimizer")
            run.step()
            meter.end()
    result = {"rank": rank, "device": where, "seconds": round(time.time() - started, 1), **meter.result(),
              **run.extra}
    if device == "cuda":
        result["device_name"] = torch.cuda.get_device_name(rank)
        result["cuda"] = torch.version.cuda
    if world > 1 and torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    return result


def _child_main(case_id: str, rank: int, world: int, device: str, out: Path) -> int:
    from cases import by_id
    try:
        result = run_rank(by_id()[case_id], rank, world, device)
    except Exception as error:  # reported in the record, the other cases still run
        import traceback
        result = {"rank": rank, "error": f"{type(error).__name__}: {error}",
                  "traceback": traceback.format_exc()[-3000:]}
    out.write_text(json.dumps(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    import measure
    from cases import smoke_case
    parser = measure.parser_with_common_arguments(__doc__.splitlines()[0], timeout=900)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--smoke", action="store_true", help="only the tiny smoke case")
    parser.add_argument("--out", type=Path, help=f"merge results here (default for cuda: {OUT})")
    parser.add_argument("--suite", choices=("ranks", "single"), default="ranks",
                        help="ranks: the step cases rank by rank (default); single: gpu_single.py's one-GPU suite")
    parser.add_argument("--out-dir", default="gpu_single_out", help="--suite single: where its files go")
    parser.add_argument("--budget", type=float, default=400.0, help="--suite single: seconds for all its cases")
    parser.add_argument("--setting", help="--suite single: run one child under this label with the environment as "
                        "it is (the allocator configuration, PYTHONPATH for other library versions)")
    parser.add_argument("--extra", action="store_true", help="--suite single: gpu_single.extra_cases (torch.compile, "
                        "long context) instead of the main list")
    args = parser.parse_args(argv)
    if args.suite == "single":
        import gpu_single
        if args.setting:
            return gpu_single.child(args.setting, args.device, args.smoke, args.budget, Path(args.out_dir), args.only,
                                    args.extra)
        return gpu_single.main(args)
    if args.child:
        return _child_main(args.child, args.rank, args.world, args.device, args.result)
    out = args.out or (OUT if args.device == "cuda" else None)
    selected = [smoke_case()] if args.smoke else [case for case in measure.selected_cases(args.only) if not case["fake"]]
    env = {"DS_ACCELERATOR": "cpu"} if args.device == "cpu" else {"DS_ACCELERATOR": "cuda"}
    failed = 0
    for index, case in enumerate(selected, 1):
        ranks = measure.run_case(case, sys.executable, args.timeout, script=Path(__file__).resolve(),
                                 extra_args=["--device", args.device], env=env)
        errors = [rank["error"] for rank in ranks if "error" in rank]
        failed += bool(errors)
        if errors:
            line = f"ERROR {errors[0]}"
        else:
            worst = max(ranks, key=lambda rank: rank["step_max_allocated"])
            line = " ".join(f"{name[:3]}={worst['phases'][name]['max_allocated'] / 2**20:.1f}" for name in PHASES)
            line = f"max_allocated {worst['step_max_allocated'] / 2**20:.1f} MiB in {worst['peak_phase']} ({line})"
        print(f"{index}/{len(selected)} {case['id']}: {line}", flush=True)
        if out is None:
            print(json.dumps(ranks, indent=1))
        else:
            measure.merge(out, case, ranks, device=args.device, peak_key="step_max_allocated", method=METHOD[args.device])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
