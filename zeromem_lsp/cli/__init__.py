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


COMMANDS = ("estimate", "check", "rules", "serve", "schema")
DESCRIPTION = ("Lint distributed-training configs (DeepSpeed ds_config.json, HF FSDP / TrainingArguments JSON, "
               "Accelerate YAML) for what their loaders refuse and for per-GPU memory (DDP, ZeRO 1-3, FSDP), "
               "in CI (check) or in the editor (serve).")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line; with `only`, just that subcommand is registered (and imported), so
    `zeromem serve` does not load the calculator nor `zeromem check` the estimate's modules."""
    parser = _Parser(prog="zeromem", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"zeromem {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS if only is None else (only,):
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
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(words[0] if words and words[0] in COMMANDS else None)
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
