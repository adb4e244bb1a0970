"""A loss kernel set in the zeromem block, in the editor over stdio: the stage hover names it with its origin and
shows what of the activations it does not keep, so the peak's parts add up from what is shown."""

from __future__ import annotations

import json
import re

import pytest
from lsp_session import ROOT, open_doc, with_breakdown
from lsprotocol import types

pytestmark = pytest.mark.asyncio(loop_scope="session")

QWEN = ROOT / "tests/data/models/Qwen2.5-7B/config.json"


def config_text(kernel: str) -> str:
    return json.dumps({"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
                       "zero_optimization": {"stage": 3},
                       "zeromem": {"parameters": {"from_config": str(QWEN)}, "world_size": 8, "sequence_length": 4096,
                                   "loss_kernel": kernel}}, indent=1)


def number(text: str) -> int:
    return int(text.replace(",", ""))


async def stage_hover(client, kernel: str) -> str:
    doc = open_doc(client, "ds_config.json", config_text(kernel))
    result = await doc.client.text_document_hover_async(
        types.HoverParams(text_document=doc.identifier, position=doc.at('"stage"', 1)))
    return await with_breakdown(doc, result.contents.value)


async def test_the_hover_shows_the_kernel_and_the_activations_it_keeps(client):
    text = await stage_hover(client, "chunked_ce")
    assert "loss kernel chunked_ce — zeromem.loss_kernel" in text
    line = re.search(r'loss kernel chunked_ce \(zeromem\.loss_kernel\): Transformers\' loss term ([\d,]+) is not kept: '
                     r'"activations" = ([\d,]+) − ([\d,]+) = ([\d,]+) B', text)
    assert line, text
    term, saved, dropped, kept = (number(group) for group in line.groups())
    assert term == dropped and saved - dropped == kept
    assert f"activations {kept:,}" in text and "chunked logits" in text and "log-softmax gradients" not in text
    plain = await stage_hover(client, "hf")
    assert "log-softmax gradients" in plain and "loss kernel hf" in plain and "is not kept" not in plain
