"""Print measured step cases compactly: per rank, each phase's peak and its parts (MiB).

    python3 benchmarks/step/show.py [--data FILE] [ID-PREFIX ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "tests" / "data" / "step" / "measured.json"


def mib(value: int) -> str:
    return f"{value / 2**20:.2f}"


def lines(case: dict, ranks: str = "all") -> list[str]:
    out = [f"== {case['id']}  engine={case['engine']} regime={case['regime']} impl={case['optimizer']['impl']} "
           f"ranks={case['ranks']} T={case['sequence_length']}x{case['micro_batch']} gc={case['gradient_checkpointing']}"]
    for rank in case.get("per_rank", []):
        if "error" in rank:
            out.append(f"  rank {rank.get('rank')}: ERROR {rank['error']}")
            continue
        if ranks != "all" and rank["rank"] != 0:
            continue
        out.append(f"  rank {rank['rank']}: step peak {mib(rank['step_peak'])} in {rank['peak_phase']}, persistent "
                   f"{mib(rank['persistent_before_step2'])}, N={rank['model_numel']} local={rank['param_numel_local']}")
        for name, phase in rank["phases"].items():
            parts = " ".join(f"{key}={mib(value)}" for key, value in phase["parts"].items())
            out.append(f"    {name:9s} peak {mib(phase['peak'])} (start {mib(phase['start'])} end {mib(phase['end'])}): "
                       f"{parts}")
            for item in phase["largest_other"][:4]:
                out.append(f"      other {mib(item['bytes'])} {item['op']} {item['shape']} {item['dtype']}")
        if "memtracker_phase_peaks" in rank:
            out.append(f"    MemTracker: {rank['memtracker_phase_peaks']}")
    return out


def main(argv: list[str]) -> int:
    data = DATA
    if argv[:1] == ["--data"]:
        data, argv = Path(argv[1]), argv[2:]
    for case in json.loads(data.read_text())["cases"]:
        if not argv or any(case["id"].startswith(prefix) for prefix in argv):
            print("\n".join(lines(case)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
