"""Issue 21 item 10 in the editor: a template's placeholders are one diagnostic on the first (ZM202, as
DeepSpeed refuses a string stage), the others as related locations — nothing else on any of them."""

from __future__ import annotations

import pytest
from lsp_session import open_doc

pytestmark = pytest.mark.asyncio(loop_scope="session")

TEMPLATE = ('{\n  "train_batch_size": TRAIN_BATCH,\n  "zero_optimization": {\n    "stage": ZERO_STAGE\n  },\n'
            '  "bf16": {"enabled": true}\n}\n')


async def test_placeholders_are_one_diagnostic_with_the_rest_related(client):
    doc = open_doc(client, "template/ds_config.json", TEMPLATE)
    [diagnostic] = await doc.diagnostics()
    assert diagnostic.code == "ZM202" and "TRAIN_BATCH, ZERO_STAGE" in diagnostic.message
    start = TEMPLATE.index("TRAIN_BATCH")
    assert diagnostic.range.start == doc.position(start)
    [other] = diagnostic.related_information
    assert other.message == "placeholder ZERO_STAGE" and other.location.range.start == doc.position(
        TEMPLATE.index("ZERO_STAGE"))
