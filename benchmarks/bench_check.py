"""Benchmark `zeromem check` against check-jsonschema (with our generated schema) on the same files.

Run: python benchmarks/bench_check.py [--files 3000] [--repeat 21] [--batch-repeat 5]
Needs check-jsonschema on PATH (pip install check-jsonschema). Prints a Markdown table; the
numbers are ratios measured in one run on one machine, not absolute promises.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "schemas" / "deepspeed.schema.json"


def make_configs(folder: Path, count: int) -> list[Path]:
    """Realistic, varied DeepSpeed configs (strict JSON so both tools can read them)."""
    paths = []
    for index in range(count):
        stage = index % 4
        config = {
            "train_batch_size": 8 * (1 + index % 16),
            "train_micro_batch_size_per_gpu": 1 + index % 4 if (8 * (1 + index % 16)) % (1 + index % 4) == 0 else 1,
            "gradient_clipping": 1.0,
            "steps_per_print": 100,
            "bf16": {"enabled": index % 2 == 0},
            "fp16": {"enabled": False, "loss_scale_window": 1000 + index},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-5, "betas": [0.9, 0.95], "eps": 1e-8}},
            "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 100 + index}},
            "zero_optimization": {
                "stage": stage,
                "overlap_comm": True,
                "contiguous_gradients": True,
                "reduce_bucket_size": 5e8,
                "allgather_bucket_size": 5e8,
                **({"offload_optimizer": {"device": "cpu", "pin_memory": True}} if stage >= 2 else {}),
                **({"stage3_prefetch_bucket_size": 5e7, "stage3_param_persistence_threshold": 1e5} if stage == 3 else {}),
            },
            "zeromem": {"parameters": f"{1 + index % 70}B", "world_size": 8, "gpu_memory": "80GiB"},
        }
        path = folder / f"ds_config_{index:05d}.json"
        path.write_text(json.dumps(config, indent=2))
        paths.append(path)
    return paths


def with_a_misspelt_key(config: Path, folder: Path) -> Path:
    """The same config with one finding both tools report (an unknown key in the strict fp16 section):
    zeromem's path with findings, where the pre-check cannot vouch and the pydantic models load."""
    folder.mkdir()
    data = json.loads(config.read_text())
    data["fp16"]["loss_scale_windw"] = data["fp16"].pop("loss_scale_window")
    path = folder / config.name
    path.write_text(json.dumps(data, indent=2))
    return path


#: Both tools run as installed: with their bytecode cached (pip writes it for check-jsonschema; an
#: editable zeromem writes it on the warm-up run). PYTHONDONTWRITEBYTECODE would make every zeromem
#: start recompile its sources, which no installed tool does.
ENV = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}


def timed(command: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run. CPU time (user + system of the child) is the steadier
    figure on a machine shared with other work; wall time is what a user waits."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False, env=ENV)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{command[0]} failed ({done.returncode}): {done.stderr.decode()[-500:]}")
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def interleaved(ours: list[str], theirs: list[str], repeat: int) -> tuple[list, list]:
    """Alternate the two tools so both see the same load (after one warm-up run each)."""
    timed(ours), timed(theirs)
    a, b = [], []
    for _ in range(repeat):
        a.append(timed(ours))
        b.append(timed(theirs))
    return a, b


def medians(runs: list) -> tuple[float, float]:
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--batch-repeat", type=int, default=5)
    args = parser.parse_args()
    peer = shutil.which("check-jsonschema") or str(Path(sys.executable).parent / "check-jsonschema")
    zeromem = [sys.executable, "-m", "zeromem_lsp", "check", "--quiet"]
    jsonschema = [peer, "--schemafile", str(SCHEMA)]
    with tempfile.TemporaryDirectory() as temp:
        folder = Path(temp)
        one = make_configs(folder / "one", 1) if (folder / "one").mkdir() is None else []
        many_dir = folder / "many"
        many_dir.mkdir()
        many = make_configs(many_dir, args.files)
        rows = []
        ours, theirs = interleaved([*zeromem, str(one[0])], [*jsonschema, str(one[0])], args.repeat)
        rows.append((f"cold start, 1 config (median of {args.repeat})", medians(ours), medians(theirs)))
        typo = with_a_misspelt_key(one[0], folder / "typo")
        ours, theirs = interleaved([*zeromem, str(typo)], [*jsonschema, str(typo)], args.repeat)
        rows.insert(1, (f"cold start, 1 config with a finding (median of {args.repeat})", medians(ours), medians(theirs)))
        ours, theirs = interleaved([*zeromem, str(many_dir)], [*jsonschema, *map(str, many)], args.batch_repeat)
        rows.append((f"{args.files} configs in one process (median of {args.batch_repeat})", medians(ours), medians(theirs)))
    print("| measurement | zeromem wall | peer wall | ratio | zeromem CPU | peer CPU | ratio |")
    print("|---|---|---|---|---|---|---|")
    for name, (a_wall, a_cpu), (b_wall, b_cpu) in rows:
        print(f"| {name} | {a_wall:.3f} s | {b_wall:.3f} s | {a_wall / b_wall:.2f} "
              f"| {a_cpu:.3f} s | {b_cpu:.3f} s | {a_cpu / b_cpu:.2f} |")
    (ours_wall, ours_cpu), (theirs_wall, theirs_cpu) = rows[-1][1], rows[-1][2]
    print(f"\nthroughput (wall): zeromem {args.files / ours_wall:,.0f} files/s, check-jsonschema "
          f"{args.files / theirs_wall:,.0f} files/s; per CPU second: zeromem {args.files / ours_cpu:,.0f}, "
          f"check-jsonschema {args.files / theirs_cpu:,.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
