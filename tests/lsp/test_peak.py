"""The peak in the editor: stage hover table, buffer-setting hover, inlay hint and ZM106's quick fixes, over
stdio. Expected bytes: the phase holding the peak as the plan shows it, its parts checked by hand arithmetic."""

from __future__ import annotations

import json
import math

import pytest
from lsp_session import ROOT, open_doc, with_breakdown
from lsprotocol import types

pytestmark = pytest.mark.asyncio(loop_scope="session")

CASE = next(case for case in json.loads((ROOT / "tests/data/activations/measured.json").read_text())["cases"]
            if case["id"] == "llama-0")  # bf16, sdpa, micro-batch 2, sequence 64
MEASURED = CASE["saved_bytes"]["2"]
GiB = 2**30


def parameters() -> int:
    """llama-0 by hand: V 1000, h 128, 4 q heads and 2 kv heads of 48, I 320, 2 layers, untied head."""
    attention = 128 * 4 * 48 + 2 * 128 * 2 * 48 + 4 * 48 * 128
    return 2 * 1000 * 128 + 2 * (attention + 3 * 128 * 320 + 2 * 128) + 128


def config_text(tmp_path, budget: int) -> str:
    model = tmp_path / "config.json"
    model.write_text(json.dumps({**CASE["config"], "num_hidden_layers": 2}))
    return json.dumps({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
                       "bf16": {"enabled": True},
                       "zero_optimization": {"stage": 2, "overlap_comm": True, "reduce_bucket_size": 100_000_000,
                                             "allgather_bucket_size": 100_000_000},
                       "zeromem": {"parameters": {"from_config": str(model)}, "world_size": 8,
                                   "sequence_length": 64, "gpu_memory": budget}}, indent=1)


def zero2_parts(tmp_path) -> dict[str, int]:
    """ZeRO-2's peak phase parts as the plan shows them, checked against hand arithmetic where they are fixed."""
    from zeromem_lsp.analysis import analyse
    from zeromem_lsp.project import file_loader

    text = config_text(tmp_path, 80 * GiB)
    plan = analyse(text, "ds_config.json", loader=file_loader(tmp_path / "ds_config.json")).plan
    held = plan.peak.stage_peak("zero2").held
    parts, n = dict(held.parts), parameters()
    assert held.moment == "the top layer's backward"
    assert parts["reduce bucket"] == 2 * 2 * 100_000_000  # overlap_comm: two IPG buffers of 2 B × 1e8
    assert parts["parameters"] == 2 * n and parts["fp32 master"] == 4 * math.ceil(n / 8)
    assert parts["optimizer states"] == 8 * math.ceil(n / 8)
    return parts


def zero2_reserve(tmp_path) -> int:
    """The default reserve at ZeRO-2: two cuBLAS workspaces + the CUDA context + one NCCL communicator (8 ranks)."""
    from zeromem_lsp.gpu.fixed_costs import WORKSPACES_PER_STEP, fixed_costs

    costs = fixed_costs("H100", ranks=8)
    return WORKSPACES_PER_STEP * costs.workspace + costs.context.low + costs.nccl.low


def expected_zero2_peak(tmp_path) -> int:
    return sum(zero2_parts(tmp_path).values()) + zero2_reserve(tmp_path)  # the phase + the default reserve


async def hover(doc, needle):
    result = await doc.client.text_document_hover_async(
        types.HoverParams(text_document=doc.identifier, position=doc.at(needle, 1)))
    return await with_breakdown(doc, result.contents.value)


async def test_stage_hover_has_the_peak_table_with_arithmetic(client, tmp_path):
    doc = open_doc(client, "ds_config.json", config_text(tmp_path, 80 * GiB))
    text = await hover(doc, '"stage"')
    peak, parts = expected_zero2_peak(tmp_path), zero2_parts(tmp_path)
    assert "| stage | model state | peak | of budget |  | peak phase: largest parts |" in text
    row = next(line for line in text.splitlines() if line.startswith("| ▶ | **ZeRO-2** | "))
    assert f" | {peak:,} (" in row and " | fits | backward: reduce bucket " in row
    shown = " + ".join(f"{name} {size:,}" for name, size in parts.items())
    reserve = zero2_reserve(tmp_path)
    assert f"ZeRO-2: backward (the top layer's backward): {shown} + reserved {reserve:,} (cuBLAS workspaces " in text
    assert f" = {peak:,} B" in text
    assert f"activations saved for backward (sdpa) = " in text and f"= {MEASURED:,} B" in text
    assert "micro-batch 2 — train_micro_batch_size_per_gpu" in text and "sequence length 64 — zeromem.sequence_length" in text


