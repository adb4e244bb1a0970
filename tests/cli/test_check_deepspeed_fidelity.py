"""Issue 14 through `zeromem check --format json` (one subprocess for every file): data_efficiency
internals, "stage": "auto", a non-object top level, unreadable from_config files, `"x": True,` in hjson.

Each case is a config that must get a finding (code + words of its message) and the same config
fixed, which must not. The expected verdicts are DeepSpeed 0.19.8's (runtime/data_pipeline/config.py,
runtime/zero/config.py, runtime/config.py); tests/oracle/test_deepspeed_sections.py checks them against
DeepSpeed itself when it is installed.
"""

from __future__ import annotations

import json

import pytest

from tests.cli.conftest import run_zeromem

B = '"train_batch_size": 8'


def _sampling(inner: str) -> str:
    return '{%s, "data_efficiency": {"data_sampling": {%s}}}' % (B, inner)


# name -> (config text, code, words the message must contain, fixed config text)
CASES = {
    "curriculum enabled without metrics": (
        _sampling('"curriculum_learning": {"enabled": true}'), "ZM211", ["curriculum_metrics"],
        _sampling('"curriculum_learning": {"enabled": true, "curriculum_metrics": {}}')),
    "curriculum enabled 'false' is truthy": (
        _sampling('"curriculum_learning": {"enabled": "false"}'), "ZM211", ['the string "false"', "true"],
        _sampling('"curriculum_learning": {"enabled": false}')),
    "curriculum_learning null": (
        _sampling('"curriculum_learning": null'), "ZM202", ["must be an object"],
        _sampling('"curriculum_learning": {}')),
    "dynamic batching enabled without max_tokens": (
        _sampling('"dynamic_batching": {"enabled": true}'), "ZM211", ["max_tokens"],
        _sampling('"dynamic_batching": {"enabled": true, "max_tokens": 4096}')),
    "dynamic batching max_tokens auto": (
        _sampling('"dynamic_batching": {"enabled": true, "max_tokens": "auto"}'), "ZM202", ["int()", "max_tokens"],
        _sampling('"dynamic_batching": {"enabled": true, "max_tokens": "4096"}')),
    "dynamic batching max_batch_size null while disabled": (
        _sampling('"dynamic_batching": {"max_batch_size": null}'), "ZM202", ["max_batch_size", "int()"],
        _sampling('"dynamic_batching": {"max_batch_size": 8.0}')),
    "dynamic batching min_batch_size text": (
        _sampling('"dynamic_batching": {"min_batch_size": "one"}'), "ZM202", ["min_batch_size"],
        _sampling('"dynamic_batching": {"min_batch_size": 1}')),
    "random_ltd list": (
        '{%s, "data_efficiency": {"data_routing": {"random_ltd": [1]}}}' % B, "ZM202", ["random_ltd", "object"],
        '{%s, "data_efficiency": {"data_routing": {"random_ltd": {"enabled": false}}}}' % B),
    "auto stage: partial offload": (
        '{%s, "zero_optimization": {"stage": "auto", "offload_optimizer": {"device": "cpu", "ratio": 0.5}}}' % B,
        "ZM209", ["stage 0 under a plain DeepSpeed launch"],
        '{%s, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}}' % B),
    "auto stage: compute_grad_norm": (
        '{%s, "zero_optimization": {"stage": "auto", "compute_grad_norm": false}}' % B,
        "ZM211", ["compute_grad_norm", "stage 0"],
        '{%s, "zero_optimization": {"stage": 2, "compute_grad_norm": false}}' % B),
    "auto stage: fp16 master weights": (
        '{%s, "zero_optimization": {"stage": "auto"}, "fp16": {"enabled": true, '
        '"fp16_master_weights_and_grads": true}}' % B, "ZM211", ["fp16_master_weights_and_grads", "stage 0"],
        '{%s, "zero_optimization": {"stage": 1}, "fp16": {"enabled": true, '
        '"fp16_master_weights_and_grads": true}}' % B),
    "auto stage itself": (
        '{%s, "zero_optimization": {"stage": "auto"}}' % B, "ZM254", ["stage 0", "ACCELERATE_DEEPSPEED_ZERO_STAGE"],
        '{%s, "zero_optimization": {"stage": 0}}' % B),
    "auto stage filled by HF (TrainingArguments)": (
        '{"per_device_train_batch_size": 4, "deepspeed": {"train_batch_size": "auto", "zero_optimization": '
        '{"stage": "auto", "offload_optimizer": {"device": "cpu", "ratio": 0.5}}}}', "ZM209",
        ['"stage": "auto" is 2 here'],
        '{"per_device_train_batch_size": 4, "deepspeed": {"train_batch_size": "auto", "zero_optimization": '
        '{"stage": "auto", "compute_grad_norm": false}}}'),
    # 7B parameters, bf16, AdamW, 8 ranks: P = G = 2 x 7e9 B, O = 12 x 7e9 B; ZeRO-2 keeps
    # P + (G + O) / 8 = 14e9 + 98e9 / 8 = 26,250,000,000 B per GPU: over 24 GiB, under 32 GiB.
    "auto stage planned as HF fills it (TrainingArguments)": (
        '{"per_device_train_batch_size": 4, "bf16": true, "deepspeed": {"train_batch_size": "auto", '
        '"bf16": {"enabled": true}, "zero_optimization": {"stage": "auto"}, '
        '"zeromem": {"parameters": "7B", "world_size": 8, "gpu_memory": "24GiB"}}}', "ZM101",
        ["ZeRO-2", "26,250,000,000"],
        '{"per_device_train_batch_size": 4, "bf16": true, "deepspeed": {"train_batch_size": "auto", '
        '"bf16": {"enabled": true}, "zero_optimization": {"stage": "auto"}, '
        '"zeromem": {"parameters": "7B", "world_size": 8, "gpu_memory": "32GiB"}}}'),
    "top-level array": ('[{%s}]' % B, "ZM202", ["top level must be an object", "an array"], '{%s}' % B),
    "top-level null": ("null", "ZM202", ["top level must be an object", "null"], '{%s}' % B),
    "hjson True, swallows the comma": (
        '{\n  %s,\n  "wall_clock_breakdown": True,\n  "steps_per_print": 10\n}' % B, "ZM253",
        ['"True,"', "comma included", "write true"],
        '{\n  %s,\n  "wall_clock_breakdown": true,\n  "steps_per_print": 10\n}' % B),
}


