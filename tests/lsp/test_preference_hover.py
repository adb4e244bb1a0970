"""A DPO run declared in the zeromem block, in the editor over stdio: the stage hover's peak shows the frozen
reference model as a part (ZeRO-2: whole on every rank, as TRL's prepare_deepspeed runs it at stage 0) and the
trainer credited to the block; with precompute_ref_log_probs the part is gone. Expected bytes: the model's
parameters in bf16 (Llama-3-8B: 8,030,261,248)."""

from __future__ import annotations

import json

import pytest
from lsp_session import ROOT, open_doc, with_breakdown
from lsprotocol import types

pytestmark = pytest.mark.asyncio(loop_scope="session")

LLAMA3 = ROOT / "tests/data/models/Meta-Llama-3-8B/config.json"
P = 2 * 8_030_261_248


def config_text(block: dict) -> str:
    return json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                       "zero_optimization": {"stage": 2},
                       "zeromem": {"parameters": {"from_config": str(LLAMA3)}, "world_size": 8,
                                   "sequence_length": 1024, **block}}, indent=1)


async def hover(doc, needle):
    result = await doc.client.text_document_hover_async(
        types.HoverParams(text_document=doc.identifier, position=doc.at(needle, 1)))
    return await with_breakdown(doc, result.contents.value)


async def test_the_stage_hover_shows_the_reference_model(client):
    doc = open_doc(client, "ds_config.json", config_text({"trainer": "dpo"}))
    text = await hover(doc, '"stage"')
    assert f"reference model {P:,}" in text
    assert "trainer dpo — zeromem.trainer" in text
    assert "dpo (TRL): chosen and rejected stacked, 2 rows" in text
    gone = open_doc(client, "ds_config_pre.json", config_text({"trainer": "dpo", "precompute_ref_log_probs": True}))
    text = await hover(gone, '"stage"')
    assert "reference model" not in text and "precomputed reference log-probs on — zeromem.precompute_ref_log_probs" in text
