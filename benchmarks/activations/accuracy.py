"""Compare zeromem's activation estimate with every measured case (no torch needed).

    .venv/bin/python benchmarks/activations/accuracy.py            # Markdown table for docs/memory-model.md
    .venv/bin/python benchmarks/activations/accuracy.py --cases    # one line per case and layer count
    .venv/bin/python benchmarks/activations/accuracy.py --write-docs   # refresh the table in the docs
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from zeromem_lsp.memory.activations import Activations, estimate_activations
from zeromem_lsp.configs.model_config import model_shape

ROOT = Path(__file__).resolve().parents[2]
MEASURED = ROOT / "tests" / "data" / "activations" / "measured.json"
DOCS = ROOT / "docs" / "memory-model.md"
START, END = "<!-- accuracy-table:", "<!-- /accuracy-table -->"
DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
LAYER_FIELD = {"gpt2": "n_layer"}


def load(path: Path = MEASURED) -> dict:
    return json.loads(path.read_text())


def estimate_case(case: dict, layers: int) -> Activations:
    """The estimate for a recorded case at `layers` layers, from its config.json fields alone."""
    config = dict(case["config"])
    config[LAYER_FIELD.get(config["model_type"], "num_hidden_layers")] = layers
    config.update(case.get("extra_fields", {}).get(str(layers), {}))
    return estimate_activations(model_shape(config), case["sequence_length"], case["micro_batch"],
                                DTYPES[case["dtype"]], case["gradient_checkpointing"], case["attention"])


def comparisons(record: dict) -> list[dict]:
    """One row per case and layer count: measured, estimated, relative error."""
    rows = []
    for case in record["cases"]:
        for layers, measured in sorted(case["saved_bytes"].items()):
            estimated = estimate_case(case, int(layers)).total
            rows.append({"id": case["id"], "model_type": case["config"]["model_type"], "layers": int(layers),
                         "measured": measured, "estimated": estimated,
                         "error": (estimated - measured) / measured})
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| architecture | measurements | exact to the byte | within ±5% | worst error | mean abs. error |",
             "|---|---|---|---|---|---|"]
    for family in sorted({row["model_type"] for row in rows}):
        errors = [row["error"] for row in rows if row["model_type"] == family]
        worst = max(errors, key=abs)
        inside = sum(abs(error) <= 0.05 for error in errors)
        exact = sum(row["measured"] == row["estimated"] for row in rows if row["model_type"] == family)
        lines.append(f"| {family} | {len(errors)} | {exact} | {inside} | {worst:+.2%} | "
                     f"{sum(abs(error) for error in errors) / len(errors):.2%} |")
    return "\n".join(lines)


def report(record: dict) -> str:
    """The docs block: versions, case count and the per-architecture table."""
    return (f"torch {record['torch']}, transformers {record['transformers']}, {len(record['cases'])} cases, "
            f"{2 * len(record['cases'])} measurements.\n\n{table(comparisons(record))}")


def with_report(docs: str, record: dict) -> str:
    """`docs` with the text between the accuracy-table markers replaced by `report(record)`."""
    start = docs.index("\n", docs.index(START)) + 1
    end = docs.index(END)
    return docs[:start] + report(record) + "\n" + docs[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", action="store_true")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args(argv)
    record = load()
    rows = comparisons(record)
    if args.cases:
        for row in rows:
            print(f"{row['id']:16} L={row['layers']} measured {row['measured']:>10} "
                  f"estimated {row['estimated']:>10} {row['error']:+.2%}")
        return 0
    if args.write_docs:
        DOCS.write_text(with_report(DOCS.read_text(), record))
        return 0
    print(report(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