@pytest.fixture(scope="module")
def findings(tmp_path_factory):
    """{(case, "bad"|"fixed"): [finding, ...]} from one `zeromem check` over every case file."""
    root = tmp_path_factory.mktemp("fidelity")
    names = {}
    for number, (name, (bad, _code, _words, fixed)) in enumerate(sorted(CASES.items())):
        for variant, text in (("bad", bad), ("fixed", fixed)):
            folder = root / f"{number:02d}-{variant}"
            folder.mkdir()
            file_name = "args.json" if "TrainingArguments" in name else "ds_config.json"
            (folder / file_name).write_text(text, encoding="utf-8")
            names[f"{folder.name}/{file_name}"] = (name, variant)
    done = run_zeromem("check", "--format", "json", ".", cwd=root)
    assert "Traceback" not in done.stderr, done.stderr
    found: dict = {key: [] for key in names.values()}
    for finding in json.loads(done.stdout)["findings"]:
        found[names[finding["path"]]].append(finding)
    return found


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_config_gets_the_finding(findings, name):
    _bad, code, words, _fixed = CASES[name]
    hits = [f for f in findings[(name, "bad")] if f["code"] == code]
    assert hits, findings[(name, "bad")]
    assert any(all(word in f["message"] for word in words) for f in hits), hits


@pytest.mark.parametrize("name", sorted(CASES))
def test_fixed_config_does_not(findings, name):
    _bad, code, _words, _fixed = CASES[name]
    assert [f for f in findings[(name, "fixed")] if f["code"] == code or f["severity"] == "error"] == []


def test_top_level_array_is_not_reported_as_a_missing_batch_size(findings):
    assert [f["code"] for f in findings[("top-level array", "bad")]] == ["ZM202"]
    assert [f["code"] for f in findings[("top-level null", "bad")]] == ["ZM202"]


def test_swallowed_comma_is_not_reported_as_a_missing_comma(findings):
    messages = " ".join(f["message"] for f in findings[("hjson True, swallows the comma", "bad")])
    assert "newline instead of a comma" not in messages


@pytest.mark.parametrize("target, reason", [("/dev/zero", "not a regular file"),
                                            (".", "config.json (file not found)"),  # a model directory
                                            ("missing.json", "file not found")])
def test_from_config_says_why_it_cannot_read(check_json, target, reason):
    text = '{%s, "zeromem": {"parameters": {"from_config": %s}}}' % (B, json.dumps(target))
    found, _text, _status = check_json(text)
    messages = [f["message"] for f in found if f["code"] == "ZM104"]
    assert len(messages) == 1 and reason in messages[0], found
