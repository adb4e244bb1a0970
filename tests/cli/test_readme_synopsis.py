"""The README's CLI reference names every option of every subcommand (the parser is the source)."""

import argparse
import re
from pathlib import Path

import pytest

from zeromem_lsp.cli import COMMANDS, build_parser

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
REFERENCE = README[README.index("## CLI reference"):README.index("\n## ", README.index("## CLI reference") + 1)]


def options(command: str) -> list[str]:
    [subparsers] = [a for a in build_parser(command)._actions if isinstance(a, argparse._SubParsersAction)]
    return [option for action in subparsers.choices[command]._actions for option in action.option_strings
            if option.startswith("--") and option != "--help"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_is_in_the_cli_reference(command):
    missing = [option for option in options(command)
               if not re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", REFERENCE)]
    assert missing == [], f"README's CLI reference lacks {missing} of `zeromem {command}`"
