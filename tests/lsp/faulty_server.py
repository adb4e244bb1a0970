"""`zeromem serve` with hover and completion broken on purpose (for test_faults.py)."""

import sys

import zeromem_lsp.server as server


def broken(*args, **kwargs):
    raise RuntimeError("injected failure")


server.hover_at = broken
server.complete = broken

from zeromem_lsp.cli import main  # noqa: E402

sys.exit(main(["serve"]))