async def test_bucket_hover_shows_its_cost(client, tmp_path):
    doc = open_doc(client, "ds_config.json", config_text(tmp_path, 80 * GiB))
    text = await hover(doc, '"reduce_bucket_size"')
    assert "costs" in text and "4.5 × 2 B × 100,000,000 (overlap_comm) = 900,000,000 B" in text


async def test_inlay_hint_adds_the_peak(client, tmp_path):
    doc = open_doc(client, "ds_config.json", config_text(tmp_path, 80 * GiB))
    [hint] = await client.text_document_inlay_hint_async(types.InlayHintParams(
        text_document=doc.identifier, range=types.Range(start=doc.position(0), end=doc.position(len(doc.text)))))
    assert "peak ≈" in hint.label
    tooltip = hint.tooltip if isinstance(hint.tooltip, str) else hint.tooltip.value
    assert f"= {expected_zero2_peak(tmp_path):,} B" in tooltip


async def test_zm106_with_quick_fixes(client, tmp_path):
    doc = open_doc(client, "ds_config.json", config_text(tmp_path, expected_zero2_peak(tmp_path) - 1))
    [warning] = [d for d in await doc.diagnostics() if d.code == "ZM106"]
    assert warning.severity == types.DiagnosticSeverity.Warning
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=doc.identifier, range=warning.range, context=types.CodeActionContext(diagnostics=[warning])))
    titles = [action.title for action in actions if action.diagnostics and action.diagnostics[0].code == "ZM106"]
    assert any(title.startswith("Halve the micro-batch to 1 and double gradient accumulation to 2") for title in titles)
    assert any("gradient checkpointing" in title for title in titles)
    shrink = next(a for a in actions if a.title.startswith("Shrink reduce_bucket_size"))
    edits = shrink.edit.document_changes[0].edits if shrink.edit.document_changes else shrink.edit.changes[doc.uri]
    doc.apply(edits)
    assert "ZM106" not in [d.code for d in await doc.diagnostics()]
    # the largest size that fits: peak - 1 leaves 1 byte less for the two IPG buffers of 2 B per element each
    expected = (2 * 2 * 100_000_000 - 1) // 4
    assert json.loads(doc.text)["zero_optimization"]["reduce_bucket_size"] == expected


async def test_missing_inputs_are_named_in_the_hover(client):
    text = json.dumps({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2},
                       "zeromem": {"parameters": "1B", "world_size": 8}})
    doc = open_doc(client, "ds_config.json", text)
    hovered = await hover(doc, '"stage"')
    assert "Peak per GPU: not computable yet" in hovered and "the sequence length" in hovered
    assert "ZeRO-2 ≈" in hovered  # model-state figures still show


async def test_zero3_settings_hover(client, tmp_path):
    text = config_text(tmp_path, 80 * GiB).replace('"stage": 2', '"stage": 3').replace(
        '"reduce_bucket_size"', '"stage3_param_persistence_threshold": 10, "prefetch_bucket_size": 1000, '
        '"reduce_bucket_size"')
    doc = open_doc(client, "ds_config.json", text)
    prefetch = await hover(doc, '"prefetch_bucket_size"')  # DeepSpeed's alias of stage3_prefetch_bucket_size
    assert "costs" in prefetch and "2 B × 1,000 = 2,000 B" in prefetch
    persistence = await hover(doc, '"stage3_param_persistence_threshold"')
    assert "stay whole on every GPU" in persistence
    gather = await hover(doc, '"allgather_bucket_size"')
    assert "holds no buffer at ZeRO-3" in gather and "ZeRO-2" in gather
