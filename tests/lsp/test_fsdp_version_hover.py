"""The FSDP version in the editor: hovering an Accelerate YAML's FSDP strategy shows the version the peak follows,
credited to the key that writes it (or to accelerate launch's default, FSDP1), and a LoRA run's plan names the
matching engine. FSDP2 holds one more gathered layer at the loss than FSDP1 (memory/step.py `Fsdp.moments`)."""

from __future__ import annotations

import pytest
from lsp_session import ROOT, open_doc, with_breakdown
from lsprotocol import types

pytestmark = pytest.mark.asyncio(loop_scope="session")

LLAMA3 = ROOT / "tests/data/models/Meta-Llama-3-8B/config.json"


def accelerate_yaml(version_line: str) -> str:
    return ("distributed_type: FSDP\nnum_processes: 8\nmixed_precision: bf16\nfsdp_config:\n"
            f"{version_line}  fsdp_offload_params: false\n  zeromem:\n"
            f"    parameters: {{from_config: {LLAMA3}}}\n    sequence_length: 1024\n    micro_batch: 1\n"
            "    precision: bf16\n    lora_rank: 16\n")


async def hover(doc, needle: str) -> str:
    result = await doc.client.text_document_hover_async(
        types.HoverParams(text_document=doc.identifier, position=doc.at(needle, 1)))
    return await with_breakdown(doc, result.contents.value)


async def test_the_hover_credits_the_fsdp_version_to_its_key_or_to_accelerates_default(client):
    written = open_doc(client, "fsdp-v2/accelerate.yaml",
                       accelerate_yaml("  fsdp_version: 2\n  fsdp_reshard_after_forward: true\n"), "yaml")
    text = await hover(written, "fsdp_reshard_after_forward")
    assert "FSDP version 2 — fsdp_version 2" in text, text
    assert "fsdp2 bytes" in text  # the adapter plan follows the same version
    unversioned = open_doc(client, "fsdp-v1/accelerate.yaml", accelerate_yaml("  fsdp_sharding_strategy: FULL_SHARD\n"),
                           "yaml")
    text = await hover(unversioned, "fsdp_sharding_strategy")
    assert "FSDP version 1 — default: FSDP1 (accelerate launch's --fsdp_version default" in text, text
    assert "fsdp1 bytes" in text
