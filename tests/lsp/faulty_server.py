"""`zeromem serve` with hover and completion broken on purpose (for test_faults.py)."""

import sys

import zeromem_lsp.assist.completion as completion
import zeromem_lsp.assist.hover as hover


def broken(*args, **kwargs):
    raise RuntimeError("injected failure")


hover.hover_at = broken  # the server imports them when a request comes
completion.complete = broken

from zeromem_lsp.cli import main  # noqa: E402

sys.exit(main(["serve"]))
