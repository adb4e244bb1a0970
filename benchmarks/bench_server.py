"""Latency and memory of `zeromem serve` beside vscode-json-language-server, one client, one run.

Setup once:  (cd benchmarks/peer && npm ci)
Run:         python benchmarks/bench_server.py [--quick]

The peer validates the same documents with our generated schema (schemas/deepspeed.schema.json).
Reports p50/p99 for open→diagnostics, change→diagnostics, hover and inlay hints on a 3 KB, a
300 KB and a 10 MB document, spawn→first diagnostics, and zeromem's RSS across many edits and
open/close cycles. Results are ratios within one run on one machine.
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
SCHEMA = ROOT / "schemas" / "deepspeed.schema.json"
PEER = ROOT / "benchmarks" / "peer" / "node_modules" / ".bin" / "vscode-json-language-server"


def config_text(target_bytes: int) -> str:
    """A realistic config padded with an `autotuning`-style block to reach the target size."""
    base = {
        "train_batch_size": 64,
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 2,
        "gradient_clipping": 1.0,
        "steps_per_print": 100,
        "bf16": {"enabled": True},
        "optimizer": {"type": "AdamW", "params": {"lr": 2e-5, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
        "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 100, "total_num_steps": 10000}},
        "zero_optimization": {
            "stage": 1,
            "overlap_comm": True,
            "contiguous_gradients": True,
            "reduce_bucket_size": 5e8,
            "allgather_bucket_size": 5e8,
        },
        "zeromem": {"parameters": "7B", "gpu_memory": "24GiB"},
    }
    text = json.dumps(base, indent=2)
    rows, index = [], 0
    while len(text) + sum(len(r) for r in rows) < target_bytes:
        rows.append(json.dumps({"name": f"trial_{index}", "stage": index % 4, "micro_batch": 1 + index % 8,
                                "note": "generated padding " * 3}))
        index += 1
    if rows:
        text = text[:-2] + ',\n  "trials": [\n    ' + ",\n    ".join(rows) + "\n  ]\n}"
    return text


def position_of(text: str, needle: str) -> dict:
    offset = text.index(needle)
    line = text.count("\n", 0, offset)
    return {"line": line, "character": offset - (text.rfind("\n", 0, offset) + 1)}


def stage_edit(text: str, stage: int) -> tuple[str, dict]:
    """The text with its first `"stage": 1` set to `stage`, and the change an editor sends for that
    keystroke: the one character's range and its new text (both servers sync incrementally)."""
    start = position_of(text, '"stage": 1')
    start["character"] += len('"stage": ')
    end = {"line": start["line"], "character": start["character"] + 1}
    return text.replace('"stage": 1', f'"stage": {stage}', 1), {"range": {"start": start, "end": end},
                                                                 "text": str(stage)}


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


async def measure(name: str, command: list[str], init_options: dict, config: dict, sizes: dict, root: str) -> dict:
    results: dict = {}
    start = time.perf_counter()
    session = await Session.start(command, config)
    await session.initialize(root, init_options)
    if config:
        await session.notify("workspace/didChangeConfiguration", {"settings": config})
    text = sizes["3 KB"][0]
    uri = f"{root}/spawn_ds_config.json"
    await session.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "json", "version": 1, "text": text}})
    await session.wait_diagnostics(uri)
    results["spawn → first diagnostics"] = {"p50": time.perf_counter() - start, "p99": time.perf_counter() - start}
    # sanity: both servers must really validate (a wrong stage value is an error for both)
    probe = f"{root}/probe_ds_config.json"
    await session.notify("textDocument/didOpen", {"textDocument": {
        "uri": probe, "languageId": "json", "version": 1,
        "text": '{"train_batch_size": 8, "zero_optimization": {"stage": 9}}'}})
    _, published = await session.wait_diagnostics(probe)
    if not published["diagnostics"]:
        raise SystemExit(f"{name} reported nothing for an invalid stage: is it validating?")
    for label, (text, repeat) in sizes.items():
        opened, changed, hovers, inlays = [], [], [], []
        for index in range(repeat):
            uri = f"{root}/{label.replace(' ', '')}_{index}_ds_config.json"
            sent = time.perf_counter()
            await session.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "json", "version": 1, "text": text}})
            arrived, _ = await session.wait_diagnostics(uri)
            opened.append(arrived - sent)
            edited, change = stage_edit(text, 1 + index % 3)
            sent = time.perf_counter()
            await session.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2},
                                                            "contentChanges": [change]})
            arrived, _ = await session.wait_diagnostics(uri)
            changed.append(arrived - sent)
            position = position_of(edited, '"stage"')
            position["character"] += 2
            sent = time.perf_counter()
            await session.request("textDocument/hover", {"textDocument": {"uri": uri}, "position": position})
            hovers.append(time.perf_counter() - sent)
            if name == "zeromem":
                lines = edited.count("\n")
                sent = time.perf_counter()
                await session.request("textDocument/inlayHint", {"textDocument": {"uri": uri}, "range": {
                    "start": {"line": 0, "character": 0}, "end": {"line": min(lines, 60), "character": 0}}})
                inlays.append(time.perf_counter() - sent)
            await session.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
        for what, values in (("open → diagnostics", opened), ("change → diagnostics", changed),
                             ("hover", hovers), ("inlay hints", inlays)):
            if values:
                results[f"{what}, {label}"] = {"p50": statistics.median(values), "p99": percentile(values, 0.99)}
    if name == "zeromem":
        results["rss"] = await memory_profile(session, root, sizes["3 KB"][0])
    await session.stop()
    return results


