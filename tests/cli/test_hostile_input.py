"""Hostile input through `zeromem check`: a clear finding, never a traceback, inputs untouched."""

import json
import random

import pytest

from tests.cli.conftest import run_zeromem

BASE = '{"train_batch_size": 8, "zero_optimization": {"stage": 5}}'


def _cases():
    rng = random.Random(7)
    return {
        "binary": (bytes(rng.randrange(256) for _ in range(4096)) + b"\x00", {"ZM003"}),
        "utf8-bom": (b"\xef\xbb\xbf" + BASE.encode(), {"ZM253", "ZM202"}),
        "utf16": (BASE.encode("utf-16"), {"ZM003", "ZM202"}),
        "invalid-utf8": (b'{"train_batch_size": 8, "note": "\xff\x80", "zero_optimization": {"stage": 5}}', {"ZM003", "ZM202"}),
        # parsed to the end: the invalid stage after 100,000 levels is still found
        "deep-nesting": (('{"train_batch_size": 8, "x": ' + "[" * 100_000 + "]" * 100_000
                          + ', "zero_optimization": {"stage": 5}}').encode(), {"ZM202"}),
        "unclosed-deep-nesting": (('{"train_batch_size": 8, "x": ' + '{"a": ' * 50_000).encode(), {"ZM001"}),
        "deep-nesting-broken-inside": (('{"train_batch_size": 8, "x": ' + "[" * 100_000 + "1,,"
                                        + "]" * 100_000 + "}").encode(), {"ZM001"}),
        "duplicate-keys": (("{" + ", ".join(f'"train_batch_size": {i + 1}' for i in range(10_000)) + "}").encode(), {"ZM203"}),
        "beyond-float": (b'{"train_batch_size": 1e400, "gradient_accumulation_steps": ' + b"9" * 5000 + b"}", {"ZM001"}),
        "nul-and-controls": (b'{"train_batch_size": 8, "zero_optimization": {"stage": \x01\x02}}', {"ZM001"}),
    }


CASES = _cases()


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_input_gets_findings_not_tracebacks(tmp_path, name):
    data, expected_codes = CASES[name]
    assert expected_codes, "every hostile case names the codes it expects"
    path = tmp_path / "ds_config.json"
    path.write_bytes(data)
    done = run_zeromem("check", "--format", "json", str(path))
    assert "Traceback" not in done.stderr
    assert done.returncode in (0, 1), done.stderr
    codes = {finding["code"] for finding in json.loads(done.stdout)["findings"]}
    assert expected_codes <= codes, codes
    assert path.read_bytes() == data  # never modified


def test_fifty_megabytes_is_refused_quickly_with_information(tmp_path):
    path = tmp_path / "ds_config.json"
    with path.open("w") as handle:
        handle.write('{"train_batch_size": 8, "pad": [')
        handle.write(",".join(["1234567890"] * 4_600_000))
        handle.write("]}")
    done = run_zeromem("check", "--format", "json", str(path))
    [finding] = json.loads(done.stdout)["findings"]
    assert finding["code"] == "ZM002" and finding["severity"] == "information"
    assert done.returncode == 0


def test_binary_files_found_in_directories_are_skipped_quietly(tmp_path):
    (tmp_path / "blob.json").write_bytes(b"\x00\x01\x02binary")
    done = run_zeromem("check", "--format", "json", "-v", str(tmp_path))
    assert json.loads(done.stdout)["findings"] == []
    assert "blob.json: binary data" in done.stderr
