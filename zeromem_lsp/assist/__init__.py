"""Editor assistance computed from an `Analysis` and a cursor offset: hover, inlay hints, completion.

Pure: no pygls or lsprotocol here. Each module returns plain dataclasses or strings with code-point
offsets; `zeromem_lsp.lsp.convert` turns them into LSP types. Wording comes from `present.py`, so
the figures match `zeromem check` and the diagnostics.
"""
