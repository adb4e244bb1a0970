"""Write tests/data/golden/*.json: what zeromem says today (benchmarks/golden/collect.py), for issue 27's redesign.

    python benchmarks/golden/record.py          # writes the files
    python benchmarks/golden/record.py --check  # says which differ, writes nothing
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.golden.collect import collect  # noqa: E402

GOLDEN = ROOT / "tests" / "data" / "golden"


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        found = collect(Path(tmp))
    differ = [name for name, text in found.items()
              if not (GOLDEN / name).is_file() or (GOLDEN / name).read_text(encoding="utf-8") != text]
    if "--check" in argv:
        print("\n".join(differ) or "all golden files match")
        return 1 if differ else 0
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name, text in found.items():
        (GOLDEN / name).write_text(text, encoding="utf-8")
    print(f"wrote {len(found)} files to {GOLDEN}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
