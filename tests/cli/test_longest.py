""""How long can I go?" (issue 30): `--max-sequence-length` / `--max-micro-batch` answer, per stage, the largest value
whose peak fits the budget — a search over the step model, consistent with the peak at that value and the next."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.conftest import run_zeromem

LLAMA3 = str(Path(__file__).resolve().parents[1] / "data" / "models" / "Meta-Llama-3-8B" / "config.json")
BASE = ("--model-config", LLAMA3, "--world-size", "8", "--micro-batch", "1", "--gpu-memory", "80GiB")


def _json(*args: str) -> dict:
    done = run_zeromem("estimate", *args, "--format", "json")
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def test_the_longest_sequence_fits_and_one_more_token_does_not():
    found = _json(*BASE, "--sequence-length", "4096", "--max-sequence-length")["max_sequence_length"]
    assert set(found) == {"ddp", "zero1", "zero2", "zero3"}
    assert found["ddp"] is None and found["zero1"] <= found["zero3"]  # ZeRO-3 leaves the most room
    for stage in ("zero1", "zero3"):
        at = _json(*BASE, "--sequence-length", str(found[stage]))
        over = _json(*BASE, "--sequence-length", str(found[stage] + 1))
        assert at["peak"][stage] <= 80 * 2**30 < over["peak"][stage]


def test_the_largest_micro_batch_is_consistent_with_the_peak():
    found = _json(*BASE, "--sequence-length", "1024", "--max-micro-batch")["max_micro_batch"]
    largest = found["zero3"]
    assert largest and largest > 1
    base = [arg if arg != "1" else str(largest) for arg in BASE]
    at = _json(*base, "--sequence-length", "1024")
    base = [arg if arg != "1" else str(largest + 1) for arg in BASE]
    over = _json(*base, "--sequence-length", "1024")
    assert at["peak"]["zero3"] <= 80 * 2**30 < over["peak"]["zero3"]


def test_text_says_it_and_usage_errors_say_what_is_missing():
    done = run_zeromem("estimate", *BASE, "--sequence-length", "4096", "--max-sequence-length")
    found = _json(*BASE, "--sequence-length", "4096", "--max-sequence-length")["max_sequence_length"]
    line = " ".join(done.stdout.split())
    assert f"longest sequence whose peak fits 80.0 GiB: ZeRO-1 {found['zero1']:,}" in line
    assert "DDP: not even 1" in line
    done = run_zeromem("estimate", "--parameters", "7B", "-R", "8", "--max-sequence-length")
    assert done.returncode == 2 and "needs --gpu-memory" in done.stderr
    done = run_zeromem("estimate", "--parameters", "7B", "-R", "8", "--gpu-memory", "80GiB", "--max-micro-batch")
    assert done.returncode == 2 and "needs the peak" in done.stderr
