"""A recipe in the editor (pytest-lsp over stdio): axolotl's gemma-3-4b-qlora.yml with its model as a local
directory (google/gemma-3-4b-it's published config.json) and a DeepSpeed file: the hover on `deepspeed:`
has the peak from the recipe's micro-batch and sequence, the inlay hint sits after the model, and a
misspelt key or a missing DeepSpeed file is a diagnostic on the recipe's own line."""

from __future__ import annotations

import shutil

import pytest
from lsp_session import ROOT, open_doc, with_breakdown
from lsprotocol import types

from zeromem_lsp.units import format_bytes

pytestmark = pytest.mark.asyncio(loop_scope="session")

RECIPE = ROOT / "tests" / "data" / "recipes" / "axolotl" / "examples" / "gemma3" / "gemma-3-4b-qlora.yml"
ZERO3 = ROOT / "tests" / "data" / "recipes" / "axolotl" / "deepspeed_configs" / "zero3.json"
GEMMA3_4B = ROOT / "tests" / "data" / "models" / "gemma-3-4b-it-text"  # its language model (the composite: no peak)


def recipe_text(tmp_path, deepspeed: str | None, optimizer: str | None = None) -> str:
    """The recipe with its model as a local directory; with `deepspeed`, that file and a zeromem block giving
    the world size (axolotl drops keys it does not know, so the block may live in the recipe). `optimizer`
    replaces the recipe's 8-bit AdamW (whose full fine-tuning peak the phase model cannot give)."""
    shutil.copytree(GEMMA3_4B, tmp_path / "gemma")
    text = RECIPE.read_text(encoding="utf-8").replace("base_model: google/gemma-3-4b-it",
                                                      f"base_model: {tmp_path / 'gemma'}")
    if optimizer is not None:
        text = text.replace("optimizer: adamw_bnb_8bit", f"optimizer: {optimizer}")
    return text + (f"\ndeepspeed: {deepspeed}\nzeromem:\n  world_size: 8\n" if deepspeed else "")


