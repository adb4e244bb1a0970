"""`zeromem check --fix / --unsafe-fixes / --diff` through the real entry point."""

from __future__ import annotations

import os
import stat

from zeromem_lsp.analysis import analyse_bytes
from zeromem_lsp.autofix import fix_pass, is_safe, still_parses
from zeromem_lsp.cli.fix import FixSession
from zeromem_lsp.findings import Finding, Fix, TextEdit
from zeromem_lsp.rules.registry import RULES

from tests.cli.conftest import run_zeromem

# A typo in fp16 (strict: DeepSpeed refuses it), the legacy cpu_offload flag, and a budget overflow:
# 7B bf16 AdamW on R = 64 / (4 × 2) = 8 ranks, optimizer state on the CPU, so GPU = P + G =
# 14e9 + 14e9 B = 26.1 GiB under ZeRO-1 > 24 GiB; ZeRO-2 shards G: 14e9 + ⌈14e9/8⌉ = 15.75e9 B fits.
CONFIG = """{
  // tuned for 8 GPUs
  "train_batch_size": 64,
  "train_micro_batch_size_per_gpu": 4,
  "gradient_accumulation_steps": 2,
  "bf16": {"enabled": true},
  "fp16": {"enabled": false,   "loss_scale_windw": 1000},
  "zero_optimization": {"stage": 1, "cpu_offload": true},
  "zeromem": {"parameters": "7B", "gpu_memory": "24GiB"}
}
"""
# the safe fixes by hand: the two renames, nothing else (comment, spacing and order kept)
SAFE = CONFIG.replace('"loss_scale_windw"', '"loss_scale_window"').replace(
    '"cpu_offload": true', '"offload_optimizer": {"device": "cpu"}')
UNSAFE = SAFE.replace('"stage": 1', '"stage": 2')


def write(tmp_path, text, name="ds_config.json"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_fix_applies_safe_fixes_in_place_and_reports_what_remains(tmp_path):
    path = write(tmp_path, CONFIG)
    os.chmod(path, 0o640)
    done = run_zeromem("check", "--fix", str(path))
    assert path.read_text(encoding="utf-8") == SAFE
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert [name for name in os.listdir(tmp_path)] == ["ds_config.json"]  # no temporary file left
    assert done.returncode == 1  # ZM101 is still there
    assert "ZM101" in done.stdout and "ZM201" not in done.stdout and "ZM251" not in done.stdout
    assert "fixed 2 findings in 1 file; 1 more fixable with --unsafe-fixes" in done.stderr


def test_unsafe_fixes_also_switch_the_stage(tmp_path):
    path = write(tmp_path, CONFIG)
    done = run_zeromem("check", "--fix", "--unsafe-fixes", str(path))
    assert path.read_text(encoding="utf-8") == UNSAFE
    assert done.returncode == 0  # only the comment warning (ZM253) remains
    assert "ZM253" in done.stdout and "ZM101" not in done.stdout
    assert "fixed 3 findings in 1 file" in done.stderr


def test_diff_prints_the_fix_and_writes_nothing(tmp_path):
    path = write(tmp_path, CONFIG)
    before = os.stat(path)
    done = run_zeromem("check", "--diff", str(path))
    assert path.read_text(encoding="utf-8") == CONFIG and os.stat(path).st_mtime_ns == before.st_mtime_ns
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[0] == f"--- a/{path}" and lines[1] == f"+++ b/{path}"
    assert [line for line in lines if line[:1] in "+-" and line[:3] not in ("---", "+++")] == [
        '-  "fp16": {"enabled": false,   "loss_scale_windw": 1000},',
        '-  "zero_optimization": {"stage": 1, "cpu_offload": true},',
        '+  "fp16": {"enabled": false,   "loss_scale_window": 1000},',
        '+  "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}},',
    ]


def test_nothing_to_fix_leaves_the_file_and_the_status(tmp_path):
    path = write(tmp_path, UNSAFE)
    done = run_zeromem("check", "--diff", str(path))
    assert done.stdout == "" and done.returncode == 0
    done = run_zeromem("check", "--fix", "--fail-on", "warning", str(path))
    assert path.read_text(encoding="utf-8") == UNSAFE
    assert done.returncode == 1  # the ZM253 warning remains and --fail-on warning counts it


def test_yaml_rename_keeps_the_plain_key_and_the_comment(tmp_path):
    text = ("distributed_type: FSDP\nmixed_precision: bf16\nnum_processes: 8\nfsdp_config:\n"
            "  fsdp_sharding_strategy: FULL_SHARD\n  fsdp_backward_prefetch_policy: BACKWARD_PRE   # old name\n")
    path = write(tmp_path, text, "accelerate_config.yaml")
    done = run_zeromem("check", "--fix", str(path))
    assert path.read_text(encoding="utf-8") == text.replace("fsdp_backward_prefetch_policy:", "fsdp_backward_prefetch:")
    assert done.returncode == 0 and "ZM351" not in done.stdout


def test_unsafe_fixes_alone_is_a_usage_error(tmp_path):
    done = run_zeromem("check", "--unsafe-fixes", str(write(tmp_path, CONFIG)))
    assert done.returncode == 2 and "--unsafe-fixes goes with --fix or --diff" in done.stderr


def test_a_fix_that_would_break_the_syntax_is_not_written(tmp_path):
    path = write(tmp_path, CONFIG)
    data = path.read_bytes()
    analysis = analyse_bytes(data, path.name)
    brace = CONFIG.rindex("}")
    breaking = Finding("ZM201", "error", "x", 0, 1, (Fix("break it", (TextEdit(brace, brace + 1, ""),), True),))
    analysis.findings = [breaking]

    class Args:
        unsafe_fixes, diff = False, False

    session = FixSession(Args())
    result = session.apply(path, data, analysis, lambda text: analyse_bytes(text.encode(), path.name), lambda f: True)
    assert result is analysis and path.read_bytes() == data
    assert "would not leave a config that parses; not fixed" in session.summary()
    assert session.status() == 1


def test_safe_fixes_are_the_renames_the_issue_names():
    safe = {code for code, rule in RULES.items() if rule.safe_fix}
    # misspelt keys in strict sections; deprecated and legacy key renames
    assert safe == {"ZM201", "ZM307", "ZM208", "ZM251", "ZM351", "ZM310", "ZM353", "ZM357"}  # ZM310/353/357: recipe key renames
    assert not {"ZM101", "ZM102", "ZM106", "ZM206", "ZM255", "ZM305", "ZM352"} & safe  # change the run
    assert is_safe(Finding("ZM201", "error", "", 0, 0)) and not is_safe(Finding("ZM101", "error", "", 0, 0))


def test_overlapping_fixes_wait_for_the_next_pass():
    one = Finding("ZM201", "error", "", 0, 3, (Fix("a", (TextEdit(0, 3, "abc"),)),))
    two = Finding("ZM251", "warning", "", 2, 5, (Fix("b", (TextEdit(2, 5, "xyz"),)),))
    step = fix_pass("012345", [one, two])
    assert step.text == "abc345" and step.applied == (one,)
    assert still_parses([], []) and not still_parses([], [Finding("ZM001", "error", "", 0, 0)])
