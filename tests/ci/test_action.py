"""The GitHub Action (action.yml + action/*.sh) run locally the way the runner runs it: each step's
`run` with `env` where `${{ inputs.x }}` is the input's value (or its default), and the files GitHub
passes (GITHUB_OUTPUT, GITHUB_PATH, GITHUB_ACTION_PATH, RUNNER_TEMP)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ACTION = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
STEPS = {step.get("id") or step["name"]: step for step in ACTION["runs"]["steps"]}
OVER_BUDGET = (ROOT / "examples" / "zero1-7b-8x24gib.json").read_text(encoding="utf-8")


def expand(value: str, inputs: dict[str, str]) -> str:
    def one(match: re.Match) -> str:
        name = match.group(1)
        return inputs.get(name, ACTION["inputs"][name].get("default", ""))
    return re.sub(r"\$\{\{\s*inputs\.([\w-]+)\s*\}\}", one, value)


def run_step(step: dict, tmp_path: Path, inputs: dict[str, str] | None = None, path: str | None = None):
    assert step["shell"] == "bash"
    outputs = tmp_path / "github_output"
    outputs.write_text("")
    env = {**os.environ, "GITHUB_ACTION_PATH": str(ROOT), "GITHUB_OUTPUT": str(outputs),
           "GITHUB_PATH": str(tmp_path / "github_path"), "RUNNER_TEMP": str(tmp_path / "runner_temp"),
           "PATH": path or f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.update({key: expand(str(value), inputs or {}) for key, value in step.get("env", {}).items()})
    (tmp_path / "runner_temp").mkdir(exist_ok=True)
    done = subprocess.run(["bash", "-c", step["run"]], env=env, cwd=tmp_path / "repo", capture_output=True,
                          text=True, timeout=600)
    found = dict(line.split("=", 1) for line in outputs.read_text().splitlines() if "=" in line)
    return done, found


@pytest.fixture
def repo(tmp_path):
    (tmp_path / "repo" / "configs").mkdir(parents=True)
    (tmp_path / "repo" / "configs" / "ds_zero1.json").write_text(OVER_BUDGET, encoding="utf-8")
    (tmp_path / "repo" / "package.json").write_text('{"name": "x", "version": "1.0.0"}', encoding="utf-8")
    return tmp_path


def test_the_action_is_composite_and_maps_every_input():
    assert ACTION["runs"]["using"] == "composite"
    check = STEPS["check"]
    mapped = {m for value in check["env"].values() for m in re.findall(r"inputs\.([\w-]+)", value)}
    assert mapped | {"upload-sarif"} == set(ACTION["inputs"])
    upload = STEPS["Upload SARIF to code scanning"]
    assert upload["uses"].startswith("github/codeql-action/upload-sarif@")
    assert "inputs.format == 'sarif'" in upload["if"] and "!cancelled()" in upload["if"]


def test_annotations_fail_the_step_on_an_over_budget_config(repo):
    done, _ = run_step(STEPS["check"], repo)
    assert done.returncode == 1, done.stderr
    [line] = [line for line in done.stdout.splitlines() if "ZM101" in line]
    assert line.startswith("::error file=configs/ds_zero1.json,line=") and "title=ZM101::ZeRO-1 needs 35.9 GiB" in line


def test_sarif_is_written_and_named_as_the_step_output(repo):
    (repo / "repo" / "out").mkdir()
    done, outputs = run_step(STEPS["check"], repo, {"format": "sarif", "sarif-file": "out/zeromem.sarif"})
    assert done.returncode == 1 and outputs == {"sarif-file": "out/zeromem.sarif"}
    log = json.loads((repo / "repo" / "out" / "zeromem.sarif").read_text())
    assert [r["ruleId"] for r in log["runs"][0]["results"]] == ["ZM101"]


def test_paths_globs_fail_on_and_args(repo):
    clean = {"paths": "package.json\nconfigs/*.json", "args": "--gpu-memory 80GiB"}
    done, _ = run_step(STEPS["check"], repo, clean)  # 35.9 GiB fits in 80 GiB
    assert done.returncode == 0, done.stdout + done.stderr
    done, _ = run_step(STEPS["check"], repo, {**clean, "args": "--gpu-memory 38GiB", "fail-on": "warning"})
    assert done.returncode == 1 and "title=ZM102" in done.stdout  # 35.9 of 38 GiB is over 90 %


@pytest.mark.parametrize("inputs, message", [
    ({"format": "xml"}, "format must be annotations or sarif, not 'xml'"),
    ({"fail-on": "fatal"}, "fail-on must be error, warning or information, not 'fatal'"),
])
def test_bad_inputs_are_clear_errors(repo, inputs, message):
    done, _ = run_step(STEPS["check"], repo, inputs)
    assert done.returncode == 2 and f"::error title=zeromem action::{message}" in done.stdout


@pytest.mark.install
def test_install_step_installs_zeromem_from_the_actions_own_checkout(repo):
    done, _ = run_step(STEPS["Install zeromem"], repo, path=os.environ["PATH"])
    assert done.returncode == 0, done.stdout + done.stderr
    [venv_bin] = (repo / "github_path").read_text().split()
    assert Path(venv_bin, "zeromem").exists()
    # the check step with only what the install step put on PATH
    done, _ = run_step(STEPS["check"], repo, path=f"{venv_bin}{os.pathsep}{os.environ['PATH']}")
    assert done.returncode == 1 and "title=ZM101" in done.stdout
