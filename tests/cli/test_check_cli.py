"""`zeromem check`: formats, exit codes, non-config files, large input, examples."""

import json

import pytest
from pathlib import Path

from tests.cli.conftest import run_zeromem, run_zeromem_subprocess, text_at

ROOT = Path(__file__).resolve().parents[2]


def test_text_format_is_path_line_col_code_severity_message(tmp_path):
    path = tmp_path / "ds_config.json"
    path.write_text('{\n  "train_batch_size": 8,\n  "zero_optimization": {"stage": 7}\n}\n')
    done = run_zeromem_subprocess("check", str(path))  # smoke: the real entry point
    assert done.returncode == 1
    line = done.stdout.strip().splitlines()[0]
    assert line.startswith(f"{path}:3:34: ZM202 error: ")
    assert "stage" in line


def test_json_positions_are_utf16_after_emoji(check_json):
    findings, text, _ = check_json('{"train_batch_size": 8, "note": "🚀🚀", "zero_optimization": {"stage": 9}}')
    [hit] = [f for f in findings if f["code"] == "ZM202"]
    assert text_at(text, hit["range"]) == "9"
    assert hit["range"]["start"]["character"] == text.encode("utf-16-le").index("9}".encode("utf-16-le")) // 2


def test_exit_0_without_errors_and_warnings_do_not_fail(check_json):
    findings, _, status = check_json('{"train_batch_sise": 8, "train_micro_batch_size_per_gpu": 1}')
    assert [f["severity"] for f in findings] == ["warning"]
    assert status == 0


def test_exit_2_for_missing_file(tmp_path):
    done = run_zeromem_subprocess("check", str(tmp_path / "nope.json"))  # smoke: exit status 2
    assert done.returncode == 2
    assert "nope.json" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_non_config_json_gets_no_findings(tmp_path):
    (tmp_path / "package.json").write_text('{"name": "x", "version": "1.0.0", "scripts": {"build": "tsc"},}')
    (tmp_path / "tsconfig.json").write_text('{"compilerOptions": {"strict": true}}')
    done = run_zeromem("check", "--format", "json", str(tmp_path / "package.json"), str(tmp_path / "tsconfig.json"))
    assert done.returncode == 0
    report = json.loads(done.stdout)
    assert report["findings"] == []
    assert [item["path"] for item in report["summary"]["not_checked"]] == [
        str(tmp_path / "package.json"), str(tmp_path / "tsconfig.json")]  # named, so said (issue 21 item 6)


def test_directory_reports_only_training_configs(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "package.json").write_text('{"name": "x"}')
    (tmp_path / "sub" / "ds.json").write_text('{"train_batch_size": 8, "zero_optimization": {"stage": 5}}')
    done = run_zeromem("check", "--format", "json", str(tmp_path))
    paths = {f["path"] for f in json.loads(done.stdout)["findings"]}
    assert paths == {str(tmp_path / "sub" / "ds.json")}


def test_half_typed_config_gets_syntax_error_and_what_parsed(check_json):
    findings, _, status = check_json('{"train_batch_size": 8, "zero_optimization": {"stage": 4, "stage3_max_live_param')
    codes = {f["code"] for f in findings}
    assert "ZM001" in codes and "ZM202" in codes
    assert status == 1


def test_oversized_document_gets_information_not_a_stall(tmp_path):
    from zeromem_lsp.analysis import MAX_DOCUMENT_CHARS

    path = tmp_path / "ds_config.json"
    path.write_text('{"train_batch_size": 8, "pad": "' + "x" * MAX_DOCUMENT_CHARS + '"}')
    done = run_zeromem("check", "--format", "json", str(path))
    [finding] = json.loads(done.stdout)["findings"]
    assert finding["code"] == "ZM002" and finding["severity"] == "information"
    assert done.returncode == 0


def test_initialize_time_failures_are_warnings_not_errors(check_json):
    # DeepSpeedConfig accepts these; only deepspeed.initialize refuses them
    findings, _, status = check_json(
        '{"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"max_grad_norm": 1.0}}}'
    )
    assert [(f["code"], f["severity"]) for f in findings] == [("ZM256", "warning")]
    assert status == 0


def test_examples_behave_as_documented():
    done = run_zeromem("check", "--format", "json", str(ROOT / "examples"))
    by_file = {}
    for finding in json.loads(done.stdout)["findings"]:
        by_file.setdefault(Path(finding["path"]).name, set()).add(finding["code"])
    assert "ZM101" in by_file["zero1-7b-8x24gib.json"]
    assert "zero3-13b-offload.json" not in by_file
    assert {"ZM201", "ZM203", "ZM253", "ZM255"} <= by_file["typos.json"]
    assert by_file["accelerate-fsdp-13b-8x40gib.yaml"] == {"ZM101"}


def test_input_files_are_never_modified(tmp_path):
    path = tmp_path / "ds_config.json"
    original = b'{"train_batch_size": 8, // c\n "zero_optimization": {"stage": 1,},}'
    path.write_bytes(original)
    before = path.stat().st_mtime_ns
    run_zeromem("check", str(path))
    assert path.read_bytes() == original and path.stat().st_mtime_ns == before


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"gradient_accumulation_steps": 4}', "ZM204"),  # only DeepSpeed keys: a config DeepSpeed refuses
        ('{"sparse_attention": {"mode": "fixed"}, "train_batch_size": 8}', "ZM210"),
    ],
)
def test_minimal_deepspeed_configs_are_recognised(check_json, text, expected):
    findings, _, status = check_json(text, "config.json")
    assert expected in {f["code"] for f in findings} and status == 1


@pytest.mark.parametrize("text", ['{"optimizer": "adam"}', '{"name": "x", "gradient_clipping": 1.0}'])
def test_generic_json_is_not_taken_for_a_config(check_json, text):
    findings, _, status = check_json(text, "settings.json")
    assert findings == [] and status == 0
