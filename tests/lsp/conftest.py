"""pytest-lsp end to end: `zeromem serve` over stdio, driven as VS Code (UTF-16) and Neovim (UTF-8).

`client` is one server per client profile for the whole session (tests open documents under their
own URIs); modules that need other settings or capabilities define their own `client` with
`lsp_session.client_fixture`. Tests wait on events (a notification arriving, a response), never on
fixed sleeps.
"""

from __future__ import annotations

from lsp_session import client_fixture

client = client_fixture(scope="session")


from lsprotocol import types  # noqa: E402
from pytest_lsp.client import default_feature  # noqa: E402


@default_feature(types.CLIENT_REGISTER_CAPABILITY)
def register_capability(ls, params: types.RegistrationParams):
    """Accept dynamic registrations as an editor does, and keep them for tests to inspect."""
    ls.__dict__.setdefault("registrations", []).append(params)
