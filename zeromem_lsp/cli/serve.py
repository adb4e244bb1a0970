"""`zeromem serve`: run the language server (stdio; `--tcp HOST:PORT` for debugging).

pygls and lsprotocol are imported only inside `run`, so other commands start fast.
"""

from __future__ import annotations

from zeromem_lsp.cli.errors import UsageError


def register(commands) -> None:
    parser = commands.add_parser("serve", help="run the language server (stdio by default)",
                                 description="Run the zeromem language server.")
    parser.add_argument("--stdio", action="store_true", help="talk over stdin/stdout (the default)")
    parser.add_argument("--tcp", metavar="HOST:PORT", help="listen on a TCP socket instead, for debugging")
    parser.set_defaults(run=run)


def parse_address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    try:
        number = int(port)
    except ValueError:
        raise UsageError(f"--tcp: expected HOST:PORT, got {text!r}") from None
    if not 0 < number < 65536:
        raise UsageError(f"--tcp: port out of range: {number}")
    return host or "127.0.0.1", number


def run(args) -> int:
    if args.stdio and args.tcp:
        raise UsageError("give either --stdio or --tcp, not both")
    address = parse_address(args.tcp) if args.tcp else None
    import logging  # here, not at the top: `check` and `estimate` start without it

    logging.basicConfig(level=logging.WARNING, format="zeromem-lsp %(levelname)s %(name)s: %(message)s")
    from zeromem_lsp.lsp.server import server

    if address is not None:
        server.start_tcp(*address)
    else:
        server.start_io()
    return 0
