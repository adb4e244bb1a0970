"""Measure the peak of a whole training step per phase (CPU, real HF model code, random weights).

Run with the measuring venv (torch 2.13 CPU, transformers, deepspeed), outside the repository's venv:

    nice -n 5 /work/venv-measure/bin/python benchmarks/step/measure.py                # every case -> JSON
    /work/venv-measure/bin/python benchmarks/step/measure.py --only ds-z3 --explain  # print, write nothing

Every case runs in fresh processes (one per rank; ranks talk over gloo on 127.0.0.1). A StorageTracker
(tracker.py) is entered before the model is built and counts the live tensor storage bytes after every
dispatched op. Two training steps run; step 2 is split into the phases forward (+ loss), backward and
optimizer (step + zero_grad). Results are merged into tests/data/step/measured.json by case id after every
case, so a partial run keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
OUT = HERE.parents[1] / "tests" / "data" / "step" / "measured.json"
OUT_LORA = OUT.with_name("measured_lora.json")  # the LoRA / QLoRA cases (cases.lora_cases, --lora)
OUT_GA = OUT.with_name("gradient_accumulation.json")  # gradient_accumulation_steps > 1 (cases.accumulation_cases)
OUT_OPTIMIZERS = OUT.with_name("measured_optimizers.json")  # SGD, Adagrad, Adafactor, torchao's AdamW8bit
PHASES = ("forward", "backward", "optimizer")
METHOD = ("TorchDispatchMode + weakref.finalize over unique untyped storages, entered before the model is "
          "built; UntypedStorage.resize_ patched; peak read after every dispatched op; step 2 of 2")


def phase_names(case: dict) -> tuple[str, ...]:
    """forward, backward, optimizer; with gradient accumulation the earlier micro-batches' forward_<k>, backward_<k>
    come first (the plain names are the last micro-batch's)."""
    earlier = tuple(f"{name}_{micro}" for micro in range(1, case.get("gradient_accumulation_steps", 1))
                    for name in ("forward", "backward"))
    return earlier + PHASES


# ---------------------------------------------------------------- child: one rank of one case
class _MemTrackerPhases:
    """torch.distributed._tools.mem_tracker.MemTracker read per phase (its peak reset at each phase start)."""

    def __init__(self):
        from torch.distributed._tools.mem_tracker import MemTracker
        self.tracker = MemTracker()
        self.peaks: dict[str, int] = {}
        self.phase = None

    def _total(self, which):
        return sum(snap.get("Total", 0) for snap in self.tracker.get_tracker_snapshot(which).values())

    def begin(self, name):
        self.end()
        self.phase = name
        self.tracker._peak_mem = {dev: snap["Total"] for dev, snap in self.tracker._curr_mem_snap.items()}

    def end(self):
        if self.phase is not None:
            self.peaks[self.phase] = sum(self.tracker._peak_mem.values())
        self.phase = None


class ProfilerPhases:
    """The phases counted by torch.profiler (profile_memory) over the CPU allocator instead of the tracker, for a
    case whose step torch.compile runs (Dynamo compiles nothing under a TorchDispatchMode): each phase is a
    record_function range, live bytes the running sum of allocation events (loss_kernels.py's method, which gives
    the tracker's figures to the byte on a case both count). No breakdown."""

    def __init__(self):
        from torch.profiler import ProfilerActivity, profile
        self.profiler = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        self.names: list[str] = []
        self.phases: dict[str, dict] = {}
        self.range = None
        self.meta_current = 0

    def __enter__(self):
        self.profiler.__enter__()
        return self

    def __exit__(self, *args):
        self.end()
        self.profiler.__exit__(*args)
        self.phases = live_peaks(self.profiler, self.names)

    def begin(self, name):
        from torch.profiler import record_function
        self.end()
        self.range = record_function(name)
        self.range.__enter__()
        self.names.append(name)

    def end(self):
        if self.range is not None:
            self.range.__exit__(None, None, None)
        self.range = None

    def breakdown(self, name, labels):
        return {}


def live_peaks(profiler, names) -> dict[str, dict]:
    """Per phase (record_function ranges `names`, in the order they ran): peak, start, end of the running sum of
    the profiler's allocator events."""
    events = profiler.profiler.kineto_results.events()
    memory = sorted((event.start_ns(), event.nbytes()) for event in events if event.name() == "[memory]")
    ranges = {event.name(): (event.start_ns(), event.start_ns() + event.duration_ns())
              for event in events if event.name() in names}
    found, live, index = {}, 0, 0
    for name in names:
        low, high = ranges[name]
        while index < len(memory) and memory[index][0] < low:
            live += memory[index][1]
            index += 1
        start = peak = live
        while index < len(memory) and memory[index][0] <= high:
            live += memory[index][1]
            peak = max(peak, live)
            index += 1
        found[name] = {"peak": peak, "start": start, "end": live}
    return found


def quiet_torch():
    """torch for one rank's child: warnings and Transformers' logging off, seed 0, one thread."""
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    import transformers
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    return torch


def run_rank(case: dict, rank: int, world: int) -> dict:
    import contextlib
    import copy
    from engines import Run, _local
    from tracker import StorageTracker
    torch = quiet_torch()
    started = time.time()
    profiled = case.get("counter") == "profiler"
    tracker = ProfilerPhases() if profiled else StorageTracker()
    cross = _MemTrackerPhases() if case.get("crosscheck_memtracker") else None
    with contextlib.ExitStack() as stack:
        if case["fake"]:
            from torch._subclasses.fake_tensor import FakeTensorMode
            tracker.fake_mode = stack.enter_context(FakeTensorMode(allow_non_fake_inputs=True))
        if cross is not None:
            stack.enter_context(cross.tracker)
        stack.enter_context(tracker)
        run = Run(case, rank, world, torch, None if profiled else tracker)
        generator = torch.Generator().manual_seed(1 + rank)
        accumulation = case.get("gradient_accumulation_steps", 1)
        batches = [torch.randint(0, case["config"]["vocab_size"], (case["micro_batch"], case["sequence_length"]),
                                 generator=generator) for _ in range(accumulation)]
        losses = []
        first = copy.copy(run.labeller)  # step 1's names apart, so step 2's breakdown is named as before
        first.labels = {}
        for step in (1, 2):
            labeller = first if step == 1 else run.labeller
            phase = (lambda name: tracker.begin("step1." + name)) if step == 1 else tracker.begin
            cross_phase = (lambda name: None) if (step == 1 or cross is None) else cross.begin
            labeller.collect()
            for micro, ids in enumerate(batches, 1):  # gradient accumulation: the last micro-batch's phases
                last = micro == accumulation  # keep the plain names, the earlier ones are suffixed _<micro>
                tag = "" if last else f"_{micro}"
                if cross is not None:
                    cross.tracker.reset_mod_stats()  # MemTracker refuses a module's second iteration otherwise
                with run.accumulating(last):
                    phase("forward" + tag), cross_phase("forward" + tag)
                    loss = run.forward(ids)
                    if accumulation > 1 and case["engine"] != "deepspeed":  # HF Trainer: the loss / GA (DeepSpeed
                        loss = loss / accumulation  # scales it in engine.backward)
                    phase("backward" + tag), cross_phase("backward" + tag)
                    run.backward(loss, boundary=last)
                losses.append(float(loss.detach().float().item()) if not case["fake"] else None)
                del loss
                labeller.collect()
            phase("optimizer"), cross_phase("optimizer")
            run.step()
            tracker.end()
            if cross is not None:
                cross.end()
            labeller.collect()
    labels = run.labeller.labels
    result = {"rank": rank, "persistent_before_step2": tracker.phases["forward"]["start"],
              "meta_bytes": tracker.meta_current,
              "step1_peak": max(tracker.phases["step1." + name]["peak"] for name in phase_names(case)), "phases": {},
              "step1_phases": {}, "losses": losses,
              "seconds": round(time.time() - started, 1), **run.extra}
    for name in phase_names(case):
        phase = tracker.phases[name]
        result["phases"][name] = {"peak": phase["peak"], "start": phase["start"], "end": phase["end"],
                                  **tracker.breakdown(name, labels)}
        one = tracker.phases["step1." + name]  # step 1 (the optimizer state is made in its optimizer phase)
        result["step1_phases"][name] = {"peak": one["peak"], "start": one["start"], "end": one["end"],
                                        **tracker.breakdown("step1." + name, first.labels)}
    result["step_peak"] = max(result["phases"][name]["peak"] for name in phase_names(case))
    result["peak_phase"] = max(phase_names(case), key=lambda name: result["phases"][name]["peak"])
    result["param_numel_local"] = sum(_local(p).numel() for p in run.model.parameters())
    result["model_numel"] = case["_model_numel"]
    if "_trainable_numel" in case:
        result["trainable_numel"] = case["_trainable_numel"]
    if cross is not None:
        result["memtracker_phase_peaks"] = dict(cross.peaks)
    if world > 1 and torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    return result


def _child_main(case_id: str, rank: int, world: int, out: Path) -> int:
    from cases import by_id
    case = by_id()[case_id]
    try:
        result = run_rank(case, rank, world)
    except Exception as error:  # reported in the record, the other cases still run
        import traceback
        result = {"rank": rank, "error": f"{type(error).__name__}: {error}",
                  "traceback": traceback.format_exc()[-3000:]}
    out.write_text(json.dumps(result))
    return 0


# ---------------------------------------------------------------- parent: run cases, merge the record
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_case(case: dict, python: str, timeout: int, script: Path | None = None, extra_args=(), env=None) -> list:
    """Run every rank of case as its own process (script --child ...); their results, rank by rank."""
    world = case["ranks"]
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        for rank in range(world):
            environment = dict(os.environ, DS_ACCELERATOR="cpu", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                               RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                               LOCAL_WORLD_SIZE=str(world), OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
                               PYTHONWARNINGS="ignore")
            environment.update(env or {})
            out = Path(tmp) / f"rank{rank}.json"
            command = [python, str(script or Path(__file__).resolve()), "--child", case["id"], "--rank", str(rank),
                       "--world", str(world), "--result", str(out), *extra_args]
            log = open(Path(tmp) / f"rank{rank}.log", "w")
            procs.append((subprocess.Popen(command, env=environment, stdout=log, stderr=subprocess.STDOUT), out, log))
        ranks, deadline = [], time.time() + timeout
        for proc, out, log in procs:
            try:
                proc.wait(timeout=max(1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                for other, _, _ in procs:
                    other.kill()
                proc.wait()
            log.close()
            if out.exists():
                ranks.append(json.loads(out.read_text()))
            else:
                tail = (Path(log.name).read_text()[-2000:])
                ranks.append({"error": f"rank exited {proc.returncode} without a result", "log_tail": tail})
    return ranks


def versions() -> dict:
    import importlib.metadata as metadata
    found = {}
    for name in ("torch", "transformers", "deepspeed", "peft", "bitsandbytes", "torchao"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def merge(out: Path, case: dict, ranks: list[dict], device="cpu", method=METHOD, peak_key="step_peak",
          lora=False) -> None:
    """Put case (with its ranks' results) into the record at out, replacing an earlier run of the same id."""
    from cases import by_id
    record = json.loads(out.read_text()) if out.exists() else {}
    kept = {item["id"]: item for item in record.get("cases", [])}
    entry = dict(case)
    entry["per_rank"] = ranks
    if case.get("gradient_accumulation_steps", 1) > 1:
        entry["phase_names"] = list(phase_names(case))
    errors = [rank.get("error") for rank in ranks if "error" in rank]
    if errors:
        entry["error"] = errors[0]
    else:
        entry[peak_key + "_max_rank"] = max(rank[peak_key] for rank in ranks)
    kept[case["id"]] = entry
    order = list(by_id())
    found = versions()
    if not lora:  # the full-step records keep the versions they had (+ torchao: its AdamW8bit's cases)
        found = {name: found[name] for name in ("torch", "transformers", "deepspeed")
                 + (("torchao",) if out.name == OUT_OPTIMIZERS.name else ())}
    record = {**found, "device": device, "method": method, "phases": list(PHASES),
              "cases": [kept[cid] for cid in order if cid in kept]}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    tmp.replace(out)


def summary(case: dict, ranks: list[dict]) -> str:
    if any("error" in rank for rank in ranks):
        return f"{case['id']}: ERROR {next(rank['error'] for rank in ranks if 'error' in rank)}"
    rank = max(ranks, key=lambda item: item["step_peak"])
    phases = " ".join(f"{name[:3]}={rank['phases'][name]['peak'] / 2**20:.1f}" for name in PHASES)
    return (f"{case['id']}: peak {rank['step_peak'] / 2**20:.1f} MiB in {rank['peak_phase']} "
            f"(persistent {rank['persistent_before_step2'] / 2**20:.1f}; {phases}) {rank['seconds']}s")


def parser_with_common_arguments(description: str, timeout: int) -> argparse.ArgumentParser:
    """--only and --timeout, and the hidden arguments a rank's child process gets (measure_gpu.py shares them)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--only", action="append", help="case ids starting with this (repeatable)")
    parser.add_argument("--timeout", type=int, default=timeout)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--world", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    return parser


def selected_cases(only, lora=False, accumulation=False, optimizers=False) -> list[dict]:
    from cases import accumulation_cases, cases, lora_cases, optimizer_cases
    chosen = (accumulation_cases() if accumulation else lora_cases() if lora else optimizer_cases() if optimizers
              else cases())
    return [case for case in chosen if not only or any(case["id"].startswith(prefix) for prefix in only)]


def main(argv: list[str] | None = None) -> int:
    parser = parser_with_common_arguments(__doc__.splitlines()[0], timeout=600)
    parser.add_argument("--skip-done", action="store_true",
                        help="skip cases already in --out without error (and measured since meta tensors are apart)")
    parser.add_argument("--explain", action="store_true", help="print each rank's result, write nothing")
    parser.add_argument("--out", type=Path, help=f"default {OUT.name} ({OUT_LORA.name} with --lora)")
    parser.add_argument("--lora", action="store_true", help="the LoRA / QLoRA cases (cases.lora_cases)")
    parser.add_argument("--accumulation", action="store_true",
                        help=f"gradient accumulation cases (cases.accumulation_cases) -> {OUT_GA.name}")
    parser.add_argument("--optimizers", action="store_true",
                        help=f"SGD, Adagrad, Adafactor (cases.optimizer_cases) -> {OUT_OPTIMIZERS.name}")
    parser.add_argument("--ids", help="exactly these case ids, comma-separated")
    args = parser.parse_args(argv)
    if args.child:
        return _child_main(args.child, args.rank, args.world, args.result)
    args.out = args.out or (OUT_GA if args.accumulation else OUT_LORA if args.lora else
                            OUT_OPTIMIZERS if args.optimizers else OUT)
    selected = selected_cases(args.only, args.lora, args.accumulation, args.optimizers)
    if args.ids:
        selected = [case for case in selected if case["id"] in args.ids.split(",")]
    if args.skip_done and args.out.exists():
        done = {item["id"] for item in json.loads(args.out.read_text())["cases"]
                if "error" not in item and all("meta_bytes" in rank for rank in item["per_rank"])}
        selected = [case for case in selected if case["id"] not in done]
    failed = 0
    for index, case in enumerate(selected, 1):
        ranks = run_case(case, sys.executable, args.timeout)
        print(f"{index}/{len(selected)} {summary(case, ranks)}", flush=True)
        failed += any("error" in rank for rank in ranks)
        if args.explain:
            print(json.dumps(ranks, indent=1))
        else:
            merge(args.out, case, ranks, lora=args.lora or args.accumulation)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
