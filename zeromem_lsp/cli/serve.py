"""`zeromem serve`: run the language server (stdio; `--tcp HOST:PORT` for debugging).

pygls and lsprotocol are imported only inside `run`, so other commands start fast.
"""

from __future__ import annotations

import socket
import sys

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


def check_can_listen(host: str, port: int) -> None:
    """A clear error now rather than a traceback from inside the event loop (the port is in use, the
    host is not this machine's...). The socket is closed again at once: pygls binds its own."""
    try:
        with socket.create_server((host, port)):
            pass
    except OSError as error:
        raise UsageError(f"--tcp: cannot listen on {host}:{port}: {error.strerror or error}") from None


def run(args) -> int:
    if args.stdio and args.tcp:
        raise UsageError("give either --stdio or --tcp, not both")
    address = parse_address(args.tcp) if args.tcp else None
    if address is not None:
        check_can_listen(*address)
    import logging  # here, not at the top: `check` and `estimate` start without it

    logging.basicConfig(level=logging.WARNING, format="zeromem-lsp %(levelname)s %(name)s: %(message)s")
    from zeromem_lsp.lsp.server import server

    if address is not None:
        announce_when_listening(logging.getLogger("pygls.server"), *address)
        server.start_tcp(*address)
    else:
        if sys.stdin.isatty():  # someone typed `zeromem serve`: it is waiting, not hung
            say("waiting for an LSP client on stdin: an editor starts this language server "
                "(docs/editors.md); `zeromem check PATH` lints from the command line. Ctrl-C stops")
        server.start_io()
    return 0


def announce_when_listening(pygls_log, host: str, port: int) -> None:
    """Say where the server listens once it does: pygls logs "Serving on ..." (INFO) right after it
    has bound the socket. Its other INFO records stay quiet, as before."""
    import logging

    def only_warnings(record) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        if record.getMessage().startswith("Serving on"):
            say(f"listening for an LSP client on {host}:{port} (TCP); Ctrl-C stops")
        return False

    pygls_log.setLevel(logging.INFO)
    pygls_log.addFilter(only_warnings)


def say(message: str) -> None:
    print(f"zeromem serve: {message}", file=sys.stderr, flush=True)
