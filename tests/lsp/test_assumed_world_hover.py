"""A recipe whose parallel degrees need more than one rank and that names no world size (axolotl takes it from the
launcher), in the editor: no ZM109 error, and the hover credits the world size to the assumption the settings
resolve once (the smallest world that runs the degrees), as `zeromem estimate -v` does."""

from __future__ import annotations

import pytest
from lsp_session import ROOT, open_doc, with_breakdown
from lsprotocol import types

pytestmark = pytest.mark.asyncio(loop_scope="session")

RECIPE = ROOT / "tests/data/recipes/axolotl/examples/expert_parallel/qwen3_30ba3b_ep_fft_4gpu.yaml"
MODEL = next((ROOT / "tests/data/hf_cache/models--Qwen--Qwen3-30B-A3B-Instruct-2507").glob("snapshots/*"))


def recipe(world: str = "") -> str:
    text = RECIPE.read_text(encoding="utf-8").replace("base_model: Qwen/Qwen3-30B-A3B-Instruct-2507",
                                                      f"base_model: {MODEL}")
    return text + (f"\nzeromem:\n  world_size: {world}\n" if world else "")


async def test_the_hover_shows_the_assumed_world_and_no_error_is_published(client):
    doc = open_doc(client, "ep/qwen3_30ba3b_ep_fft_4gpu.yaml", recipe(), "yaml")
    result = await client.text_document_hover_async(
        types.HoverParams(text_document=doc.identifier, position=doc.at("gradient_checkpointing:", 1)))
    hover = await with_breakdown(doc, result.contents.value)
    assert "R = 4 ranks — the smallest world that runs expert_parallel_size 4; give --world-size" in hover, hover
    assert "the world size is assumed" in " ".join(hover.split())  # the hover text is wrapped
    diagnostics = await doc.diagnostics()
    assert not [item for item in diagnostics if item.code == "ZM109"], diagnostics


async def test_a_written_world_the_degree_does_not_divide_is_an_error(client):
    doc = open_doc(client, "ep6/qwen3_30ba3b_ep_fft_4gpu.yaml", recipe("6"), "yaml")
    diagnostics = await doc.diagnostics()
    found = [item for item in diagnostics if item.code == "ZM109"]
    assert len(found) == 1 and found[0].severity == types.DiagnosticSeverity.Error, diagnostics
    assert "does not divide the world size 6" in found[0].message
