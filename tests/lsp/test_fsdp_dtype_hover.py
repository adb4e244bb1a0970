"""Issue 21 item 13 in the editor: hovering the FSDP example's sharding strategy or its `mixed_precision`
names the FSDP parameter dtype (fp32 under bf16 mixed precision) the figures use."""

from __future__ import annotations

import pytest
from lsp_session import ROOT, open_doc, with_breakdown
from lsprotocol import types

pytestmark = pytest.mark.asyncio(loop_scope="session")

EXAMPLE = (ROOT / "examples" / "accelerate-fsdp-13b-8x40gib.yaml").read_text(encoding="utf-8")


async def _hover(doc, needle: str) -> str:
    result = await doc.client.text_document_hover_async(
        types.HoverParams(text_document=doc.identifier, position=doc.at(needle, 1)))
    return await with_breakdown(doc, result.contents.value)


@pytest.mark.parametrize("needle", ["SHARD_GRAD_OP", "mixed_precision"])
async def test_hover_names_the_fsdp_parameter_dtype(client, needle):
    doc = open_doc(client, f"fsdp-{needle}/accelerate.yaml", EXAMPLE, "yaml")
    text = await _hover(doc, needle)
    assert "**FSDP parameter dtype: fp32** (4 B per parameter" in text
    assert "upcasts the trainable sharded parameters to fp32" in text


async def test_declared_precision_is_named_as_declared(client):
    doc = open_doc(client, "fsdp-declared/accelerate.yaml", EXAMPLE.replace(
        "    gpu_memory: 40GiB", "    gpu_memory: 40GiB\n    precision: bf16"), "yaml")
    text = await _hover(doc, "SHARD_GRAD_OP")
    assert "**FSDP parameter dtype: bf16** (2 B per parameter; gradients and optimizer state follow it) — " \
           "zeromem.precision." in text
