"""Latency of `zeromem serve` on a DeepSpeed config whose peak is known, beside the same config without a model, in
one run (issue 27): change → diagnostics (p50 / p99 over repeated edits) and the first hover after didOpen.

    python benchmarks/bench_peak_latency.py [--edits 40] [--runs 3]

The config is a ~3 KB ds_config for a Llama-3-8B-shaped model (tests/data/models/Meta-Llama-3-8B/config.json) on 8
ranks at 8,192 tokens; the baseline is the same text without `parameters` (no plan, no peak). Results are ratios
within one run on one machine, never assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lsp_client import Session  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "tests" / "data" / "models" / "Meta-Llama-3-8B" / "config.json"


def config_text(with_model: bool, steps: int) -> str:
    block = {"world_size": 8, "gpu_memory": "80GiB", "sequence_length": 8192}
    if with_model:
        block["parameters"] = {"from_config": str(MODEL)}
    config = {
        "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 8, "gradient_clipping": 1.0,
        "steps_per_print": steps, "wall_clock_breakdown": False, "bf16": {"enabled": True},
        "optimizer": {"type": "AdamW", "params": {"lr": 2e-5, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
        "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 2e-5,
                                                          "warmup_num_steps": 100, "total_num_steps": 10000}},
        "zero_optimization": {"stage": 1, "overlap_comm": True, "contiguous_gradients": True,
                              "reduce_bucket_size": 500000000, "allgather_bucket_size": 500000000},
        "activation_checkpointing": {"partition_activations": False, "contiguous_memory_optimization": False},
        "tensorboard": {"enabled": True, "output_path": "runs/", "job_name": "llama3-8b"},
        "zeromem": block,
    }
    text = json.dumps(config, indent=2)
    return text + "\n" + " " * max(0, 3072 - len(text) - 2) + "\n"  # ~3 KB


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def measure(session: Session, folder: Path, name: str, with_model: bool, edits: int) -> dict:
    uri = (folder / name).as_uri()
    text = config_text(with_model, 100)
    opened = time.perf_counter()
    await session.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "json", "version": 1,
                                                                   "text": text}})
    line = text[:text.index('"stage"')].count("\n")
    character = text.splitlines()[line].index('"stage"') + 1
    await session.request("textDocument/hover", {"textDocument": {"uri": uri},
                                                 "position": {"line": line, "character": character}})
    first_hover = time.perf_counter() - opened
    await session.wait_diagnostics(uri)
    latencies = []
    for version in range(2, edits + 2):
        sent = time.perf_counter()
        await session.notify("textDocument/didChange", {
            "textDocument": {"uri": uri, "version": version},
            "contentChanges": [{"text": config_text(with_model, 100 + version)}]})
        while True:
            arrived, params = await session.wait_diagnostics(uri)
            if params.get("version") in (version, None):
                break
        latencies.append(arrived - sent)
    await session.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    return {"first_hover_ms": first_hover * 1000, "p50_ms": statistics.median(latencies) * 1000,
            "p99_ms": percentile(latencies, 0.99) * 1000}


async def main(edits: int, runs: int) -> None:
    rows = {"with model (peak known)": [], "without a model": []}
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        for run in range(runs):
            session = await Session.start([sys.executable, "-m", "zeromem_lsp", "serve"])
            await session.initialize(folder.as_uri())
            warm = (folder / f"warm_{run}.json").as_uri()  # the server's warm-up done: what an editor sees after start
            await session.notify("textDocument/didOpen", {"textDocument": {
                "uri": warm, "languageId": "json", "version": 1, "text": '{"zero_optimization": {"stage": 1}}'}})
            await session.wait_diagnostics(warm)
            for label, with_model in (("with model (peak known)", True), ("without a model", False)):
                rows[label].append(await measure(session, folder, f"ds_{run}_{with_model}.json", with_model, edits))
            await session.stop()
    print(f"{edits} edits x {runs} runs, change -> diagnostics and the first hover after didOpen")
    summary = {}
    for label, results in rows.items():
        summary[label] = {key: statistics.median(result[key] for result in results) for key in results[0]}
        figures = ", ".join(f"{key} {value:.1f}" for key, value in summary[label].items())
        print(f"  {label:26} {figures}")
    model, plain = summary["with model (peak known)"], summary["without a model"]
    print(f"  ratio p50 {model['p50_ms'] / plain['p50_ms']:.2f}, p99 {model['p99_ms'] / plain['p99_ms']:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--edits", type=int, default=40)
    parser.add_argument("--runs", type=int, default=3)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.edits, arguments.runs))
