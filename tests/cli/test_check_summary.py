"""Issue 21 items 6 and 9 through `zeromem check`: paths named that give no config are reported, never
skipped silently; every format prints or carries the summary, with ruff's "[*] N fixable" line; JSON says
its positions are 0-based."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.cli.conftest import run_zeromem

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_a_named_file_that_is_not_a_config_is_reported(tmp_path):
    package = tmp_path / "package.json"
    package.write_text('{"name": "web", "version": "1.0.0", "scripts": {}}')
    done = run_zeromem("check", str(package))
    assert done.returncode == 0
    assert (f"zeromem: warning: {package}: not a training config (top-level keys: name, version, scripts; none is "
            "what DeepSpeed, FSDP, Accelerate or TrainingArguments read); not checked") in done.stderr
    assert "no findings in 0 configs (1 skipped)" in done.stderr
    assert "warning" not in run_zeromem("check", "-q", str(package)).stderr
    for name, text, why in (("list.json", "[1, 2]", "its top level is an array, not an object"),
                            ("empty.json", "", "it is empty"), ("broken.yaml", "a: [\n", "it does not parse")):
        (tmp_path / name).write_text(text)
        assert f"{name}: not a training config ({why}" in run_zeromem("check", str(tmp_path / name)).stderr


def test_files_found_in_a_directory_are_skipped_without_a_warning_each(tmp_path):
    (tmp_path / "package.json").write_text('{"name": "web"}')
    shutil.copy(EXAMPLES / "zero1-7b-8x24gib.json", tmp_path)
    done = run_zeromem("check", str(tmp_path))
    assert "warning: " not in done.stderr.replace("1 warning", "") and "(1 skipped)" in done.stderr


@pytest.mark.parametrize(("files", "said"), [
    ({}, "no configs (no .json/.jsonc/.hjson/.yaml/.yml files)"),
    ({"notes.txt": "x"}, "no configs (no .json/.jsonc/.hjson/.yaml/.yml files)"),
    ({"a.json": '{"name": "a"}', "b.yaml": "name: b\n"}, "no configs (2 JSON/YAML files, none a training config)"),
])
def test_a_directory_without_configs_says_so(tmp_path, files, said):
    folder = tmp_path / "configs"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    done = run_zeromem("check", "--format", "json", str(folder))
    assert done.returncode == 0 and f"zeromem: warning: {folder}: {said}" in done.stderr
    assert json.loads(done.stdout)["summary"]["not_checked"] == [{"path": str(folder), "reason": said}]


def _fix_counts(path: Path) -> tuple[int, int]:
    """What --diff says it would fix, without and with --unsafe-fixes."""
    def fixed(*extra):
        summary = run_zeromem("check", "--diff", *extra, str(path)).stderr
        return int(re.search(r"would fix (\d+) finding", summary).group(1))
    safe = fixed()
    return safe, fixed("--unsafe-fixes") - safe


def test_check_says_how_many_findings_fix_would_fix(tmp_path):
    shutil.copy(EXAMPLES / "typos.json", tmp_path)
    path = tmp_path / "typos.json"
    safe, unsafe = _fix_counts(path)
    assert (safe, unsafe) == (1, 1)  # the misspelt fp16 key (a rename); train_batch_sise (DeepSpeed ignores it now)
    text = run_zeromem("check", str(path))
    assert "[*] 1 fixable with the --fix option (1 hidden fix can be enabled with the --unsafe-fixes option)." \
        in text.stderr
    summary = json.loads(run_zeromem("check", "--format", "json", str(path)).stdout)["summary"]
    assert (summary["fixable"], summary["unsafe_fixable"]) == (safe, unsafe)
    assert "fixable" not in run_zeromem("check", "--fix", str(path)).stderr.replace("more fixable", "")


def test_every_format_prints_or_carries_the_summary(tmp_path):
    shutil.copy(EXAMPLES / "typos.json", tmp_path)
    path = str(tmp_path / "typos.json")
    line = "2 errors, 3 warnings in 1 config (0 skipped)"
    for output in ("text", "json", "sarif", "github"):
        done = run_zeromem("check", "--format", output, path)
        assert line in done.stderr, output
    report = json.loads(run_zeromem("check", "--format", "json", path).stdout)
    assert report["positions"]["line"] == "0-based"
    assert {k: report["summary"][k] for k in ("errors", "warnings", "configs_checked", "skipped")} == {
        "errors": 2, "warnings": 3, "configs_checked": 1, "skipped": 0}
    sarif = json.loads(run_zeromem("check", "--format", "sarif", path).stdout)
    assert sarif["runs"][0]["properties"]["summary"] == report["summary"]


def test_json_lines_are_zero_based_and_github_lines_one_based(tmp_path):
    shutil.copy(EXAMPLES / "typos.json", tmp_path)
    path = str(tmp_path / "typos.json")
    first = json.loads(run_zeromem("check", "--format", "json", path).stdout)["findings"][0]
    annotation = run_zeromem("check", "--format", "github", path).stdout.splitlines()[0]
    assert f"line={first['range']['start']['line'] + 1}," in annotation
    assert "0-based lines" in run_zeromem("check", "--help").stdout
