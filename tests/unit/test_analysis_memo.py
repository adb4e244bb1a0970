"""analysis.Memo (what the language server keeps across keystrokes): an analysis made with it, cold or from what it
kept, is the analysis made without it — same findings (fixes included), plan, peak, settings and origins."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from zeromem_lsp import analysis as analysis_module
from zeromem_lsp.analysis import Memo, analyse
from zeromem_lsp.configs.layers import editor
from zeromem_lsp.configs.settings import ZeromemSettings
from zeromem_lsp.memory.plan import MemoryPlan
from zeromem_lsp.project import discover, file_loader

ROOT = Path(__file__).resolve().parents[2]
LLAMA3 = ROOT / "tests" / "data" / "models" / "Meta-Llama-3-8B" / "config.json"


def _files() -> list[Path]:
    found = [p for folder in ("tests", "examples") for p in sorted((ROOT / folder).rglob("*"))
             if p.suffix in (".json", ".yaml", ".yml") and p.is_file()]
    return [p for p in found if p.stat().st_size < 200_000]


def _peak_configs() -> list[tuple[str, str]]:
    """DeepSpeed configs with a known peak around a budget: over it (ZM106 with its fixes, the bucket search and
    the cheapest fit), within it, offloaded, another micro-batch; and values equal in Python but not in type."""
    cases = []
    for stage, budget, micro, offload in itertools.product((0, 1, 2, 3), ("24GiB", "80GiB"), (1, 2, 4), (None, "cpu")):
        zero = {"stage": stage, "reduce_bucket_size": 500000000, "allgather_bucket_size": 500000000}
        if offload and stage:
            zero["offload_optimizer"] = {"device": offload}
        config = {"train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": 8, "bf16": {"enabled": True},
                  "optimizer": {"type": "AdamW", "params": {"lr": 2e-5}}, "zero_optimization": zero,
                  "zeromem": {"world_size": 8, "gpu_memory": budget, "sequence_length": 8192,
                              "parameters": {"from_config": str(LLAMA3)}}}
        cases.append((f"ds_{stage}_{budget}_{micro}_{offload}.json", json.dumps(config, indent=2)))
    for value in ("2", "2.0", "true", '"2"'):  # `micro_batch` 2, 2.0, True, "2": equal or not, each its own plan
        text = ('{"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}, "zero_optimization": {"stage": 2},'
                f' "zeromem": {{"world_size": 8, "gpu_memory": "24GiB", "sequence_length": 4096, "micro_batch": {value},'
                f' "parameters": {{"from_config": {json.dumps(str(LLAMA3))}}}}}}}')
        cases.append((f"micro_{value}.json", text))
    return cases


def _signature(result) -> tuple:
    plan = result.plan
    peaks = plan.peak.peaks if isinstance(plan, MemoryPlan) and plan.peak is not None else None
    stages = plan.peak.stages if isinstance(plan, MemoryPlan) and plan.peak is not None else None
    return (result.kind, result.findings, plan, peaks, stages, result.settings, result.origins,
            result.parameter_source)


def _analyse(path: Path | None, name: str, text: str, memo: Memo | None):
    layers = (*discover(path.parent).layers_for(path), editor(ZeromemSettings())) if path is not None else ()
    loader = file_loader(path) if path is not None else None
    return analyse(text, name, layers, loader=loader, memo=memo)


def _cases(tmp_path) -> list[tuple[Path, str, str]]:
    cases = [(path, path.name, path.read_text(encoding="utf-8", errors="replace")) for path in _files()]
    return cases + [(tmp_path / name, name, text) for name, text in _peak_configs()]


@pytest.mark.parametrize("size", [16, 2])
def test_an_analysis_with_the_memo_is_the_analysis_without_it(tmp_path, size):
    cases = _cases(tmp_path)
    fresh = [_signature(_analyse(path, name, text, None)) for path, name, text in cases]
    memo = Memo(size)
    for round_ in range(2):  # cold, then (size 16) from what was kept, in another order
        order = range(len(cases)) if round_ == 0 else reversed(range(len(cases)))
        for index in order:
            path, name, text = cases[index]
            assert _signature(_analyse(path, name, text, memo)) == fresh[index], (name, round_)
    peaks = sum(1 for signature in fresh if signature[3] is not None)
    assert peaks >= 48  # the peak path really exercised (52 without ../shared)
    assert any(finding.code == "ZM106" and len(finding.fixes) > 2 for signature in fresh for finding in signature[1])


def test_a_kept_plan_is_reused_and_a_changed_input_is_not(tmp_path):
    memo = Memo()
    name, text = _peak_configs()[0]
    first = _analyse(tmp_path / name, name, text, memo)
    again = _analyse(tmp_path / name, name, text.replace('"gradient_accumulation_steps": 8', '"steps_per_print": 7, '
                                                          '"gradient_accumulation_steps": 8'), memo)
    assert again.plan is first.plan  # a key the plan does not read: the same plan (and its peak's memo)
    other = _analyse(tmp_path / name, name, text.replace('"gradient_accumulation_steps": 8',
                                                         '"gradient_accumulation_steps": 4'), memo)
    assert other.plan is not first.plan and other.plan.peak.source != first.plan.peak.source


def test_a_model_file_changed_on_disk_is_read_again(tmp_path):
    model = tmp_path / "config.json"
    shape = json.loads(LLAMA3.read_text())
    model.write_text(json.dumps(shape))
    text = json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True}, "zero_optimization": {"stage": 2},
                       "zeromem": {"world_size": 8, "gpu_memory": "80GiB", "sequence_length": 4096,
                                   "parameters": {"from_config": "config.json"}}})
    path, memo = tmp_path / "ds.json", Memo()
    before = _analyse(path, "ds.json", text, memo)
    model.write_text(json.dumps({**shape, "num_hidden_layers": 16}))
    after = _analyse(path, "ds.json", text, memo)
    assert _signature(after) == _signature(_analyse(path, "ds.json", text, None))
    assert after.plan.inputs.parameter_bytes < before.plan.inputs.parameter_bytes
    model.write_text("{not json")
    assert _signature(_analyse(path, "ds.json", text, memo)) == _signature(_analyse(path, "ds.json", text, None))


def test_arguments_equal_in_python_but_of_other_types_are_planned_apart(monkeypatch):
    calls = []
    monkeypatch.setattr(analysis_module.planner, "plan", lambda *arguments: calls.append(arguments) or len(calls))
    memo = Memo()
    assert [memo.plan(value) for value in (1, 1.0, True, 1, 1.0, True)] == [1, 2, 3, 1, 2, 3]
    unpicklable = lambda: None  # noqa: E731 (no content form: planned every time, nothing kept)
    assert memo.plan(unpicklable) == 4 and memo.plan(unpicklable) == 5