async def memory_profile(session: Session, root: str, text: str) -> dict:
    uri = f"{root}/memory_ds_config.json"
    await session.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "json", "version": 1, "text": text}})
    await session.wait_diagnostics(uri)
    before = session.rss_bytes()
    for version in range(2, 1002):  # each keystroke sets the stage digit (ranged changes, as editors send)
        _, change = stage_edit(text, version % 4)
        await session.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                                        "contentChanges": [change]})
    await session.request("textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": 0, "character": 1}})
    after_edits = session.rss_bytes()
    cycles = []
    for cycle in range(100):
        other = f"{root}/cycle_{cycle % 10}_ds_config.json"
        await session.notify("textDocument/didOpen", {"textDocument": {"uri": other, "languageId": "json", "version": 1, "text": text}})
        await session.wait_diagnostics(other)
        await session.notify("textDocument/didClose", {"textDocument": {"uri": other}})
        await session.wait_diagnostics(other)  # cleared
        if cycle % 25 == 24:
            cycles.append(session.rss_bytes())
    return {"start": before, "after 1000 edits": after_edits, "after open/close cycles (every 25)": cycles}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, no 10 MB document")
    args = parser.parse_args()
    sizes = {"3 KB": (config_text(3_000), 15 if args.quick else 60), "300 KB": (config_text(300_000), 5 if args.quick else 20)}
    if not args.quick:
        sizes["10 MB"] = (config_text(10_000_000), 3)
    with tempfile.TemporaryDirectory() as temp:
        root = Path(temp).as_uri()
        ours = asyncio.run(measure("zeromem", [sys.executable, "-m", "zeromem_lsp", "serve"], {}, {}, sizes, root))
        peer_config = {"json": {"validate": {"enable": True},
                                "schemas": [{"fileMatch": ["*.json"], "url": SCHEMA.as_uri()}]}}
        theirs = asyncio.run(measure("peer", [str(PEER), "--stdio"],
                                     {"provideFormatter": False, "handledSchemaProtocols": ["file"]},
                                     peer_config, sizes, root)) if PEER.exists() else {}
    print("| measurement | zeromem p50 | zeromem p99 | peer p50 | peer p99 |")
    print("|---|---|---|---|---|")
    for key, value in ours.items():
        if key == "rss":
            continue
        peer = theirs.get(key)
        peer_cells = f"{peer['p50'] * 1000:.1f} ms | {peer['p99'] * 1000:.1f} ms" if peer else "n/a | n/a"
        print(f"| {key} | {value['p50'] * 1000:.1f} ms | {value['p99'] * 1000:.1f} ms | {peer_cells} |")
    rss = ours["rss"]
    mib = lambda n: f"{n / 2**20:.1f} MiB"  # noqa: E731
    print(f"\nzeromem RSS: start {mib(rss['start'])}, after 1,000 edits {mib(rss['after 1000 edits'])}, "
          f"open/close cycles: {', '.join(mib(v) for v in rss['after open/close cycles (every 25)'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
