"""The causal-LM loss path per Transformers release: the same whole steps (measure.py's storage tracker, CPU) run
in one venv per release, recorded into tests/data/step/transformers_versions.json with the versions each ran.

    cp -a /work/venv-fam /work/venv-tf444
    /work/venv-tf444/bin/python -m pip install -q 'transformers==4.44.2' 'peft==0.12.0'
    nice -n 5 python3 benchmarks/step/transformers_versions.py /work/venv-tf444/bin/python   # one release
    nice -n 5 python3 benchmarks/step/transformers_versions.py /work/venv-fam/bin/python --only lora

The releases measured and the PEFT each ran with (the one contemporary with it): 4.44.2 / PEFT 0.12.0 (the model's
forward upcasts the logits itself), 4.46.3 / PEFT 0.13.2 (`loss_function`, shifted logits), 4.51.3 / PEFT 0.15.2
(shifted labels; axolotl / LLaMA-Factory / TRL 0.1x pins of 2025), 4.57.3 / PEFT 0.17.1, 5.24.0 / PEFT 0.21.2;
torch 2.13.0 CPU throughout. A release's record replaces the previous run of that release, case by case.
`tests/unit/test_transformers_versions.py` compares the version-selected step (loss path, sdpa) with it
(configs/transformers_paths.py, docs/memory-model.md "Versions").
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from measure import METHOD, PHASES, run_case, summary  # noqa: E402

OUT = HERE.parents[1] / "tests" / "data" / "step" / "transformers_versions.json"
#: measure.py's cases (cases.by_id): full bf16 / fp32 / autocast steps with a 32k and the 152k vocabulary, and LoRA
CASES = ("torch-llama-h256-bf16-foreach", "torch-llama-h256-fp32-foreach", "torch-llama-h256-autocast-foreach",
         "torch-llama-h256-bf16-foreach-s512b1", "torch-qwen2-h256-tied-bf16-for-loop-s64b4",
         "torch-qwen2-h256-tied-autocast-for-loop", "lora-llama-h256-qv-r8-foreach",
         "lora-qwen2-h256-tied-qv-r64-for-loop", "lora-llama-h512-v8k-all-r8-foreach-s512b1",
         "lora-qwen2-h256-tied-all-r8-foreach-gc")


def venv_versions(python: str) -> dict:
    """The versions installed in the venv that runs the cases (its metadata)."""
    code = ("import importlib.metadata as m, json\nfound = {}\nfor name in ('torch', 'transformers', 'peft'):\n"
            "    try:\n        found[name] = m.version(name)\n    except m.PackageNotFoundError:\n"
            "        found[name] = None\nprint(json.dumps(found))")
    return json.loads(subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("python", help="the venv's python (torch, one Transformers release, its PEFT)")
    parser.add_argument("--only", action="append", help="case ids starting with this (repeatable)")
    parser.add_argument("--timeout", type=int, default=900)
    args = parser.parse_args(argv)
    from cases import by_id
    known = by_id()
    found = venv_versions(args.python)
    release = found["transformers"]
    record = json.loads(OUT.read_text()) if OUT.exists() else {"device": "cpu", "method": METHOD,
                                                                 "phases": list(PHASES), "releases": {}}
    entry = record["releases"].setdefault(release, {"cases": []})
    entry.update(found)
    kept = {case["id"]: case for case in entry["cases"]}
    failed = 0
    for cid in CASES:
        if args.only and not any(cid.startswith(prefix) for prefix in args.only):
            continue
        case = known[cid]
        ranks = run_case(case, args.python, args.timeout, script=HERE / "measure.py")
        print(f"transformers {release}: {summary(case, ranks)}", flush=True)
        item = {**case, "per_rank": ranks}
        if any("error" in rank for rank in ranks):
            item["error"] = next(rank["error"] for rank in ranks if "error" in rank)
            failed += 1
        kept[cid] = item
        entry["cases"] = [kept[name] for name in CASES if name in kept]
        record["releases"] = dict(sorted(record["releases"].items(),
                                         key=lambda pair: tuple(int(part) for part in pair[0].split(".")[:3])))
        OUT.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
