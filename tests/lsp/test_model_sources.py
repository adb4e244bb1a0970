"""from_config naming a model directory, in the editor: the hover names the count, the file it resolved to
and the Transformers defaults it used (google/gemma-3-4b-it's published config.json: counted whole, vision tower,
projector and language model)."""

from __future__ import annotations

import json
import shutil

import pytest
from lsp_session import ROOT, open_doc, with_breakdown
from lsprotocol import types

pytestmark = pytest.mark.asyncio(loop_scope="session")

GEMMA3_4B = ROOT / "tests" / "data" / "models" / "gemma-3-4b-it"


async def test_a_model_directory_counts_with_transformers_defaults(client, tmp_path):
    shutil.copytree(GEMMA3_4B, tmp_path / "gemma")
    text = json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                       "zero_optimization": {"stage": 3},
                       "zeromem": {"parameters": {"from_config": str(tmp_path / "gemma")}, "world_size": 8}}, indent=1)
    doc = open_doc(client, "ds_config.json", text)
    result = await client.text_document_hover_async(
        types.HoverParams(text_document=doc.identifier, position=doc.at('"stage"', 1)))
    hover = await with_breakdown(doc, result.contents.value)
    assert "4,300,079,472 parameters counted from" in hover
    assert "vision_tower 416,866,032 + multi_modal_projector 2,950,272 + language_model 3,880,263,168" in hover
    assert str(tmp_path / "gemma" / "config.json") in hover
    assert "num_attention_heads=8" in hover and "Transformers 5.24.0 defaults" in hover
