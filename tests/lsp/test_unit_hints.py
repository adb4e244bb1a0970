"""Issue 21 item 5 in the editor: a unitless GPU budget or parameter count in the editor settings or the
file's zeromem block is refused with a "did you mean 80GiB / 7B?" hint (a warning message; ZM104 on the value)."""

from __future__ import annotations

import pytest
from lsp_session import client_fixture, open_doc
from lsprotocol import types

pytestmark = pytest.mark.asyncio(loop_scope="module")

client = client_fixture(initialization_options={"zeromem": {"gpuMemory": 80, "parameters": "7B"}})

BLOCK = '{\n  "train_micro_batch_size_per_gpu": 4,\n  "zeromem": {"world_size": 8, "parameters": 7}\n}\n'


async def test_unitless_editor_budget_is_refused_with_a_hint(client):
    await client.until(lambda: any("gpuMemory" in m.message for m in client.messages))
    [message] = [m for m in client.messages if "gpuMemory" in m.message]
    assert message.type == types.MessageType.Warning and "did you mean 80GiB?" in message.message


async def test_unitless_block_count_is_zm104_on_the_value(client):
    doc = open_doc(client, "ds_config.json", BLOCK)
    [problem] = [d for d in await doc.diagnostics() if d.code == "ZM104"]
    assert "did you mean 7B?" in problem.message
    start = BLOCK.index('"parameters": 7') + len('"parameters": ')
    assert (problem.range.start, problem.range.end) == (doc.position(start), doc.position(start + 1))
