"""Issue 19 over LSP (pytest-lsp, stdio): the stage hover is one table (model state | peak | the phase holding
the peak), its cheapest stage follows the peak, an engine setting that contradicts the config is said, and
ZM106 is an error beyond the model's uncertainty. Workload: Qwen2.5-7B, 4096 × 2, 8 GPUs, 80 GiB."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lsp_session import ROOT, open_doc, with_breakdown
from lsprotocol import types

from zeromem_lsp.present import percent_of
from zeromem_lsp.units import format_bytes

pytestmark = pytest.mark.asyncio(loop_scope="session")

QWEN = ROOT / "tests/data/models/Qwen2.5-7B/config.json"
GiB = 2**30


def config_text(stage: int, **block) -> str:
    return json.dumps({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
                       "bf16": {"enabled": True}, "zero_optimization": {"stage": stage},
                       "zeromem": {"parameters": {"from_config": str(Path(QWEN))}, "world_size": 8,
                                   "sequence_length": 4096, "gpu_memory": "80GiB", **block}}, indent=1)


def the_peaks() -> tuple[int, int]:
    """ZeRO-1's peak at micro-batch 2 and 1, as `zeromem estimate` shows them (its phase's parts + reserved); at
    micro-batch 1 the doubled gradient accumulation that keeps the global batch."""
    import contextlib
    import io

    from zeromem_lsp.cli import main

    found = []
    for micro, steps in (("2", "1"), ("1", "2")):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            main(["estimate", "--model-config", str(QWEN), "-R", "8", "--sequence-length", "4096",
                  "--micro-batch", micro, "--gradient-accumulation-steps", steps, "--format", "json"])
        zero1 = json.loads(out.getvalue())["phases"]["zero1"]
        assert zero1["phases"][zero1["peak_phase"]] == sum(zero1["parts"].values())
        found.append(sum(zero1["parts"].values()) + zero1["reserved_bytes"])
    return found[0], found[1]


async def stage_hover(doc) -> str:
    await doc.diagnostics()
    result = await doc.client.text_document_hover_async(
        types.HoverParams(text_document=doc.identifier, position=doc.at('"stage"', 1)))
    return await with_breakdown(doc, result.contents.value)


async def test_hover_judges_stages_on_the_peak(client):
    doc = open_doc(client, "ds_config.json", config_text(1))
    text = await stage_hover(doc)
    header = next(line for line in text.splitlines() if "| model state |" in line)
    assert "| peak |" in header and "| peak phase: largest parts |" in header  # one table
    peak, halved = the_peaks()
    zero1 = next(line for line in text.splitlines() if line.startswith("| ▶ | **ZeRO-1** |"))
    assert "| 39.0 GiB |" in zero1 and f"| {peak:,} ({format_bytes(peak)}) |" in zero1 and "| exceeds |" in zero1
    assert "| backward: activations " in zero1
    # no stage's peak fits 80 GiB at micro-batch 2 (ZeRO-3: 80.3 GiB); ZeRO-1 does at micro-batch 1
    assert f"Cheapest whose peak fits: ZeRO-1 with micro-batch 1 (peak {format_bytes(halved)}/GPU" in text
    assert f"**peak ≈ {format_bytes(peak)}/GPU · {percent_of(peak, 80 * GiB)} of 80.0 GiB**" in text


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
