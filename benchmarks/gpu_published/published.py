"""GPU memory readings others published (tests/data/gpu_published/measurements.json) against zeromem's figure.

Each fully specified case is run through the real command line (`zeromem estimate ... --format json`, in this
process through `zeromem_lsp.cli.main`, what the console script calls) and the predicted quantity is chosen by the
kind of reading the source published, in one place (`predicted_for`):

- `allocated` (torch.cuda.max_memory_allocated): the step's peak of live bytes, without `reserved`;
- `reserved`, `nvidia_smi` and `unspecified` (a reading that names no counter): that peak plus zeromem's `reserved`
  figure (today one constant, docs/memory-model.md). When the allocator and CUDA-context model lands
  (zeromem_lsp/gpu/), it replaces this branch: reserved = the allocator's segments, nvidia_smi = reserved + context.
"""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "gpu_published" / "measurements.json"

#: bytes per unit, as the case's `unit_means` reads the source's unit (its first word)
UNIT_BYTES = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
READINGS = ("allocated", "reserved", "nvidia_smi", "unspecified")
#: what every fully specified case must state
SETUP_FIELDS = ("sequence_length", "micro_batch", "precision", "optimizer", "gradient_checkpointing", "lora",
                "quantization", "engine", "world_size")


def load_cases() -> list[dict]:
    return json.loads(DATA.read_text())["cases"]


def unit_bytes(case: dict) -> int:
    """Bytes per unit as the case reads its source (`unit_means`' first word: GB = 10^9, GiB = 2^30, ...)."""
    means = case["measured"]["unit_means"].split()[0]
    if means not in UNIT_BYTES:
        raise ValueError(f"{case['id']}: unit_means {case['measured']['unit_means']!r} does not parse")
    return UNIT_BYTES[means]


def measured_bytes(case: dict) -> int:
    """The published figure in exact bytes: its decimal value times the unit, rounded to the byte."""
    value = case["measured"]["value"]
    whole, _, fraction = value.partition(".")
    scale = 10 ** len(fraction)
    return (int(whole + fraction) * unit_bytes(case) + scale // 2) // scale


def estimate_json(args: list[str]) -> dict:
    """`zeromem estimate ARGS --offline --format json` through the CLI entry point, parsed."""
    from zeromem_lsp.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["estimate", *args, "--offline", "--format", "json"])
    if status != 0:
        raise RuntimeError(f"zeromem estimate {' '.join(args)} exited {status}: {err.getvalue()}")
    return json.loads(out.getvalue())


def predicted_for(reading: str, stage: dict) -> int:
    """The predicted quantity for a kind of reading (one stage of `zeromem estimate --format json`): the single place
    where the reading selects it. allocated: the step's live peak + the cuBLAS workspaces (what
    max_memory_allocated counts, tests/unit/test_gpu_steps.py); reserved: the caching allocator's reserved peak as
    modelled; nvidia-smi (and readings that name no counter): that + the CUDA context + NCCL."""
    live = max(stage["phases"].values())
    gpu = stage.get("gpu")
    if gpu is None:  # a fixed reserve the case sets: the old comparison
        return live if reading == "allocated" else live + stage["reserved_bytes"]
    modelled = gpu["caching_allocator_modelled"]
    if reading == "allocated":
        return live + gpu["cublas_workspaces_bytes"]
    if reading == "reserved":
        return modelled["reserved_peak_bytes"]
    if reading in ("nvidia_smi", "unspecified"):
        return modelled["reserved_peak_bytes"] + gpu["cuda_context_bytes"] + gpu["nccl_bytes"]
    raise ValueError(f"unknown reading {reading!r}")


@dataclass(frozen=True)
class Row:
    id: str
    reading: str
    measured: int
    predicted: int
    allocated: int
    why: str

    @property
    def ratio(self) -> float:
        return self.predicted / self.measured


def compare(case: dict) -> Row:
    result = estimate_json([str(ROOT / a) if a.startswith("tests/data/") else a for a in case["zeromem_args"]])
    stage = case["stage"]
    found = result["phases"][stage]
    return Row(case["id"], case["reading"], measured_bytes(case), predicted_for(case["reading"], found),
               max(found["phases"].values()), case.get("why", ""))


def rows() -> list[Row]:
    return [compare(case) for case in load_cases() if case["fully_specified"]]


def within(rows_: list[Row], tolerance: float) -> int:
    return sum(1 for row in rows_ if abs(row.ratio - 1) <= tolerance)


def table(rows_: list[Row]) -> str:
    gib = 2**30
    lines = [f"{'id':44} {'reading':11} {'measured GiB':>12} {'predicted GiB':>13} {'ratio':>6}"]
    for row in rows_:
        lines.append(f"{row.id:44} {row.reading:11} {row.measured / gib:12.2f} {row.predicted / gib:13.2f} "
                     f"{row.ratio:6.3f}")
    n = len(rows_)
    lines.append(f"within ±10%: {within(rows_, 0.10)}/{n}   within ±20%: {within(rows_, 0.20)}/{n}")
    return "\n".join(lines)


def misses(rows_: list[Row], tolerance: float = 0.10) -> str:
    """Each case outside ±tolerance with its written why (mechanism and evidence), one paragraph per miss."""
    return "\n".join(f"{row.id} ({row.ratio:.3f}x): {row.why}" for row in rows_ if abs(row.ratio - 1) > tolerance)

