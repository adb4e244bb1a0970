"""Spawn → initialize result, zeromem serve against a trivial pygls server, in the same run.

    python benchmarks/bench_startup.py [--repeat 15]

Each round starts both servers (alternating which goes first) and times from spawning the process
to receiving the `initialize` result; then it times didOpen of a 3 KB config → the
first diagnostics and the server's RSS then, zeromem only. Prints medians and the difference to the peer.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_server import config_text  # noqa: E402
from lsp_client import Session  # noqa: E402

HERE = Path(__file__).resolve().parent
ZEROMEM = [sys.executable, "-m", "zeromem_lsp", "serve"]
TRIVIAL = [sys.executable, str(HERE / "trivial_server.py")]


async def spawn_to_initialize(command: list[str], root: str) -> tuple[float, Session]:
    start = time.perf_counter()
    session = await Session.start(command, {})
    await session.initialize(root, {})
    return time.perf_counter() - start, session


async def first_diagnostics(session: Session, root: str) -> float:
    uri = f"file://{root}/startup_ds_config.json"
    start = time.perf_counter()
    await session.notify("textDocument/didOpen", {"textDocument": {
        "uri": uri, "languageId": "json", "version": 1, "text": config_text(3000)}})
    await asyncio.wait_for(session.queue(uri).get(), 30)
    return time.perf_counter() - start


async def main(repeat: int) -> None:
    root = str(HERE.parent)
    ours, peer, diagnostics, rss = [], [], [], []
    for round_ in range(repeat):
        order = [("zeromem", ZEROMEM), ("trivial", TRIVIAL)]
        for name, command in order if round_ % 2 == 0 else reversed(order):
            elapsed, session = await spawn_to_initialize(command, root)
            if name == "zeromem":
                ours.append(elapsed)
                diagnostics.append(await first_diagnostics(session, root))
                rss.append(session.rss_bytes())
            else:
                peer.append(elapsed)
            await session.stop()
    ours_ms, peer_ms = statistics.median(ours) * 1000, statistics.median(peer) * 1000
    print("| measurement | zeromem | trivial pygls server | difference |")
    print("|---|---|---|---|")
    print(f"| spawn → initialize (median of {repeat}) | {ours_ms:.0f} ms | {peer_ms:.0f} ms | +{ours_ms - peer_ms:.0f} ms |")
    print(f"| RSS after that first 3 KB config (median) | {statistics.median(rss) / 2**20:.1f} MiB | n/a | |")
    print(f"| didOpen 3 KB (right after initialize) → first diagnostics | {statistics.median(diagnostics) * 1000:.0f} ms | n/a | |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    asyncio.run(main(parser.parse_args().repeat))
