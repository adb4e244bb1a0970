"""Neovim as a real LSP client: headless Neovim (Debian's 0.7.2 in CI, or any newer one) loads
editors/neovim, opens a DeepSpeed config with a budget overflow, waits for zeromem's diagnostics,
requests hover on the stage value, and writes what it got; we check it here.

Skipped when `nvim` is not on PATH (`.ci/editors.sh` installs Debian's neovim when it can).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INIT = ROOT / "editors" / "neovim" / "test_init.lua"
NVIM = shutil.which("nvim")

pytestmark = pytest.mark.skipif(NVIM is None, reason="nvim not on PATH (apt-get install neovim)")

# The model comes from the file's own zeromem block, the 24 GiB budget from the editor settings:
# the overflow is only there if Neovim passed the settings. The emoji before the stage value on the
# same line checks the position encoding end to end (Neovim works in bytes, the server in UTF-16 or
# UTF-8 units, whichever the client offers).
CONFIG = """{
  "train_batch_size": 64,
  "train_micro_batch_size_per_gpu": 4,
  "gradient_accumulation_steps": 2,
  "bf16": {"enabled": true},
  "optimizer": {"type": "AdamW", "params": {"lr": 2e-5}},
  "tensorboard": {"job_name": "🚀"}, "zero_optimization": {"stage": 1},
  "zeromem": {"parameters": "7B"}
}
"""
STAGE_LINE = 6
STAGE_BYTE = CONFIG.splitlines()[STAGE_LINE].encode().index(b'"stage": 1') + len(b'"stage": ')


def nvim_version() -> str:
    first = subprocess.run([NVIM, "--version"], capture_output=True, text=True, timeout=30).stdout.splitlines()[0]
    return first.split()[-1]


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    work = tmp_path_factory.mktemp("neovim")
    config = work / "ds_config.json"
    config.write_text(CONFIG, encoding="utf-8")
    out = work / "result.json"
    env = {
        **os.environ,
        "ZEROMEM_PYTHON": sys.executable,
        "ZEROMEM_TEST_FILE": str(config),
        "ZEROMEM_TEST_OUT": str(out),
        "ZEROMEM_TEST_GPU_MEMORY": "24GiB",
        "XDG_CONFIG_HOME": str(work / "config"),  # no user init.lua, plugins or state
        "XDG_DATA_HOME": str(work / "data"),
        "XDG_STATE_HOME": str(work / "state"),
        "XDG_CACHE_HOME": str(work / "cache"),
    }
    command = [NVIM, "--headless", "--noplugin", "-n", "-i", "NONE", "-u", str(INIT)]
    run = subprocess.run(command, env=env, cwd=work, capture_output=True, text=True, timeout=120)
    assert out.exists(), f"Neovim wrote no result (exit {run.returncode})\nstdout: {run.stdout}\nstderr: {run.stderr}"
    result = json.loads(out.read_text(encoding="utf-8"))
    result["returncode"] = run.returncode
    return result


def test_the_session_ran_clean(session):
    assert session["errors"] == []
    assert session["returncode"] == 0
    assert session["filetype"] == "json"
    assert nvim_version().lstrip("v").startswith(session["nvim"])
    expected_api = "vim.lsp.start_client" if session["nvim"].startswith("0.7.") else None
    if expected_api:
        assert session["api"] == expected_api


def test_budget_overflow_diagnostic_on_the_stage_value(session):
    [overflow] = session["diagnostics"]
    assert overflow["code"] == "ZM101"
    assert overflow["severity"] == 1  # vim.diagnostic.severity.ERROR
    # vim.diagnostic positions are 0-based lines and byte columns, whatever the wire encoding
    assert (overflow["lnum"], overflow["col"]) == (STAGE_LINE, STAGE_BYTE)
    assert (overflow["end_lnum"], overflow["end_col"]) == (STAGE_LINE, STAGE_BYTE + 1)
    assert "35.9 GiB" in overflow["message"] and "24.0 GiB" in overflow["message"]
    assert "ZeRO-3" in overflow["message"]


def test_hover_on_the_stage_shows_every_stage(session):
    hover = session["hover"]
    assert session["hover_position"]["line"] == STAGE_LINE
    assert "ZeRO-1 ≈ 35.9 GiB/GPU · 149% of 24.0 GiB" in hover
    for stage, size, share, verdict in [("DDP", "104.3 GiB", "435%", "exceeds"), ("**ZeRO-1**", "35.9 GiB", "149%", "exceeds"),
                                        ("ZeRO-2", "24.4 GiB", "102%", "exceeds"), ("ZeRO-3", "13.0 GiB", "54%", "fits")]:
        assert f"| {stage} | {size} | {share} | {verdict} |" in hover
    assert "R = 8 ranks" in hover
    assert "Cheapest that fits: ZeRO-3 (13.0 GiB/GPU)." in hover


def test_inlay_hint_and_quick_fix(session):
    [hint] = session["inlay_hints"]
    assert hint["position"]["line"] == STAGE_LINE
    assert hint["label"] == "≈ 35.9 GiB/GPU · 149% of 24.0 GiB"
    assert "Switch to ZeRO-3 (13.0 GiB/GPU)" in session["code_actions"]


def test_the_screen_shows_diagnostic_and_hover(session):
    screen = session["screen"]
    print(screen)  # pytest -s: the screen, as in docs/editors.md
    lines = screen.splitlines()
    stage_row = next(line for line in lines if '"zero_optimization": {"stage": 1},' in line)
    assert "■ ZeRO-1 needs 35.9 GiB per GPU" in stage_row
    assert any("ZeRO-1 ≈ 35.9 GiB/GPU" in line and line.startswith("│") for line in lines)
    assert any("Cheapest that fits: ZeRO-3" in line for line in lines)
