"""Issue 19 over LSP (pytest-lsp, stdio): the stage hover is one table (model state | peak | the phase holding
the peak), its cheapest stage follows the peak, an engine setting that contradicts the config is said, and
ZM106 is an error beyond the model's uncertainty. Workload: Qwen2.5-7B, 4096 × 2, 8 GPUs, 80 GiB."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lsp_session import ROOT, open_doc
from lsprotocol import types

pytestmark = pytest.mark.asyncio(loop_scope="session")

QWEN = ROOT / "tests/data/models/Qwen2.5-7B/config.json"
GiB = 2**30


def config_text(stage: int, **block) -> str:
    return json.dumps({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
                       "bf16": {"enabled": True}, "zero_optimization": {"stage": stage},
                       "zeromem": {"parameters": {"from_config": str(Path(QWEN))}, "world_size": 8,
                                   "sequence_length": 4096, "gpu_memory": "80GiB", **block}}, indent=1)


async def stage_hover(doc) -> str:
    await doc.diagnostics()
    result = await doc.client.text_document_hover_async(
        types.HoverParams(text_document=doc.identifier, position=doc.at('"stage"', 1)))
    return result.contents.value


async def test_hover_judges_stages_on_the_peak(client):
    doc = open_doc(client, "ds_config.json", config_text(1))
    text = await stage_hover(doc)
    header = next(line for line in text.splitlines() if "| model state |" in line)
    assert "| peak |" in header and "| peak phase: largest parts |" in header  # one table
    zero1 = next(line for line in text.splitlines() if line.startswith("| ▶ | **ZeRO-1** |"))
    assert "| 39.0 GiB |" in zero1 and "(99.5 GiB)" in zero1 and "| exceeds |" in zero1 and "backward:" in zero1
    assert "Cheapest whose peak fits: ZeRO-3 (peak 75.7 GiB/GPU" in text
    assert "**peak ≈ 99.5 GiB/GPU · 124% of 80.0 GiB**" in text


async def test_zm106_error_over_lsp(client):
    doc = open_doc(client, "ds_config.json", config_text(1))
    [finding] = [d for d in await doc.diagnostics() if d.code == "ZM106"]
    assert finding.severity == types.DiagnosticSeverity.Error
    assert "beyond the model's ±10% uncertainty" in finding.message


async def test_engine_setting_contradicting_the_config_is_said(client):
    doc = open_doc(client, "ds_config.json", config_text(1, engine="torch"))
    text = await stage_hover(doc)
    assert "**Engine torch** — zeromem.engine (overrides deepspeed, which the config is)" in text


async def test_unknown_engine_is_zm104_on_the_value(client):
    doc = open_doc(client, "ds_config.json", config_text(1, engine="jax"))
    [finding] = [d for d in await doc.diagnostics() if d.code == "ZM104"]
    assert finding.severity == types.DiagnosticSeverity.Error
    assert "'torch', 'deepspeed' or 'fsdp'" in finding.message
    assert doc.offsets(finding.range)[0] == doc.text.index('"jax"')
