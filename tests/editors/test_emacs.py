"""Emacs with eglot as a real LSP client: `emacs --batch` loads editors/emacs/zeromem.el as its
Commentary says, opens a config with a budget overflow, lets eglot start `zeromem serve`, waits for
the ZM101 diagnostic in flymake and asks for hover on the stage value (editors/emacs/test-zeromem.el
writes what it got; we check it here).

CI installs Debian's emacs-nox and elpa-eglot (`.ci/editors.sh`): Emacs 28.2 with eglot 1.9, where a
`.json` file opens in js-mode. Skipped when there is no Emacs with eglot.
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
DRIVER = ROOT / "editors" / "emacs" / "test-zeromem.el"
EMACS = shutil.which("emacs")


def _has_eglot() -> bool:
    if EMACS is None:
        return False
    probe = subprocess.run([EMACS, "--batch", "--eval", "(require 'eglot)"], capture_output=True, timeout=60)
    return probe.returncode == 0


pytestmark = pytest.mark.skipif(not _has_eglot(), reason="no emacs with eglot (apt-get install emacs-nox elpa-eglot)")

# The model from the file's zeromem block, the 24 GiB budget from `zeromem-settings`: the overflow is
# there only if eglot passed the settings. The emoji before the stage checks the position encoding.
CONFIG = """{
  "train_batch_size": 64,
  "train_micro_batch_size_per_gpu": 4,
  "gradient_accumulation_steps": 2,
  "bf16": {"enabled": true},
  "tensorboard": {"job_name": "🚀"}, "zero_optimization": {"stage": 1},
  "zeromem": {"parameters": "7B"}
}
"""
STAGE_LINE = 5
STAGE_COLUMN = CONFIG.splitlines()[STAGE_LINE].index('"stage": 1') + len('"stage": ')  # in characters


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("emacs")
    config, out = work / "ds_config.json", work / "result.json"
    config.write_text(CONFIG, encoding="utf-8")
    env = {**os.environ, "HOME": str(work), "ZEROMEM_PYTHON": sys.executable, "ZEROMEM_TEST_FILE": str(config),
           "ZEROMEM_TEST_OUT": str(out), "ZEROMEM_TEST_GPU_MEMORY": "24GiB"}
    run = subprocess.run([EMACS, "--batch", "-l", str(DRIVER)], env=env, cwd=work, capture_output=True, text=True,
                         timeout=180)
    assert out.exists(), f"Emacs wrote no result (exit {run.returncode})\nstdout: {run.stdout}\nstderr: {run.stderr}"
    result = json.loads(out.read_text(encoding="utf-8"))
    result["returncode"], result["stderr"] = run.returncode, run.stderr
    return result


def test_eglot_ran_the_server_clean(session):
    assert session["errors"] is None, session["stderr"]
    assert session["returncode"] == 0
    assert session["messages"] == []  # no window/showMessage: the settings were taken
    assert "Connected! Server `zeromem'" in session["stderr"]


def test_budget_overflow_diagnostic_in_flymake(session):
    [overflow] = session["diagnostics"]
    assert overflow["text"].startswith("zeromem [ZM101]: ZeRO-1 needs 35.9 GiB per GPU")
    assert "24.0 GiB budget" in overflow["text"] and "ZeRO-3" in overflow["text"]
    assert overflow["type"] == "eglot-error"
    assert (overflow["line"], overflow["column"]) == (STAGE_LINE, STAGE_COLUMN)


def test_hover_on_the_stage(session):
    assert "ZeRO-1 exceeds the budget: model state 35.9 GiB of 24.0 GiB per GPU (149%" in session["hover"]
    assert "Cheapest that fits: ZeRO-3 (13.0 GiB/GPU)." in session["hover"]
