"""The start-up peer: a pygls server with no features, started the way `zeromem serve` starts."""

from pygls.lsp.server import LanguageServer

LanguageServer("trivial", "0").start_io()
