"""A LoRA / QLoRA run declared in the zeromem block, in the editor over stdio: the stage hover shows trainable vs
total and P, G, O as their terms; an adapter the model cannot take is ZM104 on its key. Expected figures: PEFT's own
counts (tests/data/adapters/peft_counts_full_size.json) and arithmetic on the parts the hover shows."""

from __future__ import annotations

import json
import math
import re

import pytest
from lsp_session import ROOT, open_doc, with_breakdown
from lsprotocol import types

from zeromem_lsp.units import format_bytes

pytestmark = pytest.mark.asyncio(loop_scope="session")

LLAMA3 = ROOT / "tests/data/models/Meta-Llama-3-8B/config.json"
PEFT = {case["id"]: case["measured"] for case in
        json.loads((ROOT / "tests/data/adapters/peft_counts_full_size.json").read_text())["cases"]}


def config_text(stage: int, block: dict) -> str:
    return json.dumps({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                       "zero_optimization": {"stage": stage},
                       "zeromem": {"parameters": {"from_config": str(LLAMA3)}, "world_size": 8, **block}}, indent=1)


async def hover(doc, needle):
    result = await doc.client.text_document_hover_async(
        types.HoverParams(text_document=doc.identifier, position=doc.at(needle, 1)))
    return await with_breakdown(doc, result.contents.value)


def number(text: str) -> int:
    return int(text.replace(",", ""))


def shown_sum(text: str, name: str) -> tuple[int, int]:
    """(the terms `count × each B` rebuilt, the total shown) of the hover's `- P = ...` line."""
    line = next(line for line in text.splitlines() if line.startswith(f"- {name} = "))
    terms = sum(number(count) * int(each) for count, each in re.findall(r"([\d,]+) × (\d+) B", line))
    return terms, number(re.search(r"= ([\d,]+) B$", line).group(1))


@pytest.mark.parametrize("stage", [2, 3])
async def test_stage_hover_shows_trainable_and_the_terms(client, stage):
    doc = open_doc(client, "ds_config.json", config_text(stage, {"lora_rank": 16, "lora_targets": ["q_proj", "v_proj"]}))
    text = await hover(doc, '"stage"')
    measured = PEFT["llama3-8b-qv-r16"]
    assert f"{measured['trainable']:,} trainable" in text and f"of {measured['all']:,} parameters" in text
    p, g, o = (shown_sum(text, name) for name in ("P", "G", "O"))
    assert all(rebuilt == total for rebuilt, total in (p, g, o))
    r = 8
    figure = p[1] + math.ceil((g[1] + o[1]) / r) if stage == 2 else math.ceil((p[1] + g[1] + o[1]) / r)
    row = next(line for line in text.splitlines() if f"**ZeRO-{stage}**" in line)
    assert "▶" in row and f"| {format_bytes(figure)} |" in row  # ZeRO-2: the frozen base whole on every rank
    frozen = number(re.search(r"frozen \(bf16\) ([\d,]+) × 2 B", text).group(1)) * 2
    assert (figure > frozen) if stage == 2 else (figure < frozen / 4)


async def test_targets_the_model_lacks_are_zm104_on_the_key(client):
    doc = open_doc(client, "ds_config.json", config_text(2, {"lora_rank": 16, "lora_targets": ["c_attn"]}))
    diagnostics = await doc.diagnostics()
    [found] = [d for d in diagnostics if d.code == "ZM104"]
    assert "LoRA targets c_attn match no module of this llama model" in found.message
    assert "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj" in found.message
    line = next(i for i, text in enumerate(doc.text.splitlines()) if '"lora_targets"' in text)
    assert found.range.start.line == line
