"""`zeromem estimate` text answers first (issue 28, item 1): line 1 is the verdict, then a table of at most five
columns within 80 characters, what the figure leaves out and the versions it is for, one suggestion — at most 20
lines at COLUMNS=80, GiB everywhere; `-v` adds the arithmetic in exact bytes. Through the real entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

LLAMA3 = str(Path(__file__).resolve().parents[1] / "data" / "models" / "Meta-Llama-3-8B" / "config.json")
WORKLOAD = ("--model-config", LLAMA3, "--world-size", "8", "--sequence-length", "8192", "--micro-batch", "1")


def zeromem(*args: str, columns: int = 80) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zeromem_lsp", "estimate", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": str(columns)})


@pytest.mark.parametrize("args", [
    (*WORKLOAD, "--gpu-memory", "80GiB"),
    (*WORKLOAD, "--gpu-memory", "40GiB"),
    ("--parameters", "7B", "-R", "8", "--gpu-memory", "24GiB"),
    ("--parameters", "70B", "-R", "8"),
    (*WORKLOAD, "--lora-rank", "16", "--quantization", "nf4", "--gpu-memory", "24GiB"),
])
def test_the_answer_first_within_20_lines_and_80_columns(args):
    done = zeromem(*args)
    assert done.returncode in (0, 1), done.stderr
    lines = done.stdout.rstrip("\n").splitlines()
    assert len(lines) <= 20 and max(len(line) for line in lines) <= 80
    data = json.loads(zeromem(*args, "--format", "json").stdout)
    first = lines[0]
    assert first.split()[0] in ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3", "No")
    if data["gpu_memory"] is not None:
        assert first.startswith("No stage fits") == (data["cheapest_fitting_stage"] is None)
    header = next(line for line in lines if line.split()[:1] == ["stage"])
    columns = [cell for cell in header.strip().split("  ") if cell.strip()]
    assert len(columns) <= 5  # stage | model state | peak | of budget | verdict
    assert " GB" not in done.stdout and "bytes" not in lines[0]
    assert "for torch 2.13, Transformers 5.24" in " ".join(line.strip() for line in lines)


def test_the_verdict_names_the_configured_figure():
    data = json.loads(zeromem(*WORKLOAD, "--gpu-memory", "80GiB", "--format", "json").stdout)
    first = zeromem(*WORKLOAD, "--gpu-memory", "80GiB", columns=200).stdout.splitlines()[0]
    zero3 = data["peak"]["zero3"]
    from zeromem_lsp.units import format_bytes

    assert first.startswith(f"ZeRO-3 fits: peak {format_bytes(zero3)} of 80.0 GiB per GPU")
    assert "DeepSpeed, 8 ranks" in first and "the cheapest stage that fits" in first


def test_verbose_adds_the_arithmetic_in_exact_bytes():
    short = zeromem(*WORKLOAD, "--gpu-memory", "80GiB").stdout
    long = zeromem(*WORKLOAD, "--gpu-memory", "80GiB", "-v").stdout
    assert long.startswith(short.rstrip("\n").splitlines()[0])
    data = json.loads(zeromem(*WORKLOAD, "--gpu-memory", "80GiB", "--format", "json").stdout)
    assert f"{data['zero3']:,} B" not in short and f"{data['zero3']:,} B" in long
    assert f"P = " in long and "ZeRO-3 peak = " in long


def test_the_width_follows_the_terminal():
    narrow = zeromem(*WORKLOAD, "--gpu-memory", "80GiB", columns=60).stdout.splitlines()
    wide = zeromem(*WORKLOAD, "--gpu-memory", "80GiB", columns=200).stdout.splitlines()
    assert max(map(len, narrow)) <= 60 < max(map(len, wide))
