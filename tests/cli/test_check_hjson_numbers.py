"""Issue 21 item 12 through `zeromem check`: a whole `1.0` where DeepSpeed reads a boolean or an int is
the int 1 to DeepSpeed's hjson loader (no ZM202), a fraction is not; a `timers` string or list holding
"throughput" makes DeepSpeed fail (string/list indices must be integers), one without it is ignored.

tests/oracle/test_deepspeed_oracle.py (FILES, MUTATIONS) checks the same verdicts against DeepSpeed 0.19.8.
"""

from __future__ import annotations

import pytest

B = '"train_batch_size": 8'


@pytest.mark.parametrize("text", [
    '{%s, "wall_clock_breakdown": 1.0}' % B,
    '{%s, "wall_clock_breakdown": 0.0}' % B,
    '{%s, "wall_clock_breakdown": 1e0}' % B,
    '{%s, "flops_profiler": {"enabled": 1.0}}' % B,
    '{"train_batch_size": 8.0, "zero_optimization": {"stage": 3.0, "overlap_comm": 1.0}}',
])
def test_whole_float_is_an_int_to_deepspeed(check_json, text):
    findings, _, status = check_json(text)
    assert [f for f in findings if f["severity"] == "error"] == []
    assert status == 0


@pytest.mark.parametrize("text, path", [
    ('{%s, "wall_clock_breakdown": 1.5}' % B, "wall_clock_breakdown"),
    ('{%s, "flops_profiler": {"enabled": 0.5}}' % B, "flops_profiler.enabled"),
])
def test_fraction_is_still_refused(check_json, text, path):
    findings, _, status = check_json(text)
    assert [(f["code"], path in f["message"]) for f in findings] == [("ZM202", True)]
    assert status == 1


@pytest.mark.parametrize("value, indices", [('"throughput"', "string"), ('["throughput"]', "list")])
def test_timers_holding_throughput_is_refused(check_json, value, indices):
    findings, text, status = check_json('{%s, "timers": %s}' % (B, value))
    (finding,) = findings
    assert finding["code"] == "ZM202" and f"{indices} indices must be integers" in finding["message"]
    assert status == 1


def test_timers_string_without_throughput_is_ignored_by_deepspeed(check_json):
    findings, _, status = check_json('{%s, "timers": "x"}' % B)
    assert [(f["code"], "ignores" in f["message"]) for f in findings] == [("ZM257", True)]
    assert status == 0
