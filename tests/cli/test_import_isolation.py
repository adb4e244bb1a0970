"""`zeromem check` and `zeromem estimate` must not pay for pygls/lsprotocol imports."""

import subprocess
import sys
from pathlib import Path

import pytest

LLAMA3 = str(Path(__file__).resolve().parents[2] / "tests/data/models/Meta-Llama-3-8B/config.json")

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
        ["estimate", "-v", "--parameters", "7B", "--world-size", "8", "--format", "json"],
        ["estimate", "-v", "--parameters", "7B", "--world-size", "8", "--sequence-length", "64", "--micro-batch", "1"],
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


@pytest.mark.parametrize("argv", [
    ["estimate", "-v", "--parameters", "7B", "--world-size", "8"],
    ["estimate", "-v", "--model-config", LLAMA3, "--lora-rank", "16",
     "--lora-targets", "q_proj,v_proj", "--quantization", "nf4", "--double-quant", "--world-size", "8",
     "--sequence-length", "64", "--micro-batch", "1"],
])
def test_estimate_does_not_load_pydantic_or_the_models(argv):
    probe = PROBE.replace("('pygls', 'lsprotocol', 'cattrs')", "('pydantic', 'pydantic_core')")
    done = subprocess.run([sys.executable, "-c", probe.format(argv=argv)], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip().splitlines()[-1] == "HEAVY="
    assert "P = " in done.stdout  # the estimate ran


def test_the_server_answers_initialize_before_loading_the_analysis():
    """`zeromem serve` imports only pygls and its thin adapters until `initialized` (issue 13)."""
    probe = (
        "import sys, zeromem_lsp.cli\n"
        "zeromem_lsp.cli.build_parser('serve')\n"
        "import zeromem_lsp.lsp.server\n"
        "print('LOADED=' + ','.join(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'yaml')\n"
        "      or m in ('zeromem_lsp.analysis', 'zeromem_lsp.configs', 'zeromem_lsp.rules.registry',\n"
        "               'zeromem_lsp.memory.estimate', 'zeromem_lsp.memory.activations'))))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "LOADED="


def test_checking_a_typical_valid_config_does_not_load_pydantic_or_the_models():
    """The pre-checks vouch for its sections and its zeromem block (the models stay the judge of doubt)."""
    probe = PROBE.replace("('pygls', 'lsprotocol', 'cattrs')", "('pydantic', 'pydantic_core')").replace(
        "print('HEAVY='", "heavy += [m for m in sys.modules if m.endswith(('deepspeed.models', 'settings_model'))]\nprint('HEAVY='")
    argv = ["check", "--format", "json", "tests/data/deepspeed/clean_stage3_offload.json"]
    done = subprocess.run([sys.executable, "-c", probe.format(argv=argv)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "HEAVY="


def test_a_doubtful_section_still_goes_through_pydantic():
    """The negative control: an invalid value is judged by the models (their message, their import)."""
    probe = PROBE.replace("('pygls', 'lsprotocol', 'cattrs')", "('pydantic',)")
    config = '{"train_batch_size": 8, "zero_optimization": {"stage": 7}}'
    code = f"open('bad_ds_config.json', 'w').write({config!r})\n" + probe.format(
        argv=["check", "--quiet", "bad_ds_config.json"])
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=folder)
    assert "ZM202" in done.stdout and "Input should be 0, 1, 2 or 3" in done.stdout  # pydantic's wording
    assert "pydantic" in done.stdout.strip().splitlines()[-1].removeprefix("HEAVY=").split(",")


@pytest.mark.parametrize("argv", [
    ["check", "--format", "json", "tests/data/recipes/axolotl/examples/llama-3/lora-1b.yml"],
    ["estimate", "-v", "--model-config", LLAMA3, "--world-size", "8", "--sequence-length", "64", "--micro-batch", "1"],
])
def test_a_known_family_never_loads_torch_transformers_or_the_meta_count(argv):
    """Counting on the meta device (configs/meta_count.py) is for families zeromem does not describe; for the others
    neither torch nor Transformers is imported, nor the module that would start them."""
    probe = PROBE.replace("m.split('.')[0] in ('pygls', 'lsprotocol', 'cattrs')",
                          "m.split('.')[0] in ('torch', 'transformers') or m == 'zeromem_lsp.configs.meta_count'")
    environ = {**__import__("os").environ, "HF_HUB_CACHE": "tests/data/hf_cache"}
    done = subprocess.run([sys.executable, "-c", probe.format(argv=argv)], capture_output=True, text=True, timeout=60,
                          env=environ)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "HEAVY="
