"""The `zeromem` command: argument parsing and dispatch only.

Never imports pygls or lsprotocol (only `zeromem serve` does, lazily), so `check` and `estimate`
start fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from zeromem_lsp import __version__
from zeromem_lsp.cli.errors import UsageError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage dump, exit 2
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="zeromem", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"zeromem {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    from zeromem_lsp.cli import estimate

    estimate.register(commands)
    for name in ("check", "rules", "serve", "schema"):
        module = _optional_command(name)
        if module is not None:
            module.register(commands)
    return parser


def _optional_command(name: str):
    import importlib

    try:
        return importlib.import_module(f"zeromem_lsp.cli.{name}")
    except ModuleNotFoundError as error:
        if error.name == f"zeromem_lsp.cli.{name}":
            return None
        raise


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 2
        return args.run(args)
    except UsageError as error:
        print(f"zeromem: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