async def test_the_deepspeed_hover_has_the_recipes_peak(client, tmp_path):
    doc = open_doc(client, "gemma-3-4b-qlora.yml", recipe_text(tmp_path, str(ZERO3)), "yaml")
    result = await client.text_document_hover_async(
        types.HoverParams(text_document=doc.identifier, position=doc.at("deepspeed:", 1)))
    hover = await with_breakdown(doc, result.contents.value)
    assert "**Peak per GPU**" in hover and "| ▶ | **ZeRO-3** |" in hover
    assert "micro-batch 2 — micro_batch_size" in hover and "sequence length 2,048 — sequence_len" in hover
    # the loss's backward: two fp32 gradients of 4 B × micro 2 × 2048 × vocabulary
    assert f"log-softmax gradients {2 * 4 * 2 * 2048 * 262_208:,}" in hover
    assert "3,880,263,168 parameters counted from" in hover and "R = 8 ranks — zeromem.world_size" in hover
    # QLoRA with the recipe's 8-bit AdamW: the frozen-base step, rebuilt from the parts the hover shows
    line = next(line for line in hover.splitlines() if line.startswith("- ZeRO-3: "))
    moment, figures = line.removeprefix("- ZeRO-3: ").split(": ", 1)
    terms, total = figures.rsplit(" = ", 1)
    terms = terms.split(" (cuBLAS workspaces ", 1)[0]  # the reserve's own parts, in brackets after it
    parts = {name: int(value.replace(",", "")) for name, value in (term.rsplit(" ", 1) for term in terms.split(" + "))}
    # no gradient yet at the loss; gradient_accumulation_steps 4 adds none: ZeRO-3 accumulates in its partitions
    assert moment == "backward (the loss's backward)" and "gradients" not in parts
    assert sum(parts.values()) == int(total.split(" B")[0].replace(",", ""))
    saved = next(line for line in hover.splitlines() if line.startswith("- with LoRA ("))
    assert saved.endswith(f"= {parts['activations']:,} B, instead of the full fine-tuning 5,122,402,310 B")
    p_line = next(line for line in hover.splitlines() if line.startswith("- P = "))
    p_bytes = int(p_line.rsplit(" = ", 1)[1].removesuffix(" B").replace(",", ""))
    assert parts["parameters"] == -(-p_bytes // 8)  # ZeRO-3: ⌈P/R⌉
    assert "measured as a whole step with PEFT (torch, QLoRA NF4, DeepSpeed ZeRO-0/1/2/3" in hover
    assert "); offload derived, not measured whole" in hover


async def test_the_recipes_8bit_optimizer_gives_a_full_fine_tune_a_derived_peak(client, tmp_path):
    """bitsandbytes' 8-bit AdamW under ZeRO-3: its step is derived from its code (memory/optimizer_step.py), so the
    stage has a peak, and the hover says which part is derived."""
    text = recipe_text(tmp_path, str(ZERO3)).replace("adapter: qlora\n", "")  # no adapter: every weight trained
    doc = open_doc(client, "gemma-3-4b-full.yml", text, "yaml")
    result = await client.text_document_hover_async(
        types.HoverParams(text_document=doc.identifier, position=doc.at("deepspeed:", 1)))
    hover = await with_breakdown(doc, result.contents.value)
    row = next(line for line in hover.splitlines() if line.startswith("| ▶ | **ZeRO-3** |"))
    assert "| — |" not in row and "peak unknown" not in hover
    assert "8-bit m, v + block scales (derived)" in hover


async def test_the_inlay_hint_follows_the_model(client, tmp_path):
    """No deepspeed / fsdp_config: DDP, whose per-rank state needs no world size."""
    doc = open_doc(client, "gemma-3-4b-qlora.yml", recipe_text(tmp_path, None), "yaml")
    [hint] = await client.text_document_inlay_hint_async(types.InlayHintParams(
        text_document=doc.identifier, range=types.Range(start=doc.position(0), end=doc.position(len(doc.text)))))
    model_line = doc.text.index(str(tmp_path / "gemma")) + len(str(tmp_path / "gemma"))
    assert hint.position == doc.position(model_line) and "peak ≈" in hint.label


async def test_a_missing_deepspeed_file_and_a_misspelt_key_are_diagnostics_here(client, tmp_path):
    text = recipe_text(tmp_path, "deepspeed_configs/zero3.jsn").replace("micro_batch_size: 2", "micro_batchsize: 2")
    doc = open_doc(client, "gemma-3-4b-qlora.yml", text, "yaml")
    diagnostics = {d.code: d for d in await doc.diagnostics()}
    missing, misspelt = diagnostics["ZM311"], diagnostics["ZM353"]
    assert missing.range.start == doc.position(doc.text.index("deepspeed_configs/zero3.jsn"))
    assert "deepspeed_configs/zero3.jsn" in missing.message and "looked for" in missing.message
    assert misspelt.range.start == doc.position(doc.text.index("micro_batchsize"))
    assert misspelt.severity == types.DiagnosticSeverity.Warning


async def test_the_sequence_key_hover_shows_what_it_costs(client, tmp_path):
    doc = open_doc(client, "gemma-3-4b-qlora.yml", recipe_text(tmp_path, None), "yaml")
    result = await client.text_document_hover_async(
        types.HoverParams(text_document=doc.identifier, position=doc.at("sequence_len:", 1)))
    hover = await with_breakdown(doc, result.contents.value)
    assert "**Peak per GPU**" in hover and "| ▶ | **DDP** |" in hover  # torch DDP: no FSDP strategy shown
    assert "NO_SHARD" not in hover and "FSDP parameter dtype" not in hover
    assert "sequence length 2,048 — sequence_len" in hover


async def test_a_recipe_without_an_engine_is_torch_ddp_in_the_hover(client, tmp_path):
    """No deepspeed / fsdp_config: plain torch DDP — only the DDP stage, no master copy, no offload to
    suggest; over the budget the advice names DeepSpeed or FSDP (an edit of the recipe zeromem cannot make)."""
    # as a full fine-tune (no `adapter:`: axolotl trains every parameter)
    text = recipe_text(tmp_path, None).replace("adapter: qlora\n", "") + "zeromem:\n  gpu_memory: 8GiB\n"
    doc = open_doc(client, "gemma-3-4b-full.yml", text, "yaml")
    result = await client.text_document_hover_async(
        types.HoverParams(text_document=doc.identifier, position=doc.at("base_model:", 1)))
    hover = await with_breakdown(doc, result.contents.value)
    parameters = 3_880_263_168  # gemma-3-4b-it's text model; bf16 weights and grads, adamw_bnb_8bit's 2 B state
    state = 3 * 2 * parameters + 6 * 262_208 * 2_560  # + the embedding's fp32 m, v (HF Trainer's nn.Embedding override)
    # P + G + O, the DDP formula; the 8-bit AdamW's full fine-tuning step is derived (bitsandbytes): a peak
    assert f"| ▶ | **DDP** | {format_bytes(state)} | — |" not in hover
    assert f"| ▶ | **DDP** | {format_bytes(state)} |" in hover and "peak unknown" not in hover
    assert "bf16 params 2 B + bf16 grads 2 B + adam8bit state 2 B (torch: no separate master copy)" in hover
    assert "engine torch" in hover and "ZeRO-3" not in hover.split("Nothing peaks")[0]
    assert "Offload: none (plain DDP has no offload; DeepSpeed ZeRO and FSDP do)." in hover
    assert "Nothing peaks within the budget under DDP" in hover and "`deepspeed:`" in hover
    (over,) = [item for item in await doc.diagnostics() if item.code == "ZM101"]
    assert over.message.startswith(f"DDP needs 25.4 GiB per GPU ({state:,} B)")
    assert "offload" not in over.message and "FSDP (an `fsdp_config`)" in over.message


async def test_a_non_recipe_yaml_gets_nothing(client):
    doc = open_doc(client, "ci.yml", "name: ci\njobs:\n  test:\n    runs-on: ubuntu-latest\n", "yaml")
    assert await doc.diagnostics() == []
    result = await client.text_document_hover_async(
        types.HoverParams(text_document=doc.identifier, position=doc.at("jobs", 1)))
    assert result is None
