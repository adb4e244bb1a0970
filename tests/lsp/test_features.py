"""Hover, inlay hints and completion end to end; the same figures as `zeromem check`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from lsp_session import OVERFLOW, ROOT, example, open_doc
from lsprotocol import types

from zeromem_lsp.configs import key_inventory

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def hover(doc, needle, delta=1):
    return await doc.client.text_document_hover_async(
        types.HoverParams(text_document=doc.identifier, position=doc.at(needle, delta)))


async def complete(doc, offset):
    result = await doc.client.text_document_completion_async(
        types.CompletionParams(text_document=doc.identifier, position=doc.position(offset)))
    return result.items if result else []


async def test_hover_on_stage_shows_every_stage(client):
    """The answer first, short and readable in every client (issue 28): the verdict on line 1, the stage table as
    a fixed-width block (no Markdown table pipes), at most 15 lines none wider than 80; the whole breakdown is one
    command away (zeromem.memoryReport, and `zeromem estimate --config FILE -v`)."""
    doc = open_doc(client, "ds_config.json", OVERFLOW)
    result = await hover(doc, '"stage"')
    text = result.contents.value
    assert result.contents.kind == types.MarkupKind.Markdown
    lines = text.splitlines()
    assert lines[0].startswith("**ZeRO-1 exceeds the budget: model state 35.9 GiB of 24.0 GiB per GPU (149%")
    assert len(lines) <= 15 and max(map(len, lines)) <= 80
    assert not any(line.startswith("|") for line in lines)
    block = text.split("```text\n", 1)[1].split("```", 1)[0]
    for figure in ("104.3 GiB", "35.9 GiB", "24.4 GiB", "13.0 GiB", "149%", "54%"):
        assert figure in block
    assert "▶ ZeRO-1" in block and max(map(len, block.splitlines())) <= 60
    assert "Cheapest that fits: ZeRO-3" in text
    assert "`zeromem estimate --config" in text and "ds_config.json -v`" in text
    assert doc.text_of(result.range) == '"stage"'
    breakdown = await doc.breakdown()
    assert "| ▶ | **ZeRO-1** | 35.9 GiB |" in breakdown
    assert "P = 7B × 2 B (bf16) = 13.0 GiB" in breakdown and "R = 8 ranks" in breakdown
    assert "█" in breakdown and "│" in breakdown


async def test_hover_on_value_after_emoji_has_exact_range(client):
    doc = open_doc(client, "ds_config.json", OVERFLOW)
    result = await hover(doc, '"stage": 1', len('"stage": '))
    assert doc.text_of(result.range) == "1"
    assert "ZeRO-1 exceeds the budget: model state 35.9 GiB of 24.0 GiB per GPU" in result.contents.value


async def test_hover_on_offload_batch_and_zeromem_keys(client):
    doc = open_doc(client, "ds_config.json", example("zero3-13b-offload.json"))
    offload = (await hover(doc, '"device"')).contents.value
    assert "**Offload at ZeRO-3** (optimizer → cpu): GPU 1.5 GiB · host 10.6 GiB per rank" in offload
    assert '`"cpu"`' in offload  # the enum values of device
    doc2 = open_doc(client, "ds_config.json", example("zero1-7b-8x24gib.json"))
    batch = (await hover(doc2, '"train_micro_batch_size_per_gpu"')).contents.value
    assert "Implied world size: 8 ranks" in batch
    budget = (await hover(doc2, '"gpu_memory"')).contents.value
    assert "Per-GPU memory budget" in budget and "24.0 GiB (25,769,803,776 B)" in budget


async def test_inlay_hint_after_the_stage_value(client):
    doc = open_doc(client, "ds_config.json", OVERFLOW)
    end = doc.position(len(doc.text))
    hints = await client.text_document_inlay_hint_async(types.InlayHintParams(
        text_document=doc.identifier, range=types.Range(start=doc.position(0), end=end)))
    [hint] = hints
    assert hint.label == "≈ 35.9 GiB/GPU · 149% of 24.0 GiB"
    stage_end = OVERFLOW.index('"stage": 1') + len('"stage": 1')
    assert hint.position == doc.position(stage_end)
    # a range that does not hold the stage gets nothing
    outside = await client.text_document_inlay_hint_async(types.InlayHintParams(
        text_document=doc.identifier, range=types.Range(start=doc.position(0), end=doc.position(10))))
    assert not outside


async def test_figures_match_zeromem_check(client):
    path = ROOT / "examples" / "zero1-7b-8x24gib.json"
    done = subprocess.run([sys.executable, "-m", "zeromem_lsp", "check", "--format", "json", str(path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    [cli] = json.loads(done.stdout)["findings"]
    doc = open_doc(client, "zero1.json", path.read_text(encoding="utf-8"))
    [diagnostic] = await doc.diagnostics()
    assert diagnostic.message == cli["message"] and diagnostic.code == cli["code"]
    hints = await client.text_document_inlay_hint_async(types.InlayHintParams(
        text_document=doc.identifier, range=types.Range(start=doc.position(0), end=doc.position(len(doc.text)))))
    hover_text = (await hover(doc, '"stage"')).contents.value
    for figure in ("35.9 GiB", "24.0 GiB"):
        assert figure in cli["message"] and figure in hints[0].label and figure in hover_text


async def test_completion_of_zero_keys_with_docs(client):
    text = '{\n  "zero_optimization": {\n    "stage": 2,\n    "off\n  }\n}\n'
    doc = open_doc(client, "ds_config.json", text)
    items = await complete(doc, text.index('"off') + 4)
    labels = [item.label for item in items]
    assert "offload_optimizer" in labels and "overlap_comm" in labels
    assert "stage" not in labels  # already present
    offload = next(item for item in items if item.label == "offload_optimizer")
    assert offload.kind == types.CompletionItemKind.Property
    assert doc.text_of(offload.text_edit.range) == '"off'
    assert offload.text_edit.new_text == '"offload_optimizer": '
    assert "offload" in offload.documentation.value.lower()


async def test_completion_of_values_and_zeromem_block(client):
    text = '{"zero_optimization": {"stage": 1, "offload_optimizer": {"device": ""}},\n "zeromem": {"parameters": "7B", "world_size": 8, "gpu_memory": "24GiB", "precision": "" }}'
    doc = open_doc(client, "ds_config.json", text)
    devices = await complete(doc, text.index('"device": "') + len('"device": "'))
    assert [item.label for item in devices] == ['"none"', '"cpu"', '"nvme"']
    stages = await complete(doc, text.index('"stage": 1') + len('"stage": 1'))
    assert [item.label for item in stages] == ["0", "1", "2", "3"]
    assert "13.0 GiB" in stages[3].detail  # each stage with its figure
    precisions = await complete(doc, text.index('"precision": "') + len('"precision": "'))
    assert {item.label for item in precisions} == {'"fp32"', '"fp16"', '"bf16"'}
    keys = await complete(doc, text.index(' }}') + 1)
    labels = [item.label for item in keys]
    assert "optimizer" in labels and "warn_fraction" in labels and "parameters" not in labels


async def test_completion_at_top_level_includes_zeromem(client):
    text = '{\n  "train_batch_size": 8,\n  \n}'
    doc = open_doc(client, "ds_config.json", text)
    items = await complete(doc, text.index("\n  \n") + 3)
    labels = [item.label for item in items]
    assert "zeromem" in labels and "zero_optimization" in labels and "train_batch_size" not in labels


async def test_hover_says_first_when_the_figures_are_approximate(client):
    """A key the model does not cover (issue 26): the hover's first paragraph names it with its value and why."""
    config = json.loads(OVERFLOW)
    config["zero_optimization"]["zero_quantized_weights"] = True
    doc = open_doc(client, "ds_config.json", json.dumps(config, indent=2))
    text = (await hover(doc, '"stage"')).contents.value
    head = text.split("\n\n")[:2]
    assert " ".join(head[1].split()).startswith(
        "**Approximate:** `zero_optimization.zero_quantized_weights: true` is not modelled")
    assert len(text.splitlines()) <= 15
    breakdown = await doc.breakdown()
    why = key_inventory.classify("deepspeed", "zero_optimization.zero_quantized_weights")[2]
    assert f"`zero_optimization.zero_quantized_weights: true` is not modelled ({why})" in breakdown
    plain = open_doc(client, "ds_config.json", OVERFLOW)
    assert "Approximate" not in (await hover(plain, '"stage"')).contents.value


async def test_hover_on_the_sequence_length_says_how_long_can_go(client, tmp_path):
    config = json.loads(OVERFLOW)
    config["zeromem"] = {"parameters": {"from_config": str(ROOT / "tests/data/models/Meta-Llama-3-8B/config.json")},
                         "world_size": 8, "gpu_memory": "80GiB", "sequence_length": 4096}
    config["train_micro_batch_size_per_gpu"], config["gradient_accumulation_steps"] = 1, 8
    doc = open_doc(client, "ds_config.json", json.dumps(config, indent=2))
    text = (await hover(doc, '"sequence_length"')).contents.value
    longest = int(text.split("at ZeRO-1: ", 1)[1].split(" tokens", 1)[0].replace(",", ""))
    done = subprocess.run([sys.executable, "-m", "zeromem_lsp", "estimate", "--model-config",
                           str(ROOT / "tests/data/models/Meta-Llama-3-8B/config.json"), "-R", "8", "--micro-batch",
                           "1", "--gradient-accumulation-steps", "8", "--sequence-length", "4096", "--gpu-memory",
                           "80GiB", "--max-sequence-length", "--format", "json"], capture_output=True, text=True)
    assert json.loads(done.stdout)["max_sequence_length"]["zero1"] == longest
