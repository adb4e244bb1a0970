"""Benchmark `zeromem check` against check-jsonschema (with our generated schema) on the same files.

Run: python benchmarks/bench_check.py [--files 3000] [--repeat 15]
Needs check-jsonschema on PATH (pip install check-jsonschema). Prints a Markdown table; the
numbers are ratios measured in one run on one machine, not absolute promises.
"""

from __future__ import annotations

import argparse
import json
import os
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


#: Both tools run as installed: with their bytecode cached (pip writes it for check-jsonschema; an
#: editable zeromem writes it on the warm-up run). PYTHONDONTWRITEBYTECODE would make every zeromem
#: start recompile its sources, which no installed tool does.
ENV = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}


def timed(command: list[str], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, env=ENV)
        times.append(time.perf_counter() - start)
    return times


def interleaved(ours: list[str], theirs: list[str], repeat: int) -> tuple[list[float], list[float]]:
    """Alternate the two tools so both see the same load on a shared machine (after one warm-up run each)."""
    timed(ours, 1), timed(theirs, 1)
    a, b = [], []
    for _ in range(repeat):
        a += timed(ours, 1)
        b += timed(theirs, 1)
    return a, b


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=15)
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
        rows.append(("cold start, 1 config (median of %d)" % args.repeat, statistics.median(ours), statistics.median(theirs)))
        ours, theirs = interleaved([*zeromem, str(many_dir)], [*jsonschema, *map(str, many)], 3)
        rows.append((f"{args.files} configs in one process (median of 3)", statistics.median(ours), statistics.median(theirs)))
    print("| measurement | zeromem check | check-jsonschema | ratio (zeromem / peer) |")
    print("|---|---|---|---|")
    for name, a, b in rows:
        print(f"| {name} | {a:.3f} s | {b:.3f} s | {a / b:.2f} |")
    files_per_second = args.files / rows[1][1]
    print(f"\nzeromem check throughput: {files_per_second:,.0f} files/s; check-jsonschema: {args.files / rows[1][2]:,.0f} files/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
