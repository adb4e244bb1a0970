"""`zeromem check` and `zeromem estimate` must not pay for pygls/lsprotocol imports."""

import subprocess
import sys

import pytest

PROBE = """
import sys
from zeromem_lsp.cli import main
try:
    main({argv!r})
except SystemExit:
    pass
heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('pygls', 'lsprotocol', 'cattrs'))
print('HEAVY=' + ','.join(heavy))
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["estimate", "--parameters", "7B", "--world-size", "8", "--format", "json"],
        ["estimate", "--parameters", "7B", "--world-size", "8", "--sequence-length", "64", "--micro-batch", "1"],
        ["check", "--format", "json", "tests/data/deepspeed/clean_stage3_offload.json"],
    ],
)
def test_cli_commands_do_not_import_the_lsp_stack(argv):
    done = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "HEAVY="


def test_check_format_choices_match_the_reporters():
    from zeromem_lsp.cli.check import FORMATS
    from zeromem_lsp.cli.reporters import REPORTERS

    assert sorted(FORMATS) == sorted(REPORTERS)


def test_estimate_does_not_load_pydantic_or_the_models():
    probe = PROBE.replace("('pygls', 'lsprotocol', 'cattrs')", "('pydantic', 'pydantic_core')")
    argv = ["estimate", "--parameters", "7B", "--world-size", "8"]
    done = subprocess.run([sys.executable, "-c", probe.format(argv=argv)], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip().splitlines()[-1] == "HEAVY="


def test_the_server_answers_initialize_before_loading_the_analysis():
    """`zeromem serve` imports only pygls and its thin adapters until `initialized` (issue 13)."""
    probe = (
        "import sys, zeromem_lsp.cli\n"
        "zeromem_lsp.cli.build_parser('serve')\n"
        "import zeromem_lsp.server\n"
        "print('LOADED=' + ','.join(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'yaml')\n"
        "      or m in ('zeromem_lsp.analysis', 'zeromem_lsp.configs', 'zeromem_lsp.rules.registry',\n"
        "               'zeromem_lsp.estimate', 'zeromem_lsp.activations'))))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "LOADED="
