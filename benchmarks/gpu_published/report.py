"""Print the published-GPU-measurement table: `python benchmarks/gpu_published/report.py`.

The same figures tests/unit/test_published_gpu.py asserts (benchmarks/gpu_published/published.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.gpu_published.published import load_cases, misses, rows, table  # noqa: E402


def main() -> None:
    cases = load_cases()
    print(f"{len(cases)} readings collected, {sum(c['fully_specified'] for c in cases)} fully specified\n")
    compared = rows()
    print(table(compared))
    print("\nwhy each miss beyond ±10%:\n" + misses(compared))
    print("\nnot fully specified:")
    for case in cases:
        if not case["fully_specified"]:
            print(f"  {case['id']}: {case['not_fully_specified_because']}")


if __name__ == "__main__":
    main()
