"""Issue 21 item 5 through `zeromem estimate` / `zeromem check`: a size without a unit is bytes, so a GPU
budget or reserve under 1 MiB and a parameter count under 1,000 are errors with a "did you mean" hint —
on the command line (exit 2), in the zeromem block and in project settings (ZM104 where the value is);
a budget in decimal gigabytes gets a note that a GPU sold as "80 GB" has 80 GiB."""

from __future__ import annotations

import json

import pytest

from tests.cli.conftest import run_zeromem, text_at

CONFIG = '{\n  "train_micro_batch_size_per_gpu": 4,\n  "bf16": {"enabled": true},\n  "zero_optimization": {"stage": 1}%s\n}\n'


@pytest.mark.parametrize(("args", "said"), [
    (("--parameters", "7B", "-R", "8", "--gpu-memory", "80"),
     "--gpu-memory: 80 is 80 B, under 1 MiB: a size without a unit is bytes; did you mean 80GiB?"),
    (("--parameters", "7B", "-R", "8", "--gpu-memory", "24KB"), "24KB is 24,000 B, under 1 MiB; did you mean 24GiB?"),
    (("--parameters", "7B", "-R", "8", "--gpu-memory", "0"), "a budget of 0 B"),
    (("--parameters", "7", "-R", "8"),
     "--parameters: 7 is 7 parameters, under 1,000: a count without a suffix is whole parameters; did you mean 7B?"),
    (("--parameters", "0.5K", "-R", "8"), "0.5K is 500 parameters, under 1,000; did you mean 0.5B?"),
])
def test_estimate_refuses_a_unitless_size_with_a_hint(args, said):
    done = run_zeromem("estimate", *args)
    assert done.returncode == 2 and done.stdout == ""
    assert said in done.stderr and len(done.stderr.splitlines()) == 1


def test_check_refuses_a_unitless_budget_with_a_hint(tmp_path):
    (tmp_path / "ds_config.json").write_text(CONFIG % "")
    done = run_zeromem("check", "--gpu-memory", "80", "--parameters", "7B", "--world-size", "8", str(tmp_path))
    assert done.returncode == 2 and "did you mean 80GiB?" in done.stderr
    done = run_zeromem("check", "--parameters", "7", str(tmp_path))
    assert done.returncode == 2 and "did you mean 7B?" in done.stderr


@pytest.mark.parametrize(("block", "value", "hint"), [
    ('"gpu_memory": 80', "80", "did you mean 80GiB?"),
    ('"gpu_memory": "80"', '"80"', "did you mean 80GiB?"),
    ('"parameters": 7', "7", "did you mean 7B?"),
    ('"reserved": 512', "512", "did you mean 512MiB?"),
])
def test_zeromem_block_value_gets_a_positioned_zm104(check_json, block, value, hint):
    findings, text, status = check_json(CONFIG % f',\n  "zeromem": {{"world_size": 8, {block}}}')
    [problem] = [f for f in findings if f["code"] == "ZM104"]
    assert hint in problem["message"] and status == 1
    assert text_at(text, problem["range"]) == value


def test_reserve_of_zero_is_no_reserve(check_json):
    findings, _, _ = check_json(CONFIG % ',\n  "zeromem": {"parameters": "7B", "reserved": 0}')
    assert not [f for f in findings if f["code"] == "ZM104"]


def test_project_settings_value_gets_zm104_on_its_line(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.zeromem]\nworld-size = 8\ngpu-memory = 80\n')
    (tmp_path / "ds_config.json").write_text(CONFIG % "")
    done = run_zeromem("check", "--format", "json", str(tmp_path / "ds_config.json"))
    [problem] = [f for f in json.loads(done.stdout)["findings"] if f["code"] == "ZM104"]
    assert problem["path"].endswith("pyproject.toml") and problem["range"]["start"]["line"] == 2
    assert "did you mean 80GiB?" in problem["message"] and done.returncode == 1


@pytest.mark.parametrize("command", ["estimate", "check"])
def test_decimal_gigabytes_budget_gets_a_note(tmp_path, command):
    (tmp_path / "ds_config.json").write_text(CONFIG % "")
    where = ("--parameters", "7B", "-R", "8") if command == "estimate" else (
        "--parameters", "7B", "--world-size", "8", str(tmp_path))
    done = run_zeromem(command, *where, "--gpu-memory", "80GB")
    assert done.returncode == 0, done.stderr
    assert ('zeromem: note: --gpu-memory 80GB is 80,000,000,000 B (74.5 GiB); a GPU sold as "80 GB" has 80 GiB: '
            "write 80GiB for it") in done.stderr
    binary = run_zeromem(command, *where, "--gpu-memory", "80GiB")
    assert "note" not in binary.stderr


@pytest.mark.parametrize(("name", "text", "value", "fixed"), [
    ("ds_config.json", CONFIG % ',\n  "zeromem": {"gpu_memory": "80GB", "parameters": "7B", "world_size": 8}',
     '"80GB"', '"gpu_memory": "80GiB"'),
    ("accelerate.yaml", "distributed_type: FSDP\nnum_processes: 8\nfsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n"
     "  zeromem:\n    gpu_memory: 24 GB\n    parameters: 7B\n", "24 GB", 'gpu_memory: "24GiB"'),
])
def test_decimal_gigabytes_in_the_block_is_a_positioned_note_with_a_fix(tmp_path, check_json, name, text, value,
                                                                         fixed):
    findings, _, status = check_json(text, name)
    [note] = [f for f in findings if f["code"] == "ZM107"]
    assert note["severity"] == "information" and text_at(text, note["range"]) == value
    number = value.strip('"').split()[0].removesuffix("GB")
    assert f'a GPU sold as "{number} GB" has {number} GiB: write {number}GiB for it' in note["message"]
    done = run_zeromem("check", "--fix", "--unsafe-fixes", "--select", "ZM107", str(tmp_path / name))
    assert fixed in (tmp_path / name).read_text() and done.returncode == 0
    assert "ZM107" not in run_zeromem("check", str(tmp_path / name)).stdout
