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
        ["check", "--format", "json", "tests/data/deepspeed/clean_stage3_offload.json"],
    ],
)
def test_cli_commands_do_not_import_the_lsp_stack(argv):
    done = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "HEAVY="
