"""`zeromem estimate`: in-process through `cli.main`; the console script and one figure as subprocesses."""

import json
import subprocess
import sys

import pytest

SEEDS = [
    ((400, 400, 800, 4), (1600, 1000, 700, 400)),
    ((5, 7, 11, 3), (23, 16, 11, 8)),
    ((100, 50, 200, 1), (350, 350, 350, 350)),
]


from tests.cli.conftest import run_zeromem as zeromem
from tests.cli.conftest import run_zeromem_subprocess


@pytest.mark.parametrize(("args", "expected"), SEEDS)
def test_seed_examples_as_json(args, expected):
    p, g, o, r = (str(a) for a in args)
    done = zeromem("estimate", "-v", "--parameter-bytes", p, "--gradient-bytes", g, "--optimizer-bytes", o,
                   "--world-size", r, "--format", "json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert (data["ddp"], data["zero1"], data["zero2"], data["zero3"]) == expected
    assert data["inputs"]["world_size"] == args[3]


def test_zero_paper_figure_1():  # smoke: through `python -m zeromem_lsp`
    done = run_zeromem_subprocess("estimate", "-v", "--parameters", "7.5B", "--precision", "fp16", "--optimizer", "adam",
                   "--world-size", "64", "--format", "json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    # Rajbhandari et al. 2020, Figure 1 (GB = 1e9 bytes)
    assert data["ddp"] == 120 * 10**9
    assert data["zero1"] == 31_406_250_000  # 31.4 GB
    assert data["zero2"] == 16_640_625_000  # 16.6 GB
    assert data["zero3"] == 1_875_000_000
    assert data["inputs"]["bytes_per_parameter"] == {"parameter": 2, "gradient": 2, "optimizer": 12}

    text = zeromem("estimate", "-v", "--parameters", "7.5B", "--precision", "fp16", "--optimizer", "adam",
                   "--world-size", "64")
    assert text.returncode == 0
    for shown in ("120,000,000,000", "31,406,250,000", "16,640,625,000", "1,875,000,000",
                  "= 111.8 GiB", "= 29.2 GiB", "= 15.5 GiB", "= 1.7 GiB"):  # GiB in every text line
        assert shown in text.stdout


def test_budget_marks_fits_and_cheapest_stage():
    done = zeromem("estimate", "-v", "--parameters", "7B", "--world-size", "8", "--gpu-memory", "24GiB",
                   "--format", "json")
    data = json.loads(done.stdout)
    budget = 24 * 2**30
    assert data["gpu_memory"] == budget
    assert data["fits"] == {k: data[k] <= budget for k in ("ddp", "zero1", "zero2", "zero3")}
    assert data["fits"]["zero3"] and not data["fits"]["ddp"]
    assert data["cheapest_fitting_stage"] == next(k for k in ("ddp", "zero1", "zero2", "zero3") if data["fits"][k])

    text = zeromem("estimate", "-v", "--parameters", "7B", "--world-size", "8", "--gpu-memory", "24GiB")
    assert "│" in text.stdout and "exceeds" in text.stdout and "fits" in text.stdout
    assert "cheapest stage that fits" in text.stdout


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--parameters", "seven", "--world-size", "8"), "'seven'"),
        (("--parameters", "7B", "--world-size", "0"), "--world-size"),
        (("--parameters", "7B", "--world-size", "1K"), "'1K'"),
        (("--parameters", "7B", "--world-size", "8", "--gpu-memory", "80 GBs"), "'80 GBs'"),
        (("--parameter-bytes", "1", "--world-size", "8"), "all three"),
        (("--world-size", "8"), "--parameters"),
        (("--parameters", "7B", "--world-size", "8", "--optimizer", "adamx"), "adamx"),
        (("--parameters", "7B",), "--world-size"),
    ],
)
def test_bad_input_exits_2_with_one_line(args, fragment):
    done = zeromem("estimate", "-v", *args)
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1
    assert fragment in done.stderr
    assert "Traceback" not in done.stderr


def test_console_script_matches_module(tmp_path):
    import shutil

    exe = shutil.which("zeromem") or str(__import__("pathlib").Path(sys.executable).parent / "zeromem")
    done = subprocess.run([exe, "estimate", "-v", "--parameters", "1B", "-R", "2", "--format", "json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert json.loads(done.stdout) == json.loads(zeromem("estimate", "-v", "--parameters", "1B", "-R", "2", "--format", "json").stdout)


@pytest.mark.parametrize("output", ["text", "json"])
def test_exit_1_when_a_budget_is_given_and_no_stage_fits(output):
    """7B bf16 AdamW on one GPU: 112e9 B in every stage, above an 80 GiB budget; 8 GPUs fit at ZeRO-3."""
    alone = zeromem("estimate", "-v", "--parameters", "7B", "-R", "1", "--gpu-memory", "80GiB", "--format", output)
    assert alone.returncode == 1, alone.stderr
    if output == "text":
        assert "no stage fits 80.0 GiB per GPU" in alone.stdout
    else:
        assert json.loads(alone.stdout)["cheapest_fitting_stage"] is None
    shared = zeromem("estimate", "-v", "--parameters", "7B", "-R", "8", "--gpu-memory", "80GiB", "--format", output)
    assert shared.returncode == 0
    unbudgeted = zeromem("estimate", "-v", "--parameters", "7B", "-R", "1", "--format", output)
    assert unbudgeted.returncode == 0


def test_mixed_precision_estimate_names_the_fsdp_parameter_dtype():
    """Issue 21 item 13: DeepSpeed's 2 + 2 + 12 is not FSDP's 4 + 4 + 8 under bf16; the output says which is which."""
    text = zeromem("estimate", "-v", "--parameters", "13B", "-R", "8")
    assert ("note: these are DeepSpeed's bytes per parameter (bf16 parameters, fp32 master copy). FSDP parameter "
            "dtype under bf16 mixed precision: fp32") in text.stdout
    assert "FSDP holds 4 + 4 + 8 bytes/parameter with no master copy" in text.stdout
    data = json.loads(zeromem("estimate", "-v", "--parameters", "13B", "-R", "8", "--optimizer", "sgd",
                              "--format", "json").stdout)
    [note] = data["notes"]
    assert "FSDP holds 4 + 4 + 0 bytes/parameter" in note
    full = zeromem("estimate", "-v", "--parameters", "13B", "-R", "8", "--precision", "fp32", "--format", "json")
    assert json.loads(full.stdout)["notes"] == []
